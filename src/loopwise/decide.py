"""Deciding on evidence, before and after building: :func:`decide`, :func:`check`, :func:`analyze`.

* :func:`decide` is the decision rule of DESIGN §1 as a pure function: two questions
  (can the steps be written down in advance? what does a wrong step cost?) plus volume and
  latency budget → ``workflow``, ``agent`` or ``hybrid``, with the reasons and the example
  to start from.
* :func:`check` is a static review of any step — a loopwise workflow, agent or hybrid, or
  any object that looks like one (duck typing: ``tools``, ``max_steps``, ``budget``,
  ``validation_errors()``, ``graph``). Findings are data (:class:`Finding`); errors fail
  the ``loopwise check`` command, warnings do not.
* :func:`analyze` mines stored agent runs for the tool-call paths they took; when a few
  paths cover most runs the steps *are* known, and it writes a workflow skeleton of the
  dominant path.

This module only reads the other parts (DESIGN §2): it never runs a step.
"""

from __future__ import annotations

import difflib
import enum
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Architecture",
    "Decision",
    "Finding",
    "Level",
    "PathStats",
    "TraceAnalysis",
    "analyze",
    "check",
    "check_target",
    "decide",
    "example_args",
    "stored_runs",
    "tool_path",
    "workflow_skeleton",
]


class Architecture(enum.StrEnum):
    """The three shapes an LLM feature can take."""

    WORKFLOW = "workflow"
    AGENT = "agent"
    HYBRID = "hybrid"


STEPS_KNOWN = ("yes", "no", "partly")
WRONG_STEP_COST = ("cheap", "expensive")

#: The canonical example to start from, per architecture (DESIGN §12).
EXAMPLES: Mapping[Architecture, str] = {
    Architecture.WORKFLOW: "workflows/ticket_triage.py:triage",
    Architecture.AGENT: "agents/order_investigation.py:investigate",
    Architecture.HYBRID: "workflows/refund_desk.py:refund_desk",
}

#: Runs per day from which an agent's per-run cost and variance dominate the bill.
HIGH_VOLUME = 10_000
#: A latency budget (seconds) under which a multi-turn agent loop rarely fits.
TIGHT_LATENCY = 5.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    """The answer of :func:`decide`."""

    architecture: Architecture
    """``workflow``, ``agent`` or ``hybrid``."""
    reasons: list[str]
    """Why, one sentence each, most important first."""
    start_from: str
    """The canonical example to copy (a ``loopwise run`` target)."""
    cautions: list[str] = field(default_factory=list)
    """What to watch for with this choice (volume, latency)."""
    next_steps: list[str] = field(default_factory=list)
    """Commands that turn the choice into evidence."""
    answers: dict[str, Any] = field(default_factory=dict)
    """The answers the decision was made from."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON document ``loopwise decide --json`` prints."""
        return {
            "architecture": str(self.architecture),
            "reasons": self.reasons,
            "start_from": self.start_from,
            "cautions": self.cautions,
            "next_steps": self.next_steps,
            "answers": self.answers,
        }


