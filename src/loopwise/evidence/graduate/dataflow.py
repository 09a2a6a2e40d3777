"""What the traces prove: where each tool argument came from, and what decided a branch.

:func:`learn` turns the traces of the dominant paths into a :class:`Plan`: a tree of turns
(:class:`TurnPlan`) and the points where the paths part (:class:`Split`). For every call:

* an argument whose value in *every* run equals the run's input or a field of an earlier
  tool result (and that varies between runs, so the equality is not a coincidence of a
  constant) is a :class:`Source` binding; one equal in every run is a constant; anything
  else is **model-filled** (a structured call fills it);
* a tool called a varying number of times in a turn is a **fan-out** over a list in an
  earlier result: one call per item, each argument a field of the item, and — when not
  every item was called — a filter on one field whose values separate the called items
  from the others in every run (:class:`FanOut`); else the whole fan-out is model-filled;
* where paths part, a :class:`Rule` on earlier results — a field's value, or whether any
  item of a list has a field among some values — that sends every run to the branch it
  took; else ``None`` (a structured routing call decides).

A rule or filter must not memorize: a field whose every value is seen once (an id) cannot
be one. Nothing here can learn what no stored run shows, and nothing a person decided is
learned: an argument a person edited in any run is never a binding or a constant (a
structured call fills it, and the tool's own gate judges it as it judged the agent's).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeGuard

from loopwise.core.jsontypes import JSONObject, JSONScalar, JSONValue
from loopwise.evidence.graduate.traces import Call, Trace

__all__ = ["END", "FanOut", "Plan", "Rule", "Source", "Split", "StepPlan", "TurnPlan", "learn"]

END = "end"
"""The label of a branch where the runs stop calling tools and answer."""

_DEPTH = 3  # how deep into nested results a binding may reach


@dataclass(frozen=True, slots=True, order=True)
class Source:
    """Where a value comes from: the run input, or a field of an earlier tool's result."""

    tool: str
    """The tool whose (latest) result holds it; ``""`` for the run input."""
    path: tuple[str, ...] = ()
    """The keys from the result (or input) down to the value."""

    @property
    def text(self) -> str:
        """``the input``, ``lookup_customer["id"]``."""
        where = "the input" if not self.tool else self.tool
        keys = "".join(f"[{k!r}]" for k in self.path)
        return f"{where}{keys}" if keys else where


