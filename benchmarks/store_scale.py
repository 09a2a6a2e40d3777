"""Every store verb at 10k, 100k and 1M runs, on SQLite and PostgreSQL, with fitted exponents.

For each size a store is filled by :mod:`storegen` (rows as the store writes them), then
timed, each the median of ``repeats``:

* the CLI verbs as fresh processes (what a person waits for), wall time and the CPU
  (user + system) of the process: ``loopwise pending``,
  ``runs list``, ``runs show RUN``, ``approve RUN --approval c1`` (a different paused run
  each time);
* the inbox's ``/`` and ``/runs/RUN`` over HTTP from one ``loopwise serve``;
* a worker's claim with nothing to claim (what an idle worker pays per poll), in process;
* the share of a core one idle ``loopwise worker`` uses (polling every second);
* the same verbs as calls in one process (``store: ...``): the store's own work, whose
  growth the fresh processes' start-up hides.

The exponent k of time ~ size^k is fitted between consecutive sizes (the CLI verbs carry
~0.1 s of interpreter start-up at every size, so theirs stay near 0 while they are flat).

``python benchmarks/store_scale.py [--sizes 10000,100000,1000000] [--repeats 5]
[--sqlite-only]``, or ``--store URL --sizes N`` to time a store filled before (by
:func:`storegen.fill` with N runs) again. PostgreSQL from ``LOOPWISE_BENCH_PG`` /
``LOOPWISE_TEST_PG`` or a throwaway ``.ci/postgres``. ``make bench`` runs 10k only.
"""

from __future__ import annotations

import argparse
import http.client
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import storegen

from loopwise.running.approvals import views
from loopwise.store.open import close_shared_stores, open_store

LOOPWISE = str(Path(sys.executable).with_name("loopwise"))
FRESH = ("python -c pass", "pending", "runs list", "runs show", "approve")
"""The verbs timed as fresh processes; each also has a ``VERB (CPU)`` entry: the user +
system CPU seconds of its process (what the machine's load does not change)."""
VERBS = (
    *FRESH,
    *(f"{verb} (CPU)" for verb in FRESH),
    "inbox /",
    "inbox /runs/ID",
    "claim",
    "store: pending",
    "store: runs list",
    "store: runs show",
    "store: approve",
)
GOAL = {"claim": 0.05}
"""Seconds each verb may take at 1M runs (0.25 s unless named here)."""
IDLE_GOAL = 0.05
"""The share of a core an idle worker may use."""


