"""A validated plan as a workflow: :func:`authorize_plan` asks every step's gate before
the first action, :func:`compile_plan` turns the plan into a
:class:`~loopwise.architectures.workflow.Workflow` whose action nodes make their calls
through the one executor (:mod:`loopwise.tools.calls`), and :class:`ActionResult` is what
each action node gives. :mod:`loopwise.architectures.hybrid` is the propose → approve →
execute loop around them.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, Literal

from pydantic import BaseModel
from typing_extensions import TypeForm

from loopwise.architectures.edits import call_of, rechecks
from loopwise.architectures.plans import (
    Action,
    ActionCatalog,
    Plan,
    PlanApproval,
    PlanStep,
    dependency_graph,
)
from loopwise.architectures.stakes import step_stake
from loopwise.architectures.workflow import Workflow
from loopwise.core.events import jsonable
from loopwise.core.function_step import step
from loopwise.core.journal import Journal
from loopwise.core.members import StepDefaults
from loopwise.core.step import Context
from loopwise.errors import ConfigError
from loopwise.tools.call_values import Call, CallSettings, Outcome
from loopwise.tools.calls import execute
from loopwise.tools.edits import edit_problem
from loopwise.tools.gates import Ask, authorize_all, pause
from loopwise.tools.verdicts import Denied, Pending, Verdict

__all__ = ["ActionResult", "ActionStatus", "authorize_plan", "compile_plan", "once_in"]


ActionStatus = Literal["done", "denied", "skipped", "failed"]


class ActionResult(BaseModel):
    """What became of one planned action when the plan ran."""

    step: str
    """The plan step's id."""
    action: str
    """The action's name."""
    status: ActionStatus
    """``done``, ``denied`` (by its gate), ``skipped`` (a dependency did not run) or
    ``failed`` (the action raised)."""
    output: object = None
    """What the action returned (when ``done``), as JSON."""
    reason: str | None = None
    """Why it did not run, when it did not."""
    edited_by: str | None = None
    """Who edited its arguments, when a person did (it ran with :attr:`ran_with`)."""
    ran_with: dict[str, object] | None = None
    """The arguments it ran with, when a person edited them."""


class _ActionNode(StepDefaults):
    """The workflow node of one plan step: dependencies, then the tool-call executor."""

    needs_model = False
    output_type: TypeForm[object] = ActionResult

    def __init__(
        self,
        planned: PlanStep,
        action: Action,
        call_id: str,
        verdict: Verdict | None,
        once_in: str,
    ) -> None:
        self.name = planned.id
        self.planned = planned
        self.action = action
        self.call_id = call_id
        self.verdict = verdict
        self.once_in = once_in
        self.recheck: str | None = None
        """Why a person decides it again (a step it depends on was edited), if so."""

    async def run(self, upstream: object, ctx: Context) -> ActionResult:
        """Skip when a dependency did not run or the plan's gate denied; else make the call
        (its gate's verdict is recalled from the journal, or asked now)."""
        for dep, result in (upstream if isinstance(upstream, dict) else {}).items():
            if isinstance(result, ActionResult) and result.status != "done":
                return self._result("skipped", reason=f"step {dep} was {result.status}")
        if isinstance(self.verdict, Denied):
            verdict = self.verdict
            return self._result("denied", reason=f"denied by {verdict.by}: {verdict.reason}")
        call = Call(
            name=self.action.name,
            key=Journal.key(ctx.step_path, "action", self.call_id),
            policies=(self.action.policy,),
            once_in=self.once_in,
            recheck=self.recheck,
            **call_of(self.planned, self.call_id, self.verdict, self.recheck),
        )
        tools = {self.action.name: self.action.tool}
        (made,) = await execute(ctx, [call], tools, CallSettings(keep_value=True))
        if made.pending is not None:
            raise pause([made.pending])
        return self._from(made)

    def _from(self, made: Outcome) -> ActionResult:
        if made.status == "done":
            edit = {"edited_by": made.edited_by, "ran_with": made.ran_with}
            return self._result("done", output=jsonable(made.value), **edit)
        if made.status == "failed":
            return self._result("failed", reason=made.reason)
        return self._result("denied", reason=made.reason)

    def _result(self, status: ActionStatus, **fields: object) -> ActionResult:
        # Validated as the constructor validates (the executor's ran_with is any JSON).
        known = {"step": self.planned.id, "action": self.action.name, "status": status}
        return ActionResult.model_validate({**known, **fields})