def decide(
    steps_known: str,
    wrong_step_cost: str,
    *,
    volume: int | None = None,
    latency_seconds: float | None = None,
) -> Decision:
    """Apply the decision rule.

    ``steps_known`` is ``yes``, ``no`` or ``partly``; ``wrong_step_cost`` is ``cheap``
    (actions reversible, or read-only) or ``expensive`` (money, deletes, mail to customers).
    ``volume`` is runs per day and ``latency_seconds`` the answer-time budget; both
    only add cautions (the tail cost of an agent at volume, sequential turns against a
    latency budget); they never overrule the two questions.

    The table (the first three rows are DESIGN §1; the rest are this module's choice):

    ============  ==========  =========  ===============================================
    steps known   wrong step  →          because
    ============  ==========  =========  ===============================================
    yes           cheap       workflow   fixed path: one call + routing code
    no            cheap       agent      the model must choose steps; mistakes undo
    no            expensive   hybrid     model proposes, deterministic code executes
    yes           expensive   workflow   path is fixed; put human gates on the effects
    partly        cheap       workflow   fixed skeleton, an agent node for the open part
    partly        expensive   hybrid     the open part must not touch effects directly
    ============  ==========  =========  ===============================================

    Raises :class:`~loopwise.errors.ConfigError` naming a value that is not allowed.
    """
    known, cost = (
        _norm(steps_known, STEPS_KNOWN, "steps_known"),
        _norm(wrong_step_cost, WRONG_STEP_COST, "wrong_step_cost"),
    )
    arch, reasons = _rule(known, cost, volume, latency_seconds)
    answers: dict[str, Any] = {"steps_known": known, "wrong_step_cost": cost}
    if volume is not None:
        answers["volume_per_day"] = volume
    if latency_seconds is not None:
        answers["latency_seconds"] = latency_seconds
    return Decision(
        architecture=arch,
        reasons=reasons,
        start_from=EXAMPLES[arch],
        cautions=_cautions(arch, volume, latency_seconds),
        next_steps=_next_steps(arch),
        answers=answers,
    )


def _norm(value: str, allowed: Sequence[str], name: str) -> str:
    from loopwise.errors import ConfigError

    norm = str(value).strip().lower()
    if norm not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(allowed)}, not {value!r}", name=name)
    return norm


def _rule(
    known: str, cost: str, volume: int | None, latency: float | None
) -> tuple[Architecture, list[str]]:
    fixed = (
        "the steps can be written down in advance, so plain code fixes the path: usually one "
        "structured-output call plus routing code — cheaper, more reliable, debuggable at a "
        "known line"
    )
    if known == "yes" and cost == "cheap":
        return Architecture.WORKFLOW, [fixed]
    if known == "yes":
        return Architecture.WORKFLOW, [
            fixed,
            "a wrong step is expensive, so put a human gate (or a stricter policy) in front of "
            "each irreversible node; no model chooses the path, so nothing injectable reaches "
            "the effects",
        ]
    if cost == "expensive":
        return Architecture.HYBRID, _hybrid_reasons(known)
    if known == "partly":
        return Architecture.WORKFLOW, [
            "part of the path is known: write that part as a workflow, so most of every run "
            "is fixed, cheap and debuggable",
            "make only the open part an agent node (a workflow node can be an agent) with "
            "read-only or reversible tools, a small max_steps and a run budget",
        ]
    return Architecture.AGENT, _agent_reasons()


def _hybrid_reasons(known: str) -> list[str]:
    first = (
        "the steps cannot be written down in advance, so a model has to choose them"
        if known == "no"
        else "part of the path must be chosen by a model"
    )
    return [
        first,
        "a wrong step is expensive (money, deletes, mail to customers), so the model only "
        "proposes a plan; a deterministic workflow validates and executes it",
        "irreversible actions wait behind human gates: the looping, injectable, "
        "error-compounding part never touches what cannot be undone",
    ]


def _agent_reasons() -> list[str]:
    return [
        "the steps cannot be written down in advance: each case needs a different sequence "
        "of lookups, so a model with tools in a loop chooses them",
        "a wrong step is cheap and reversible, so no plan approval is needed: give the agent "
        "read-only or reversible tools, a small max_steps and a run budget",
    ]


def _cautions(arch: Architecture, volume: int | None, latency: float | None) -> list[str]:
    out = []
    if arch is not Architecture.WORKFLOW and volume is not None and volume >= HIGH_VOLUME:
        out.append(
            f"{volume} runs/day: an agent's cost varies per run and its tail (p95) is what you "
            "pay for; run `loopwise analyze` on stored runs and move the dominant paths into "
            "a workflow"
        )
    if arch is not Architecture.WORKFLOW and latency is not None and latency < TIGHT_LATENCY:
        out.append(
            f"a {latency:g}s latency budget: every agent turn is a sequential model call; keep "
            "max_steps small and measure p95 latency with `loopwise eval`"
        )
    if arch is Architecture.HYBRID:
        out.append(
            "approvals make runs pause: decide who approves, and use `loopwise pending` / "
            "`approve` / `resume` for durable runs"
        )
    return out


