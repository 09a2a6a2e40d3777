"""Workers as a fleet: a worker's CPU per run, its start-up, and 1 vs 8 workers on PostgreSQL.

* :func:`worker_cpu` — one ``loopwise worker`` process executes ``n`` queued runs of a
  3-step agent (two tool turns and an answer) over an OpenAI model speaking to the
  benchmark server; its CPU (from ``/proc``) per run after three warm-up runs. Run as a
  script it prints that: ``python benchmarks/fleet.py cpu [N]`` (SQLite, a read-only
  tool), ``python benchmarks/fleet.py cpu [N] postgresql`` (PostgreSQL, the scale
  benchmark's write tool). Both are ``make bench`` rows.
* :func:`scale_out` — ``1`` and ``8`` worker processes at ``--concurrency 1`` on one
  PostgreSQL, a 50 ms model, the same queued runs; throughput ratio, the CPU per run of
  every process involved (workers, PostgreSQL, the model server, this script), the ratio
  to what the CPU left by other processes allowed, and every effect exactly once.
  ``python benchmarks/fleet.py scale [RUNS] [cold]`` (PostgreSQL from
  ``LOOPWISE_BENCH_PG``/``LOOPWISE_TEST_PG`` or a throwaway ``.ci/postgres``): the clock
  starts once every worker has run once (``cold``: before their first runs, which load
  the target and the model SDK, ~0.5 s of CPU each).
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
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


def worker_cpu(
    base_url: str, n: int, *, store: str | None = None, effect: bool = False
) -> tuple[float, float]:
    """``(CPU seconds per run, CPU seconds of start-up and the first runs)`` of one
    ``loopwise worker`` executing ``n`` queued 3-step agent runs over ``base_url``.

    ``store``: a PostgreSQL URL (a fresh database is made on that server), else a new
    SQLite file. ``effect``: the scale benchmark's agent, whose tool is a ``write`` (a
    commit before and after each effect), instead of a read-only one. Per run is counted
    after three warm-up runs (which load the target and the SDK)."""
    here = Path(tempfile.mkdtemp(prefix="loopwise-bench-cpu-"))
    (here / "target.py").write_text(SCALE_TARGET if effect else CPU_TARGET)
    spec = f"{here / 'target.py'}:agent"
    env = {**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "bench"}

    def queue(st: Any, k: int) -> list[str]:
        question = "Why did order A-1 fail? turns=2"
        return [loopwise.enqueue(spec, question, model="bench-model", store=st) for _ in range(k)]

    with _location(store, here) as where, open_store(where) as st:  # the schema made first
        proc = _worker(where, env, poll=1.0 if store else 0.05)
        try:
            _until_done(st, queue(st, 3))
            warm = _cpu(proc.pid)
            _until_done(st, queue(st, n))
            busy = _cpu(proc.pid)
        finally:
            _stop(proc)
    return (busy - warm) / n, warm


@contextmanager
def _location(pg: str | None, here: Path) -> Iterator[str]:
    """A fresh database on the PostgreSQL server ``pg``, else a SQLite file in ``here``."""
    if pg is None:
        yield str(here / "runs.db")
        return
    from store_side import fresh_database

    with fresh_database(pg) as url:
        yield url


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
    database_cpu: float
    """CPU seconds the PostgreSQL server's processes used meanwhile (0 when it runs
    elsewhere)."""
    own_cpu: float
    """CPU seconds this script used meanwhile (queueing the runs, watching them)."""
    busy: float
    """How busy the machine's cores were meanwhile (every process's work: PostgreSQL's,
    this script's, other people's)."""
    twice: int
    """Effects recorded more than once (must be 0)."""
    warmed: int
    """Workers that had executed a run before the clock started (each loads the target
    and the model SDK with its first run)."""
    warm_up: float
    """Seconds the warm-up runs (two per worker, before the clock) took."""

    @property
    def rate(self) -> float:
        return self.runs / self.seconds

    @property
    def ours(self) -> float:
        """CPU seconds per run of every process of the benchmark."""
        return (self.cpu + self.server_cpu + self.database_cpu + self.own_cpu) / self.runs

    def cpu_limit(self, cores: int) -> float:
        """Runs per second the CPU left to the benchmark allowed: the cores, less what
        other processes used meanwhile, over the benchmark's CPU per run (and the model
        server, one process, at most one core)."""
        elapsed = self.seconds
        others = max(0.0, self.busy * cores * elapsed - self.ours * self.runs)
        free = cores - others / elapsed
        return min(free / self.ours, self.runs / self.server_cpu if self.server_cpu else math.inf)


def scale_out(pg: str, server: Any, workers: int, runs: int, *, warm: bool = True) -> Fleet:
    """``workers`` workers at ``--concurrency 1`` on a fresh PostgreSQL database draining
    ``runs`` runs of a 3-step agent (2 tool turns and an answer) over ``server``.

    The clock starts once every worker has executed a run (two queued per worker, drained
    first): a worker's first run loads the target and the model SDK (~0.5 s of CPU), which
    eight workers starting at once on two cores would otherwise pay inside the measurement;
    :attr:`Fleet.warm_up` says how long that took. ``warm=False`` starts the clock with
    the workers cold (each first run inside the measurement)."""
    from store_side import fresh_database

    here = Path(tempfile.mkdtemp(prefix="loopwise-bench-fleet-"))
    (here / "target.py").write_text(SCALE_TARGET)
    spec = f"{here / 'target.py'}:agent"
    env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "bench"}
    question = "Why did order A-1 fail? turns=2"

    def queue(st: Any, k: int) -> list[str]:
        return [loopwise.enqueue(spec, question, model="bench-model", store=st) for _ in range(k)]

    with fresh_database(pg) as url, open_store(url) as st:
        # PostgreSQL wakes workers by NOTIFY: the default poll is only a fallback.
        procs = [_worker(url, env, poll=1.0) for _ in range(workers)]
        assert server.proc is not None
        pids = [p.pid for p in procs] + [server.proc.pid]
        try:
            started = time.perf_counter()
            warm_ids = queue(st, 2 * workers if warm else 0)
            _until_done(st, warm_ids)
            warm_up = time.perf_counter() - started
            warmed = len({st.get_run(i).owner for i in warm_ids})
            database = _database_pids(st)
            cpu0, started, machine0 = [_cpu(p) for p in pids], time.perf_counter(), _machine()
            db0, own0 = sum(_cpu(p) for p in database), _own_cpu()
            ids = queue(st, runs)
            _until_done(st, ids)
            seconds = time.perf_counter() - started
            used = [_cpu(p) - before for p, before in zip(pids, cpu0, strict=True)]
            db, own = sum(_cpu(p) for p in database) - db0, _own_cpu() - own0
            busy, total = (b - a for a, b in zip(machine0, _machine(), strict=True))
        finally:
            for p in procs:
                _stop(p)
    keys = (here / "ledger.txt").read_text().split()
    everything = 2 * (runs + len(warm_ids))
    twice = sum(n - 1 for n in Counter(keys).values()) + (everything - len(set(keys)))
    return Fleet(
        workers=workers,
        runs=runs,
        seconds=seconds,
        cpu=sum(used[:-1]),
        server_cpu=used[-1],
        database_cpu=db,
        own_cpu=own,
        busy=busy / total,
        twice=twice,
        warmed=warmed,
        warm_up=warm_up,
    )


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def _database_pids(st: Any) -> list[int]:
    """The PostgreSQL server's processes when it runs on this machine (its postmaster and
    every child of it), else none."""
    try:
        with st._transaction() as tx:  # the benchmark's look behind the store
            backend = int(tx.rows("SELECT pg_backend_pid() AS pid")[0]["pid"])
        parent = _stat(backend)[1]
    except (OSError, ValueError, LookupError):
        return []
    pids = [parent]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if _stat(int(entry.name))[1] == parent:
                    pids.append(int(entry.name))
            except (OSError, ValueError):
                continue  # ended meanwhile
    return pids


def _stat(pid: int) -> tuple[str, int]:
    """(state, parent pid) of process ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def scale_report(one: Fleet, many: Fleet, cores: int) -> list[str]:
    """The ratio of ``many`` workers to one, and to what the machine's CPU allowed."""
    limit = many.cpu_limit(cores)
    ideal = one.rate * many.workers
    lines = [
        f"1 worker:  {one.rate:.1f} runs/s ({one.runs} runs in {one.seconds:.1f} s)",
        f"{many.workers} workers: {many.rate:.1f} runs/s ({many.runs} runs in "
        f"{many.seconds:.1f} s): {many.rate / one.rate:.2f}x one worker (goal >= 6x)",
    ]
    for fleet in (one, many):
        lines.append(
            f"CPU per run, {fleet.workers} worker(s): {fleet.cpu / fleet.runs * 1000:.1f} ms "
            f"in the workers, {fleet.database_cpu / fleet.runs * 1000:.1f} ms in PostgreSQL, "
            f"{fleet.server_cpu / fleet.runs * 1000:.1f} ms in the model server, "
            f"{fleet.own_cpu / fleet.runs * 1000:.1f} ms in this script; the cores were "
            f"{fleet.busy:.0%} busy (everyone's work)"
        )
    lines += [
        f"the CPU left to the benchmark during the {many.workers}-worker run allowed at most "
        f"{limit:.0f} runs/s: {many.workers} workers reached {many.rate / min(limit, ideal):.0%}"
        f" of min({many.workers} x one worker = {ideal:.0f} runs/s, that)",
        (
            f"warm-up (two runs per worker, before the clock): {one.warm_up:.1f} s for 1, "
            f"{many.warm_up:.1f} s for {many.workers}; workers warmed: {one.warmed}, "
            f"{many.warmed}"
            if many.warmed
            else "cold: each worker's first run (loading the target and the model SDK) was "
            "inside the measurement"
        ),
        f"effects recorded twice or missing: {one.twice + many.twice} (must be 0)",
    ]
    return lines


