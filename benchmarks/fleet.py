"""Workers as a fleet: a worker's CPU per run, its start-up, and 1 vs 8 workers on PostgreSQL.

* :func:`worker_cpu` — one ``loopwise worker`` process (SQLite store) executes ``n`` queued
  runs of a 3-step agent (two tool turns and an answer) over an OpenAI model speaking to the
  benchmark server; its CPU (from ``/proc``) per run after three warm-up runs. Run as a
  script it prints that: ``python benchmarks/fleet.py cpu``.
* :func:`scale_out` — ``1`` and ``8`` worker processes at ``--concurrency 1`` on one
  PostgreSQL, a 50 ms model, the same queued runs; throughput ratio, and every run completed
  exactly once. ``python benchmarks/fleet.py scale [RUNS]`` (PostgreSQL from
  ``LOOPWISE_BENCH_PG``/``LOOPWISE_TEST_PG`` or a throwaway ``.ci/postgres``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import loopwise
from loopwise import open_store

HERE = Path(__file__).resolve().parent
LOOPWISE = str(Path(sys.executable).with_name("loopwise"))

# Speaks to the benchmark server (bench_script.respond): `turns=2` asks for two tool turns.
CPU_TARGET = '''
import loopwise


@loopwise.tool
def lookup_order(order_id: str) -> str:
    """Look an order up by its id."""
    return f"{order_id}: declined"


agent = loopwise.Agent(name="bench_cpu_agent", tools=[lookup_order])
'''


def _worker(store: str, env: dict[str, str], poll: float = 0.05) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [LOOPWISE, "worker", "--store", store, "--concurrency", "1", "--poll", str(poll)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    proc.stderr.readline()  # its banner: imported, store open
    return proc


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.stderr is not None
    proc.stderr.close()


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` used so far (Linux: /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far (Linux: /proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - idle) / tick, sum(fields) / tick


def _until_done(store: Any, ids: list[str], timeout: float = 600.0) -> None:
    """Wait until every run in ``ids`` completed: asking about the oldest not yet seen
    completed, so the watching costs the CPU the workers share little."""
    deadline = time.monotonic() + timeout
    waiting = list(ids)
    while waiting:
        while waiting and store.get_run(waiting[0]).status == "completed":
            waiting.pop(0)
        if time.monotonic() > deadline:
            raise RuntimeError(f"runs not completed in {timeout:.0f} s")
        if waiting:
            time.sleep(0.05)


def worker_cpu(base_url: str, n: int) -> tuple[float, float]:
    """``(CPU seconds per run, CPU seconds of start-up and the first runs)`` of one
    ``loopwise worker`` executing ``n`` queued 3-step agent runs over ``base_url``.

    Per run is counted after three warm-up runs (which load the target and the SDK)."""
    here = Path(tempfile.mkdtemp(prefix="loopwise-bench-cpu-"))
    (here / "target.py").write_text(CPU_TARGET)
    spec, store = f"{here / 'target.py'}:agent", str(here / "runs.db")
    env = {**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "bench"}

    def queue(k: int) -> list[str]:
        question = "Why did order A-1 fail? turns=2"
        return [loopwise.enqueue(spec, question, model="bench-model", store=st) for _ in range(k)]

    with open_store(store) as st:  # the schema made before the worker opens it
        proc = _worker(store, env)
        try:
            _until_done(st, queue(3))
            warm = _cpu(proc.pid)
            _until_done(st, queue(n))
            busy = _cpu(proc.pid)
        finally:
            _stop(proc)
    return (busy - warm) / n, warm


# Each run writes its idempotency key once per attempt to the ledger: a run executed twice
# (or an effect repeated) shows as a key written twice.
SCALE_TARGET = '''
from pathlib import Path

import loopwise

LEDGER = Path(__file__).with_name("ledger.txt")


@loopwise.tool(effect="write")
def lookup_order(order_id: str, ctx) -> str:
    """Look an order up (and note that it was looked at, once)."""
    with LEDGER.open("a") as f:
        f.write(ctx.idempotency_key + "\\n")
    return f"{order_id}: declined"


agent = loopwise.Agent(name="bench_scale_agent", tools=[lookup_order])
'''


@dataclass
class Fleet:
    """One measurement of ``workers`` worker processes draining ``runs`` queued runs."""

    workers: int
    runs: int
    seconds: float
    """From the first run queued to the last completed."""
    cpu: float
    """CPU seconds the workers used meanwhile."""
    server_cpu: float
    """CPU seconds the model server (one process) used meanwhile."""
    busy: float
    """How busy the machine's cores were meanwhile (every process's work: PostgreSQL's,
    this script's, other people's)."""
    twice: int
    """Effects recorded more than once (must be 0)."""

    @property
    def rate(self) -> float:
        return self.runs / self.seconds


def scale_out(pg: str, server: Any, workers: int, runs: int) -> Fleet:
    """``workers`` workers at ``--concurrency 1`` on a fresh PostgreSQL database draining
    ``runs`` runs of a 3-step agent (2 tool turns and an answer) over ``server``."""
    from store_side import fresh_database

    here = Path(tempfile.mkdtemp(prefix="loopwise-bench-fleet-"))
    (here / "target.py").write_text(SCALE_TARGET)
    spec = f"{here / 'target.py'}:agent"
    env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "bench"}
    with fresh_database(pg) as url, open_store(url) as st:
        # PostgreSQL wakes workers by NOTIFY: the default poll is only a fallback.
        procs = [_worker(url, env, poll=1.0) for _ in range(workers)]
        assert server.proc is not None
        pids = [p.pid for p in procs] + [server.proc.pid]
        try:
            cpu0, started, machine0 = [_cpu(p) for p in pids], time.perf_counter(), _machine()
            question = "Why did order A-1 fail? turns=2"
            ids = [
                loopwise.enqueue(spec, question, model="bench-model", store=st) for _ in range(runs)
            ]
            _until_done(st, ids)
            seconds = time.perf_counter() - started
            used = [_cpu(p) - before for p, before in zip(pids, cpu0, strict=True)]
            busy, total = (b - a for a, b in zip(machine0, _machine(), strict=True))
        finally:
            for p in procs:
                _stop(p)
    keys = (here / "ledger.txt").read_text().split()
    twice = sum(n - 1 for n in Counter(keys).values()) + (2 * runs - len(set(keys)))
    return Fleet(
        workers=workers,
        runs=runs,
        seconds=seconds,
        cpu=sum(used[:-1]),
        server_cpu=used[-1],
        busy=busy / total,
        twice=twice,
    )


def scale_report(one: Fleet, many: Fleet, cores: int) -> list[str]:
    """The ratio of ``many`` workers to one, and to what the machine's CPU allows."""
    worker, server = many.cpu / many.runs, many.server_cpu / many.runs
    ceiling = min(cores / (worker + server), 1 / server)  # the model server is one process
    ideal = one.rate * many.workers
    return [
        f"1 worker:  {one.rate:.1f} runs/s ({one.runs} runs in {one.seconds:.1f} s)",
        f"{many.workers} workers: {many.rate:.1f} runs/s ({many.runs} runs in "
        f"{many.seconds:.1f} s): {many.rate / one.rate:.2f}x one worker (goal >= 6x)",
        f"CPU per run: {worker * 1000:.1f} ms in the workers, {server * 1000:.1f} ms in the "
        f"model server (one process), so {cores} cores allow at most {ceiling:.0f} runs/s; "
        f"{many.workers} workers reached {many.rate / min(ceiling, ideal):.0%} of "
        f"min({many.workers} x one worker, that)",
        f"the machine's cores were {one.busy:.0%} busy during the 1-worker run and "
        f"{many.busy:.0%} during the {many.workers}-worker run (PostgreSQL, this script and "
        "other sessions included)",
        f"effects recorded twice or missing: {one.twice + many.twice} (must be 0)",
    ]


def _main(argv: list[str]) -> int:
    sys.path.insert(0, str(HERE))
    from server import Server

    what = argv[0] if argv else "cpu"
    if what == "cpu":
        with Server(latency=0.0) as server:
            per_run, warm = worker_cpu(server.base_url, int(argv[1]) if len(argv) > 1 else 100)
        print(f"worker CPU per run: {per_run * 1000:.1f} ms (start-up and 3 runs: {warm:.2f} s)")
        return 0
    if what == "scale":
        from store_side import postgres

        runs = int(argv[1]) if len(argv) > 1 else 40
        with postgres() as pg, Server(latency=0.05) as server:
            if pg is None:
                print("no PostgreSQL: set LOOPWISE_BENCH_PG", file=sys.stderr)
                return 2
            one = scale_out(pg, server, 1, runs)
            many = scale_out(pg, server, 8, runs * 8)
        print("\n".join(scale_report(one, many, os.cpu_count() or 1)))
        return 0
    print(f"unknown benchmark {what!r}: cpu or scale", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