def _next_steps(arch: Architecture) -> list[str]:
    example = EXAMPLES[arch]
    steps = [
        f"loopwise check {example}",
        f"loopwise run {example} --model scripted",
        "loopwise eval YOUR_WORKFLOW YOUR_AGENT --dataset cases.jsonl --report report.html",
    ]
    if arch is Architecture.AGENT:
        steps.append(f"loopwise analyze {example}  # after some runs: are the steps known?")
    return steps


class Level(enum.StrEnum):
    """How bad a :class:`Finding` is: errors fail ``loopwise check``, warnings do not."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One result of :func:`check`."""

    level: Level
    """``error`` (fails the check) or ``warning``."""
    code: str
    """A stable identifier (``ungated-irreversible``, ``no-step-limit`` ...)."""
    where: str
    """The path of the step or tool (``investigate/tools/get_orders``)."""
    message: str
    """What is wrong, in one sentence."""
    fix: str
    """How to fix it, in one sentence."""

    def to_dict(self) -> dict[str, str]:
        """A JSON-ready dict."""
        return {
            "level": str(self.level),
            "code": self.code,
            "where": self.where,
            "message": self.message,
            "fix": self.fix,
        }


#: More tools than this and a model starts picking the wrong one.
MAX_TOOLS = 12
#: A step limit above this is no limit in practice.
LARGE_STEP_LIMIT = 50
#: Names at least this similar (difflib ratio) are easy to confuse.
NAME_SIMILARITY = 0.85
#: Descriptions sharing this share of their words (Jaccard) are easy to confuse.
DESCRIPTION_OVERLAP = 0.6

_WHEN = re.compile(
    r"\b(when|whenever|use|used|call|if|before|after|unless|once|only for|in case)\b",
    re.IGNORECASE,
)
_STOPWORDS = frozenset(
    {"a", "an", "the", "of", "to", "for", "and", "or", "by", "in", "on", "at", "is", "it"}
)


@dataclass(frozen=True, kw_only=True, slots=True)
class _ToolView:
    """What :func:`check` reads from a tool, whatever its class."""

    name: str
    description: str
    effect: str | None
    gated: bool
    untrusted: bool
    params: dict[str, str | None]
    obj: Any


def check(step: Any, *, where: str | None = None) -> list[Finding]:
    """Review ``step`` statically and return every finding, errors first.

    Works on loopwise workflows, agents and hybrids and on any object shaped like them:
    ``tools`` (a list or mapping of tools with ``name``, ``description``, ``effect``,
    ``gate``, ``untrusted_output`` and a ``schema``/``args_model``), ``max_steps``,
    ``budget``, ``validation_errors()`` for graphs; it recurses into workflow nodes,
    tools that are steps, and a hybrid's planner and actions. It never runs anything.
    """
    findings: list[Finding] = []
    seen: set[int] = set()
    _check_step(step, where or _name(step), findings, seen)
    order = {Level.ERROR: 0, Level.WARNING: 1}
    return sorted(findings, key=lambda f: order[f.level])


