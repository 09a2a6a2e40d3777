"""Mining exactly the agent's runs: :func:`load_runs` takes a store's runs of one target,
:func:`mine` splits them into mined and held-out runs and finds their paths.

A run is the agent's when its recorded spec names the same module — a file by its
resolved path, as the eval history keys targets
(:func:`~loopwise.evidence.evals.history.history_key`), so ``agent.py:x`` and
``./agent.py:x`` are one target and another folder's ``agent.py:x`` is another — and the
same name in it. Runs an eval made (marked with its ``eval_id``) and runs that recorded no
spec are never mined: nothing proves they are this agent's.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias

from loopwise.core.events import Event, Status
from loopwise.errors import ConfigError
from loopwise.evidence.evals.history import history_key
from loopwise.evidence.graduate.analyze import (
    COVERAGE,
    TOP_PATHS,
    PathStats,
    RunRecord,
    TraceAnalysis,
    analyze,
    records,
    tool_path,
)
from loopwise.evidence.graduate.traces import Trace, statuses_of, trace_of
from loopwise.running.targets import Target
from loopwise.store.base import StoredRun
from loopwise.store.open import open_existing

__all__ = ["Mined", "RunHistory", "RunSource", "load_runs", "mine", "newest_runs"]


class RunHistory(Protocol):
    """What mining reads of a store (any :class:`~loopwise.store.base.RunStore`): its
    runs, newest first, and each one's log."""

    def list_runs(self, *, limit: int = 50) -> list[StoredRun]:
        """The most recent ``limit`` runs first."""
        ...

    def events(self, run_id: str) -> list[Event]:
        """The run's events in ``seq`` order."""
        ...


