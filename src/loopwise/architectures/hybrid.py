"""Hybrids: a model proposes a plan, validation checks it, a workflow executes it behind gates.

The pieces, in the order a run meets them (the plan model and its checks live in
:mod:`loopwise.architectures.plans`; this module runs them):

* an :class:`ActionCatalog` of registered actions and the :class:`Plan` proposed from it;
* a planner: one :class:`~loopwise.architectures.structured.Structured` call or an
  :class:`~loopwise.architectures.agent.Agent` holding read-only tools. It never holds an
  action, so it cannot execute one (a planner with a ``write``/``irreversible`` tool raises
  :class:`~loopwise.errors.ToolError` when the hybrid is built);
* :func:`validate_plan`: unknown actions, arguments failing their schema or policy,
  unknown dependencies, cycles, too many steps, no steps without a reason. The errors go
  back to the planner a bounded number of times, then the run ends ``invalid_output``.
  An empty plan with a ``reason`` ("nothing to do") ends the run ``completed`` at once;
* optionally, with ``approve_plan``, a person approves the whole plan, shown as a Mermaid
  graph with each action's effect and estimated cost (:func:`plan_mermaid`); whether that
  also answers the steps' human gates is ``plan_approval_covers_gates`` (default: no);
* :func:`authorize_plan`: every step's gate is asked before the first action runs, so a
  person sees all the plan's asks at once and the run pauses once (``awaiting_approval``,
  durable: ``loopwise approve``/``deny``, then ``resume``);
* :func:`compile_plan`: the plan as a :class:`~loopwise.architectures.workflow.Workflow` (the one
  executor): independent actions run concurrently, dependencies in order, each once
  (journaled, with an idempotency key). A denied action skips its dependants and the run
  ends ``denied`` (or, with ``replan_on_denial``, the planner is asked again with the
  denial as feedback).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from pydantic import BaseModel
from typing_extensions import TypeForm

from loopwise.architectures.agent import Agent
from loopwise.architectures.edits import as_ran
from loopwise.architectures.plan_run import (
    ActionResult,
    authorize_plan,
    compile_plan,
    once_in,
)
from loopwise.architectures.planner import (
    REJECTED,
    check_planner,
    planner_instructions,
    planner_request,
)
from loopwise.architectures.plans import (
    WHOLE_PLAN_NOTE,
    Action,
    ActionCatalog,
    Plan,
    PlanApproval,
    PlanContext,
    PlanStep,
    check_gated,
    parse_plan,
    validate_plan,
)
from loopwise.architectures.stakes import plan_mermaid, plan_stake
from loopwise.architectures.structured import Structured
from loopwise.core.events import EventType, Status, jsonable
from loopwise.core.journal import Journal
from loopwise.core.jsontypes import JSONObject
from loopwise.core.members import StepDefaults
from loopwise.core.names import check_name
from loopwise.core.result import Halt
from loopwise.core.shape import Kind, Limits, Shape, describe, mermaid
from loopwise.core.step import Context, Step
from loopwise.core.usage import Budget, Usage
from loopwise.tools.calls import effect_id
from loopwise.tools.gates import Ask, authorize_all, human, pause
from loopwise.tools.source import ToolSource
from loopwise.tools.tool import Tool
from loopwise.tools.verdicts import Denied, Edited, Pending

# The plan vocabulary users write beside a hybrid (`from loopwise import
# hybrid`, then `hybrid.PlanContext`), kept on this documented module for them; the package
# imports these from loopwise.architectures.plans.
__all__ = [
    "REJECTED",
    "Action",
    "ActionCatalog",
    "ActionResult",
    "Hybrid",
    "HybridOutput",
    "Plan",
    "PlanContext",
    "PlanStep",
    "authorize_plan",
    "compile_plan",
]


class HybridOutput(BaseModel):
    """A hybrid's output: the plan that ran and what became of each action."""

    plan: Plan
    """The validated plan as it ran: a step a person edited shows the arguments it ran with
    (``plan.reason`` says why; with no steps, why nothing was done)."""
    proposed: Plan | None = None
    """The plan as the planner proposed it, when a person edited a step (else ``None``)."""
    results: dict[str, ActionResult]
    """Per plan step id, in plan order."""
    rounds: int = 1
    """How many plans were executed (more than one after a re-plan on denial)."""

    def ran(self, action: str) -> int:
        """How many steps of ``action`` completed."""
        return sum(1 for r in self.results.values() if r.action == action and r.status == "done")


