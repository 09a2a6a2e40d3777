"""The kinds of node a :class:`~loopwise.architectures.workflow.Workflow` runs.

A node runs a step under the node's name (:class:`NamedNode`); a route node runs a
:class:`RouteStep`, which reads the key of its input and answers with a
:class:`RouteDecision` naming the one branch that runs next; a tool node
(:class:`ToolNode`) makes its call through the tool-call executor, behind the tool's gate.
Also here: what a node passes on, how paused nodes pause together, and a node as drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Required, TypedDict, get_origin

from pydantic import BaseModel
from typing_extensions import TypeForm

from loopwise.architectures.wiring import hints_of, plain_key, strip_type
from loopwise.core.events import Status, jsonable
from loopwise.core.function_step import FunctionStep
from loopwise.core.journal import Journal
from loopwise.core.jsontypes import JSONObject, JSONValue
from loopwise.core.members import StepDefaults
from loopwise.core.replay import RERUN, replays
from loopwise.core.result import Halt
from loopwise.core.shape import Kind, Node, Shape, describe
from loopwise.core.step import Context, Step
from loopwise.tools.call_values import Call, CallSettings
from loopwise.tools.calls import execute, values_or_halt
from loopwise.tools.tool import Arguments, Tool, require_gate

Join = Callable[[dict[str, Any]], object]
"""Turns ``{predecessor name: output}`` into a join node's input (``Any``: a user's join
names its predecessors' types, ``dict[str, Ticket]``, which a ``dict[str, object]`` would
refuse)."""

_NO_FIELD = object()


@dataclass(frozen=True, kw_only=True, slots=True)
class RouteSpec:
    """What a route node reads and where each value of it leads."""

    on: str | FunctionStep
    """A field of the routed value, or a function of it."""
    branches: dict[object, str]
    """Route value (enum members normalised to their values) → target node."""
    default: str | None
    """The target for any other value."""

    def targets(self) -> list[str]:
        """The nodes it may lead to, each once, the default last."""
        found = list(dict.fromkeys(self.branches.values()))
        if self.default is not None and self.default not in found:
            found.append(self.default)
        return found

    def labels(self, target: str) -> list[str]:
        """The values that lead to ``target`` (``default`` among them when it is)."""
        values = [str(v) for v, t in self.branches.items() if t == target]
        return [*values, "default"] if target == self.default else values

    def describe(self) -> str:
        """What it routes on, as drawn: a field name, or ``fn()``."""
        return self.on if isinstance(self.on, str) else f"{self.on.name}()"


@dataclass(frozen=True, kw_only=True, slots=True)
class RouteDecision:
    """What a route node produced: the value it passes on, the key, the chosen branch."""

    value: object
    """The routed value, passed unchanged to the chosen branch."""
    key: object
    """The value routed on."""
    branch: str
    """The node that runs next."""

    def model_dump(self, mode: str = "json") -> JSONObject:
        """JSON form for ``step_finished`` events (the choice is journaled with the value)."""
        return {"route": jsonable(self.key), "branch": self.branch, "value": jsonable(self.value)}


class RouteStep(StepDefaults):
    """The step a route node runs: read the key, pick the branch."""

    needs_model = False

    def __init__(self, name: str, spec: RouteSpec) -> None:
        self.name = name
        self.spec = spec

    async def run(self, value: object, ctx: Context) -> RouteDecision:
        on = self.spec.on
        if isinstance(on, FunctionStep):
            key = await on.run(value, ctx)
        elif isinstance(value, Mapping) and on in value:
            key = value[on]
        # getattr: the field the user named, of the value they route (a model, a dataclass).
        elif (key := getattr(value, on, _NO_FIELD)) is _NO_FIELD:
            raise Halt(Status.ERROR, f"route {self.name}: the value has no field {on!r}")
        branch = self.spec.branches.get(plain_key(key), self.spec.default)
        if branch is None:
            raise Halt(
                Status.ERROR, f"route {self.name}: no branch for {key!r} and no default branch"
            )
        return RouteDecision(value=value, key=key, branch=branch)

    def restorable(self, output: object, recorded: JSONValue) -> bool:
        """Whether a resume takes the choice from the log: when a function made it (it may
        read a world that has changed since); a field of the same input is read again."""
        return isinstance(self.spec.on, FunctionStep)

    def restore(self, value: object, recorded: JSONValue) -> object:
        """The recorded choice for ``value``: its branch, and its key as ``on`` declares its
        type (else as recorded: the key only names the choice, the branch routes)."""
        on = self.spec.on
        if not isinstance(on, FunctionStep) or not isinstance(recorded, Mapping):
            return RERUN
        branch = recorded.get("branch")
        if not isinstance(branch, str) or branch not in self.spec.targets():
            return RERUN
        key = on.restore(value, recorded.get("route"))
        key = recorded.get("route") if key is RERUN else key
        return RouteDecision(value=value, key=key, branch=branch)


class ToolNode(StepDefaults):
    """A tool as a workflow node: its input is the tool's arguments (a dict, or a pydantic
    model with those fields), its output the tool's return value. The call is made by the
    tool-call executor, so the node passes the tool's gate (a person pauses the run
    durably), is journaled (a resumed run replays it), runs with its idempotency key and
    taints the run when the tool's output is untrusted."""

    needs_model = False

    def __init__(self, tool: Tool) -> None:
        fix = "give it one (@tool(effect='irreversible', gate=human())) before using it as a node"
        require_gate(tool, holder="", fix=fix)
        self.tool = tool
        self.name = tool.name
        self.input_type: TypeForm[object] = tool.args_model
        self.output_type: TypeForm[object] = hints_of(tool.fn).get("return", Any)
        self.description = tool.description

    def accepts(self, given: object) -> bool:
        """Whether a value of type ``given`` can be the tool's arguments (checked when the
        workflow is declared): a mapping (validated when it runs), the argument model, or
        a pydantic model whose fields are arguments and cover the required ones."""
        given = strip_type(given)
        if given is Any or given is self.tool.args_model:
            return True
        origin = get_origin(given) or given
        if isinstance(origin, type) and issubclass(origin, Mapping):
            return True
        if not (isinstance(given, type) and issubclass(given, BaseModel)):
            return False
        wanted = self.tool.args_model.model_fields
        required = {k for k, f in wanted.items() if f.is_required()}
        return set(given.model_fields) <= set(wanted) and required <= set(given.model_fields)

    def describe(self) -> Shape:
        """A tool step: the tool as the reviewer sees it (effect, gate, taint)."""
        return Shape(kind=Kind.TOOL, name=self.name, tools=(self.tool.describe(),))

    async def run(self, input: Arguments, ctx: Context) -> object:
        """Make the call with ``input`` as the tool's arguments (what :meth:`accepts` let
        in; :func:`loopwise.tools.calls.values_or_halt` says how it may end)."""
        n = ctx.journal.counted(ctx.step_path, "tool_node")
        bind = ctx.step_path if n == 1 else f"{ctx.step_path}@{n}"
        call = Call(
            name=self.tool.name,
            arguments=input,
            call_id=bind,
            bind_id=bind,
            key=Journal.key(ctx.step_path, "tool_node", n),
            # Once per workflow in the run, not per node name: a node renamed while its run
            # was paused must not take the same effect again on resume.
            once_in=Journal.key(ctx.step_path.rpartition("/")[0], "workflow"),
        )
        made = await execute(
            ctx, [call], {self.tool.name: self.tool}, CallSettings(keep_value=True)
        )
        return values_or_halt(made)[0]


