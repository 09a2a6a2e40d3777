"""Plans: what a hybrid's planner proposes, and the checks a plan passes before anything runs.

* an :class:`ActionCatalog` of registered actions — each a :class:`~loopwise.tools.tool.Tool`
  (name, typed argument model, effect, gate), optionally with an automatic ``policy`` and
  a cost ``estimate``;
* a :class:`Plan`: steps ``{id, action, args, depends_on, reason}`` and the plan's own
  ``reason``. The schema the planner sees (:meth:`ActionCatalog.plan_type`) is a
  discriminated union on ``action``: only catalog names, each with that action's own
  argument model. No steps is a plan too ("nothing to do": a thank-you note, an order
  already refunded) when its ``reason`` says why;
* :func:`validate_plan`: unknown actions, arguments failing their schema or policy,
  unknown dependencies, cycles, too many steps, no steps without a reason
  (:class:`PlanContext` lets a policy see the whole plan);
* what a person is shown of a plan is :mod:`loopwise.architectures.stakes`' part, and what
  the planner is told :mod:`loopwise.architectures.planner`'s.

Running a plan is :mod:`loopwise.architectures.hybrid`'s part.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, create_model

from loopwise.architectures.digraph import Digraph
from loopwise.core.events import jsonable
from loopwise.core.jsontypes import JSONMapping, JSONObject, JSONRecord, JSONValue, json_object
from loopwise.core.shape import name_of
from loopwise.core.step import Context
from loopwise.errors import ConfigError, ToolError
from loopwise.tools.arguments import ToolArgumentsError
from loopwise.tools.gates import Gate, PolicyFn, recheck_edited, takes_ctx
from loopwise.tools.source import ToolSource, spread
from loopwise.tools.tool import Tool
from loopwise.tools.verdicts import Approved

__all__ = [
    "WHOLE_PLAN_NOTE",
    "Action",
    "ActionCatalog",
    "Plan",
    "PlanApproval",
    "PlanContext",
    "PlanStep",
    "check_gated",
    "check_policy",
    "dependency_graph",
    "parse_plan",
    "validate_plan",
]

Policy = PolicyFn
"""An automatic check of an action's arguments (a dict), as :func:`loopwise.tools.gates.policy`
takes: ``True``/``None``/``Approved``/``Escalate`` pass, ``False``, a string or
``Denied`` reject (the string being the reason); may be async. An optional second
parameter receives the rest of the plan at validation (:class:`PlanContext`)."""


class PlanStep(BaseModel):
    """One proposed action of a plan."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(
        pattern=r"^[A-Za-z0-9_-]{1,32}$",
        description="A short unique id for this step, e.g. `s1`.",
    )
    action: str = Field(description="The catalog action to run.")
    args: object = Field(description="The action's arguments.")
    depends_on: list[str] = Field(
        default_factory=list, description="Ids of steps that must finish before this one."
    )
    reason: str = Field(description="One line: why this step is needed.")
    # The tool and the arguments it validated (a new tool or new args validate again).
    _parsed: tuple[Tool, object, BaseModel] | None = PrivateAttr(default=None)

    def args_dict(self) -> JSONRecord:
        """The arguments as a plain dict (a catalog plan's step holds its action's argument
        model; a plain :class:`Plan`'s, the JSON object it was given). Its values are JSON
        (a :data:`~loopwise.core.jsontypes.JSONRecord`, as an event's data is), so a
        plan policy adds ``other.args_dict()["amount_cents"]`` as the hybrids guide does."""
        if isinstance(self.args, BaseModel):
            return self.args.model_dump(mode="json")
        return dict(json_object(self.args))

    def parsed_args(self, tool: Tool) -> BaseModel:
        """The arguments as ``tool`` validates them (raises
        :class:`~loopwise.tools.arguments.ToolArgumentsError`).

        :func:`validate_plan` validates them once and the step keeps the result, so
        authorisation, the repeat check and rechecks do not validate them again; a step it
        did not validate (a plan recalled from the journal on resume) is validated here on
        first use. The executor still validates each call's arguments itself.
        """
        kept = self._parsed
        if kept is None or kept[0] is not tool or kept[1] is not self.args:
            kept = self._parsed = (tool, self.args, tool.parse(self.args_dict()))
        return kept[2]


