"""Static review of a declared step: :func:`check`.

It reads the step's description of itself (:mod:`loopwise.core.shape`): tools, limits, graph
problems and nested steps, through workflow nodes, a hybrid's planner and actions, and
tools that are steps. A hand-rolled step that does not describe itself is opaque: there
is nothing in it to review. Findings are data (:class:`Finding`); errors fail the
``loopwise check`` command, warnings do not. It never runs anything.
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Iterator
from dataclasses import dataclass

from loopwise.core.shape import Kind, Shape, ToolShape, describe

__all__ = ["Finding", "Level", "check"]


class Level(enum.StrEnum):
    """How bad a :class:`Finding` is: errors fail ``loopwise check``, warnings do not."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"
    """Neither: what check found worth showing (an MCP tool's annotation mapping)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One result of :func:`check`."""

    level: Level
    """``error`` (fails the check), ``warning``, or ``info`` (shown only)."""
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


def check(step: object, *, where: str | None = None) -> list[Finding]:
    """Review ``step`` statically and return every finding, errors first.

    A budget set on an enclosing step (a hybrid, a workflow) covers the steps inside it:
    a budget is per run.
    """
    shape = describe(step)
    findings: list[Finding] = []
    _check_shape(shape, where or shape.name, findings, budgeted=False)
    order = {Level.ERROR: 0, Level.WARNING: 1, Level.INFO: 2}
    return sorted(findings, key=lambda f: order[f.level])


def _check_shape(shape: Shape, where: str, out: list[Finding], *, budgeted: bool) -> None:
    if shape.repeated:
        return
    budgeted = budgeted or shape.limits.budgeted
    out.extend(_graph_findings(shape, where))
    if shape.loops:
        out.extend(_loop_findings(shape, where, budgeted=budgeted))
        out.extend(_toolset_findings(list(shape.tools), where))
        for tool in shape.tools:
            out.extend(_tool_findings(tool, f"{where}/tools/{tool.name}"))
    elif shape.kind is Kind.TOOL:
        for tool in shape.tools:
            out.extend(_tool_findings(tool, where))
    if shape.actions:
        out.extend(_toolset_findings(list(shape.actions), f"{where}/actions", untrusted=False))
        for action in shape.actions:
            out.extend(_tool_findings(action, f"{where}/actions/{action.name}"))
    for path, child in shape.children():
        _check_shape(child, f"{where}/{path}", out, budgeted=budgeted)


def _tool_findings(tool: ToolShape, where: str) -> Iterator[Finding]:
    if tool.origin:
        yield Finding(
            level=Level.INFO,
            code="tool-origin",
            where=where,
            message=tool.origin,
            fix="if that is not what the tool does, override it (loopwise.mcp.Override)",
        )
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
    missing = [p for p, d in tool.parameters.items() if not d]
    if missing:
        yield _warning(
            "param-no-description",
            where,
            f"tool {tool.name!r}: parameter(s) {', '.join(missing)} have no description, "
            "so the model guesses what to pass",
            "describe each parameter (Annotated[str, Field(description=...)] or the "
            "docstring's Args section) with its format and an example",
        )


def _description_findings(tool: ToolShape, where: str) -> Iterator[Finding]:
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


def _loop_findings(step: Shape, where: str, *, budgeted: bool) -> Iterator[Finding]:
    """A tool-using step is a loop: it needs a step limit (error) and a budget (warning).

    A missing step limit is an error because the model decides when to stop and can
    decide wrongly; a missing budget is a warning because the step limit already bounds
    the run, only less tightly (tokens per step grow as the transcript does).
    """
    limit = step.limits.max_steps
    if limit is None or limit <= 0:
        yield _error(
            "no-step-limit",
            where,
            f"{step.name!r} calls tools in a loop with no step limit: a model that never "
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
            f"{step.name!r} has no run budget (tokens, USD or seconds), nor does any step "
            "around it: its cost tail is unbounded within the step limit",
            "set budget=Budget(max_tokens=..., max_cost_usd=...) on it or on the step that "
            "runs it, from the p95s `loopwise eval` measures",
        )


def _toolset_findings(
    tools: list[ToolShape], where: str, *, untrusted: bool = True
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
    for note in dict.fromkeys(n for t in tools for n in t.left_out):
        yield _warning(
            "tool-left-out",
            where,
            note,
            "fix the tool's input schema or name on its server, or pass include=[...] without it",
        )
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


def _duplicate_findings(tools: list[ToolShape], where: str) -> Iterator[Finding]:
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


def _graph_findings(step: Shape, where: str) -> Iterator[Finding]:
    for problem in step.problems:
        route = problem.code == "non-exhaustive-route"
        yield _error(
            "non-exhaustive-route" if route else "graph",
            f"{where}/{problem.node}" if problem.node else where,
            problem.message,
            "cover every value of the routed Literal/Enum or give the route a default branch"
            if route
            else "fix the graph declaration at the node named",
        )
