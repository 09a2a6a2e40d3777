"""Workflows: steps wired into a directed acyclic graph, validated before they run.

A :class:`Workflow` is a step (``name``, ``input_type``, ``output_type``, ``async run``)
whose body is a directed graph of nodes, each running another step: a function
(``@step``), a structured-output call, an agent, another workflow. Declare it like the
pipeline it is::

    wf = Workflow("support", input_type=Ticket)
    wf.then(classify)                                  # a chain...
    wf.parallel(lookup_customer, lookup_orders)        # ...fans out...
    wf.then(draft)                                     # ...and joins again
    wf.route("category", {"billing": refunds, "technical": engineers}, default=general)

or with the plain builder (what compilers of plans use)::

    wf.add("classify", classify)
    wf.add("customer", lookup_customer, after=["classify"])
    wf.add("orders", lookup_orders, after=["classify"])
    wf.add("draft", draft, after=["customer", "orders"])
    wf.add_route("by_category", "category", {"billing": "refunds"}, default="general",
                 after=["classify"])

**What a node receives** (the join rule): the first node gets the workflow input; a node
with one predecessor gets that predecessor's output; a node with several predecessors
gets a dict ``{predecessor name: output}`` of the predecessors that ran — unless its
predecessors are mutually exclusive branches of a route, in which case exactly one ran
and the node gets its output. ``join=fn`` replaces the rule for a node: ``fn`` receives
that dict and returns the node's input. A route node passes its input through unchanged
to the one branch it picks. When a node's declared input type is a pydantic model and it
receives a dict, the dict is validated into the model. The workflow's output is the
output of the end node that ran.

**Validation** (:meth:`Workflow.validation_errors`, :meth:`Workflow.validate`): cycles,
nodes unreachable from the start, dangling branches (route branches naming no node, a
branch end nothing joins), output→input type mismatches between connected steps (from
annotations and pydantic models; ``Any`` matches anything) and routes on a
``Literal``/``Enum``/``bool`` that miss a value and have no default. Each problem is a
:class:`~loopwise.errors.GraphError` naming the node and the fix. The chained methods
(``then``, ``parallel``, ``route``) check the edges they declare at once; the builder
(``add``, ``add_route``, ``connect``) allows forward references, so its graphs are checked
by ``validate()`` — which every run does before its first node (once per graph version).

**Running**: a node starts as soon as every node before it is done or skipped
(:mod:`loopwise.architectures.schedule`), so independent nodes run concurrently and an
urgent one never waits for an unrelated slow one; only the chosen branch of a route runs
(skipped nodes neither run nor emit). A node that waits for a person holds back only what
depends on it; once nothing else can run, every waiting node is listed in one pause.
Every node runs through ``ctx.run_step`` (``step_started``/``step_finished`` with its
usage, path ``workflow/node``) and counts one step; the run's budget covers every
node. A node that raises ends the run with ``Halt(Status.ERROR, "node X: ...")`` (its
running siblings are cancelled); a ``Halt`` from a node (budget, refusal...) ends it as is.
Node names are unique and stable, so journal keys of a resumed run are deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from typing_extensions import TypeForm

from loopwise.architectures.digraph import Digraph
from loopwise.architectures.graph_checks import (
    branch_errors,
    cycle_error,
    reach_errors,
    route_errors,
)
from loopwise.architectures.guards import Guards, end_errors, merges, route_guards
from loopwise.architectures.nodes import (
    Join,
    NamedNode,
    NodeData,
    RouteDecision,
    RouteSpec,
    RouteStep,
    ToolNode,
    node_shape,
    passed_on,
    paused_together,
)
from loopwise.architectures.schedule import run_as_ready
from loopwise.architectures.wiring import (
    coerce_input,
    plain_key,
    strip_type,
    type_name,
    types_compatible,
)
from loopwise.core.events import Status
from loopwise.core.function_step import FunctionStep
from loopwise.core.members import StepDefaults, step_member
from loopwise.core.names import check_name, name_problem
from loopwise.core.result import Halt
from loopwise.core.shape import Edge, Graph, Kind, Limits, Problem, Shape, mermaid, name_of
from loopwise.core.step import Context, Step, needs_model
from loopwise.core.usage import Budget
from loopwise.errors import ConfigError, GraphError
from loopwise.tools.tool import Tool

if TYPE_CHECKING:
    import networkx as nx


__all__ = [
    "Workflow",
]

K = TypeVar("K")
"""The type of a route's keys (``Literal`` strings, ``Enum`` members, ``bool``...)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Plan:
    start: str
    generations: list[list[str]]
    ends: list[str]
    merges: frozenset[str]


