"""A stored agent run as data to learn from: its input, its output and its tool calls,
turn by turn, with the values the tools returned (:func:`trace_of`),
and what a person decided about each call.

The turns are the ones :func:`loopwise.evidence.graduate.analyze.tool_path` counts: the calls
between two model calls form one turn, consecutive turns of the same tools collapse into
one (their calls together), the answer call and invented tool names are left out. Calls
whose result was an error (failed, denied, refused) are left out too, and counted in
:attr:`Trace.kinds`: a workflow makes the call that worked.

A call a person decided is marked: :attr:`Call.person` says how (``approved``, ``edited``)
and :attr:`Call.edited` names the arguments a person changed, so what a person decided is
never learned as if the agent had chosen it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from loopwise.core.jsontypes import JSONMapping, JSONObject, JSONValue
from loopwise.evidence.graduate.analyze import ANSWER_TOOLS, RunRecord, event_parts

__all__ = ["Call", "Trace", "statuses_of", "trace_of"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Call:
    """One successful tool call of a stored run."""

    tool: str
    """The tool's name."""
    args: JSONObject
    """The arguments it was called with."""
    value: JSONValue
    """What it returned (its recorded content read as JSON, else the text)."""
    person: str | None = None
    """How a person decided it when one was asked (``approved``, ``edited``), else ``None``."""
    edited: frozenset[str] = frozenset()
    """The arguments a person changed (their values are the person's, not the agent's)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Trace:
    """One stored run, turn by turn."""

    run_id: str
    """The run's id."""
    status: str
    """How it ended."""
    input: JSONValue
    """The run's input."""
    output: JSONValue
    """The run's output (JSON form)."""
    turns: tuple[tuple[Call, ...], ...]
    """The collapsed turns, each its successful calls in the order they were asked."""
    kinds: dict[str, int] = field(default_factory=dict)
    """Calls by what happened to them, when not plain: ``edited``, ``approved`` (by a
    person), ``denied``, ``failed`` (any other error result), ``waiting`` (undecided)."""

    @property
    def path(self) -> tuple[tuple[str, ...], ...]:
        """The turns as sorted tool names (as
        :func:`~loopwise.evidence.graduate.analyze.tool_path`)."""
        return tuple(tuple(sorted({c.tool for c in turn})) for turn in self.turns)


def trace_of(run: RunRecord) -> Trace:
    """The trace of one run ``{"run_id", "status", "input", "output", "events"}``."""
    seen = _Seen()
    turns: list[list[Call]] = []
    current: list[Call] = []
    order: list[str] = []
    for event in run.get("events") or ():
        kind, data = event_parts(event)
        call_id = str(data.get("call_id"))
        if kind == "model_call":
            _close(turns, current, order, seen.asked)
            current, order = [], []
        elif kind == "tool_call" and _a_step(data):
            if seen.call(call_id, data):
                order.append(call_id)
        elif kind == "gate_requested":
            seen.persons.setdefault(call_id, "waiting")
        elif kind == "gate_decided" and call_id in seen.persons:
            seen.persons[call_id] = str(data.get("decision") or "decided")
        elif kind == "tool_result" and call_id in seen.asked:
            found = seen.result(call_id, data)
            if found is not None:
                current.append(found)
    _close(turns, current, order, seen.asked)
    waiting = sum(1 for d in seen.persons.values() if d == "waiting")
    if waiting:
        seen.kinds["waiting"] = waiting
    return Trace(
        run_id=str(run.get("run_id")),
        status=str(run.get("status")),
        input=run.get("input"),
        output=run.get("output"),
        turns=tuple(tuple(t) for t in turns),
        kinds=dict(seen.kinds),
    )


class _Seen:
    """The calls of one run so far: asked, edited, decided by a person."""

    def __init__(self) -> None:
        self.asked: dict[str, tuple[str, JSONValue]] = {}
        self.edited: dict[str, frozenset[str]] = {}
        self.persons: dict[str, str] = {}
        self.kinds: Counter[str] = Counter()

    def call(self, call_id: str, data: JSONMapping) -> bool:
        """Note a ``tool_call`` event; whether it is a new call (not the edit of one)."""
        tool, args = str(data.get("tool")), data.get("args")
        if "edited_by" in data:
            self.edited[call_id] = _changed(data.get("edited_from"), args)
        new = call_id not in self.asked
        self.asked[call_id] = (tool, args)
        return new

    def result(self, call_id: str, data: JSONMapping) -> Call | None:
        tool, args = self.asked.pop(call_id)
        person = self.persons.pop(call_id, None)
        if person == "waiting":
            person = None  # answered after all: the result says how
        edited = self.edited.pop(call_id, frozenset())
        if edited:
            person = "edited"
        if data.get("is_error"):
            status = str(data.get("status") or "failed")
            self.kinds["denied" if status == "denied" else "failed"] += 1
            return None
        if person is not None:
            self.kinds[person] += 1
        return Call(tool=tool, args=_dict(args), value=_value(data), person=person, edited=edited)


def _changed(before: JSONValue, after: JSONValue) -> frozenset[str]:
    """The arguments an edit changed, added or removed (``*``, every one, when the sides
    are not argument dicts to compare)."""
    if not isinstance(before, Mapping) or not isinstance(after, Mapping):
        return frozenset({"*"})
    keys = set(before) | set(after)
    return frozenset(str(k) for k in keys if _json(before.get(k)) != _json(after.get(k)))


def _json(value: JSONValue) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _close(
    turns: list[list[Call]],
    current: list[Call],
    order: list[str],
    asked: dict[str, tuple[str, JSONValue]],
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


def _a_step(data: JSONMapping) -> bool:
    invented = "effect" in data and data["effect"] is None
    return data.get("tool") not in ANSWER_TOOLS and not invented


def _dict(args: JSONValue) -> JSONObject:
    return dict(args) if isinstance(args, Mapping) else {}


def _value(data: JSONMapping) -> JSONValue:
    if "value" in data:
        return data["value"]
    content = data.get("content")
    if not isinstance(content, str):
        return content
    try:
        parsed: JSONValue = json.loads(content)
    except ValueError:
        return content
    return parsed


def statuses_of(runs: Iterable[RunRecord]) -> dict[str, int]:
    """How many runs ended with each status."""
    counts: dict[str, int] = {}
    for run in runs:
        key = str(run.get("status"))
        counts[key] = counts.get(key, 0) + 1
    return counts
