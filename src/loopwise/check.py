"""Static review of a declared step: :func:`check`.

Works on any step — a loopwise workflow, agent or hybrid, or any object that looks like
one (duck typing: ``tools``, ``max_steps``, ``budget``, ``validation_errors()``,
``graph``). Findings are data (:class:`Finding`); errors fail the ``loopwise check``
command, warnings do not. It only reads the step: it never runs anything.
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from loopwise.agent import FINAL_ANSWER

__all__ = ["Finding", "Level", "check"]

ANSWER_TOOLS = frozenset({FINAL_ANSWER})


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