@dataclass(kw_only=True)
class _RunState:
    input: object
    outputs: dict[str, object] = field(default_factory=dict)
    paused: list[Halt] = field(default_factory=list)
    """Nodes that wait for people (all are listed together when nothing else can run)."""


class Workflow(StepDefaults):
    """A fixed graph of steps; itself a step. See the module docstring for the rules."""

    def __init__(
        self,
        name: str,
        *,
        input_type: TypeForm[object] = Any,
        description: str = "",
        budget: Budget | None = None,
    ) -> None:
        self.name = check_name(name, what="workflow")
        """The workflow's step name (its events' path)."""
        self.input_type: TypeForm[object] = input_type
        """The workflow input's type; a pydantic model validates a dict input."""
        self.description = description
        """What the workflow is for."""
        self.budget = budget
        """The run budget when this workflow is the run's target."""
        self._dag: Digraph[NodeData] = Digraph()
        # Node attrs `step` and `join`; route nodes also `route`; `named` once it has run.
        self._view: tuple[int, nx.DiGraph] | None = None
        self._tails: list[str] = []
        # Route branches named before their node exists: node name -> the routes naming it.
        self._awaited: dict[str, list[str]] = {}
        self._routes = 0
        self._guards_memo: tuple[int, Guards] | None = None
        self._version = 0
        self._plan: tuple[int, _Plan] | None = None

    def __repr__(self) -> str:
        return f"<workflow {self.name}: {len(self._dag)} nodes>"

    @property
    def nodes(self) -> list[str]:
        """Node names in declaration order."""
        return list(self._dag)

    @property
    def steps(self) -> dict[str, Step]:
        """Node name → the step it runs, in declaration order (a tool's node: its step)."""
        return {node: data["step"] for node, data in self._dag.items()}

    @property
    def graph(self) -> nx.DiGraph:
        """The graph as a frozen ``networkx.DiGraph`` (node attrs ``step`` and ``join``;
        route nodes also ``route``), for analysis and drawing; declare with the methods.

        Built on first use and again after a change: the workflow holds its graph in plain
        dicts, so declaring and running one never imports networkx.
        """
        if self._view is None or self._view[0] != self._version:
            import networkx

            view = networkx.DiGraph()
            for node, data in self._dag.items():
                view.add_node(node, **{k: v for k, v in data.items() if k != "named"})
            view.add_edges_from(self._dag.edges())
            self._view = (self._version, networkx.freeze(view))
        return self._view[1]

    @property
    def output_type(self) -> object:
        """The output type of the end node(s) (``Any`` when they differ or are unknown)."""
        found = {strip_type(self._out_type(n, set())) for n in self._ends()}
        return found.pop() if len(found) == 1 else Any

    @property
    def needs_model(self) -> bool:
        """Whether any node calls a model (the CLI asks for one only then)."""
        return any(needs_model(self._dag.data(n)["step"]) for n in self._dag)

    def add(
        self,
        name: str,
        step: Step | Tool,
        *,
        after: Iterable[str] = (),
        join: Join | None = None,
    ) -> Workflow:
        """Add node ``name`` running ``step`` after the nodes in ``after`` (builder API).

        A :class:`~loopwise.tools.tool.Tool` is a node too: its input is its arguments, and it
        runs behind its gate, journaled, with its idempotency key (see :mod:`loopwise.tools.calls`).

        ``after`` must name nodes already added; a route reaches nodes added later by
        naming them as branches. ``join`` overrides what a join node receives.
        """
        after = list(after)
        if isinstance(step, Tool):
            step = ToolNode(step)
        self._check_new(name, step, after)
        self._dag.add_node(name, {"step": step, "join": join})
        for pred in after:
            self._dag.add_edge(pred, name)
        for route in self._awaited.pop(name, ()):
            self._dag.add_edge(route, name)
        self._touch()
        return self

    def add_route(
        self,
        name: str,
        on: str | Callable[..., object],
        branches: Mapping[K, str],
        *,
        default: str | None = None,
        after: Iterable[str] = (),
    ) -> Workflow:
        """Add a routing node that sends its input to ONE branch (builder API).

        ``on`` is a field of the incoming value (a pydantic model, dataclass or dict) or a
        function of it (sync or async; its return is the key). ``branches`` maps route
        values (``Literal`` strings or ``Enum`` members) to node names, which may be added
        later; ``default`` takes every other value.
        """
        key_of = on if isinstance(on, str) else FunctionStep(on)
        spec = RouteSpec(
            on=key_of, branches={plain_key(k): v for k, v in branches.items()}, default=default
        )
        self.add(name, RouteStep(name, spec), after=after)
        self._dag.data(name)["route"] = spec
        self._routes += 1
        for target in spec.targets():
            if target in self._dag:
                self._dag.add_edge(name, target)
            else:
                self._awaited.setdefault(target, []).append(name)
        self._touch()
        return self

    def connect(self, source: str, target: str) -> Workflow:
        """Add an edge between two existing nodes (builder API)."""
        for node in (source, target):
            if node not in self._dag:
                raise GraphError(f"cannot connect: no node {node!r} in {self.name}", node=node)
        self._dag.add_edge(source, target)
        self._touch()
        return self

    def then(
        self, step: Step | Tool, *, name: str | None = None, join: Join | None = None
    ) -> Workflow:
        """Append ``step`` after the current end(s): a chain link, or the join of a fan-out."""
        node = name or _step_name(step, self.name)
        self.add(node, step, after=self._current_ends(), join=join)
        self._tails = [node]
        self._raise_first(self._edge_errors(node))
        return self

    def parallel(self, *steps: Step, **named: Step) -> Workflow:
        """Fan out: each step runs after the current end(s), concurrently with the others.

        Node names are the steps' names, or the keywords. Join them with :meth:`then`.
        """
        pairs = [(_step_name(s, self.name), s) for s in steps] + list(named.items())
        if len(pairs) < 2:
            raise GraphError(f"{self.name}: parallel() needs two or more steps", node=None)
        if len(self._dag) == 0:
            # A workflow has one start node; without it the branches would be unreachable.
            raise GraphError(
                f"{self.name}: parallel() fans out from a node, and the workflow has none "
                f"yet; start it with then(step) (the step that receives the input)",
                node=pairs[0][0],
            )
        after = self._current_ends()
        for node, step in pairs:
            self.add(node, step, after=after)
            self._raise_first(self._edge_errors(node))
        self._tails = [node for node, _ in pairs]
        return self

    def route(
        self,
        on: str | Callable[..., object],
        branches: Mapping[K, Step],
        *,
        default: Step | None = None,
        name: str | None = None,
    ) -> Workflow:
        """Route the current output to ONE of ``branches`` (by value of ``on``).

        ``on`` is a field name or a function; ``branches`` maps values to steps (one step
        may serve several values). A following :meth:`then` merges the branches: it gets
        the output of the one that ran. Raises :class:`GraphError` at once when the route
        does not cover every value of a ``Literal``/``Enum`` and has no default.
        """
        label = on if isinstance(on, str) else name_of(on) or "fn"
        node = name or f"route_{label}"
        steps = {id(s): s for s in [*branches.values(), *([default] if default else [])]}
        targets = {k: _step_name(v, self.name) for k, v in branches.items()}
        self.add_route(
            node, on, targets, default=default.name if default else None, after=self._current_ends()
        )
        for step in steps.values():
            if step.name not in self._dag:
                self.add(step.name, step)
        self._raise_first(self._edge_errors(node) + self._route_errors(node))
        self._tails = self._dag.data(node)["route"].targets()
        return self

    def validation_errors(self) -> list[GraphError]:
        """Every problem of the graph, without raising (``loopwise check`` reports these)."""
        if len(self._dag) == 0:
            return [
                GraphError(f"workflow {self.name!r} has no nodes; add one", node=None, code="empty")
            ]
        errors = branch_errors(self._dag)
        cycle = cycle_error(self._dag)
        if cycle is not None:
            return [*errors, cycle]
        errors += reach_errors(self._dag, self._start())
        for node in self._dag:
            errors += self._edge_errors(node) + self._route_errors(node)
        return errors + end_errors(self._ends(), self._guards())

    def validate(self) -> Workflow:
        """Raise the first :class:`GraphError` of :meth:`validation_errors`; return self."""
        self._raise_first(self.validation_errors())
        return self

    async def run(self, input: object, ctx: Context) -> object:
        """Run the graph on ``input`` (validated first); return the end node's output."""
        plan = self._compiled()
        state = _RunState(input=coerce_input(input, self.input_type, f"workflow {self.name}"))

        async def run_node(node: str) -> bool:
            await self._run_node(node, plan, state, ctx)
            return node in state.outputs

        await run_as_ready(
            [n for generation in plan.generations for n in generation],
            self._dag.predecessors,
            lambda node: self._active(node, plan, state),
            run_node,
            ctx.check_budget,
        )
        if state.paused:
            raise paused_together(state.paused)
        ran = [n for n in plan.ends if n in state.outputs]
        outputs = {n: passed_on(state.outputs[n]) for n in ran}
        return outputs[ran[0]] if len(ran) == 1 else outputs

    def describe(self) -> Shape:
        """The graph as data: each node's own shape, route labels, what validation finds."""
        nodes = [node_shape(node, data) for node, data in self._dag.items()]
        edges = []
        for source, target in self._dag.edges():
            spec: RouteSpec | None = self._dag.data(source).get("route")
            label = ", ".join(spec.labels(target)) if spec is not None else ""
            edges.append(Edge(source=source, target=target, label=label))
        problems = tuple(
            Problem(code=e.code, node=e.node, message=str(e)) for e in self.validation_errors()
        )
        return Shape(
            kind=Kind.WORKFLOW,
            name=self.name,
            limits=Limits(budget=self.budget),
            graph=Graph(nodes=tuple(nodes), edges=tuple(edges)),
            problems=problems,
        )

    def to_mermaid(self) -> str:
        """The graph as a Mermaid flowchart (``loopwise graph`` prints it)."""
        return mermaid(self.describe())

    def _current_ends(self) -> list[str]:
        """Where the chained methods attach: the last declared ends, or the graph's ends."""
        if self._tails or len(self._dag) == 0:
            return list(self._tails)
        return self._ends()

    def _ends(self) -> list[str]:
        """The nodes nothing follows, in declaration order."""
        return [n for n in self._dag if self._dag.out_degree(n) == 0]

    def _touch(self) -> None:
        self._version += 1

    def _check_new(self, name: str, step: object, after: list[str]) -> None:
        problem = name_problem(name)
        if problem is not None:
            message = f"{self.name}: node name {name!r} {problem}"
            raise GraphError(message, node=name, code="bad-name")
        if name in self._dag:
            raise GraphError(
                f"node {name!r} already exists in {self.name}; node names are unique "
                "(pass name=... or wrap the step under another name)",
                node=name,
            )
        if not isinstance(step, Step):
            raise GraphError(
                f"node {name!r}: {step!r} is not a step (decorate the function with @step)",
                node=name,
            )
        for pred in after:
            if pred not in self._dag:
                raise GraphError(
                    f"node {name!r} comes after {pred!r}, which is not declared yet; "
                    "add nodes in order, or reach later nodes through a route",
                    node=name,
                )

    def _raise_first(self, errors: list[GraphError]) -> None:
        if errors:
            raise errors[0]

    def _compiled(self) -> _Plan:
        if self._plan is not None and self._plan[0] == self._version:
            return self._plan[1]
        self.validate()
        plan = _Plan(
            start=self._start(),
            generations=self._generations(),
            ends=self._ends(),
            merges=frozenset(n for n in self._dag if self._merges(n)),
        )
        self._plan = (self._version, plan)
        return plan

    def _generations(self) -> list[list[str]]:
        """The topological generations; a cycle (closed by ``connect``) raises its error."""
        generations = self._dag.generations()
        if generations is None:
            cycle = cycle_error(self._dag)
            assert cycle is not None
            raise cycle
        return generations

    def _start(self) -> str:
        roots = [n for n in self._dag if self._dag.in_degree(n) == 0]
        return str(roots[0] if roots else next(iter(self._dag)))

    def _active(self, node: str, plan: _Plan, state: _RunState) -> bool:
        if node == plan.start:
            return True
        return any(self._edge_live(p, node, state) for p in self._dag.predecessors(node))

    def _edge_live(self, pred: str, node: str, state: _RunState) -> bool:
        if pred not in state.outputs:
            return False
        out = state.outputs[pred]
        return not isinstance(out, RouteDecision) or out.branch == node

    def _node_input(self, node: str, plan: _Plan, state: _RunState) -> object:
        if node == plan.start:
            return state.input
        live = {
            p: passed_on(state.outputs[p])
            for p in self._dag.predecessors(node)
            if self._edge_live(p, node, state)
        }
        join: Join | None = self._dag.data(node)["join"]
        if join is not None:
            return join(live)
        if self._dag.in_degree(node) == 1 or node in plan.merges:
            return next(iter(live.values()))
        return live

    def _named(self, node: str, step: Step) -> NamedNode:
        """The node's step under its name: one object per node, so what is remembered about
        a step by its identity (its kind, for ``step_started``) holds across runs."""
        data = self._dag.data(node)
        named = data.get("named")
        if named is None or named.inner is not step:
            named = data["named"] = NamedNode(node, step)
        return named

    async def _run_node(self, node: str, plan: _Plan, state: _RunState, ctx: Context) -> None:
        step = self._dag.data(node)["step"]
        try:
            value = self._node_input(node, plan, state)
            value = coerce_input(value, step_member(step, "input_type"), f"node {node}")
            ctx.count_step()
            state.outputs[node] = await ctx.run_step(self._named(node, step), value)
        except Halt as halt:
            if halt.status is not Status.AWAITING_APPROVAL:
                raise
            # What does not depend on it goes on: every gate that can be asked is, before
            # the run pauses once.
            state.paused.append(halt)
        except ConfigError:
            raise
        except Exception as e:
            raise Halt(Status.ERROR, f"node {node}: {type(e).__name__}: {e}") from e

    def _merges(self, node: str) -> bool:
        """Whether ``node`` joins mutually exclusive route branches (so one ran)."""
        if not self._routes:
            return False  # only route branches exclude each other
        return merges(self._dag, node, self._guards())

    def _guards(self) -> Guards:
        """Per node, the route choices (route, branch) every run of it depends on."""
        if self._guards_memo is None or self._guards_memo[0] != self._version:
            self._guards_memo = (self._version, route_guards(self._dag, self._generations()))
        return self._guards_memo[1]

    def _out_type(self, node: str, seen: set[str]) -> object:
        """What ``node`` passes on: a route passes on what it received."""
        data = self._dag.data(node)
        if "route" not in data:
            return step_member(data["step"], "output_type")
        preds = self._dag.predecessors(node)
        if node in seen or len(preds) > 1:
            return Any
        if not preds:
            return self.input_type
        return self._out_type(preds[0], seen | {node})

    def _edge_errors(self, node: str) -> list[GraphError]:
        """Type mismatches on the edges into ``node``."""
        data = self._dag.data(node)
        wanted = step_member(data["step"], "input_type")
        preds = self._dag.predecessors(node)
        given: list[tuple[str, object]]
        if not preds:
            given = [("the workflow input", self.input_type)]
        elif data["join"] is not None:
            return []
        elif len(preds) == 1 or self._merges(node):
            given = [(repr(p), self._out_type(p, set())) for p in preds]
        else:
            given = [(f"the join of {', '.join(preds)}", dict)]
        step = data["step"]
        if isinstance(step, ToolNode):
            return [
                GraphError(
                    f"node {node!r} is the tool {step.tool.name!r}, whose input is its "
                    f"arguments ({', '.join(step.tool.args_model.model_fields) or 'none'}): "
                    f"a dict or a pydantic model with those fields, but {source} gives "
                    f"{type_name(out)}; convert in a small @step between",
                    node=node,
                    code="type-mismatch",
                )
                for source, out in given
                if not step.accepts(out)
            ]
        return [
            GraphError(
                f"node {node!r} takes {type_name(wanted)} but {source} gives "
                f"{type_name(out)}; fix the annotations or convert in a small @step between",
                node=node,
                code="type-mismatch",
            )
            for source, out in given
            if not types_compatible(out, wanted)
        ]

    def _route_errors(self, node: str) -> list[GraphError]:
        spec: RouteSpec | None = self._dag.data(node).get("route")
        if spec is None:
            return []
        preds = self._dag.predecessors(node)
        if len(preds) > 1:  # a join: what is routed is no one step's output
            return route_errors(node, spec, Any, joined=True)
        routed = self._out_type(preds[0], set()) if preds else self.input_type
        return route_errors(node, spec, routed)


def _step_name(step: object, workflow: str) -> str:
    """The node name of a step added by the chained methods; a non-step is a GraphError."""
    if not isinstance(step, Step | Tool):
        raise GraphError(
            f"{workflow}: {step!r} is not a step; decorate the function with @loopwise.step "
            "(or give an object a `name` and `async run(input, ctx)`)",
            node=str(name_of(step) or step),
        )
    return str(step.name)