def _check_step(
    step: Any, where: str, out: list[Finding], seen: set[int], budgeted: bool = False
) -> None:
    if id(step) in seen:
        return
    seen.add(id(step))
    # A budget is per run: one set on an enclosing step (a hybrid, a workflow) covers this.
    budgeted = budgeted or _has_budget(getattr(step, "budget", None))
    out.extend(_graph_findings(step, where))
    tools = _tools_of(step)
    if tools is not None:
        views = [_tool_view(t) for t in tools]
        out.extend(_loop_findings(step, where, budgeted=budgeted))
        out.extend(_toolset_findings(views, where))
        for view in views:
            out.extend(_tool_findings(view, f"{where}/tools/{view.name}"))
    catalog = getattr(step, "catalog", None)
    if catalog is not None:
        actions = [_tool_view(getattr(a, "tool", a)) for a in _items(catalog)]
        out.extend(_toolset_findings(actions, f"{where}/actions", untrusted=False))
        for view in actions:
            out.extend(_tool_findings(view, f"{where}/actions/{view.name}"))
    for name, child in _children(step):
        _check_step(child, f"{where}/{name}", out, seen, budgeted)


def _name(obj: Any) -> str:
    return str(getattr(obj, "name", None) or getattr(obj, "__name__", None) or type(obj).__name__)


def _items(value: Any) -> list[Any]:
    if value is None or isinstance(value, str | bytes):
        return []
    if isinstance(value, Mapping):
        return list(value.values())
    if isinstance(value, Iterable):
        return list(value)
    return [value]


def _tools_of(step: Any) -> list[Any] | None:
    """The step's tools, or ``None`` when it is not a tool-using step.

    An agent's ``tool_map`` (its tools as built, plain functions wrapped) wins over the
    ``tools`` it was given; the answer tool it adds itself is not the user's to review.
    """
    built = getattr(step, "tool_map", None)
    if isinstance(built, Mapping):
        return [t for name, t in built.items() if name not in ANSWER_TOOLS]
    tools = getattr(step, "tools", None)
    if tools is None or (callable(tools) and not isinstance(tools, Iterable)):
        return None
    return _items(tools)


def _tool_view(tool: Any) -> _ToolView:
    import inspect

    effect = getattr(tool, "effect", None)
    effect = getattr(effect, "value", effect)
    description = getattr(tool, "description", None)
    if description is None and callable(tool):
        description = inspect.getdoc(tool)
    return _ToolView(
        name=_name(tool),
        description=str(description or "").strip(),
        effect=None if effect is None else str(effect).lower(),
        gated=_gated(tool),
        untrusted=bool(
            getattr(tool, "untrusted_output", False) or getattr(tool, "untrusted", False)
        ),
        params=_params_of(tool),
        obj=tool,
    )


def _gated(tool: Any) -> bool:
    gate = getattr(tool, "gate", None)
    if gate is None:
        gate = getattr(tool, "gates", None)
    return bool(gate) if isinstance(gate, list | tuple) else gate is not None


def _params_of(tool: Any) -> dict[str, str | None]:
    """Parameter name → description (``None`` when it has none)."""
    schema = _schema_of(tool)
    if schema is not None:
        props = schema.get("properties") or {}
        defs = schema.get("$defs") or {}
        return {name: _describe(sub, defs) for name, sub in props.items() if name != "ctx"}
    return _signature_params(tool)


def _schema_of(tool: Any) -> dict[str, Any] | None:
    import inspect

    for attr in ("parameters", "schema", "json_schema"):
        value = getattr(tool, attr, None)
        if inspect.ismethod(value):
            value = value()
        if isinstance(value, Mapping):
            value = dict(value)
            function = value.get("function")
            if isinstance(function, Mapping):
                value = dict(function)
            params = value.get("parameters", value)
            if isinstance(params, Mapping) and ("properties" in params or "type" in params):
                return dict(params)
    model = getattr(tool, "args_model", None)
    dump = getattr(model, "model_json_schema", None)
    if callable(dump):
        result = dump()
        return result if isinstance(result, dict) else None
    return None


def _describe(sub: Any, defs: Mapping[str, Any]) -> str | None:
    if not isinstance(sub, Mapping):
        return None
    if sub.get("description"):
        return str(sub["description"])
    ref = sub.get("$ref")
    if isinstance(ref, str):
        target = defs.get(ref.rsplit("/", 1)[-1], {})
        if isinstance(target, Mapping) and target.get("description"):
            return str(target["description"])
    return None