class Plan(BaseModel):
    """A proposed plan: actions drawn from a catalog, with dependencies and reasons."""

    model_config = ConfigDict(extra="forbid")

    steps: list[PlanStep] = Field(description="The actions to take, in a sensible order.")
    reason: str | None = Field(
        default=None,
        description="One line: why this plan; with no steps, why nothing needs doing.",
    )

    def by_id(self) -> dict[str, PlanStep]:
        """The steps keyed by id."""
        return {s.id: s for s in self.steps}


class _CatalogPlan(Plan):
    """The base of catalog plan types: their JSON schema uses ``anyOf``, not ``oneOf``,
    and says each thing once.

    Strict structured-output servers accept ``anyOf`` but reject ``oneOf`` and
    ``discriminator``; validation still uses the discriminator for precise errors. The
    schema is sent on every planner call (small servers hold 4,096 tokens), so it carries
    no ``title`` (pydantic's "Order Id" beside ``order_id``), each action's arguments
    once (a ``$ref``, not inlined beside a description) and no action description (the
    planner's instructions have them, :meth:`ActionCatalog.describe`).
    """

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The schema with every ``oneOf`` turned into ``anyOf``, without titles."""
        return _lean_object(super().model_json_schema(*args, **kwargs))


_NAMED = frozenset({"properties", "$defs"})
"""Schema keywords whose keys are names (a property called ``title`` is no title)."""


def _lean(node: JSONValue, names: bool = False) -> JSONValue:
    if isinstance(node, list):
        return [_lean(v) for v in node]
    if not isinstance(node, dict):
        return node
    return _lean_object(node, names)


def _lean_object(node: JSONObject, names: bool = False) -> JSONObject:
    if names:
        return {k: _lean(v) for k, v in node.items()}
    out = {("anyOf" if k == "oneOf" else k): _lean(v, k in _NAMED) for k, v in node.items()}
    out.pop("discriminator", None)
    out.pop("title", None)
    return out


@dataclass(frozen=True, kw_only=True)
class Action:
    """A registered action: the tool that carries it out plus what the plan checks."""

    tool: Tool
    """The :class:`~loopwise.tools.tool.Tool` that executes it (its gate guards each call)."""
    policy: Policy | None = None
    """An extra argument check at validation time (the tool gate's policy runs too)."""
    estimate: Callable[[Any], float] | None = None
    """What one call is estimated to cost (money at stake, in :attr:`unit`), from its
    validated arguments; shown in the plan approval."""
    unit: str | Callable[[Any], str | None] | None = None
    """What :attr:`estimate`'s number is in: a currency code (``"EUR"``) or any unit
    (``"credits"``), or a function of the validated arguments giving one (an order's own
    currency). Without it the approval says the action declares no unit."""

    @property
    def name(self) -> str:
        """The action's (the tool's) name."""
        return self.tool.name

    @property
    def effect(self) -> str:
        """``read``, ``write`` or ``irreversible``."""
        return str(self.tool.effect)

    @property
    def args_model(self) -> type[BaseModel]:
        """The pydantic model of the arguments."""
        return self.tool.args_model

    @property
    def description(self) -> str:
        """What the action does and when to use it."""
        return self.tool.description


class ActionCatalog:
    """The actions a plan may use; :meth:`plan_type` is the schema the planner sees."""

    def __init__(self, actions: Iterable[Tool | Action | ToolSource] = ()) -> None:
        self._actions: dict[str, Action] = {}
        self._plan_type: type[Plan] | None = None
        for action in spread(actions):  # a source (an MCP server) gives each of its tools
            self.add(action)

    def add(
        self,
        tool: Tool | Action,
        *,
        policy: Policy | None = None,
        estimate: Callable[[Any], float] | None = None,
        unit: str | Callable[[Any], str | None] | None = None,
    ) -> Action:
        """Register ``tool`` (or a ready :class:`Action`) as an action.

        Raises :class:`~loopwise.errors.ToolError` for something that is not a tool, a
        name that is not an identifier, or a name registered twice.
        """
        given: object = tool  # callers without a type checker pass plain functions too
        if isinstance(given, Action):
            action = given
        elif isinstance(given, Tool):
            action = Action(tool=given, policy=policy, estimate=estimate, unit=unit)
        else:
            name = str(name_of(given) or given)
            raise ToolError(f"action {name!r} must be a @tool (with an effect)", tool=name)
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", action.name):
            raise ToolError(f"action name {action.name!r} is not an identifier", tool=action.name)
        if action.name in self._actions:
            raise ToolError(f"action {action.name!r} is registered twice", tool=action.name)
        self._actions[action.name] = action
        self._plan_type = None
        return action

    def __contains__(self, name: object) -> bool:
        return name in self._actions

    def __getitem__(self, name: str) -> Action:
        return self._actions[name]

    def get(self, name: str) -> Action | None:
        """The action called ``name``, or ``None``."""
        return self._actions.get(name)

    def __iter__(self) -> Iterator[Action]:
        return iter(self._actions.values())

    def __len__(self) -> int:
        return len(self._actions)

    @property
    def names(self) -> list[str]:
        """The registered action names, in registration order."""
        return list(self._actions)

    def plan_type(self) -> type[Plan]:
        """A :class:`Plan` subclass whose steps are a union discriminated on ``action``."""
        if self._plan_type is not None:
            return self._plan_type
        if not self._actions:
            raise ConfigError("an action catalog needs at least one action", name="catalog")
        variants = [_step_variant(a) for a in self._actions.values()]
        item: Any = variants[0]
        if len(variants) > 1:
            item = Annotated[Union[tuple(variants)], Field(discriminator="action")]  # noqa: UP007
        steps: Any = list[item]
        model = create_model(
            "Plan",
            __base__=_CatalogPlan,
            steps=(steps, Field(description="The actions to take.")),
        )
        self._plan_type = model
        return model

    def describe(self, *, schemas: bool = False) -> str:
        """The catalog as the planner reads it: name, effect and description of each
        action, and with ``schemas`` its arguments' JSON schema too (the planner's own
        instructions leave them out: its answer's schema, :meth:`plan_type`, has them)."""
        lines = []
        for a in self._actions.values():
            line = f"- {a.name} [{a.effect}]: {a.description.strip()}"
            if schemas:
                schema = json.dumps(a.args_model.model_json_schema(), separators=(",", ":"))
                line += f"\n  args schema: {schema}"
            lines.append(line)
        return "\n".join(lines)


def _step_variant(action: Action) -> type[PlanStep]:
    camel = "".join(part.capitalize() for part in action.name.split("_"))
    literal: Any = Literal[action.name]
    # No descriptions here: a description beside the arguments' $ref makes strict schema
    # conversion inline them (sent twice), and the instructions describe every action.
    return create_model(
        f"{camel}Step", __base__=PlanStep, action=(literal, ...), args=(action.args_model, ...)
    )


def _format_validation(error: ValidationError) -> list[str]:
    out = []
    for e in error.errors(include_url=False):
        loc = ".".join(str(p) for p in e["loc"])
        out.append(f"{loc}: {e['msg']}" if loc else str(e["msg"]))
    return out


def parse_plan(raw: object, catalog: ActionCatalog) -> tuple[Plan | None, list[str]]:
    """``raw`` (a plan, dict or JSON text) as the catalog's plan type, or the errors."""
    if isinstance(raw, Plan) and not isinstance(raw, catalog.plan_type()):
        raw = raw.model_dump(mode="json")
    if isinstance(raw, catalog.plan_type()):
        return raw, []
    try:
        if isinstance(raw, str | bytes):
            return catalog.plan_type().model_validate_json(raw), []
        return catalog.plan_type().model_validate(raw), []
    except ValidationError as e:
        return None, _format_validation(e)


_RESERVED = frozenset({"start", "results"})


def _structure_errors(plan: Plan, catalog: ActionCatalog, max_steps: int) -> list[str]:
    errors: list[str] = []
    if not plan.steps and not (plan.reason or "").strip():
        errors.append(
            "the plan has no steps and gives no reason: propose steps, or say in "
            '"reason" why nothing needs doing'
        )
    if len(plan.steps) > max_steps:
        errors.append(f"the plan has {len(plan.steps)} steps; at most {max_steps} are allowed")
    seen: set[str] = set()
    for s in plan.steps:
        if s.id in seen:
            errors.append(f"step id {s.id!r} is used twice")
        if s.id in _RESERVED:
            errors.append(f"step id {s.id!r} is reserved; use another id")
        seen.add(s.id)
        if s.action not in catalog:
            errors.append(
                f"step {s.id}: unknown action {s.action!r}; known: {', '.join(catalog.names)}"
            )
    for s in plan.steps:
        for dep in s.depends_on:
            if dep not in seen:
                errors.append(f"step {s.id}: depends on unknown step {dep!r}")
            elif dep == s.id:
                errors.append(f"step {s.id}: depends on itself")
    if not errors:
        errors.extend(_cycle_errors(plan))
    return errors


def _cycle_errors(plan: Plan) -> list[str]:
    cycle = dependency_graph(plan).find_cycle()
    if cycle is None:
        return []
    return [f"dependency cycle: {' -> '.join([*cycle, cycle[0]])}"]


@dataclass(frozen=True, kw_only=True)
class PlanContext:
    """The rest of the plan, for a policy judging one of its steps at validation.

    A policy with a second positional parameter (``def within_total(args, plan=None)``)
    is given one when :func:`validate_plan` judges a step, so an invariant over several
    steps (the refunds of one order, summed) is judged before anything runs. Everywhere
    else (an agent's call, a gate asked while the plan runs, an edit re-checked) it is
    called with the arguments alone, so give the parameter a default of ``None``.
    One-parameter policies are always called with the arguments alone.
    """

    plan: Plan
    """The whole proposed plan (already valid against the catalog's argument models)."""
    step: PlanStep
    """The step being judged."""

    def others(self, action: str | None = None) -> list[PlanStep]:
        """The plan's other steps, in plan order; only those of ``action`` when given."""
        return [
            s
            for s in self.plan.steps
            if s.id != self.step.id and (action is None or s.action == action)
        ]


def _takes_plan(fn: PolicyFn) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    # `ctx` is the run's context (see Gate.run_policy), never the plan.
    return sum(p.kind in positional and p.name != "ctx" for p in params) >= 2


def _with_plan(check: Gate | PolicyFn | None, plan: PlanContext | None) -> Gate | PolicyFn | None:
    """``check`` (a policy or a gate) calling its policy with ``plan`` when it takes one."""
    fn = check.check if isinstance(check, Gate) else check
    if plan is None or fn is None or not _takes_plan(fn):
        return check

    def bound_plain(args: JSONObject) -> object:
        return fn(args, plan)

    def bound_with_ctx(args: JSONObject, ctx: Context | None) -> object:
        return fn(args, plan, ctx=ctx)

    # A policy with a `ctx` parameter keeps it (see Gate.run_policy).
    bound: PolicyFn = bound_with_ctx if takes_ctx(fn) else bound_plain
    return replace(check, check=bound) if isinstance(check, Gate) else bound


async def check_policy(
    action: Action, args: JSONObject, plan: PlanContext | None = None
) -> str | None:
    """Run ``action``'s policy and its gate's policy on ``args``: ``None`` or the reason.

    Only a denial is a validation error; a policy that escalates to a person is fine
    here (the person is asked when the action runs). Each is judged as its gate judges
    it at run time (:func:`loopwise.tools.gates.recheck_edited`), failing closed when it raises;
    a policy that takes a second parameter is also given ``plan`` (see :class:`PlanContext`).
    """
    for check in (action.policy, action.tool.gate):
        denied = await recheck_edited(_with_plan(check, plan), action.name, args)
        if denied is not None:
            return denied.reason
    return None


async def validate_plan(
    raw: object, catalog: ActionCatalog, *, max_steps: int = 10
) -> tuple[Plan | None, list[str]]:
    """Check a proposed plan; return ``(plan, [])`` when valid, else ``(None, errors)``.

    Errors say which step is wrong and how: an unknown action (listing the known ones),
    arguments failing the action's schema or policy, unknown or cyclic dependencies,
    duplicate ids, too many steps, no steps and no ``reason`` (an empty plan is valid
    when its reason says why nothing needs doing). Policies judge each step with the
    rest of the plan in view when they take it (:class:`PlanContext`): the plan is
    judged as a whole.
    """
    plan, errors = parse_plan(raw, catalog)
    if plan is None:
        return None, errors
    errors = _structure_errors(plan, catalog, max_steps)
    if errors:
        return None, errors
    for s in plan.steps:
        try:  # what the plan's own parse lets through (pydantic's JSON reads NaN)
            s.parsed_args(catalog[s.action].tool)
        except ToolArgumentsError as e:
            errors.append(f"step {s.id} ({s.action}): {e}")
            continue
        reason = await check_policy(
            catalog[s.action], s.args_dict(), PlanContext(plan=plan, step=s)
        )
        if reason is not None:
            errors.append(f"step {s.id} ({s.action}): policy rejected the arguments: {reason}")
    return (None, errors) if errors else (plan, [])


@dataclass(frozen=True, kw_only=True)
class PlanApproval:
    """A person's approval of a whole plan (``approve_plan=True``), as its steps' gates see it."""

    verdict: Approved
    """Who approved the plan, and when."""
    approval_id: str
    """The whole-plan approval's id (``plan``, ``plan_2`` after a re-plan)."""
    args: JSONMapping
    """Per step id, the arguments the person was shown."""
    covers_gates: bool = False
    """Whether the approval answers the steps' human gates
    (``Hybrid(plan_approval_covers_gates=True)``)."""

    def covers(self, step: PlanStep, args: object, effect: str) -> tuple[Approved | None, str]:
        """The approval that answers ``step``'s human gate (``None``: a person is asked)
        and the note its request (or the audit log) carries."""
        by = self.verdict.by
        if jsonable(self.args.get(step.id)) != jsonable(args):
            return None, (
                f"the plan was approved by {by}, but this step's arguments are not the ones "
                "it showed: a person decides these exact arguments"
            )
        if not self.covers_gates:
            return None, (
                f"the plan was approved by {by}; this {effect} step asks again with its "
                "exact arguments (Hybrid(plan_approval_covers_gates=True) lets the plan's "
                "approval answer it)"
            )
        reason = f"approved by {by} as part of the whole plan ({self.approval_id})"
        return Approved(by=by, reason=reason, at=self.verdict.at), reason


WHOLE_PLAN_NOTE = {
    False: "approving the plan lets it run; each step whose gate asks a person (an "
    "irreversible refund, a mail) still asks with its exact arguments",
    True: "approving the plan also answers its steps' human gates for exactly these "
    "arguments (their policies still judge them)",
}
"""What a person approving a whole plan is told it means (``plan_approval_covers_gates``)."""


def check_gated(catalog: ActionCatalog, hybrid: str) -> None:
    """Raise :class:`ToolError` when an ``irreversible`` action of ``catalog`` has no gate."""
    for a in catalog:
        if a.effect == "irreversible" and a.tool.gate is None:
            raise ToolError(
                f"hybrid {hybrid!r}: action {a.name!r} is irreversible and has no gate; "
                "give it one (@tool(effect='irreversible', gate=human()))",
                tool=a.name,
                code="ungated-irreversible",
            )


def dependency_graph(plan: Plan) -> Digraph[None]:
    """The plan's steps as a graph, an edge from each dependency to its dependant (a
    dependency on no step of the plan is left out: validation reports it)."""
    graph: Digraph[None] = Digraph()
    for s in plan.steps:
        if s.id not in graph:
            graph.add_node(s.id, None)
    for s in plan.steps:
        for d in s.depends_on:
            if d in graph:
                graph.add_edge(d, s.id)
    return graph