class _Attempt(StepDefaults):
    """The planner under a per-attempt name, so each attempt has its own journal keys."""

    def __init__(self, name: str, inner: Step) -> None:
        self.name = name
        self.inner = inner

    def describe(self) -> Shape:
        """The planner, under this attempt's name."""
        return replace(describe(self.inner), name=self.name)

    async def run(self, input: object, ctx: Context) -> object:
        # Declared effects are checked when the hybrid is built; this also covers what
        # the planner reaches through nested steps (an agent wrapped by as_tool as "read").
        ctx.refuse_effects = (
            "a hybrid's planner only proposes: it cannot make write or irreversible calls, "
            "not even through a nested step; propose the action in the plan instead"
        )
        return await self.inner.run(input, ctx)


class Hybrid(StepDefaults):
    """Propose, then execute: a planner proposes a :class:`Plan`, validation checks it,
    the compiled workflow runs it, irreversible actions pass their gates.

    ``actions`` are the catalog (tools, or an :class:`ActionCatalog`). The planner is
    ``planner`` when given, else built: an :class:`~loopwise.architectures.agent.Agent`
    over ``tools`` (read-only investigation) when there are any, else one
    :class:`~loopwise.architectures.structured.Structured` call. ``task`` says what plans
    are for.

    ``approve_plan`` asks a person to approve each whole plan before its gates are asked.
    That approval answers the steps' human gates only with ``plan_approval_covers_gates``
    (default ``False``: an irreversible step is decided on its own exact arguments, and its
    request says the plan was approved and why it asks again); with it, a step whose
    arguments are exactly those the approved plan showed is recorded as approved by the
    plan's approver, and its policy still judges it (:class:`PlanApproval`).

    How runs end: ``completed`` (every action done, or an empty plan whose ``reason``
    says why nothing needs doing: no action runs, and the output's ``plan.reason`` says
    why; after a denial and a re-plan, an empty plan ends ``denied``); ``invalid_output``
    (no valid plan after ``max_plan_retries`` re-asks); ``awaiting_approval`` (a gate or
    the whole-plan approval waits for a person); ``denied`` (an action or the plan was
    denied, after ``replan_on_denial`` re-plans); ``tool_failed`` (an action raised).

    Raises :class:`~loopwise.errors.ToolError` at construction when the planner holds a
    ``write``/``irreversible`` tool or an ``irreversible`` action has no gate.
    """

    needs_model = True
    """The CLI must give this step a model."""

    def __init__(
        self,
        name: str,
        *,
        actions: ActionCatalog | Iterable[Tool | Action | ToolSource],
        task: str = "",
        tools: Sequence[Tool | ToolSource | Callable[..., object]] = (),
        planner: Step | None = None,
        max_steps: int = 10,
        max_plan_retries: int = 2,
        planner_max_steps: int = 8,
        approve_plan: bool = False,
        plan_approval_covers_gates: bool = False,
        replan_on_denial: int = 0,
        budget: Budget | None = None,
        input_type: TypeForm[object] = str,
    ) -> None:
        self.name = check_name(name, what="hybrid")
        self.catalog = actions if isinstance(actions, ActionCatalog) else ActionCatalog(actions)
        check_gated(self.catalog, name)
        self.max_steps = max_steps
        self.max_plan_retries = max_plan_retries
        self.approve_plan = approve_plan
        self.plan_approval_covers_gates = plan_approval_covers_gates
        self.replan_on_denial = replan_on_denial
        self.budget = budget or Budget()
        self.input_type = input_type
        self.output_type: TypeForm[object] = HybridOutput
        self.description = task
        self.planner = planner or self._default_planner(task, tools, planner_max_steps)
        self._attempts: dict[str, _Attempt] = {}
        check_planner(self.planner, name)

    def _default_planner(
        self, task: str, tools: Sequence[Tool | ToolSource | Callable[..., object]], max_steps: int
    ) -> Step:
        text = planner_instructions(
            self.catalog, task, max_steps=self.max_steps, investigates=bool(tools)
        )
        if tools:
            return Agent(
                name="planner",
                instructions=text,
                tools=tools,
                output_type=self.catalog.plan_type(),
                max_steps=max_steps,
            )
        return Structured("planner", output=self.catalog.plan_type(), instructions=text)

    def __repr__(self) -> str:
        return f"<hybrid {self.name}: {len(self.catalog)} actions>"

    async def run(self, input: object, ctx: Context) -> HybridOutput:
        """Propose, validate, (approve,) execute; re-plan on denial when configured."""
        feedback: list[str] = []
        output: HybridOutput | None = None
        nothing: str | None = None
        scope = _id_scope(ctx)
        for round_no in range(1, self.replan_on_denial + 2):
            plan = await self.propose(
                input, ctx, feedback=feedback, round_no=round_no, scope=once_in(scope)
            )
            if not plan.steps:
                # "Nothing to do", with the planner's reason: nothing to approve or run.
                if round_no == 1:
                    return HybridOutput(plan=plan, results={}, rounds=round_no)
                nothing = f"then the planner proposed nothing more: {plan.reason}"
                break
            suffix = "" if round_no == 1 else f"_{round_no}"
            approved = await self._approve_whole(plan, f"{scope}plan{suffix}", ctx)
            refused = approved if isinstance(approved, str) else None
            if refused is not None:
                feedback = [refused]
                continue
            name = f"execute{suffix}"
            try:
                verdicts = await authorize_plan(
                    plan,
                    self.catalog,
                    ctx,
                    name=name,
                    scope=scope,
                    approved=approved if isinstance(approved, PlanApproval) else None,
                )
            except Halt as halt:
                halt.output = HybridOutput(plan=plan, results={}, rounds=round_no)
                raise
            workflow = compile_plan(plan, self.catalog, name=name, verdicts=verdicts, scope=scope)
            ran = await ctx.run_step(workflow, plan)
            # The workflow gathers results as actions finish; people read them in plan order.
            results = {s.id: ran[s.id] for s in plan.steps if s.id in ran}
            output = HybridOutput(**as_ran(plan, results), results=results, rounds=round_no)
            _raise_failed(output)
            denied = [r for r in results.values() if r.status == "denied"]
            if not denied:
                return output
            feedback = _denial_feedback(output)
        # After a whole plan was refused the refusal says it; else what became of each step
        # (and, when the last plan was empty, why the planner proposed nothing more).
        detail = "; ".join(feedback)
        if refused is None and output is not None:
            detail = _outcome_text(output)
        if nothing is not None:
            detail = f"{detail}; {nothing}" if detail else nothing
        raise Halt(Status.DENIED, f"{self.name}: {detail or 'denied'}", output=output)

    async def propose(
        self,
        input: object,
        ctx: Context,
        *,
        feedback: Sequence[str] = (),
        round_no: int = 1,
        scope: str | None = None,
    ) -> Plan:
        """Ask the planner until its plan validates (``max_plan_retries`` re-asks).

        With ``scope`` (the hybrid's run, see :mod:`loopwise.tools.calls`), a plan that repeats
        a ``write``/``irreversible`` action with arguments that already took effect in
        it — or holds one twice — is invalid, and the planner is told so.
        The accepted plan is journaled, so a resumed run executes the same plan without
        validating it again (its policies would see the effects it already had).
        Raises :class:`Halt` (``invalid_output``) when the last plan is still invalid.
        """
        key = Journal.key(ctx.step_path, "plan", round_no)
        recorded = ctx.journal.recall(key)
        if recorded is not None:
            plan, _ = parse_plan(recorded.get("plan"), self.catalog)
            if plan is not None:
                _count_again(ctx, recorded.get("spent"))
                return plan
        notes = list(feedback)
        errors: list[str] = []
        before = (replace(ctx.usage), ctx.steps[0])
        for attempt in range(1, self.max_plan_retries + 2):
            name = "plan" if (round_no, attempt) == (1, 1) else f"plan_{round_no}_{attempt}"
            attempt_step = self._attempts.get(name)
            if attempt_step is None or attempt_step.inner is not self.planner:
                # One object per attempt name: a step's kind is remembered by its identity.
                attempt_step = self._attempts[name] = _Attempt(name, self.planner)
            raw = await ctx.run_step(attempt_step, planner_request(input, notes))
            plan, errors = await self._validate(raw, key, ctx, (before, scope))
            if plan is not None:
                return plan
            notes = [*feedback, *errors]
        raise Halt(
            Status.INVALID_OUTPUT,
            f"{self.name}: no valid plan after {self.max_plan_retries + 1} attempts: "
            + "; ".join(errors),
        )

    async def _validate(
        self, raw: object, key: str, ctx: Context, since: tuple[tuple[Usage, int], str | None]
    ) -> tuple[Plan | None, list[str]]:
        """Validate as a ``validate`` step; a valid plan's event carries the journal key
        and what planning spent (a resumed run skips the planner but still counts it)."""
        before, scope = since
        check = ctx.child("validate")
        check.emit(EventType.STEP_STARTED, {"input": jsonable(raw)})
        plan, errors = await validate_plan(raw, self.catalog, max_steps=self.max_steps)
        if plan is not None:
            errors = _repeat_errors(plan, self.catalog, ctx, scope)
            plan = None if errors else plan
        data: JSONObject = {"output": {"valid": plan is not None, "errors": list(errors)}}
        if plan is not None:
            spent = {**ctx.usage.since(before[0]).to_dict(), "steps": ctx.steps[0] - before[1]}
            # Each step's effect is recorded with the plan: what a person reading the run
            # is shown before the step asks or runs.
            effects: JSONObject = {s.id: self.catalog[s.action].effect for s in plan.steps}
            data.update(key=key, plan=plan.model_dump(mode="json"), effects=effects, spent=spent)
        check.emit(EventType.STEP_FINISHED, data)
        return plan, errors

    async def _approve_whole(
        self, plan: Plan, call_id: str, ctx: Context
    ) -> PlanApproval | str | None:
        """The whole-plan approval (when configured): the person's approval, the denial
        (a string), or ``None`` when no plan approval is asked."""
        if not self.approve_plan:
            return None
        steps = plan.model_dump(mode="json")["steps"]
        ask = Ask(
            ctx=ctx,
            tool="approve_plan",
            effect=_strongest({self.catalog[s.action].effect for s in plan.steps}),
            args={
                "plan": steps,
                "graph": plan_mermaid(plan, self.catalog),
                "estimated_cost": plan_stake(plan, self.catalog)["at_stake"],
            },
            call_id=call_id,
            gate=human(),
            **plan_stake(plan, self.catalog),
            note=WHOLE_PLAN_NOTE[self.plan_approval_covers_gates],
        )
        (verdict,) = await authorize_all([ask])
        if isinstance(verdict, Pending):
            raise pause([verdict])
        if isinstance(verdict, Edited):
            # Running the plan as proposed would ignore what the person changed, and an
            # edited plan would skip validation: neither runs.
            verdict = Denied(
                "it was edited, but a whole plan is approved or denied, not edited (nothing "
                "ran; deny it with a reason to have it planned again)",
                by=verdict.by,
            )
        if isinstance(verdict, Denied):
            reason = f"the whole plan was denied by {verdict.by}: {verdict.reason}"
            if self.replan_on_denial == 0:
                raise Halt(Status.DENIED, f"{self.name}: {reason}")
            return reason
        return PlanApproval(
            verdict=verdict,
            approval_id=call_id,
            args={s["id"]: s["args"] for s in steps},
            covers_gates=self.plan_approval_covers_gates,
        )

    def describe(self) -> Shape:
        """Its planner, its actions (each a tool behind its gate) and its limits."""
        return Shape(
            kind=Kind.HYBRID,
            name=self.name,
            # An edit a person makes is judged by the action's own policy too (approvals).
            actions=tuple(
                replace(a.tool.describe(), policies=(a.policy,) if a.policy else ())
                for a in self.catalog
            ),
            parts=(("planner", describe(self.planner)),),
            limits=Limits(max_steps=self.max_steps, budget=self.budget),
        )

    def to_mermaid(self) -> str:
        """The hybrid's fixed shape (propose → validate → execute behind gates)."""
        return mermaid(self.describe())