def _signature_params(tool: Any) -> dict[str, str | None]:
    import inspect

    fn = getattr(tool, "fn", None) or getattr(tool, "func", None) or tool
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return {}
    return {n: None for n in sig.parameters if n not in {"self", "ctx", "context"}}


def _tool_findings(tool: _ToolView, where: str) -> Iterator[Finding]:
    if tool.effect == "irreversible" and not tool.gated:
        yield _error(
            "ungated-irreversible",
            where,
            f"tool {tool.name!r} is irreversible and has no gate: a model's guess executes "
            "an effect that cannot be undone",
            "give it a gate (a human gate, or a policy that escalates to one), or make it a "
            "plan action of a hybrid",
        )
    if tool.effect is None:
        yield _warning(
            "tool-no-effect",
            where,
            f"tool {tool.name!r} does not declare its effect",
            "declare effect='read', 'write' or 'irreversible' so gates and taint can apply",
        )
    yield from _description_findings(tool, where)
    missing = [p for p, d in tool.params.items() if not d]
    if missing:
        yield _warning(
            "param-no-description",
            where,
            f"tool {tool.name!r}: parameter(s) {', '.join(missing)} have no description, "
            "so the model guesses what to pass",
            "describe each parameter (Annotated[str, Field(description=...)] or the "
            "docstring's Args section) with its format and an example",
        )


def _description_findings(tool: _ToolView, where: str) -> Iterator[Finding]:
    words = re.findall(r"[A-Za-z']+", tool.description)
    fix = (
        "write one sentence on what it does and one on when to call it "
        '("Look up an order by id. Use it when the customer names an order.")'
    )
    if not words:
        yield _warning(
            "tool-no-description",
            where,
            f"tool {tool.name!r} has no description; the model sees only its name",
            fix,
        )
    elif len(words) < 4:
        yield _warning(
            "tool-description-short",
            where,
            f"tool {tool.name!r}: {tool.description!r} is too short to say what it does "
            "and when to call it",
            fix,
        )
    elif not _WHEN.search(tool.description):
        yield _warning(
            "tool-description-when",
            where,
            f"tool {tool.name!r}: the description says what it does but not when to call it",
            fix,
        )


def _error(code: str, where: str, message: str, fix: str) -> Finding:
    return Finding(level=Level.ERROR, code=code, where=where, message=message, fix=fix)


def _warning(code: str, where: str, message: str, fix: str) -> Finding:
    return Finding(level=Level.WARNING, code=code, where=where, message=message, fix=fix)


def _loop_findings(step: Any, where: str, *, budgeted: bool) -> Iterator[Finding]:
    """A tool-using step is a loop: it needs a step limit (error) and a budget (warning).

    A missing step limit is an error because the model decides when to stop and can
    decide wrongly; a missing budget is a warning because the step limit already bounds
    the run, only less tightly (tokens per step grow as the transcript does).
    """
    limit = getattr(step, "max_steps", None)
    if not isinstance(limit, int) or limit <= 0:
        yield _error(
            "no-step-limit",
            where,
            f"{_name(step)!r} calls tools in a loop with no step limit: a model that never "
            "stops runs until something else breaks",
            "set max_steps (a small number: most tasks need fewer than 10 turns)",
        )
    elif limit > LARGE_STEP_LIMIT:
        yield _warning(
            "large-step-limit",
            where,
            f"max_steps={limit} is no limit in practice; errors compound over long runs",
            f"lower max_steps below {LARGE_STEP_LIMIT} and split the task",
        )
    if not budgeted:
        yield _warning(
            "no-budget",
            where,
            f"{_name(step)!r} has no run budget (tokens, USD or seconds), nor does any step "
            "around it: its cost tail is unbounded within the step limit",
            "set budget=Budget(max_tokens=..., max_cost_usd=...) on it or on the step that "
            "runs it, from the p95s `loopwise eval` measures",
        )


