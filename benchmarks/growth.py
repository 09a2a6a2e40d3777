"""Growth: what loopwise's own work costs as the work grows, with a fitted exponent.

Each series times one size after another in this process, in CPU seconds of this process
(an in-process model that answers at once, so only loopwise's work is timed, and other
jobs on a shared machine do not count) and fits ``time ~ size^k`` by least
squares on the logs of the larger sizes (the smallest ones are mostly fixed cost). A
linear cost has ``k`` near 1; a cost that re-walks what came before has ``k`` near 2.

``late_vs_early`` times the steps of one long run with every option on (context policy,
token budget, scripted model, store) and compares a late step with an early one.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import math
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import loopwise
from loopwise import ModelRequest, ToolCall, Turn
from loopwise.architectures.agent import Agent, LoopDetection
from loopwise.architectures.history import ContextPolicy
from loopwise.architectures.workflow import Workflow
from loopwise.core.usage import Budget
from loopwise.evidence.evals.dataset import Case, load_dataset
from loopwise.evidence.evals.harness import EvalTarget, aevaluate
from loopwise.running.targets import load_target
from loopwise.store.sqlite import SQLiteStore

WORKFLOWS = Path(__file__).resolve().parent.parent / "workflows"

#: Agent steps per run: 10 ... 2,000.
STEPS = (10, 100, 250, 500, 1000, 2000)
#: Eval cases per in-process eval.
CASES = (1000, 5000)
#: Workflow nodes per declared (and run) workflow.
NODES = (101, 301, 1001, 3001)
#: The smallest size the exponent is fitted from (smaller sizes are mostly fixed cost).
FIT_FROM = 100

#: A tool result long enough for a context policy to compact (its preview is 120 chars).
PAGE = "order O-1001 failed: card declined by the issuer; retry scheduled. " * 5


@dataclass
class Series:
    """Sizes and the seconds each took."""

    name: str
    unit: str
    sizes: list[int]
    seconds: list[float]

    @property
    def exponent(self) -> float:
        """The slope of log(time) on log(size), from :data:`FIT_FROM` up."""
        points = [
            (math.log(n), math.log(s))
            for n, s in zip(self.sizes, self.seconds, strict=True)
            if n >= FIT_FROM
        ]
        mx = statistics.fmean(x for x, _ in points)
        my = statistics.fmean(y for _, y in points)
        num = sum((x - mx) * (y - my) for x, y in points)
        return num / sum((x - mx) ** 2 for x, _ in points)


class _CountingModel:
    """Calls ``fetch_page`` ``steps - 1`` times, then answers; O(1) per turn."""

    name = "growth-model"

    def __init__(self, steps: int, clock: list[float] | None = None) -> None:
        self._left = steps
        self._clock = clock

    async def complete(self, request: ModelRequest) -> Turn:
        return self.next_turn(request)

    def next_turn(self, request: ModelRequest) -> Turn:
        """The next turn (the scripted variant uses this as its script)."""
        if self._clock is not None:
            self._clock.append(time.process_time())
        self._left -= 1
        if self._left <= 0:
            return Turn(text="done", finish_reason="stop")
        call = ToolCall(id=f"g{self._left}", name="fetch_page", arguments='{"page": 1}')
        # No token counts: a scripted model estimates them from the prompt, as it would.
        return Turn(tool_calls=[call], finish_reason="tool_calls")


async def fetch_page(page: int) -> str:
    """Fetch one page of the order history.

    Args:
        page: The page number.
    """
    return PAGE


def _agent(steps: int, policy: ContextPolicy | None = None) -> Agent:
    return Agent(
        name="growth_agent",
        instructions="Read the history, then answer.",
        tools=[fetch_page],
        max_steps=steps + 1,
        context_policy=policy,
        loop_detection=LoopDetection(repeats=0, ping_pong=0),
    )


def _scripted(counting: _CountingModel) -> Any:
    # Imported here: loopwise.testing is not part of what an agent run loads.
    from loopwise.testing import ScriptedModel

    return ScriptedModel(counting.next_turn)


@dataclass(frozen=True)
class _Variant:
    name: str
    policy: ContextPolicy | None = None
    budget: Budget | None = None
    scripted: bool = False
    store: bool = False


VARIANTS = (
    _Variant("agent, bare"),
    _Variant("agent, ContextPolicy(keep_last=3)", policy=ContextPolicy(keep_last=3)),
    _Variant("agent, token budget", budget=Budget(max_tokens=10**12)),
    _Variant("agent, ScriptedModel", scripted=True),
    _Variant("agent, store on (SQLite)", store=True),
)
EVERYTHING = _Variant(
    "everything on",
    policy=ContextPolicy(keep_last=3),
    budget=Budget(max_tokens=10**12),
    scripted=True,
    store=True,
)


async def _agent_run(variant: _Variant, steps: int, clock: list[float] | None = None) -> None:
    counting = _CountingModel(steps, clock)
    model = _scripted(counting) if variant.scripted else counting
    options: dict[str, Any] = {"model": model, "budget": variant.budget}
    if variant.store:
        folder = tempfile.mkdtemp(prefix="loopwise-growth-")
        with SQLiteStore(Path(folder) / "runs.db") as store:
            result = await loopwise.arun(
                _agent(steps, variant.policy), "go", store=store, **options
            )
    else:
        result = await loopwise.arun(_agent(steps, variant.policy), "go", store=None, **options)
    if result.status != "completed" or result.steps != steps:
        raise RuntimeError(f"growth run ended {result.status} after {result.steps} steps")


async def _timed(work: Callable[[], Awaitable[object]]) -> float:
    gc.collect()
    start = time.process_time()
    await work()
    return time.process_time() - start


async def agent_series(variant: _Variant, sizes: Sequence[int] = STEPS) -> Series:
    """One run per size; seconds per run."""
    await _agent_run(variant, 10)  # warm: imports, first-use caches
    seconds = [await _timed(lambda n=n: _agent_run(variant, n)) for n in sizes]
    return Series(variant.name, "steps", list(sizes), seconds)


async def late_vs_early(steps: int = STEPS[-1]) -> tuple[float, float]:
    """Median seconds of an early step (10-110) and of a late one (the last 100), one run
    with every option on; a step is the time between two model calls."""
    clock: list[float] = []
    await _agent_run(EVERYTHING, steps, clock)
    gaps = [b - a for a, b in itertools.pairwise(clock)]
    window = min(100, steps // 4)
    return statistics.median(gaps[10 : 10 + window]), statistics.median(gaps[-window:])


async def eval_series(sizes: Sequence[int] = CASES) -> Series:
    """In-process evals of the triage workflow with its own offline model."""
    loaded = load_target(str(WORKFLOWS / "ticket_triage.py:triage"))
    pool = load_dataset(WORKFLOWS / "data" / "tickets.jsonl")
    target = EvalTarget(name="triage", step=loaded.step, model=loaded.module.offline_model)

    def cases(n: int) -> list[Case]:
        return [Case(id=str(i), input=pool[i % len(pool)].input) for i in range(n)]

    async def one(n: int) -> None:
        report = await aevaluate([target], cases(n), concurrency=8)
        if report.targets[0].completed_rate != 1.0:
            raise RuntimeError("growth eval: not every case completed")

    await one(50)
    seconds = [await _timed(lambda n=n: one(n)) for n in sizes]
    return Series("in-process eval (triage, offline model)", "cases", list(sizes), seconds)


@loopwise.step
async def _pass(value: int) -> int:
    return value


async def _parity(value: int) -> int:
    return value % 2


def _diamonds(nodes: int) -> Workflow:
    """A chain of route diamonds (route -> one of two branches -> merge), built with the
    builder API, branches named before they exist: what a compiled plan looks like."""
    wf = Workflow(f"diamonds{nodes}", input_type=int)
    wf.add("start", _pass)
    last = "start"
    for i in range(max(1, (nodes - 1) // 4)):
        wf.add_route(f"r{i}", _parity, {0: f"even{i}", 1: f"odd{i}"}, after=[last])
        wf.add(f"even{i}", _pass)
        wf.add(f"odd{i}", _pass)
        last = f"merge{i}"
        wf.add(last, _pass, after=[f"even{i}", f"odd{i}"])
    return wf


async def workflow_series(sizes: Sequence[int] = NODES) -> tuple[Series, Series]:
    """Declaring a workflow of N nodes, and running it (validation included)."""
    declare: list[float] = []
    run: list[float] = []
    _diamonds(10)
    for n in sizes:
        gc.collect()
        start = time.process_time()
        wf = _diamonds(n)
        declare.append(time.process_time() - start)
        run.append(await _timed(lambda wf=wf: loopwise.arun(wf, 1, store=None)))
    return (
        Series("workflow: declare (route diamonds)", "nodes", list(sizes), declare),
        Series("workflow: run it (first run validates)", "nodes", list(sizes), run),
    )


def run_all(quick: bool = False) -> tuple[list[Series], tuple[float, float]]:
    """Every series, and the late/early step pair (``quick``: smaller sizes)."""
    steps, cases, nodes = (STEPS[:4], (200, 1000), NODES[:3]) if quick else (STEPS, CASES, NODES)

    async def main() -> tuple[list[Series], tuple[float, float]]:
        series = [await agent_series(v, steps) for v in VARIANTS]
        late = await late_vs_early(steps[-1])
        series.append(await eval_series(cases))
        series.extend(await workflow_series(nodes))
        return series, late

    return asyncio.run(main())
