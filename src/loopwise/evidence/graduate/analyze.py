"""Trace mining: which tool-call paths did stored agent runs take? :func:`analyze`.

When a few paths cover most runs the steps *are* known: :func:`analyze` says so with the
numbers and :func:`workflow_skeleton` writes the Python of a workflow that takes the
dominant paths — the evidence-based way from a prototype agent to a workflow.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Required, TypeAlias, TypedDict, cast

from loopwise.architectures.agent import FINAL_ANSWER
from loopwise.core.events import Event
from loopwise.core.jsontypes import JSONMapping, JSONObject, JSONValue

__all__ = [
    "PathStats",
    "RunRecord",
    "StoredEvent",
    "ToolPath",
    "TraceAnalysis",
    "analyze",
    "event_parts",
    "example_args",
    "records",
    "tool_path",
    "workflow_skeleton",
]


StoredEvent: TypeAlias = "Event | JSONMapping"
"""An event as a run record holds it: an :class:`~loopwise.core.events.Event`, or its
:meth:`~loopwise.core.events.Event.to_dict` (``{"type", "data", ...}``)."""

ToolPath: TypeAlias = tuple[tuple[str, ...], ...]
"""A tool-call path: turns in order, each the sorted tools called in it."""


class RunRecord(TypedDict, total=False):
    """One stored run as the evidence code reads it: what
    :func:`~loopwise.evidence.graduate.mining.newest_runs` reads from a store, and what
    :func:`analyze` takes (``run_id``, ``status`` and ``events`` at least)."""

    run_id: Required[str]
    """The run's id."""
    status: Required[str]
    """How it ended (a :class:`~loopwise.core.events.Status` value, or ``running``)."""
    events: Required[Sequence[StoredEvent]]
    """Its log, oldest first."""
    model: str | None
    """The model it started with."""
    input: JSONValue
    """Its input, as stored."""
    output: JSONValue
    """Its output, as stored (JSON form)."""
    created_at: str
    """When it was created (ISO 8601)."""


def records(runs: Iterable[Mapping[str, object]]) -> list[RunRecord]:
    """Runs as a caller holds them (:class:`RunRecord` s, or any mappings with their keys:
    dicts read from JSON or built in code) as run records. Nothing is copied or checked
    here: every reader of a record takes its keys with ``.get`` and narrows what it reads,
    so a mapping's other keys are never looked at."""
    return cast("list[RunRecord]", list(runs))


#: A few paths: the verdict ``steps_known`` needs the top paths up to this many ...
TOP_PATHS = 3
#: ... to cover at least this share of the runs ...
COVERAGE = 0.8
#: ... over at least this many runs.
MIN_RUNS = 5


