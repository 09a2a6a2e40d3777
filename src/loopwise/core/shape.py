"""What a step is, as data: its kind, tools, parts, limits and graph — and the one drawing
of it.

Every step kind describes itself with a ``describe()`` method returning a :class:`Shape`
(a :class:`~loopwise.tools.tool.Tool` returns a :class:`ToolShape`); :func:`describe` calls it
for any step. ``loopwise check``, the eval's architecture column, the report's drawings
and ``loopwise graph`` read only that, so a step is never read by guessing attribute
names or its class name. A hand-rolled step (anything with a ``name`` and ``run``) may
describe itself the same way; one that does not is an :attr:`Kind.OPAQUE` step: it runs
like any other, and the static check sees nothing inside it.

:func:`mermaid` is the only Mermaid renderer: workflows, hybrids, agents and a hybrid's
proposed plan are all drawn by it from a :class:`Graph`.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import functools
import re
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

from loopwise.core.jsontypes import JSONMapping, JSONValue, json_object
from loopwise.core.usage import Budget

__all__ = [
    "Edge",
    "Graph",
    "Kind",
    "Limits",
    "Node",
    "Problem",
    "Shape",
    "ToolShape",
    "describe",
    "drawing",
    "kind_of",
    "mermaid",
    "parameters_of",
]


class Kind(enum.StrEnum):
    """What kind of step a :class:`Shape` describes (a closed set)."""

    FUNCTION = "function"
    STRUCTURED = "structured"
    WORKFLOW = "workflow"
    AGENT = "agent"
    HYBRID = "hybrid"
    TOOL = "tool"
    OPAQUE = "opaque"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolShape:
    """A tool as the model and the reviewer see it."""

    name: str
    """The name the model calls."""
    description: str
    """What it does and when to call it (empty when undocumented)."""
    effect: str | None
    """``read``, ``write`` or ``irreversible``; ``None`` when it declares none."""
    gated: bool
    """Whether a gate decides each call."""
    untrusted: bool
    """Whether its output is untrusted text (it taints the run)."""
    parameters: Mapping[str, str | None] = field(default_factory=dict)
    """Parameter name → its description (``None`` when it has none)."""
    step: Shape | None = None
    """The step it runs, for a step given as a tool (:func:`~loopwise.tools.tool.as_tool`)."""
    origin: str | None = None
    """For a tool from outside (an MCP server's): where it came from and how its effect,
    gate and taint were decided, in one line (``check`` shows it)."""
    left_out: tuple[str, ...] = ()
    """Tools its source listed but could not use, each with why (``check`` warns)."""
    tool: Any = field(default=None, compare=False, repr=False)
    """The :class:`~loopwise.tools.tool.Tool` itself: arguments a person edits are judged by
    its schema and gate when the decision is made (:mod:`loopwise.running.approvals`)."""
    policies: tuple[Any, ...] = field(default=(), compare=False, repr=False)
    """Policies besides the gate's that its calls' edited arguments must pass (a plan
    action's own policy)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Limits:
    """What bounds a step's runs."""

    max_steps: int | None = None
    """The step limit of a loop (``None``: none)."""
    budget: Budget | None = None
    """The run budget the step sets when it is the run's target."""

    @property
    def budgeted(self) -> bool:
        """Whether the budget limits tokens, USD or seconds."""
        b = self.budget
        return b is not None and any(
            v is not None for v in (b.max_tokens, b.max_cost_usd, b.max_seconds)
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Problem:
    """Something wrong with a step's declaration that did not stop it being built."""

    code: str
    """The error's code (``non-exhaustive-route``, ``cycle`` ...)."""
    node: str | None
    """Where in the graph, when known."""
    message: str
    """What is wrong and how to fix it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Node:
    """A node of a :class:`Graph`."""

    id: str
    """Unique in its graph (Mermaid ids are derived from it)."""
    label: str
    """The text drawn."""
    kind: str
    """A :class:`Kind` value, ``route``, or a tool's effect (how it is coloured)."""
    detail: str = ""
    """A second line (``gated``, ``max_steps 8``)."""
    form: Literal["box", "decision", "nested"] = "box"
    """How Mermaid draws it: a box, a decision diamond, or a box of a nested graph."""
    shape: Shape | None = None
    """The step at this node, when it is one."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Edge:
    """An edge of a :class:`Graph`, labelled with the route values that take it."""

    source: str
    target: str
    label: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class Graph:
    """Nodes and edges, in declaration order."""

    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Shape:
    """A step's description of itself."""

    kind: Kind
    """What kind of step it is."""
    name: str
    """The step's name."""
    tools: tuple[ToolShape, ...] = ()
    """The tools a model may call in it (an agent's, without its answer tool)."""
    actions: tuple[ToolShape, ...] = ()
    """The actions its plans may use (a hybrid's catalog)."""
    parts: tuple[tuple[str, Shape], ...] = ()
    """Nested steps by role (a hybrid's ``planner``)."""
    limits: Limits = field(default_factory=Limits)
    """Its step limit and budget."""
    graph: Graph | None = None
    """Its graph (a workflow's nodes and edges; each node's :attr:`Node.shape`)."""
    problems: tuple[Problem, ...] = ()
    """What its own validation found (an invalid graph)."""
    repeated: bool = False
    """It contains itself here (a step given to itself as a tool): described above."""

    @property
    def loops(self) -> bool:
        """Whether a model calls tools in a loop in it (it needs a step limit)."""
        return self.kind is Kind.AGENT

    def children(self) -> Iterator[tuple[str, Shape]]:
        """Nested steps with their path below this one: parts, graph nodes, tool steps."""
        yield from self.parts
        if self.graph is not None:
            for node in self.graph.nodes:
                if node.shape is not None:
                    yield f"nodes/{node.id}", node.shape
        for tool in self.tools:
            if tool.step is not None:
                yield f"tools/{tool.name}", tool.step


@runtime_checkable
class Describes(Protocol):
    """A step that says what it is."""

    def describe(self) -> Shape: ...


_IN_PROGRESS: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "loopwise_describing", default=frozenset()
)


def name_of(obj: object) -> str | None:
    """What an error calls a user's object that is not what was asked for: its
    ``__name__`` (a function's, a class's), ``None`` when it has none."""
    # getattr: the object is whatever the user passed (a function, an instance, a lambda).
    name = getattr(obj, "__name__", None)
    return name if isinstance(name, str) and name else None


def describe(step: object) -> Shape:
    """``step``'s :class:`Shape`; an :attr:`Kind.OPAQUE` one when it does not describe itself.

    Steps describe their nested steps through this function, so a step that contains
    itself (an agent given itself as a tool) is described once and marked
    :attr:`Shape.repeated` where it recurs.
    """
    # getattr: a step has a name, but describe() is asked about whatever a step nests
    # (a user's object in a workflow or an agent's tools), and an OPAQUE shape is the answer.
    name = str(getattr(step, "name", "") or type(step).__name__)
    if not isinstance(step, Describes):
        return Shape(kind=Kind.OPAQUE, name=name)
    active = _IN_PROGRESS.get()
    if id(step) in active:
        return Shape(kind=Kind.OPAQUE, name=name, repeated=True)
    token = _IN_PROGRESS.set(active | {id(step)})
    try:
        return step.describe()
    finally:
        _IN_PROGRESS.reset(token)


_KINDS: dict[int, tuple[weakref.ref[object], Kind]] = {}


def kind_of(step: object) -> Kind:
    """``describe(step).kind``, remembered per step object: a run names the kind of every
    step it enters (``step_started``), and describing a step builds its whole shape."""
    key = id(step)
    known = _KINDS.get(key)
    if known is not None and known[0]() is step:
        return known[1]
    kind = describe(step).kind
    with contextlib.suppress(TypeError):  # a step without weak references is not remembered
        _KINDS[key] = (weakref.ref(step, functools.partial(_forget, key)), kind)
    return kind


def _forget(key: int, _gone: object) -> None:
    _KINDS.pop(key, None)


def parameters_of(schema: JSONMapping) -> dict[str, str | None]:
    """Parameter name → description from an arguments JSON schema (``$ref`` followed)."""
    props = json_object(schema.get("properties"))
    defs = json_object(schema.get("$defs"))
    return {name: _description(sub, defs) for name, sub in props.items()}


def _description(sub: JSONValue, defs: JSONMapping) -> str | None:
    if not isinstance(sub, Mapping):
        return None
    if sub.get("description"):
        return str(sub["description"])
    ref = sub.get("$ref")
    target = json_object(defs.get(ref.rsplit("/", 1)[-1])) if isinstance(ref, str) else {}
    return str(target["description"]) if target.get("description") else None


def _tool_node(tool: ToolShape, *, effect_in_label: bool = True) -> Node:
    notes = [n for n, on in (("gated", tool.gated), ("untrusted output", tool.untrusted)) if on]
    effect = tool.effect or "read"
    label = f"{tool.name} ({effect})" if effect_in_label else tool.name
    return Node(id=tool.name, label=label, kind=effect, detail=", ".join(notes))


def drawing(shape: Shape) -> Graph:
    """The graph that draws ``shape``: a workflow's own; a hybrid's propose → validate →
    actions; an agent with its tools; any other step as one node."""
    if shape.graph is not None:
        return shape.graph
    if shape.kind is Kind.HYBRID:
        return _hybrid_drawing(shape)
    if shape.kind is Kind.AGENT:
        return _agent_drawing(shape)
    if shape.kind is Kind.TOOL and shape.tools:
        return Graph(nodes=(_tool_node(shape.tools[0]),))
    return Graph(nodes=(Node(id=shape.name, label=shape.name, kind=shape.kind.value),))


def _agent_drawing(shape: Shape) -> Graph:
    """The loop: the model's turn calls tools, their results go back to it, until it
    answers (or a guardrail ends the run)."""
    limit = shape.limits.max_steps
    detail = f"max_steps {limit}" if limit is not None else ""
    me = Node(id=shape.name, label=shape.name, kind=shape.kind.value, detail=detail)
    tools = tuple(_tool_node(t) for t in shape.tools)
    answer = Node(id=f"{shape.name}/answer", label="answer", kind="answer", form="decision")
    edges = [
        *(Edge(source=me.id, target=t.id) for t in tools),
        *(Edge(source=t.id, target=me.id, label="result") for t in tools),
        Edge(source=me.id, target=answer.id, label="no more calls"),
    ]
    return Graph(nodes=(me, *tools, answer), edges=tuple(edges))


def _hybrid_drawing(shape: Shape) -> Graph:
    planner = dict(shape.parts).get("planner")
    plan = Node(
        id="plan",
        label="planner: propose",
        kind=planner.kind.value if planner else Kind.OPAQUE.value,
        detail=planner.name if planner else "",
    )
    validate = Node(id="validate", label="validate plan", kind="route", form="decision")
    actions = tuple(_tool_node(a) for a in shape.actions)
    # The planner's read-only tools: what it may look at before it proposes.
    reads = tuple(
        replace(_tool_node(t), id=f"planner/{t.name}") for t in (planner.tools if planner else ())
    )
    edges = [
        *(Edge(source="plan", target=r.id, label="reads") for r in reads),
        Edge(source="plan", target="validate"),
        Edge(source="validate", target="plan", label="errors"),
        *(Edge(source="validate", target=a.id, label="valid") for a in actions),
    ]
    return Graph(nodes=(plan, *reads, validate, *actions), edges=tuple(edges))


#: Words Mermaid reads as syntax where a node id stands.
_RESERVED = frozenset({"end", "graph", "subgraph", "flowchart", "style", "class", "click"})


def _mermaid_ids(nodes: tuple[Node, ...]) -> dict[str, str]:
    ids: dict[str, str] = {}
    for node in nodes:
        base = re.sub(r"\W", "_", node.id) or "node"
        if base.lower() in _RESERVED or base[0].isdigit():
            base = f"n_{base}"
        candidate, n = base, 1
        while candidate in ids.values():
            n += 1
            candidate = f"{base}_{n}"
        ids[node.id] = candidate
    return ids


def _quote(text: str) -> str:
    return '"' + text.replace('"', "#quot;") + '"'


_FORMS = {"box": ("[", "]"), "decision": ("{", "}"), "nested": ("[[", "]]")}


def mermaid(graph: Graph | Shape, *, title: str | None = None) -> str:
    """A Mermaid flowchart of ``graph`` (of a shape: its :func:`drawing`, titled with its
    kind and name). Node ids are the node ids made safe and unique; labels are quoted."""
    if isinstance(graph, Shape):
        title = title or f"{graph.kind} {graph.name}"
        graph = drawing(graph)
    known = {n.id for n in graph.nodes}
    loose = [e for edge in graph.edges for e in (edge.source, edge.target) if e not in known]
    ends = tuple(Node(id=e, label=e, kind="") for e in dict.fromkeys(loose))
    ids = _mermaid_ids(graph.nodes + ends)
    lines = [f"%% {title}"] if title else []
    lines.append("flowchart TD")
    for node in graph.nodes:
        start, end = _FORMS[node.form]
        lines.append(f"    {ids[node.id]}{start}{_quote(node.label)}{end}")
    for edge in graph.edges:
        label = f"|{_quote(edge.label)}|" if edge.label else ""
        lines.append(f"    {ids[edge.source]} -->{label} {ids[edge.target]}")
    return "\n".join(lines) + "\n"