def _id_scope(ctx: Context) -> str:
    """What makes this run of the hybrid's call ids unique in the run (``""`` for the target).

    Approvals and idempotency keys are bound to call ids: a hybrid nested in a workflow or
    agent, or run twice at one place, must not share ``execute.s1`` with another, or its
    refund would be deduplicated into the other's (done, but never paid) or approved by
    the other's decision. Counted per path, so a resumed run scopes alike.
    """
    n = ctx.journal.counted(ctx.step_path, "hybrid")
    if len(ctx.path) <= 1 and n == 1:
        return ""
    return f"{ctx.step_path}{'' if n == 1 else f'@{n}'}/"


def _repeat_errors(
    plan: Plan, catalog: ActionCatalog, ctx: Context, scope: str | None
) -> list[str]:
    """A re-plan must not repeat an effect its run already took, nor hold one twice."""
    errors: list[str] = []
    planned: dict[str, str] = {}
    for s in plan.steps:
        tool = catalog[s.action].tool
        found = effect_id(scope, tool, s.parsed_args(tool))
        if found is None:
            continue
        earlier = ctx.journal.effect(found)
        if earlier is not None:
            errors.append(
                f"step {s.id} ({s.action}): this action already took effect with these "
                f"arguments in this run (as {earlier.get('call_id')}); it is never repeated — "
                "leave it out of the plan"
            )
        elif found in planned:
            errors.append(
                f"step {s.id} ({s.action}): the same action with the same arguments is "
                f"already step {planned[found]}; an effect is taken once — leave one out"
            )
        planned.setdefault(found, s.id)
    return errors


