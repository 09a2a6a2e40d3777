"""The run store's benchmarks: per-event cost on SQLite and PostgreSQL, sequential runs
with a store kept open, and worker throughput on one PostgreSQL.

PostgreSQL comes from ``LOOPWISE_BENCH_PG`` (or ``LOOPWISE_TEST_PG``), else a throwaway
server started with ``.ci/postgres`` when its binaries are there; without either the
PostgreSQL rows say SKIPPED.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import loopwise
from loopwise import open_store
from loopwise.store.sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parent.parent
LOOPWISE = str(Path(sys.executable).with_name("loopwise"))

# A worker's target: a two-turn agent whose offline model answers after 50 ms a call.
WORKER_TARGET = '''
import asyncio

import loopwise
from loopwise.testing import ScriptedModel, call, reply


def lookup(order_id: str) -> str:
    """Look an order up."""
    return f"{order_id}: shipped"


agent = loopwise.Agent(name="bench_worker_agent", tools=[lookup])


def _respond(request):
    done = [m["content"] for m in request.messages if m["role"] == "tool"]
    return reply(done[-1]) if done else call("lookup", {"order_id": "A-1"})


class _Slow(ScriptedModel):
    async def complete(self, request):
        await asyncio.sleep(0.05)
        return await super().complete(request)


def offline_model():
    return _Slow(_respond)
'''


@contextlib.contextmanager
def postgres() -> Iterator[str | None]:
    """A PostgreSQL server URL for the benchmarks, or ``None`` when there is none."""
    given = os.environ.get("LOOPWISE_BENCH_PG") or os.environ.get("LOOPWISE_TEST_PG")
    if given:
        yield given
        return
    if not (ROOT / ".ci" / "postgres").exists() or not _has_postgres():
        yield None
        return
    where = tempfile.mkdtemp(prefix="loopwise-bench-pg-")
    os.chmod(where, 0o755)
    started = subprocess.run(
        [str(ROOT / ".ci" / "postgres"), "start", where],
        capture_output=True,
        text=True,
        check=False,
    )
    if started.returncode != 0:
        yield None
        return
    try:
        yield started.stdout.strip()
    finally:
        subprocess.run([str(ROOT / ".ci" / "postgres"), "stop", where], check=False)


def _has_postgres() -> bool:
    return bool(
        subprocess.run(["sh", "-c", "command -v pg_ctl || ls /usr/lib/postgresql/*/bin/pg_ctl"],
                       capture_output=True, check=False).stdout
    )  # fmt: skip


@contextlib.contextmanager
def fresh_database(server: str) -> Iterator[str]:
    """A new, empty database on ``server`` (dropped afterwards)."""
    import psycopg

    name = f"lw_bench_{os.urandom(4).hex()}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield urllib.parse.urlsplit(server)._replace(path=f"/{name}").geturl()
    finally:
        from loopwise.store.open import close_shared_stores

        close_shared_stores()
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def sqlite_location() -> str:
    return str(Path(tempfile.mkdtemp(prefix="loopwise-bench-")) / "runs.db")


def sequential_runs(n: int) -> tuple[float, float]:
    """Runs per second of ``loopwise.run(step, x, store=PATH)`` in a loop, with the store
    kept open by the process (now) and opened and closed around every run (before)."""

    @loopwise.step
    async def tiny(x: int) -> int:
        return x

    path = sqlite_location()
    loopwise.run(tiny, 0, store=path)  # warm: imports, the schema
    start = time.perf_counter()
    for i in range(n):
        loopwise.run(tiny, i, store=path)
    kept = n / (time.perf_counter() - start)
    start = time.perf_counter()
    for i in range(n):
        with SQLiteStore(path) as store:  # what each run paid before it was kept open
            loopwise.run(tiny, i, store=store)
    reopened = n / (time.perf_counter() - start)
    return kept, reopened


def worker_throughput(url: str, workers: int, runs: int, concurrency: int) -> float:
    """Runs per second of ``workers`` worker processes executing ``runs`` queued runs."""
    here = Path(tempfile.mkdtemp(prefix="loopwise-bench-worker-"))
    (here / "target.py").write_text(WORKER_TARGET)
    spec = f"{here / 'target.py'}:agent"
    procs = [_start_worker(url, concurrency) for _ in range(workers)]
    try:
        with open_store(url) as store:
            start = time.perf_counter()
            ids = [loopwise.enqueue(spec, "go", model="scripted", store=store) for _ in range(runs)]
            while not _all_done(store, ids):
                time.sleep(0.02)
            return runs / (time.perf_counter() - start)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.communicate(timeout=60)


def _start_worker(url: str, concurrency: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [LOOPWISE, "worker", "--store", url, "--concurrency", str(concurrency), "--poll", "0.5"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    proc.stderr.readline()  # its banner: imported, connected, listening
    return proc


def _all_done(store: Any, ids: list[str]) -> bool:
    runs = {r.run_id: r.status for r in store.list_runs(limit=len(ids) + 10)}
    return all(runs.get(i) == "completed" for i in ids)
