"""A stored agent run as data to learn from: its input, its output and its tool calls,
turn by turn, with the values the tools returned (:func:`trace_of`, :func:`load_runs`).

The turns are the ones :func:`loopwise.evidence.graduate.analyze.tool_path` counts: the calls
between two model calls form one turn, consecutive turns of the same tools collapse into
one (their calls together), the answer call and invented tool names are left out. Calls
whose result was an error are left out too: a workflow makes the call that worked.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from loopwise.evidence.graduate.analyze import ANSWER_TOOLS, event_parts
from loopwise.store.open import open_existing

__all__ = ["Call", "Trace", "load_runs", "statuses_of", "trace_of"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Call:
    """One successful tool call of a stored run."""

    tool: str
    """The tool's name."""
    args: dict[str, Any]
    """The arguments it was called with."""
    value: Any
    """What it returned (its recorded content read as JSON, else the text)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Trace:
    """One stored run, turn by turn."""

    run_id: str
    """The run's id."""
    status: str
    """How it ended."""
    input: Any
    """The run's input."""
    output: Any
    """The run's output (JSON form)."""
    turns: tuple[tuple[Call, ...], ...]
    """The collapsed turns, each its successful calls in the order they were asked."""

    @property
    def path(self) -> tuple[tuple[str, ...], ...]:
        """The turns as sorted tool names (as
        :func:`~loopwise.evidence.graduate.analyze.tool_path`)."""
        return tuple(tuple(sorted({c.tool for c in turn})) for turn in self.turns)


def trace_of(run: Mapping[str, Any]) -> Trace:
    """The trace of one run ``{"run_id", "status", "input", "output", "events"}``."""
    asked: dict[str, tuple[str, Any]] = {}
    turns: list[list[Call]] = []
    current: list[Call] = []
    order: list[str] = []
    for event in run.get("events") or ():
        kind, data = event_parts(event)
        if kind == "model_call":
            _close(turns, current, order, asked)
            current, order = [], []
        elif kind == "tool_call" and _a_step(data):
            call_id = str(data.get("call_id"))
            asked[call_id] = (str(data.get("tool")), data.get("args"))
            order.append(call_id)
        elif kind == "tool_result" and not data.get("is_error"):
            call_id = str(data.get("call_id"))
            if call_id in asked:
                tool, args = asked.pop(call_id)
                current.append(Call(tool=tool, args=_dict(args), value=_value(data)))
    _close(turns, current, order, asked)
    return Trace(
        run_id=str(run.get("run_id")),
        status=str(run.get("status")),
        input=run.get("input"),
        output=run.get("output"),
        turns=tuple(tuple(t) for t in turns),
    )


def _close(
    turns: list[list[Call]], current: list[Call], order: list[str], asked: dict[str, Any]
) -> None:
    """End a turn: keep its calls (collapsing into the previous turn of the same tools)."""
    for call_id in order:
        asked.pop(call_id, None)  # a call without a successful result
    if not current:
        return
    tools = {c.tool for c in current}
    if turns and {c.tool for c in turns[-1]} == tools:
        turns[-1].extend(current)
    else:
        turns.append(list(current))


def _a_step(data: Mapping[str, Any]) -> bool:
    invented = "effect" in data and data["effect"] is None
    return data.get("tool") not in ANSWER_TOOLS and not invented


def _dict(args: Any) -> dict[str, Any]:
    return dict(args) if isinstance(args, Mapping) else {}


def _value(data: Mapping[str, Any]) -> Any:
    if "value" in data:
        return data["value"]
    content = data.get("content")
    if not isinstance(content, str):
        return content
    try:
        return json.loads(content)
    except ValueError:
        return content


def load_runs(where: Any, target: str, *, limit: int = 1000) -> list[dict[str, Any]]:
    """The newest ``limit`` runs of ``target`` (its spec or step name) in the store at
    ``where`` (a path, URL or store; ``None``: the default), oldest first, with input,
    output and events. No store yet: no runs."""
    if where is not None and not isinstance(where, str | os.PathLike):  # a store itself
        return _runs_in(where, target, limit)
    store = open_existing(where)
    if store is None:
        return []
    with store:
        return _runs_in(store, target, limit)


def _runs_in(store: Any, target: str, limit: int) -> list[dict[str, Any]]:
    names = {target, target.rsplit(":", 1)[-1]}
    rows = [r for r in store.list_runs(limit=limit) if r.spec in names or r.target in names]
    return [
        {
            "run_id": r.run_id,
            "status": r.status,
            "model": r.model,
            "input": r.input,
            "output": r.output,
            "created_at": r.created_at,
            "events": store.events(r.run_id),
        }
        for r in reversed(rows)
    ]


def statuses_of(runs: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many runs ended with each status."""
    counts: dict[str, int] = {}
    for run in runs:
        key = str(run.get("status"))
        counts[key] = counts.get(key, 0) + 1
    return counts