def _has_budget(budget: Any) -> bool:
    if budget is None:
        return False
    limits = ("max_tokens", "max_cost_usd", "max_seconds")
    if any(hasattr(budget, name) for name in limits):
        return any(getattr(budget, name, None) is not None for name in limits)
    return True


def _toolset_findings(
    tools: list[_ToolView], where: str, *, untrusted: bool = True
) -> Iterator[Finding]:
    if len(tools) > MAX_TOOLS:
        yield _warning(
            "too-many-tools",
            where,
            f"{len(tools)} tools (more than {MAX_TOOLS}): the more tools, the more often a "
            "model picks the wrong one",
            "split the agent by task, or merge tools that differ only by a parameter",
        )
    yield from _duplicate_findings(tools, where)
    if not untrusted:
        return
    readers = [t.name for t in tools if t.untrusted]
    writers = [t.name for t in tools if t.effect in {"write", "irreversible"} and not t.gated]
    if readers and writers:
        yield _warning(
            "untrusted-beside-write",
            where,
            f"untrusted output ({', '.join(readers)}) shares a transcript with ungated "
            f"write tools ({', '.join(writers)}): injected text can steer their arguments; "
            "loopwise's taint rule will then hold every such call for a human",
            "gate the write tools explicitly, or split reading untrusted content and writing "
            "into two steps (a hybrid)",
        )


def _duplicate_findings(tools: list[_ToolView], where: str) -> Iterator[Finding]:
    for i, a in enumerate(tools):
        for b in tools[i + 1 :]:
            name_ratio = difflib.SequenceMatcher(None, a.name.lower(), b.name.lower()).ratio()
            overlap = _jaccard(a.description, b.description)
            if name_ratio >= NAME_SIMILARITY or overlap >= DESCRIPTION_OVERLAP:
                yield _warning(
                    "near-duplicate-tools",
                    where,
                    f"tools {a.name!r} and {b.name!r} look alike (names {name_ratio:.0%} "
                    f"similar, descriptions {overlap:.0%} shared words): a model will confuse "
                    "them",
                    "merge them, or rename and describe each so that when to use which is obvious",
                )


def _jaccard(a: str, b: str) -> float:
    ta, tb = _tokens(a), _tokens(b)
    if not ta or not tb:
        return 0.0
    return len(ta & tb) / len(ta | tb)


def _tokens(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOPWORDS}


def _graph_findings(step: Any, where: str) -> Iterator[Finding]:
    validate = getattr(step, "validation_errors", None)
    if not callable(validate):
        return
    for problem in validate():
        message = str(problem)
        node = getattr(problem, "node", None)
        route = bool(re.search(r"does not cover|not covered|exhaustive", message))
        yield _error(
            "non-exhaustive-route" if route else "graph",
            f"{where}/{node}" if node else where,
            message,
            "cover every value of the routed Literal/Enum or give the route a default branch"
            if route
            else "fix the graph declaration at the node named",
        )


_CHILD_ATTRS = ("planner", "executor", "agent", "workflow", "inner", "step")
_CHILD_COLLECTIONS = ("nodes", "steps")


def _children(step: Any) -> Iterator[tuple[str, Any]]:
    """Nested steps to review: workflow nodes, a hybrid's parts, tools that are steps."""
    for attr in _CHILD_ATTRS:
        child = getattr(step, attr, None)
        if child is not None and child is not step and _is_reviewable(child):
            yield attr, child
    for attr in _CHILD_COLLECTIONS:
        value = getattr(step, attr, None)
        if callable(value) and not isinstance(value, Iterable):
            continue
        for item in _items(value):
            node = getattr(item, "step", item)
            if _is_reviewable(node):
                yield f"{attr}/{_name(node)}", node
    graph = getattr(step, "graph", None)
    for name, data in _graph_nodes(graph):
        node = data.get("step")
        if node is not None and _is_reviewable(node):
            yield f"nodes/{name}", node
    for tool in _items(getattr(step, "tools", None)):
        inner = getattr(tool, "step", None)
        if inner is not None and _is_reviewable(inner):
            yield f"tools/{_name(tool)}", inner