RunSource: TypeAlias = (
    "str | os.PathLike[str] | RunHistory | list[RunRecord] | Sequence[Mapping[str, object]] | None"
)
"""Where mined runs come from: a store (its path or URL, or the store; ``None``: the
default store), or the runs themselves (a list of :class:`RunRecord` s or of mappings with
their keys, as :func:`~loopwise.evidence.graduate.analyze.analyze` takes)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Mined:
    """What mining found."""

    analysis: TraceAnalysis
    """The path analysis of the mined runs."""
    traces: list[Trace]
    """The mined runs on the paths written down (the ones the workflow learns from)."""
    paths: list[PathStats]
    """The paths written down."""
    held_out: list[RunRecord]
    """The completed runs kept out of the mining, for the evaluation."""
    left_out: dict[str, int]
    """Runs that did not complete, by status."""
    mined: int
    """Completed runs mined."""
    every: int = 0
    """About one completed run in this many was held out (0: none)."""
    outside: int = 0
    """Mined runs on paths not written down (the workflow does not take them)."""
    calls: dict[str, int] = field(default_factory=dict)
    """Mined runs by what happened to some call of theirs: ``edited`` or ``approved`` by
    a person (mined; what the person decided is not learned), ``denied``, ``failed``."""
    unlearned: int = 0
    """Mined runs on a written path not learned from: a denied or failed call left the
    path its successful calls took different from the path it is counted on."""


def mine(runs: Sequence[RunRecord], *, target: str, holdout: float = 0.25) -> Mined:
    """Split ``runs`` (oldest first) into mined and held-out completed runs and analyse
    the mined ones; about one completed run in ``round(1 / holdout)`` is held out."""
    if not 0 <= holdout < 1:
        raise ConfigError(f"holdout must be at least 0 and below 1, not {holdout}", name="holdout")
    completed = [r for r in runs if str(r.get("status")) == Status.COMPLETED.value]
    left_out = statuses_of(r for r in runs if str(r.get("status")) != Status.COMPLETED.value)
    every = round(1 / holdout) if holdout else 0
    held = [r.copy() for r in completed if _held(r, every)]
    mined = [r for r in completed if not _held(r, every)]
    analysis = analyze(mined, target=target)
    paths = _covering(analysis.paths)
    wanted = {p.path for p in paths}
    traces, calls, unlearned = [], Counter[str](), 0
    for run in mined:
        trace = trace_of(run)
        calls.update(trace.kinds.keys())
        path, _ = tool_path(run.get("events") or [])
        if path not in wanted:
            continue
        if trace.path == path:
            traces.append(trace)
        else:
            unlearned += 1
    return Mined(
        analysis=analysis,
        traces=traces,
        paths=paths,
        held_out=held,
        left_out=left_out,
        mined=len(mined),
        every=every,
        outside=len(mined) - sum(p.runs for p in paths),
        calls=dict(sorted(calls.items())),
        unlearned=unlearned,
    )


def _held(run: RunRecord, every: int) -> bool:
    """Held out: about one run in ``every``, chosen by a hash of its input — not by its
    place in time (runs made in a cycle split evenly), and every run of one input falls on
    the same side (a held-out case is an input the mining never saw)."""
    if not every:
        return False
    text = json.dumps(run.get("input"), sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:4], "big") % every == 0


def _covering(stats: list[PathStats]) -> list[PathStats]:
    chosen: list[PathStats] = []
    for p in stats[:TOP_PATHS]:
        chosen.append(p)
        if sum(c.share for c in chosen) >= COVERAGE:
            break
    return chosen


def load_runs(where: RunSource, agent: Target, *, limit: int = 1000) -> list[RunRecord]:
    """The newest ``limit`` runs of ``agent`` in the store at ``where`` (a path, URL or
    store; ``None``: the default), oldest first, with input, output and events; no eval's
    runs. No store yet: no runs. Runs given themselves (a list) are taken as they are."""
    if isinstance(where, Sequence) and not isinstance(where, str):
        return records(where)
    if where is not None and not isinstance(where, str | os.PathLike):  # a store itself
        return _runs_in(where, agent, limit)
    store = open_existing(where)
    if store is None:
        return []
    with store:
        return _runs_in(store, agent, limit)


def _runs_in(store: RunHistory, agent: Target, limit: int) -> list[RunRecord]:
    mine = _Same(agent)
    return newest_runs(store, lambda r: mine(r.spec, r.target), limit)


def newest_runs(
    store: RunHistory, keep: Callable[[StoredRun], bool], limit: int
) -> list[RunRecord]:
    """The newest ``limit`` runs of ``store`` that ``keep`` takes (never an eval's), oldest
    first, with input, output and events: read newest first, a wider window each time,
    until ``limit`` were found or every run was seen."""
    fetch = max(4 * limit, 200)
    while True:
        rows = store.list_runs(limit=fetch)
        chosen = [r for r in rows if r.eval_id is None and keep(r)]
        if len(chosen) >= limit or len(rows) < fetch:
            break
        fetch *= 4
    return [
        RunRecord(
            run_id=r.run_id,
            status=r.status,
            model=r.model,
            input=r.input,
            output=r.output,
            created_at=r.created_at,
            events=store.events(r.run_id),
        )
        for r in reversed(chosen[:limit])
    ]


class _Same:
    """Whether a stored run's spec names the agent: the same module (a file by its
    resolved path, a dotted module by name or by the file it loaded from) and name."""

    def __init__(self, agent: Target) -> None:
        module_part, _, name = agent.spec.partition(":")
        self.name = name
        self.step_name = str(agent.step.name)
        self.modules = _keys(module_part)
        file = getattr(agent.module, "__file__", None)  # getattr: a module may have none
        if isinstance(file, str):
            self.modules.add(history_key(file))

    def __call__(self, spec: str | None, target: str) -> bool:
        if not spec:
            return False
        module_part, _, name = spec.partition(":")
        # Where either spec names no attribute, the step's own name decides.
        same_name = name == self.name if name and self.name else target == self.step_name
        return same_name and bool(_keys(module_part) & self.modules)


def _keys(module_part: str) -> set[str]:
    """What identifies a spec's module: a file's resolved path; a dotted name, and the
    file it was loaded from in this process."""
    if module_part.endswith(".py") or "/" in module_part:
        return {history_key(module_part)}
    keys = {module_part}
    file = getattr(sys.modules.get(module_part), "__file__", None)  # getattr: may have none
    if isinstance(file, str):
        keys.add(history_key(file))
    return keys