class NodeData(TypedDict, total=False):
    """What a workflow holds for each node (its graph's node data)."""

    step: Required[Step]
    """The step the node runs (a route's :class:`RouteStep`, a tool's :class:`ToolNode`)."""
    join: Required[Join | None]
    """What a join node receives instead of ``{predecessor: output}`` (``None``: that)."""
    route: RouteSpec
    """A route node's spec (only route nodes have one)."""
    named: NamedNode
    """The step under the node's name, made when the node first runs."""


def paused_together(halts: list[Halt]) -> Halt:
    """One ``awaiting_approval`` halt listing every request of the paused nodes."""
    if len(halts) == 1:
        return halts[0]
    pending = [p for h in halts for p in h.pending]
    detail = f"{len(pending)} call(s) await approval: " + ", ".join(
        f"{p.get('tool')} ({p.get('approval_id')})" for p in pending
    )
    return Halt(Status.AWAITING_APPROVAL, detail, output=halts[0].output, pending=pending)


@dataclass(slots=True, weakref_slot=True)
class NamedNode(StepDefaults):
    """A node's step under the node's name (its events' path and journal keys)."""

    name: str
    inner: Step

    async def run(self, input: object, ctx: Context) -> object:
        return await self.inner.run(input, ctx)

    def restorable(self, output: object, recorded: JSONValue) -> bool:
        """Whether the node's step can be replayed from its record (:mod:`loopwise.core.replay`)."""
        inner = replays(self.inner)
        return inner is not None and inner.restorable(output, recorded)

    def restore(self, input: object, recorded: JSONValue) -> object:
        """The node's step's recorded output, or ``RERUN``."""
        inner = replays(self.inner)
        return RERUN if inner is None else inner.restore(input, recorded)

    def describe(self) -> Shape:
        """The node's step, under the node's name."""
        return replace(describe(self.inner), name=self.name)


def passed_on(output: object) -> object:
    """What a node's ``output`` passes on: a route's chosen value, else the output itself."""
    return output.value if isinstance(output, RouteDecision) else output


def node_shape(node: str, data: NodeData) -> Node:
    """Workflow node ``node`` (its graph data ``data``) as drawn."""
    spec: RouteSpec | None = data.get("route")
    if spec is not None:
        return Node(id=node, label=f"{node}: {spec.describe()}?", kind="route", form="decision")
    inner = describe(data["step"])
    nested = inner.kind in (Kind.WORKFLOW, Kind.HYBRID)
    return Node(
        id=node, label=node, kind=inner.kind.value, form="nested" if nested else "box", shape=inner
    )