def _graph_nodes(graph: Any) -> list[tuple[str, dict[str, Any]]]:
    nodes = getattr(graph, "nodes", None)
    if nodes is None or not callable(nodes):
        return []
    try:
        return [(str(n), dict(d)) for n, d in nodes(data=True)]
    except TypeError:
        return []


def _is_reviewable(obj: Any) -> bool:
    """Only things that can hold findings: tool users, graphs, composites."""
    if isinstance(obj, str | bytes | int | float | Mapping):
        return False
    markers = ("tools", "validation_errors", "graph", *_CHILD_ATTRS, *_CHILD_COLLECTIONS)
    return any(getattr(obj, m, None) is not None for m in markers)


#: A few paths: the verdict ``steps_known`` needs the top paths up to this many ...
TOP_PATHS = 3
#: ... to cover at least this share of the runs ...
COVERAGE = 0.8
#: ... over at least this many runs.
MIN_RUNS = 5


@dataclass(frozen=True, kw_only=True, slots=True)
class PathStats:
    """One distinct tool-call path and the runs that took it."""

    path: tuple[tuple[str, ...], ...]
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

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "path": self.text,
            "turns": [list(t) for t in self.path],
            "repeated": list(self.repeated),
            "runs": self.runs,
            "share": round(self.share, 4),
            "statuses": self.statuses,
            "run_ids": self.run_ids,
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

    def to_dict(self) -> dict[str, Any]:
        """The JSON document ``loopwise analyze --json`` prints."""
        return {
            "target": self.target,
            "runs": self.runs,
            "distinct_paths": len(self.paths),
            "top_coverage": round(self.top_coverage, 4),
            "verdict": self.verdict,
            "message": self.message,
            "paths": [p.to_dict() for p in self.paths],
            "skeleton": self.skeleton,
        }


#: Tool calls that deliver the answer rather than take a step (an agent's structured output).
ANSWER_TOOLS = frozenset({"final_answer"})


def tool_path(events: Iterable[Any]) -> tuple[tuple[tuple[str, ...], ...], tuple[bool, ...]]:
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
        kind, data = _event_parts(event)
        if kind == "model_call" and current:
            turns.append(tuple(sorted(set(current))))
            current = []
        elif kind == "tool_call" and data.get("tool") not in ANSWER_TOOLS:
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


def _event_parts(event: Any) -> tuple[str, Mapping[str, Any]]:
    if isinstance(event, Mapping):
        return str(event.get("type")), event.get("data") or {}
    return str(getattr(event, "type", "")), getattr(event, "data", None) or {}


def analyze(
    runs: Iterable[Mapping[str, Any]],
    *,
    target: str | None = None,
    top: int = TOP_PATHS,
    coverage: float = COVERAGE,
    min_runs: int = MIN_RUNS,
) -> TraceAnalysis:
    """Mine ``runs`` (each ``{"run_id", "status", "events"}``) for their tool-call paths.

    Runs that never called a tool are left out (they are not agent runs). The verdict is
    ``steps_known`` when the top ``top`` paths cover at least ``coverage`` of at least
    ``min_runs`` runs; then :attr:`TraceAnalysis.skeleton` holds a workflow of the fewest
    top paths that reach ``coverage``.
    """
    # Runs that took the same turns share a path whether they repeated a turn or not
    # (one order checked or three); the path marks a turn repeated if any run did.
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    repeats: dict[tuple[Any, ...], list[bool]] = {}
    for run in runs:
        path, repeated = tool_path(run.get("events") or [])
        if path:
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


