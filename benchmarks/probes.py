"""Measurements that need a fresh process: import time and peak memory.

Run as a script: ``probes.py import STATEMENT`` prints the seconds the import statement
took;
``probes.py memory KIND BASE_URL RUNS`` runs ``RUNS`` concurrent runs and prints the
process's peak RSS in KiB, KIND one of ``raw``/``loopwise`` (the agent task) or
``triage-raw``/``triage-loopwise`` (the triage task; loopwise runs the canonical
``workflows/ticket_triage.py:triage`` workflow, loaded as the CLI loads it).

:func:`cli_times` times ``loopwise`` commands as fresh processes, as a user runs them.

Peak RSS is read from ``VmHWM`` in ``/proc/self/status`` where there is one: Linux
carries ``getrusage``'s ``ru_maxrss`` across ``fork``/``exec``, so a probe started by a
big parent would report the parent's peak, not its own. Elsewhere ``ru_maxrss`` is used.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _run(*args: str) -> float:
    # Bytecode caches on, as in any normal install: with PYTHONDONTWRITEBYTECODE set,
    # loopwise (an editable install) would be compiled from source on every import
    # while openai's wheel ships its .pyc files.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run(
        [sys.executable, str(HERE / "probes.py"), *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=HERE,
        env=env,
    )
    return float(out.stdout.strip().splitlines()[-1])


def import_times(modules: list[str], repeats: int) -> dict[str, float]:
    """Best-of-``repeats`` seconds of each import statement, each in a fresh interpreter
    (after one untimed import of each, which writes the bytecode caches)."""
    for m in modules:
        _run("import", m)
    best = {m: float("inf") for m in modules}
    for _ in range(repeats):
        for m in modules:  # interleaved, so drift hits both alike
            best[m] = min(best[m], _run("import", m))
    return best


def peak_memory(kind: str, base_url: str, runs: int, repeats: int) -> float:
    """Lowest peak RSS (KiB) over ``repeats`` processes doing ``runs`` concurrent agent runs."""
    return min(_run("memory", kind, base_url, str(runs)) for _ in range(repeats))


def cli_times(
    commands: dict[str, Callable[[], list[str]]], repeats: int
) -> dict[str, tuple[float, float]]:
    """Median wall and CPU seconds (user + system) of each command as a fresh process
    (interleaved, after one untimed run of each, which writes the bytecode caches); each
    command's argv is built afresh for every run (an approval is decided once). CPU time
    is blind to other jobs on a busy machine; wall time is what a user waits."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def once(argv: list[str]) -> tuple[float, float]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True, env=env)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    for argv in commands.values():
        once(argv())
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(repeats):
        for name, argv in commands.items():
            runs[name].append(once(argv()))
    return {
        name: (statistics.median(w for w, _ in r), statistics.median(c for _, c in r))
        for name, r in runs.items()
    }


def _import(statement: str) -> None:
    start = time.perf_counter()
    exec(statement)
    print(time.perf_counter() - start)


def _memory(kind: str, base_url: str, runs: int) -> None:
    import asyncio

    import openai
    import raw_loop

    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
    question = "Why did order A-1000 fail? turns=5"
    ticket = {"subject": "Charged twice", "body": "I was billed twice for order O-1001."}

    async def main() -> None:
        if kind == "raw":
            await asyncio.gather(*(raw_loop.agent(client, "bench", question) for _ in range(runs)))
            return
        if kind == "triage-raw":
            await asyncio.gather(*(raw_loop.triage(client, "bench", ticket) for _ in range(runs)))
            return
        import lw_side

        model = lw_side.openai_model("bench", client)
        if kind == "triage-loopwise":
            from loopwise.running.targets import load_target

            triage = load_target(str(HERE.parent / "workflows" / "ticket_triage.py:triage")).step
            await asyncio.gather(*(lw_side.run(triage, ticket, model) for _ in range(runs)))
            return
        agent = lw_side.make_agent()
        await asyncio.gather(*(lw_side.run(agent, question, model) for _ in range(runs)))

    asyncio.run(main())
    print(_peak_rss_kib(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))


def _peak_rss_kib(maxrss: int) -> int:
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return maxrss // 1024 if sys.platform == "darwin" else maxrss


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    if sys.argv[1] == "import":
        _import(sys.argv[2])
    else:
        _memory(sys.argv[2], sys.argv[3], int(sys.argv[4]))