@dataclass(frozen=True, kw_only=True, slots=True)
class FanOut:
    """One call per item of a list in an earlier result."""

    over: Source
    """The list."""
    fields: dict[str, str]
    """Argument → the item's field it takes."""
    when: tuple[str, tuple[JSONValue, ...]] | None = None
    """Only items whose field (first) has one of these values (``None``: every item)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepPlan:
    """How the workflow makes one tool's calls of one turn."""

    tool: str
    """The tool."""
    bound: dict[str, Source] = field(default_factory=dict)
    """Arguments taken from the input or an earlier result (proved by every run)."""
    constants: dict[str, JSONValue] = field(default_factory=dict)
    """Arguments with the same value in every run."""
    filled: tuple[str, ...] = ()
    """Arguments a structured call fills (single calls)."""
    fanout: FanOut | None = None
    """Set for a tool called once per item of a list."""
    many: bool = False
    """Called a varying number of times with no list that proves which: a structured call
    gives every call's arguments."""
    runs: int = 0
    """The runs this was learned from."""
    edited: tuple[str, ...] = ()
    """Arguments a person edited in some run: never learned, always filled."""
    persons: dict[str, int] = field(default_factory=dict)
    """Calls a person decided, by how (``approved``, ``edited``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Rule:
    """A condition on earlier results that sent every run to the branch it took."""

    source: Source
    """The value (or, with ``item_field``, the list) the rule reads."""
    branches: dict[str, tuple[JSONValue, ...]]
    """Branch label → the values that choose it (``any_of``: the item values)."""
    default: str
    """The branch every other value takes."""
    item_field: str | None = None
    """Set for "any item of the list has this field among the values"."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnPlan:
    """One turn: its tools' calls (concurrent), then what follows."""

    tools: tuple[StepPlan, ...]
    """One plan per tool of the turn."""
    then: TurnPlan | Split | None
    """The next turn, a split, or ``None`` (answer)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Split:
    """Where the mined paths part."""

    branches: dict[str, TurnPlan | None]
    """Branch label → its first turn (``None`` for :data:`END`)."""
    runs: dict[str, int]
    """Branch label → the runs that took it."""
    rule: Rule | None
    """The learned condition, or ``None``: a routing call decides."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """What :func:`learn` found."""

    first: TurnPlan | Split | None
    """The first turn (or split)."""
    runs: int
    """The traces it was learned from."""


def learn(traces: Sequence[Trace]) -> Plan:
    """Learn a :class:`Plan` from ``traces`` (the runs of the paths to write down)."""
    indexes = [_Index(t) for t in traces]
    return Plan(first=_node(list(zip(traces, indexes, strict=True)), 0), runs=len(traces))


_Pair = tuple[Trace, "_Index"]
_Rank = tuple[bool, int, str, tuple[str, ...]]
"""How a source ranks (:func:`_preference`): the input first, then the shortest path."""


def _node(pairs: list[_Pair], depth: int) -> TurnPlan | Split | None:
    if not pairs:
        return None  # nothing to learn from: the runs answer
    groups: dict[str, list[_Pair]] = {}
    for pair in pairs:
        trace = pair[0]
        label = "+".join(trace.path[depth]) if depth < len(trace.path) else END
        groups.setdefault(label, []).append(pair)
    if len(groups) == 1:
        label, group = next(iter(groups.items()))
        return None if label == END else _turn(group, depth)
    ordered = sorted(groups, key=lambda k: (-len(groups[k]), k))
    branches = {k: (None if k == END else _turn(groups[k], depth)) for k in ordered}
    return Split(
        branches=branches,
        runs={k: len(groups[k]) for k in ordered},
        rule=_rule({k: groups[k] for k in ordered}, depth),
    )


def _turn(pairs: list[_Pair], depth: int) -> TurnPlan:
    tools = pairs[0][0].path[depth]
    plans = tuple(_step(tool, pairs, depth) for tool in tools)
    return TurnPlan(tools=plans, then=_node(pairs, depth + 1))


def _calls(trace: Trace, depth: int, tool: str) -> list[Call]:
    return [c for c in trace.turns[depth] if c.tool == tool]


def _step(tool: str, pairs: list[_Pair], depth: int) -> StepPlan:
    per_run = [_calls(t, depth, tool) for t, _ in pairs]
    sources = [ix.at(depth) for _, ix in pairs]
    every = [c for calls in per_run for c in calls]
    edited = {n for c in every for n in c.edited}
    if "*" in edited:  # the person's edit replaced the arguments whole
        edited = {n for c in every for n in c.args}
    persons = dict(Counter(c.person for c in every if c.person is not None))
    found = _learned(tool, per_run, sources, frozenset(edited))
    return replace(found, runs=len(pairs), edited=tuple(sorted(edited)), persons=persons)


def _learned(
    tool: str, per_run: list[list[Call]], sources: list[_AtDepth], edited: frozenset[str]
) -> StepPlan:
    single = None
    if all(len(calls) == 1 for calls in per_run):
        single = _single(tool, [c[0] for c in per_run], sources, edited)
        if not single.filled:
            return single
    # Called once per item of a list (a run that called it once had one such item)?
    fanout = _fanout(per_run, sources) if not edited else None
    if fanout is None:
        return single or StepPlan(tool=tool, many=True)
    fan, constants = fanout
    return StepPlan(tool=tool, fanout=fan, constants=constants)


def _single(
    tool: str, calls: list[Call], sources: list[_AtDepth], edited: frozenset[str]
) -> StepPlan:
    names = sorted({name for c in calls for name in c.args} | edited)
    bound: dict[str, Source] = {}
    constants: dict[str, JSONValue] = {}
    filled: list[str] = []
    for name in names:
        if name in edited or not all(name in c.args for c in calls):
            filled.append(name)  # a person's value, or passed in some runs only
            continue
        values = [_canon(c.args[name]) for c in calls]
        if len(set(values)) == 1 and len(calls) > 1:
            constants[name] = calls[0].args[name]
            continue
        common = set.intersection(
            *(set(s.get(v, ())) for s, v in zip(sources, values, strict=True))
        )
        if common:
            bound[name] = min(common, key=_preference)
        else:
            filled.append(name)
    return StepPlan(tool=tool, bound=bound, constants=constants, filled=tuple(filled))


def _preference(source: Source) -> _Rank:
    """The input first, then the shortest path, then by name."""
    return (source.tool != "", len(source.path), source.tool, source.path)


def _fanout(
    per_run: list[list[Call]], sources: list[_AtDepth]
) -> tuple[FanOut, dict[str, JSONValue]] | None:
    names = sorted({name for calls in per_run for c in calls for name in c.args})
    every = [c for calls in per_run for c in calls]
    if not every or not all(set(c.args) == set(names) for c in every):
        return None
    constants = {
        n: every[0].args[n]
        for n in names
        if len({_canon(c.args[n]) for c in every}) == 1 and len(every) > 1
    }
    varying = [n for n in names if n not in constants]
    if not varying:
        return None
    for over in sorted(_common_lists(sources)):
        lists = [s.lists[over] for s in sources]
        fields = _item_fields(varying, per_run, lists)
        if fields is None:
            continue
        chosen = [
            _chosen(calls, items, fields) for calls, items in zip(per_run, lists, strict=True)
        ]
        if any(c is None for c in chosen):
            continue
        marks = [c for c in chosen if c is not None]
        if all(all(m) for m in marks):
            return FanOut(over=over, fields=fields), constants
        when = _filter(lists, marks, set(fields.values()))
        if when is not None:
            return FanOut(over=over, fields=fields, when=when), constants
    return None


def _common_lists(sources: list[_AtDepth]) -> set[Source]:
    return set.intersection(*(set(s.lists) for s in sources)) if sources else set()


def _item_fields(
    names: list[str], per_run: list[list[Call]], lists: list[list[JSONObject]]
) -> dict[str, str] | None:
    """Argument → an item field holding its value in every call of every run."""
    fields: dict[str, str] = {}
    for name in names:
        candidates: set[str] | None = None
        for calls, items in zip(per_run, lists, strict=True):
            for call in calls:
                value = _canon(call.args[name])
                here = {k for item in items for k, v in item.items() if _canon(v) == value}
                candidates = here if candidates is None else candidates & here
        if not candidates:
            return None
        fields[name] = min(candidates, key=lambda k: (not _unique(k, lists), k))
    return fields


def _unique(key: str, lists: list[list[JSONObject]]) -> bool:
    return all(len({_canon(i.get(key)) for i in items}) == len(items) for items in lists)


def _chosen(
    calls: list[Call], items: list[JSONObject], fields: dict[str, str]
) -> list[bool] | None:
    """Per item: whether it was called (``None``: a call matches no item)."""
    wanted = {tuple(_canon(c.args[n]) for n in fields) for c in calls}
    keys = [tuple(_canon(item.get(f)) for f in fields.values()) for item in items]
    if not wanted <= set(keys):
        return None
    return [k in wanted for k in keys]


def _filter(
    lists: list[list[JSONObject]], chosen: list[list[bool]], taken: set[str]
) -> tuple[str, tuple[JSONValue, ...]] | None:
    """The field and values that tell the called items from the others in every run
    (``None``: no field does)."""
    keys = {k for items in lists for item in items for k in item} - taken
    for key in _by_spread(keys, lists):
        if not _varied(key, lists):
            continue
        called: dict[str, JSONValue] = {}
        passed: set[str] = set()
        count = 0
        for items, marks in zip(lists, chosen, strict=True):
            for item, mark in zip(items, marks, strict=True):
                value = item.get(key)
                if mark:
                    called[_canon(value)] = value
                    count += 1
                else:
                    passed.add(_canon(value))
        if called and not (set(called) & passed):
            return key, tuple(sorted(called.values(), key=_canon))
    return None


def _rule(groups: dict[str, list[_Pair]], depth: int) -> Rule | None:
    """The first rule, most recent results first, that sends every run its own way."""
    labels = list(groups)
    pairs = [p for g in groups.values() for p in g]
    sources = [p[1].at(depth) for p in pairs]
    scalars = set.intersection(*(set(s.scalars) for s in sources))
    lists = _common_lists(sources)
    for source in sorted(scalars | lists, key=sources[0].recency):
        if source in scalars:
            rule = _scalar_rule(groups, source, depth)
        elif len(labels) == 2:
            rule = _any_rule(groups, source, labels, depth)
        else:
            rule = None
        if rule is not None:
            return rule
    return None


def _scalar_rule(groups: dict[str, list[_Pair]], source: Source, depth: int) -> Rule | None:
    """ "This field's value" chooses the branch: the value sets of the branches are disjoint
    and small (the values repeat: not an id)."""
    values: dict[str, dict[str, JSONValue]] = {}
    for label, group in groups.items():
        for _, index in group:
            value = index.at(depth).scalars[source]
            values.setdefault(label, {})[_canon(value)] = value
    keys = [set(v) for v in values.values()]
    distinct = set().union(*keys)
    results = {ix.at(depth).results.get(source.tool) for g in groups.values() for _, ix in g}
    if sum(len(k) for k in keys) != len(distinct) or len(distinct) >= max(
        len(groups) + 1, len(results)
    ):
        return None
    return Rule(
        source=source,
        branches={k: tuple(sorted(v.values(), key=_canon)) for k, v in values.items()},
        default=next(iter(groups)),
    )


def _any_rule(
    groups: dict[str, list[_Pair]], over: Source, labels: list[str], depth: int
) -> Rule | None:
    """ "Some item of a list has a field among these values" for one branch, not the other."""
    items = {k: [ix.at(depth).lists[over] for _, ix in g] for k, g in groups.items()}
    every = [x for lists in items.values() for x in lists]
    keys = {f for lists in every for item in lists for f in item}
    for key in _by_spread(keys, every):
        if not _varied(key, every):
            continue
        for yes, no in ((labels[0], labels[1]), (labels[1], labels[0])):
            found = _any_values(key, items[yes], items[no])
            if found is not None:
                return Rule(source=over, branches={yes: found}, default=no, item_field=key)
    return None


def _varied(key: str, lists: list[list[JSONObject]]) -> bool:
    """A field that can be a condition: scalar, and fewer values than distinct items (not
    an id: the same item seen in many runs does not make its id a pattern)."""
    items = {_canon(i): i for items in lists for i in items}
    values = [i.get(key) for i in items.values()]
    return all(_scalar(v) for v in values) and len({_canon(v) for v in values}) < max(2, len(items))


def _by_spread(keys: set[str], lists: list[list[JSONObject]]) -> list[str]:
    """The fields, fewest distinct values first (a status before a note)."""

    def spread(key: str) -> tuple[int, str]:
        return len({_canon(i.get(key)) for items in lists for i in items}), key

    return sorted(keys, key=spread)


def _any_values(
    key: str, yes: list[list[JSONObject]], no: list[list[JSONObject]]
) -> tuple[JSONValue, ...] | None:
    seen_no = {_canon(i.get(key)) for items in no for i in items}
    values = {_canon(i.get(key)): i.get(key) for items in yes for i in items}
    chosen = {k: v for k, v in values.items() if k not in seen_no}
    if not chosen or not all(any(_canon(i.get(key)) in chosen for i in items) for items in yes):
        return None
    return tuple(sorted(chosen.values(), key=_canon))


@dataclass(slots=True)
class _AtDepth:
    """What a run had seen before one turn: value (canonical) → sources holding it."""

    by_value: dict[str, list[Source]]
    scalars: dict[Source, JSONScalar]
    lists: dict[Source, list[JSONObject]]
    turn_of: dict[str, int]
    results: dict[str, str]
    """Tool → its latest result (canonical): how many distinct things the runs saw."""

    def recency(self, source: Source) -> tuple[int, _Rank]:
        """The most recent result first (what the agent just read decides what it does
        next), then the input, then :func:`_preference`."""
        return (-self.turn_of.get(source.tool, -1), _preference(source))

    def get(self, value: str, default: Sequence[Source] = ()) -> Sequence[Source]:
        return self.by_value.get(value, default)


class _Index:
    """Per trace, the sources seen before each turn (built on first use)."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self._at: dict[int, _AtDepth] = {}

    def at(self, depth: int) -> _AtDepth:
        found = self._at.get(depth)
        if found is None:
            found = self._at[depth] = self._build(depth)
        return found

    def _build(self, depth: int) -> _AtDepth:
        latest: dict[str, JSONValue] = {"": self.trace.input}
        turn_of: dict[str, int] = {}
        for i, turn in enumerate(self.trace.turns[:depth]):
            counts = Counter(c.tool for c in turn)
            for call in turn:
                turn_of[call.tool] = i
                if counts[call.tool] == 1:
                    latest[call.tool] = call.value
                else:
                    latest.pop(call.tool, None)  # several results: none is "the" result
        results = {tool: _canon(value) for tool, value in latest.items()}
        found = _AtDepth(by_value={}, scalars={}, lists={}, turn_of=turn_of, results=results)
        for tool, value in latest.items():
            for path, leaf in _walk(value, ()):
                source = Source(tool, path)
                found.by_value.setdefault(_canon(leaf), []).append(source)
                if _scalar(leaf):
                    found.scalars[source] = leaf
                elif isinstance(leaf, list) and all(isinstance(i, dict) for i in leaf):
                    found.lists[source] = [i for i in leaf if isinstance(i, dict)]  # all of them
        return found


def _walk(value: JSONValue, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], JSONValue]]:
    yield path, value
    if isinstance(value, dict) and len(path) < _DEPTH:
        for key, inner in value.items():
            if isinstance(key, str):
                yield from _walk(inner, (*path, key))


def _scalar(value: JSONValue) -> TypeGuard[JSONScalar]:
    return value is None or isinstance(value, str | int | float | bool)


def _canon(value: JSONValue) -> str:
    """One text per JSON value (``1`` and ``true`` differ, key order does not matter)."""
    return json.dumps(value, sort_keys=True, default=str)