def _path_stats(key: tuple[Any, ...], group: list[Mapping[str, Any]], total: int) -> PathStats:
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
        return "no_runs", "no stored run called a tool: run the agent a few times first"
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
            f"{share} (≥ {coverage:.0%}): the steps are known. Write these paths as a "
            "workflow (skeleton below) and keep the agent for the rest, or drop it"
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
    examples: Mapping[str, Any] | None = None,
) -> str:
    """Python source of a :class:`~loopwise.workflow.Workflow` that takes ``paths``.

    The turns the paths share become a chain of nodes; where they part, one node holds an
    ``if`` per path with a ``TODO`` condition (in a workflow, code decides what the model
    did). Tools the agent called together are awaited together; a repeated turn becomes
    a loop. When ``name`` is a target spec (``agents/x.py:investigate``) the skeleton
    takes the tools from that agent (its ``tool_map``); ``examples`` maps a tool to
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
        "import asyncio",
        "",
        "import loopwise",
        "from loopwise import Workflow",
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
        "from loopwise.targets import load_target",
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

    def __init__(self, examples: Mapping[str, Any]) -> None:
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
        awaited = ", ".join(f"{_identifier(t)}.invoke({_identifier(t)}_args, ctx)" for t in turn)
        names = ", ".join(repr(t) for t in turn)
        return [
            *lines,
            f"{indent}results = await asyncio.gather({awaited})",
            f"{indent}for tool_name, result in zip([{names}], results):",
            f"{indent}    state.setdefault(tool_name, []).append(result)",
        ]


def example_args(runs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Tool name → the arguments of its first recorded call in ``runs``."""
    found: dict[str, Any] = {}
    for run in runs:
        for event in run.get("events") or []:
            kind, data = _event_parts(event)
            if kind == "tool_call" and data.get("tool") not in found:
                found[str(data.get("tool"))] = data.get("args")
    return found


def _identifier(text: str) -> str:
    ident = re.sub(r"\W", "_", text.rsplit("/", 1)[-1].removesuffix(".py")) or "step"
    return ident if ident.isidentifier() and not ident[0].isdigit() else f"_{ident}"


def check_target(spec: str) -> list[Finding]:
    """:func:`check` the step ``spec`` names (``path.py:name``), as ``loopwise check`` does.

    A declaration error raised while the target's module loads (an agent given an
    ungated irreversible tool refuses to be built) is reported as an error finding, not
    raised: the check's answer is still "this target is not fit to run". A target that
    cannot be found raises :class:`~loopwise.errors.TargetError`.
    """
    from loopwise.errors import ConfigError, TargetError
    from loopwise.targets import load_target

    try:
        target = load_target(spec)
    except TargetError as e:
        cause = e.__cause__
        if not isinstance(cause, ConfigError):
            raise
        irreversible = "irreversible" in str(cause) and "gate" in str(cause)
        return [
            _error(
                "ungated-irreversible" if irreversible else "declaration",
                f"{spec}/{cause.name}" if cause.name else spec,
                f"the target cannot be built: {cause}",
                "fix the declaration the message names; loopwise refuses it at construction",
            )
        ]
    return check(target.step, where=_name(target.step))


def stored_runs(path: Any, target: str | None = None, *, limit: int = 1000) -> list[dict[str, Any]]:
    """Runs of ``target`` from the store at ``path``, oldest first, as :func:`analyze` takes them.

    ``target`` matches a run's recorded spec (``agents/x.py:investigate``) or its step
    name (``investigate``); ``None`` takes every run. Reads the newest ``limit`` runs.
    """
    from pathlib import Path

    from loopwise.store import SQLiteStore

    if not Path(path).exists():
        return []  # no store yet: no runs (a path that is not a store fails when opened)
    names = {target, target.rsplit(":", 1)[-1]} if target else set()
    with SQLiteStore(path) as store:
        rows = store.list_runs(limit=limit)
        chosen = [r for r in rows if not names or r["spec"] in names or r["target"] in names]
        return [
            {"run_id": r["run_id"], "status": r["status"], "events": store.events(r["run_id"])}
            for r in reversed(chosen)
        ]