def _count_again(ctx: Context, spent: object) -> None:
    """Count the journaled planning of a resumed run in its usage and steps once more."""
    if not isinstance(spent, dict):
        return
    usage = Usage.from_dict(spent)
    for scope in (ctx.usage, *ctx.scopes):
        scope.add(usage)
    ctx.steps[0] += int(spent.get("steps", 0))


def _strongest(effects: set[str]) -> str:
    return next((e for e in ("irreversible", "write") if e in effects), "read")


def _raise_failed(output: HybridOutput) -> None:
    """End ``tool_failed`` when an action raised."""
    failed = [r for r in output.results.values() if r.status == "failed"]
    if failed:
        first = failed[0]
        raise Halt(
            Status.TOOL_FAILED,
            f"step {first.step} ({first.action}) failed: {first.reason}",
            output=output,
        )


def _not_run(output: HybridOutput) -> list[str]:
    return [
        f"step {r.step} ({r.action}) was {r.status}: {r.reason}"
        for r in output.results.values()
        if r.status in ("denied", "skipped")
    ]


def _done(output: HybridOutput) -> str:
    return ", ".join(
        f"{r.step} ({r.action})" for r in output.results.values() if r.status == "done"
    )


def _denial_feedback(output: HybridOutput) -> list[str]:
    """What the planner is told before it plans again (an instruction, for the model)."""
    done = _done(output)
    return [*_not_run(output), *([f"already done, do not repeat: {done}"] if done else [])]


def _outcome_text(output: HybridOutput) -> str:
    """What became of the last plan, for the people reading the run's detail."""
    done = _done(output)
    return "; ".join([*_not_run(output), *([f"done: {done}"] if done else [])])