class _Collect(StepDefaults):
    """The end node: gathers every action's result (it runs after all of them)."""

    needs_model = False
    output_type: TypeForm[object] = dict

    def __init__(self, name: str) -> None:
        self.name = name

    async def run(
        self, results: Mapping[str, ActionResult], ctx: Context
    ) -> dict[str, ActionResult]:
        """The results by step id."""
        return dict(results)


@step(name="start")
async def _start(plan: Any) -> Any:
    """The compiled workflow's start node: every independent action follows it."""
    return plan


def compile_plan(
    plan: Plan,
    catalog: ActionCatalog,
    *,
    name: str = "execute",
    verdicts: Mapping[str, Verdict] | None = None,
    scope: str = "",
) -> Workflow:
    """The plan as a :class:`~loopwise.architectures.workflow.Workflow`: one node per step,
    edges from ``depends_on``, all results joined in a final ``results`` node.

    Each step starts as soon as the steps it depends on are done. Every
    action is made by the tool-call executor (:mod:`loopwise.tools.calls`), so it passes its
    gate there: the verdicts :func:`authorize_plan` journaled are recalled, a step
    without one is asked then. ``verdicts`` (by step id) can only add denials, and their
    edits make the steps that depend on an edited one ask a person again
    (:mod:`loopwise.architectures.edits`). ``scope``
    prefixes the call ids (``{scope}{name}.{id}``, which bind approvals and idempotency
    keys), as given to :func:`authorize_plan`, and bounds "an effect at most once" to
    this hybrid's run.
    """
    verdicts = verdicts or {}
    wf = Workflow(name)
    wf.add("start", _start)
    generations = dependency_graph(plan).generations()
    if generations is None:
        raise ConfigError(
            f"{name}: the plan's steps depend on each other in a cycle; validate_plan "
            "reports it (a hybrid compiles only a validated plan)",
            name=name,
        )
    order = [sid for generation in generations for sid in generation]
    by_id = plan.by_id()
    again = rechecks(plan, catalog, verdicts)
    for sid in order:
        planned = by_id[sid]
        call_id = f"{scope}{name}.{sid}"
        verdict, recheck = verdicts.get(sid), again.get(sid)
        node = _ActionNode(planned, catalog[planned.action], call_id, verdict, once_in(scope))
        node.recheck = recheck
        wf.add(sid, node, after=planned.depends_on or ["start"], join=dict)
    wf.add("results", _Collect("results"), after=order, join=dict)
    return wf


async def authorize_plan(
    plan: Plan,
    catalog: ActionCatalog,
    ctx: Context,
    *,
    name: str = "execute",
    scope: str = "",
    approved: PlanApproval | None = None,
) -> dict[str, Verdict]:
    """Every step's gate verdict, asked together before any action runs.

    The plan is known in advance, so a person sees all of its asks at once and the run
    pauses once: when any gate is undecided this raises the ``awaiting_approval``
    :class:`Halt` listing all of them. Decisions are journaled by the gates, so a resumed
    run gets the same verdicts without asking again. Policies therefore judge the world as
    it is before the plan's first effect (as validation did); the executor asks them again
    as each action is about to run, where only a denial counts.
    Each request carries the planner's reason for the step and the action's estimate of
    what is at stake. ``approved`` is the person's approval of this whole plan, when one
    was asked: it answers a step's human gate only when it covers gates and the step's
    arguments are exactly those shown (:meth:`PlanApproval.covers`); else the step's
    request says the plan was approved and why it asks again.
    """
    base = ctx.child(name)
    asks = []
    for planned in plan.steps:
        action = catalog[planned.action]
        args = planned.parsed_args(action.tool).model_dump(mode="json")
        covered, note = None, None
        if approved is not None:
            covered, note = approved.covers(planned, args, action.effect)
        asks.append(
            Ask(
                ctx=base.child(planned.id),
                tool=action.name,
                effect=action.effect,
                args=args,
                call_id=f"{scope}{name}.{planned.id}",
                gate=action.tool.gate,
                edit_problem=partial(edit_problem, action.tool),
                why=planned.reason,
                **step_stake(planned, catalog),
                note=note,
                covered_by=covered,
            )
        )
    verdicts = await authorize_all(asks)
    waiting = [v for v in verdicts if isinstance(v, Pending)]
    if waiting:
        raise pause(waiting)
    return {
        p.id: v for p, v in zip(plan.steps, verdicts, strict=True) if not isinstance(v, Pending)
    }


def once_in(scope: str) -> str:
    """The scope in which an action's effect happens at most once: this hybrid's run
    (two parts, where an agent's scope has three: none spells another's)."""
    return Journal.key("hybrid", scope)