def _median(work: Callable[[int], object], repeats: int) -> float:
    times = []
    for k in range(repeats):
        started = time.perf_counter()
        work(k)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _fresh(work: Callable[[int], object], repeats: int) -> tuple[float, float]:
    """Median wall and CPU (user + system) seconds of ``work``, a process run to its end."""
    walls, cpus = [], []
    for k in range(repeats):
        cpu, started = _children_cpu(), time.perf_counter()
        work(k)
        walls.append(time.perf_counter() - started)
        cpus.append(_children_cpu() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def _cli(*argv: str) -> None:
    done = subprocess.run([LOOPWISE, *argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"loopwise {' '.join(argv)}: {done.stderr.strip()}")


@contextmanager
def _inbox(store: str) -> Iterator[int]:
    proc = subprocess.Popen(
        [LOOPWISE, "serve", "--store", store, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()  # serving http://127.0.0.1:PORT
    try:
        yield int(first.rsplit(":", 1)[1])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()


def _get(port: int, path: str) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("GET", path)
    answer = conn.getresponse()
    answer.read()
    conn.close()
    if answer.status != 200:
        raise RuntimeError(f"GET {path}: HTTP {answer.status}")


def time_verbs(store: str, size: int, repeats: int) -> dict[str, float]:
    """Median seconds of each verb on a filled store of ``size`` runs."""
    paused = [storegen.run_id(i) for i in range(size) if storegen.kind_of(i) == storegen.PAUSED]
    middle = storegen.run_id(size // 2 + (1 if storegen.kind_of(size // 2) == "looked" else 0))
    # Runs whose approval is still undecided (a store timed before has some decided).
    newest = _undecided(store, paused[::-1], "c1", repeats)
    oldest = _undecided(store, paused, "c2", repeats)
    at = ["--store", store]
    bare = [sys.executable, "-c", "pass"]
    fresh: dict[str, Callable[[int], object]] = {
        "python -c pass": lambda k: subprocess.run(bare, check=True),
        "pending": lambda k: _cli("pending", *at),
        "runs list": lambda k: _cli("runs", "list", *at),
        "runs show": lambda k: _cli("runs", "show", middle, *at),
        "approve": lambda k: _cli("approve", newest[k], "--approval", "c1", "--by", "bench", *at),
    }
    out: dict[str, float] = {}
    for verb, work in fresh.items():
        out[verb], out[f"{verb} (CPU)"] = _fresh(work, repeats)
    with _inbox(store) as port:
        _get(port, "/")  # warm: the first request opens the store
        out["inbox /"] = _median(lambda k: _get(port, "/"), repeats)
        out["inbox /runs/ID"] = _median(lambda k: _get(port, f"/runs/{paused[k]}"), repeats)
    with open_store(store) as st:
        st.claim_next("bench:0")  # warm: the connection
        out["claim"] = _median(lambda k: st.claim_next(f"bench:{k}"), repeats)
        # The same verbs in this process: the store's own work, without the ~0.1 s (far
        # more on a loaded machine) a fresh interpreter costs at every size.
        out["store: pending"] = _median(lambda k: views(st, st.pending_page().approvals), repeats)
        out["store: runs list"] = _median(lambda k: st.list_runs(limit=50), repeats)
        out["store: runs show"] = _median(lambda k: st.show(middle), repeats)
        out["store: approve"] = _median(
            lambda k: st.decide(oldest[k], "c2", decision="approved", by="bench"), repeats
        )
    close_shared_stores()
    out["idle worker"] = idle_worker(store, IDLE_SECONDS)
    return out


IDLE_SECONDS = 10.0


def _undecided(store: str, runs: list[str], approval: str, n: int) -> list[str]:
    """The first ``n`` of ``runs`` whose ``approval`` is still undecided."""
    found: list[str] = []
    with open_store(store) as st:
        for run_id in runs:
            if any(a.approval_id == approval for a in st.pending(run_id)):
                found.append(run_id)
                if len(found) == n:
                    break
    close_shared_stores()
    return found


def idle_worker(store: str, seconds: float) -> float:
    """The share of a core one ``loopwise worker`` (default poll: 1 s) uses with nothing to
    claim, over ``seconds`` after it is up."""
    from fleet import _cpu

    proc = subprocess.Popen(
        [LOOPWISE, "worker", "--store", store],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    try:
        proc.stderr.readline()  # its banner
        time.sleep(1.0)  # the first claims warm the connection and the pages
        before, started = _cpu(proc.pid), time.perf_counter()
        time.sleep(seconds)
        return (_cpu(proc.pid) - before) / (time.perf_counter() - started)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        proc.stderr.close()


def exponents(sizes: list[int], seconds: list[float]) -> list[float]:
    """The exponent k of seconds ~ size^k between each pair of consecutive sizes."""
    return [
        math.log(seconds[i + 1] / seconds[i]) / math.log(sizes[i + 1] / sizes[i])
        for i in range(len(sizes) - 1)
    ]


@contextmanager
def locations(pg: str | None) -> Iterator[Callable[[str, int], Iterator[str]]]:
    """``where(kind, size)``: a context manager giving a fresh store of that kind."""

    @contextmanager
    def where(kind: str, size: int) -> Iterator[str]:
        if kind == "sqlite":
            yield str(Path(tempfile.mkdtemp(prefix=f"loopwise-scale-{size}-")) / "runs.db")
            return
        from store_side import fresh_database

        assert pg is not None
        with fresh_database(pg) as url:
            yield url

    yield where  # type: ignore[misc]


def measure(
    sizes: list[int], kinds: list[str], pg: str | None, repeats: int, say: Callable[[str], None]
) -> dict[str, dict[int, dict[str, float]]]:
    """``{kind: {size: {verb: seconds}}}``, each store filled then timed."""
    results: dict[str, dict[int, dict[str, float]]] = {k: {} for k in kinds}
    with locations(pg) as where:
        for kind in kinds:
            for size in sizes:
                with where(kind, size) as store:  # type: ignore[operator]
                    filled = storegen.fill(store, size)
                    say(f"{kind} {size:,} runs: filled in {filled:.0f} s; timing...")
                    results[kind][size] = time_verbs(store, size, repeats)
    return results


def table(results: dict[str, dict[int, dict[str, float]]]) -> list[str]:
    """The results as lines: a row per store kind and verb, a column per size, then k."""
    lines = []
    for kind, by_size in results.items():
        sizes = sorted(by_size)
        head = " ".join(f"{s:>9,}" for s in sizes)
        lines.append(f"{kind:<10} {'verb':<21} {head}   k (each decade)   goal")
        for verb in VERBS:
            secs = [by_size[s][verb] for s in sizes]
            ks = " ".join(f"{k:+.2f}" for k in exponents(sizes, secs)) or "-"
            goal = GOAL.get(verb, 0.25)
            ok = "ok" if secs[-1] <= goal else "MISSED"
            said = f"<= {goal * 1000:.0f} ms {ok}"
            said = "(start-up alone)" if verb.startswith("python -c pass") else said
            said = "user + system" if verb.endswith("(CPU)") else said
            cells = " ".join(f"{t * 1000:>7.0f}ms" for t in secs)
            lines.append(f"{'':<10} {verb:<21} {cells}   {ks:<17} {said}")
        idle = [by_size[s]["idle worker"] for s in sizes]
        ok = "ok" if idle[-1] <= IDLE_GOAL else "MISSED"
        cells = " ".join(f"{share:>8.1%}" for share in idle)
        lines.append(f"{'':<10} {'idle worker CPU':<21} {cells}   {'':<17} <= {IDLE_GOAL:.0%} {ok}")
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sqlite-only", action="store_true")
    parser.add_argument(
        "--store",
        help="time this store, filled before by storegen with --sizes runs (one size), "
        "instead of filling new ones",
    )
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.store:
        kind = "postgresql" if args.store.startswith("postgres") else "sqlite"
        print("\n".join(table({kind: {sizes[0]: time_verbs(args.store, sizes[0], args.repeats)}})))
        return 0
    from store_side import postgres

    with postgres() as pg:
        kinds = ["sqlite"] if args.sqlite_only or pg is None else ["sqlite", "postgresql"]
        results = measure(sizes, kinds, pg, args.repeats, lambda s: print(s, file=sys.stderr))
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    os.environ.setdefault("LOOPWISE_MODEL", "scripted")
    sys.exit(main(sys.argv[1:]))
