"""Graduating from 1,000 stored runs: mining and generation time (target: under 10 s).

    .venv/bin/python benchmarks/graduate.py [RUNS]

Stores RUNS (default 1,000) offline runs of the order-investigation agent in a fresh
SQLite store (not timed), then times ``loopwise.graduate`` without its evaluation
(``dataset=[]``): reading the runs and their events from the store, the path analysis,
learning the bindings and conditions, writing the module, loading it and ``check``.
Prints the seconds, best of three, and each part once. Not a test: machines are noisy.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = f"{ROOT}/agents/order_investigation.py:investigate"
WORDS = [
    "Why did the last orders of {c} fail?",
    "What went wrong with {c}'s recent orders?",
    "Customer {c}: check the last three orders",
]


def _store(path: str, n: int) -> None:
    import loopwise
    from loopwise.running.targets import load_target, model_for

    target = load_target(SPEC)
    model = model_for(target, "scripted")
    pairs = [(f"C-{1001 + i % 12}", WORDS[i % 3], i) for i in range(n)]
    random.Random(7).shuffle(pairs)
    with loopwise.open_store(path) as store:
        for c, w, i in pairs:
            question = w.format(c=c) + ("" if i < 36 else f" (ticket {i})")
            loopwise.run(target.step, question, model=model, store=store, spec=SPEC)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    import loopwise
    from loopwise.evidence.graduate.graduate import mine
    from loopwise.evidence.graduate.traces import load_runs

    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("LOOPWISE_SHOP_DB", f"{tmp}/shop.db")
        store = f"{tmp}/runs.db"
        started = time.perf_counter()
        _store(store, n)
        print(f"stored {n} runs in {time.perf_counter() - started:.1f} s (not timed)")
        times = []
        for k in range(3):
            out = Path(tmp) / f"wf{k}.py"
            t0 = time.perf_counter()
            g = loopwise.graduate(SPEC, runs=store, out=out, dataset=[], limit=n)
            times.append(time.perf_counter() - t0)
            assert g.out is not None and not [f for f in g.findings if f.level == "error"]
        t0 = time.perf_counter()
        runs = load_runs(store, SPEC, limit=n)
        t1 = time.perf_counter()
        found = mine(runs, target=SPEC)
        t2 = time.perf_counter()
        print(f"  read {len(runs)} runs with their events: {t1 - t0:.2f} s")
        print(f"  analyse + split ({found.mined} mined): {t2 - t1:.2f} s")
        best = min(times)
        verdict = "met" if best < 10 else "MISSED"
        print(f"graduate without its eval, {n} runs: best {best:.2f} s of 3 (< 10 s: {verdict})")


if __name__ == "__main__":
    main()