@dataclass(frozen=True, kw_only=True, slots=True)
class PathStats:
    """One distinct tool-call path and the runs that took it."""

    path: ToolPath
    """Turns in order; each the sorted tools called in that turn (parallel calls share one)."""
    repeated: tuple[bool, ...]
    """Per turn: whether some run repeated it (consecutive identical turns collapse)."""
    runs: int
    """How many runs took this path."""
    share: float
    """``runs`` / all runs analysed."""
    statuses: dict[str, int]
    """How those runs ended."""
    run_ids: list[str]
    """Which runs (for ``loopwise runs show``)."""

    @property
    def text(self) -> str:
        """``lookup_customer → list_orders → {get_payment, get_shipment}+``."""
        parts = []
        for turn, again in zip(self.path, self.repeated, strict=True):
            label = turn[0] if len(turn) == 1 else "{" + ", ".join(turn) + "}"
            parts.append(label + ("+" if again else ""))
        return " → ".join(parts) if parts else "(no tool calls)"

    def to_dict(self) -> JSONObject:
        """A JSON-ready dict."""
        return {
            "path": self.text,
            "turns": [list(t) for t in self.path],
            "repeated": list(self.repeated),
            "runs": self.runs,
            "share": round(self.share, 4),
            "statuses": dict(self.statuses),
            "run_ids": list(self.run_ids),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class TraceAnalysis:
    """What :func:`analyze` found in stored runs."""

    target: str | None
    """The target analysed (``None``: every stored run)."""
    runs: int
    """Runs analysed."""
    paths: list[PathStats]
    """Distinct paths, most runs first."""
    verdict: str
    """``steps_known``, ``steps_unknown``, ``not_enough_runs`` or ``no_runs``."""
    message: str
    """The verdict in one or two sentences, with the numbers."""
    top_coverage: float
    """Share of runs covered by the top ``TOP_PATHS`` paths."""
    skeleton: str | None
    """A Python workflow skeleton of the top paths when the steps are known."""
    statuses: tuple[str, ...] | None = ("completed",)
    """Only runs that ended with one of these were counted (``None``: every run)."""
    model: str | None = None
    """Only runs that started with this model were counted (``None``: any model)."""

    def to_dict(self) -> JSONObject:
        """The JSON document ``loopwise analyze --json`` prints."""
        return {
            "target": self.target,
            "statuses": None if self.statuses is None else list(self.statuses),
            "model": self.model,
            "runs": self.runs,
            "distinct_paths": len(self.paths),
            "top_coverage": round(self.top_coverage, 4),
            "verdict": self.verdict,
            "message": self.message,
            "paths": [p.to_dict() for p in self.paths],
            "skeleton": self.skeleton,
        }


#: Tool calls that deliver the answer rather than take a step (an agent's structured output).
ANSWER_TOOLS = frozenset({FINAL_ANSWER})


def tool_path(events: Iterable[StoredEvent]) -> tuple[ToolPath, tuple[bool, ...]]:
    """The collapsed tool-call path of one run's events (dicts or :class:`Event`).

    Tool calls between two model calls belong to one turn (the model asked for them
    together, so they may run in parallel); a turn is the sorted set of its tool names.
    Consecutive identical turns collapse into one marked as repeated, so "checked three
    orders one after another" and "checked two" are the same path. Calls of
    :data:`ANSWER_TOOLS` are the answer, not a step, and are left out.
    """
    turns: list[tuple[str, ...]] = []
    current: list[str] = []
    for event in events:
        kind, data = event_parts(event)
        if kind == "model_call" and current:
            turns.append(tuple(sorted(set(current))))
            current = []
        elif kind == "tool_call" and _a_step(data):
            current.append(str(data.get("tool", "?")))
    if current:
        turns.append(tuple(sorted(set(current))))
    path: list[tuple[str, ...]] = []
    repeated: list[bool] = []
    for turn in turns:
        if path and path[-1] == turn:
            repeated[-1] = True
        else:
            path.append(turn)
            repeated.append(False)
    return tuple(path), tuple(repeated)


def _a_step(data: JSONMapping) -> bool:
    """A call that is a step of the path: not the answer, and not an invented tool name
    (recorded with ``effect: null``), which no workflow could call."""
    invented = "effect" in data and data["effect"] is None
    return data.get("tool") not in ANSWER_TOOLS and not invented


def event_parts(event: StoredEvent) -> tuple[str, JSONMapping]:
    """An event's ``(type, data)``, whether a stored dict or an :class:`Event`."""
    if isinstance(event, Mapping):
        # Any mapping, as a record's events may hold (read-only ones, a database row's):
        # what is no mapping holds no data.
        data = event.get("data")
        return str(event.get("type")), data if isinstance(data, Mapping) else {}
    return str(event.type), event.data


def analyze(
    runs: Iterable[Mapping[str, object]],
    *,
    target: str | None = None,
    statuses: Collection[str] | None = ("completed",),
    model: str | None = None,
    top: int = TOP_PATHS,
    coverage: float = COVERAGE,
    min_runs: int = MIN_RUNS,
) -> TraceAnalysis:
    """Mine ``runs`` (each ``{"run_id", "status", "events"}``, ``"model"`` optional) for
    their tool-call paths.

    Only runs that ended with one of ``statuses`` count (by default the completed ones: a
    run that got stuck or failed is not a path worth writing down; ``None`` counts every
    run), and, given ``model``, only runs whose ``"model"`` is that model. Runs that never
    called a tool count as their own path, ``(no tool calls)`` (an empty
    :attr:`PathStats.path`); invented tool names are left out of paths. The verdict is
    ``steps_known`` when the top ``top`` paths cover at least ``coverage`` of at least
    ``min_runs`` runs; then :attr:`TraceAnalysis.skeleton` holds a workflow of the fewest
    top paths that reach ``coverage``.
    """
    # Runs that took the same turns share a path whether they repeated a turn or not
    # (one order checked or three); the path marks a turn repeated if any run did.
    groups: dict[ToolPath, list[RunRecord]] = {}
    repeats: dict[ToolPath, list[bool]] = {}
    chosen = sorted(statuses) if statuses is not None else None
    for run in records(runs):
        if (chosen is not None and str(run.get("status")) not in chosen) or (
            model is not None and run.get("model") != model
        ):
            continue
        # A run that called no tool (it answered at once, or planned nothing) took a path
        # of its own, ``(no tool calls)``: left out, the shares would be of fewer runs.
        path, repeated = tool_path(run.get("events") or [])
        groups.setdefault(path, []).append(run)
        seen = repeats.setdefault(path, [False] * len(path))
        repeats[path] = [a or b for a, b in zip(seen, repeated, strict=True)]
    total = sum(len(g) for g in groups.values())
    stats = sorted(
        (_path_stats((p, tuple(repeats[p])), group, total) for p, group in groups.items()),
        key=lambda p: (-p.runs, p.text),
    )
    covered = sum(p.share for p in stats[:top])
    verdict, message = _verdict(
        stats, total, covered, top=top, coverage=coverage, min_runs=min_runs
    )
    skeleton = None
    if verdict == "steps_known":
        runs_seen = [r for group in groups.values() for r in group]
        top_paths = _covering(stats, coverage, top)
        skeleton = workflow_skeleton(top_paths, name=target, examples=example_args(runs_seen))
    return TraceAnalysis(
        target=target,
        statuses=None if chosen is None else tuple(chosen),
        model=model,
        runs=total,
        paths=stats,
        verdict=verdict,
        message=message,
        top_coverage=covered,
        skeleton=skeleton,
    )


def _covering(stats: list[PathStats], coverage: float, top: int) -> list[PathStats]:
    """The fewest top paths (at most ``top``) that reach ``coverage``."""
    chosen: list[PathStats] = []
    for p in stats[:top]:
        chosen.append(p)
        if sum(c.share for c in chosen) >= coverage:
            break
    return chosen


def _path_stats(
    key: tuple[ToolPath, tuple[bool, ...]], group: list[RunRecord], total: int
) -> PathStats:
    statuses = Counter(str(r.get("status")) for r in group)
    return PathStats(
        path=key[0],
        repeated=key[1],
        runs=len(group),
        share=len(group) / total,
        statuses=dict(statuses.most_common()),
        run_ids=[str(r.get("run_id")) for r in group],
    )


def _verdict(
    stats: list[PathStats], total: int, covered: float, *, top: int, coverage: float, min_runs: int
) -> tuple[str, str]:
    if total == 0:
        return "no_runs", "no stored run to analyse: run the agent a few times first"
    k = min(top, len(stats))
    share = (
        f"the top path covers {covered:.0%} of {total} runs"
        if k == 1
        else f"the top {k} paths cover {covered:.0%} of {total} runs"
    )
    if total < min_runs:
        return "not_enough_runs", (
            f"{len(stats)} distinct path(s) over {total} runs; {share}, but fewer than "
            f"{min_runs} runs prove nothing yet"
        )
    if covered >= coverage:
        return "steps_known", (
            f"{share} (≥ {coverage:.0%}): the steps are known. `loopwise graduate` writes "
            "these paths as a workflow and evaluates it against the agent (a skeleton is "
            "below)"
        )
    return "steps_unknown", (
        f"{len(stats)} distinct paths; {share} (< {coverage:.0%}): the runs do not converge, "
        "so the steps are not known and an agent (or a hybrid, if a wrong step is expensive) "
        "fits"
    )


def workflow_skeleton(
    paths: PathStats | Sequence[PathStats],
    *,
    name: str | None = None,
    examples: JSONMapping | None = None,
) -> str:
    """Python source of a :class:`~loopwise.architectures.workflow.Workflow` that takes ``paths``.

    The turns the paths share become a chain of nodes; where they part, one node holds an
    ``if`` per path with a ``TODO`` condition (in a workflow, code decides what the model
    did). Tools the agent called together are called together, through
    :func:`loopwise.tools.calls.call_tools` — gated, journaled and keyed like the agent's calls,
    so a write tool's policy or person still decides; a repeated turn becomes a loop.
    When ``name`` is a target spec (``agents/x.py:investigate``) the skeleton takes the
    tools from that agent (its ``tool_map``); ``examples`` maps a tool to
    arguments the agent once passed, shown beside each call.
    """
    group = [paths] if isinstance(paths, PathStats) else list(paths)
    base = _identifier((name or "agent").rsplit(":", 1)[-1]) + "_workflow"
    tools = sorted({t for p in group for turn in p.path for t in turn})
    shared = _shared_prefix(group)
    share = sum(p.share for p in group)
    lines = [
        f'"""{base}: the agent\'s common tool paths ({share:.0%} of its runs) as a workflow,',
        "so the path is fixed, cheap and debuggable at a known line:",
        *(f"    {p.share:>4.0%}  {p.text}" for p in group),
        '"""',
        "",
        "import loopwise",
        "from loopwise import Workflow",
        "from loopwise import call_tools",
        *_tool_imports(name, tools),
        "",
    ]
    calls = _Calls(examples or {})
    nodes = []
    for i, turn in enumerate(shared, 1):
        again = any(p.repeated[i - 1] for p in group)
        node = f"step_{i}_" + "_and_".join(_identifier(t) for t in turn)
        nodes.append(node)
        lines += _node(node, f"Call {', '.join(turn)}.", calls.turn(turn, again, "    "))
    if any(len(p.path) > len(shared) for p in group):
        node = f"step_{len(shared) + 1}_branch"
        nodes.append(node)
        lines += _node(node, "The paths part here.", _branches(group, len(shared), calls))
    chain = "".join(f"\n    .then({n})" for n in nodes)
    lines += [
        "",
        f'{base} = (\n    Workflow("{base}", input_type=dict){chain}\n)',
        "# TODO: end with a structured-output step that writes the answer from the state.",
        "",
    ]
    return "\n".join(lines)


def _tool_imports(spec: str | None, tools: list[str]) -> list[str]:
    if not spec or ":" not in spec:
        return [f"from YOUR_AGENT_MODULE import {', '.join(_identifier(t) for t in tools)}"]
    return [
        "from loopwise.running.targets import load_target",
        "",
        "# The agent's own tools, now called in a fixed order by code.",
        f"_tools = load_target({spec!r}).step.tool_map",
        *(f"{_identifier(t)} = _tools[{t!r}]" for t in tools),
    ]


def _shared_prefix(paths: Sequence[PathStats]) -> tuple[tuple[str, ...], ...]:
    first = paths[0].path
    n = 0
    while n < len(first) and all(len(p.path) > n and p.path[n] == first[n] for p in paths):
        n += 1
    return first[:n]


def _node(node: str, doc: str, body: list[str]) -> list[str]:
    return [
        "",
        "@loopwise.step",
        f"async def {node}(state: dict, ctx: loopwise.Context) -> dict:",
        f'    """{doc}"""',
        *body,
        "    return state",
        "",
    ]


def _branches(paths: Sequence[PathStats], start: int, calls: _Calls) -> list[str]:
    lines = []
    for p in paths:
        rest = p.path[start:]
        if not rest:
            lines.append(f"    # {p.share:.0%} of runs stop here.")
            continue
        lines.append(f"    if False:  # TODO: when? ({p.share:.0%} of runs go on like this)")
        for turn, again in zip(rest, p.repeated[start:], strict=True):
            lines += calls.turn(turn, again, "        ")
    return lines


class _Calls:
    """Writes the calls of one turn, with example arguments from the runs."""

    def __init__(self, examples: JSONMapping) -> None:
        self.examples = examples

    def turn(self, turn: tuple[str, ...], again: bool, indent: str) -> list[str]:
        lines = []
        if again:
            lines.append(f"{indent}for item in []:  # TODO: what the agent repeated this for")
            indent += "    "
        for t in turn:
            seen = self.examples.get(t)
            hint = f"  # the agent passed e.g. {json.dumps(seen)}" if seen is not None else ""
            lines.append(f"{indent}{_identifier(t)}_args: dict = {{}}{hint}")
        pairs = ", ".join(f"({_identifier(t)}, {_identifier(t)}_args)" for t in turn)
        names = ", ".join(repr(t) for t in turn)
        return [
            *lines,
            # Through the executor: each call passes its tool's gate, journal and key.
            f"{indent}results = await call_tools(ctx, [{pairs}])",
            f"{indent}for tool_name, result in zip([{names}], results):",
            f"{indent}    state.setdefault(tool_name, []).append(result)",
        ]


def example_args(runs: Iterable[RunRecord]) -> JSONObject:
    """Tool name → the arguments of its first recorded call in ``runs``."""
    found: JSONObject = {}
    for run in runs:
        for event in run.get("events") or []:
            kind, data = event_parts(event)
            if kind == "tool_call" and data.get("tool") not in found:
                found[str(data.get("tool"))] = data.get("args")
    return found


def _identifier(text: str) -> str:
    ident = re.sub(r"\W", "_", text.rsplit("/", 1)[-1].removesuffix(".py")) or "step"
    return ident if ident.isidentifier() and not ident[0].isdigit() else f"_{ident}"