def _main(argv: list[str]) -> int:
    sys.path.insert(0, str(HERE))
    from server import Server

    what = argv[0] if argv else "cpu"
    if what == "cpu":
        # cpu [N] [postgresql]: SQLite's read-only agent, or PostgreSQL's with the scale
        # benchmark's write effect (PostgreSQL from LOOPWISE_BENCH_PG, else a throwaway).
        n = int(argv[1]) if len(argv) > 1 else 100
        if "postgresql" not in argv[2:]:
            with Server(latency=0.0) as server:
                per_run, warm = worker_cpu(server.base_url, n)
            print(f"worker CPU per run (SQLite, read-only tool): {per_run * 1000:.1f} ms "
                  f"(start-up and 3 runs: {warm:.2f} s)")  # fmt: skip
            return 0
        from store_side import postgres

        with postgres() as pg, Server(latency=0.0) as server:
            if pg is None:
                print("no PostgreSQL: set LOOPWISE_BENCH_PG", file=sys.stderr)
                return 2
            per_run, warm = worker_cpu(server.base_url, n, store=pg, effect=True)
        print(f"worker CPU per run (PostgreSQL, a write tool): {per_run * 1000:.1f} ms "
              f"(start-up and 3 runs: {warm:.2f} s)")  # fmt: skip
        return 0
    if what == "scale":
        from store_side import postgres

        # scale [RUNS] [cold]: cold starts the clock before each worker's first run.
        runs = int(argv[1]) if len(argv) > 1 else 40
        warm = "cold" not in argv[2:]
        with postgres() as pg, Server(latency=0.05) as server:
            if pg is None:
                print("no PostgreSQL: set LOOPWISE_BENCH_PG", file=sys.stderr)
                return 2
            one = scale_out(pg, server, 1, runs, warm=warm)
            many = scale_out(pg, server, 8, runs * 8, warm=warm)
        print("\n".join(scale_report(one, many, os.cpu_count() or 1)))
        return 0
    print(f"unknown benchmark {what!r}: cpu or scale", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
