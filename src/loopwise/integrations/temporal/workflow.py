"""The one workflow type (:data:`~.address.WORKFLOW`): a loopwise run as a Temporal workflow.

The loop (an agent's turns, a workflow's graph, a hybrid's plan) runs here, in workflow
code, exactly as in a local run (:func:`loopwise.core.execute.execute`); its outside-world
work leaves through the engine seam (:mod:`loopwise.core.offload`):

* a model call is an activity (``loopwise.model``), its turn journaled by Temporal;
* a tool call is an activity (``loopwise.tool``) with the run's idempotency key (run id =
  workflow id, + the call's id), retried on another worker when its worker dies;
* a policy's judgement is a local activity (``loopwise.judge``): it may read a database,
  and its verdict is in the history, so replay never judges again.

A human gate pauses the run as a local run pauses (``run_paused``, the approvals in the
log); the workflow then waits for decisions, sent as signals (:data:`~.address.DECIDE_SIGNAL`:
Temporal accepts them while no worker runs), and resumes the run from its own log
(``run_resumed``), as ``loopwise resume`` does from a store. What a client reads without a
worker — status, approvals, the log — is in the workflow's memo
(:data:`~.address.MEMO_KEY`), updated at each pause and at the end; the queries
:data:`~.address.PENDING_QUERY` and :data:`~.address.EVENTS_QUERY` answer the same live.

A long run continues as a new workflow run (continue-as-new) before a model call once its
history passes ``continue_after`` events (or Temporal suggests it) and no tool call is in
flight: the new run carries the log and the approvals, and its journal replays the loop
to that call, as a resume does.

Determinism: the run id, the clock (``workflow.time``) and every activity come from the
workflow; loopwise's modules and the target's module are passed through the sandbox (the
target is loaded once per worker process, not per run); a sync ``@step`` runs in place.
Events' ``at`` times are the worker's clock when they were made (a replay makes them
again), and so are informational only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from datetime import timedelta
from types import EllipsisType
from typing import Any

from loopwise.errors import missing_extra

try:
    from temporalio import workflow
    from temporalio.common import RetryPolicy
except ImportError as e:  # pragma: no cover - the extra is installed in the test env
    raise missing_extra("temporal", e, needed_by="loopwise.integrations.temporal") from None

with workflow.unsafe.imports_passed_through():
    from loopwise.core.events import Event, EventType, Status, jsonable
    from loopwise.core.execute import execute, new_context
    from loopwise.core.jsontypes import JSONObject, JSONValue
    from loopwise.core.offload import Work
    from loopwise.core.options import RunOptions
    from loopwise.core.result import Halt, RunResult
    from loopwise.core.step import Context, Step
    from loopwise.core.usage import Budget
    from loopwise.errors import ModelAPIError
    from loopwise.integrations.temporal.activities import forget, remember
    from loopwise.integrations.temporal.address import (
        DECIDE_SIGNAL,
        EVENTS_QUERY,
        MEMO_KEY,
        PENDING_QUERY,
        WORKFLOW,
    )
    from loopwise.integrations.temporal.book import Book, event_of
    from loopwise.integrations.temporal.messages import (
        Carried,
        Declared,
        JudgeAnswer,
        ModelAnswer,
        RunSummary,
        ToolAnswer,
    )
    from loopwise.models.port import ModelDefaults, ModelRequest, Turn, model_name
    from loopwise.running.store_approvals import StoreApprovals
    from loopwise.running.stored import typed_input
    from loopwise.running.targets import load_target
    from loopwise.tools.verdicts import Approved, Denied, Escalate

__all__ = ["LoopwiseRun"]

_MEMO_EVENTS_LIMIT = 256_000
"""Characters of log the memo holds at most (a longer log is read by query, a worker up)."""

_NOT_SENT = {"on_text", "deps"}


class _Rollover(BaseException):
    """Raised before a model call once the history is long: the run continues as a new
    workflow run (continue-as-new) from its log, whose journal replays it to this call.
    A ``BaseException``: no step's ``except Exception`` may take it for an error."""


class _Flight:
    """How many activities of the run are in flight (a rollover waits for none)."""

    def __init__(self) -> None:
        self.n = 0


class _EngineModel(ModelDefaults):
    """The run's model in workflow code: each call is a ``loopwise.model`` activity; what
    the real model declares (``declared``, from the worker) it declares too."""

    def __init__(
        self,
        name: str,
        spec: str,
        timeout: timedelta,
        declared: Declared,
        roll: Callable[[], bool],
    ) -> None:
        self.name = name
        self._spec = spec
        self._timeout = timeout
        self._roll = roll
        self.structured_mode = declared.get("structured_mode")
        self.decision_backends = tuple(declared.get("decision_backends") or ())
        given = declared.get("endpoint")
        self._endpoint = (given[0], given[1]) if given else None

    @property
    def endpoint(self) -> tuple[str, str] | None:
        """The real model's ``(base URL, model name)``, when it has one."""
        return self._endpoint

    async def complete(self, request: ModelRequest) -> Turn:
        if self._roll():
            raise _Rollover
        # What is sent: the request as data (its text hook and deps stay here).
        sent = asdict(replace(request, on_text=None, deps=None))
        for name in _NOT_SENT:
            del sent[name]
        answer: ModelAnswer = await workflow.execute_activity(
            "loopwise.model",
            {"spec": self._spec, "model": self.name, "request": sent},
            start_to_close_timeout=self._timeout,
        )
        if "error" in answer:
            raise ModelAPIError(answer["error"], status_code=answer.get("status_code"))
        return Turn.from_dict(answer["turn"])


@workflow.defn(name=WORKFLOW)
class LoopwiseRun:
    """Runs the target a run was started with (``start``: spec, input, model, options)."""

    def __init__(self) -> None:
        self._events: list[Event] = []
        self._book = Book(workflow.info().workflow_id)
        self._judged = 0
        self._flight = _Flight()
        self._mark: int | None = None
        self._limit = 10_000

    @workflow.run
    async def run(self, start: dict[str, Any]) -> Mapping[str, Any]:
        """Run to the end, pausing for decisions as often as the run asks for them; its
        :class:`~.messages.RunSummary`. ``start`` is as :meth:`~.store.TemporalStore.start`
        wrote it. Both annotations say "JSON as sent": Temporal's converter reads them at
        run time, and cannot resolve the recursive JSON alias a TypedDict's fields use."""
        timeout = timedelta(seconds=float(start.get("activity_timeout", 300.0)))
        # The target's module is loaded once per worker process, as plain Python, first
        # by a local activity (outside workflow code: an import may take longer than a
        # workflow task may), then here from the import cache.
        loaded: Declared | None = await workflow.execute_local_activity(
            "loopwise.load",
            {"spec": start["spec"], "model": start.get("model")},
            start_to_close_timeout=timeout,
        )
        declared: Declared = loaded or {}
        if "error" in declared:
            return self._unloaded(str(declared["error"]))
        self._limit = int(start.get("continue_after", 10_000))
        carried: Carried | None = start.get("carried")
        if carried:
            self._events = [event_of(e) for e in carried["events"]]
            self._book = Book.from_dicts(self._book.run_id, carried["approvals"])
        with workflow.unsafe.imports_passed_through(), workflow.unsafe.sandbox_unrestricted():
            target = load_target(start["spec"]).step
        limits = start.get("options", {})
        model = start.get("model")
        opts = RunOptions(
            model=_EngineModel(model, start["spec"], timeout, declared, self._long)
            if model
            else None,
            run_id=workflow.info().workflow_id,
            budget=Budget(**limits.get("budget", {})),
            max_steps=limits.get("max_steps"),
            sinks=(self,),
            approvals=StoreApprovals(self._book),
            clock=workflow.time,
        )
        given = typed_input(target, start.get("input"))
        ctx = self._context(target, opts, start["spec"], timeout)
        if carried:
            ctx.restore(list(self._events))
            ctx.started_at -= float(carried.get("wall_seconds", 0.0))
            ctx.emit(EventType.RUN_RESUMED, {"target": target.name, "continued_as_new": True})
        result = await self._execute(target, given, ctx, start)
        while result.status is Status.AWAITING_APPROVAL:
            self._publish(result)
            await workflow.wait_condition(lambda: not self._book.pending(None))
            ctx = self._context(target, opts, start["spec"], timeout)
            ctx.restore(list(self._events))
            # Wall time goes on from where the run paused (max_seconds stays per run, as a
            # resumed local run's): the wait for a person does not count.
            ctx.started_at -= result.usage.wall_seconds
            ctx.emit(EventType.RUN_RESUMED, self._resumed(target, result, opts))
            result = await self._execute(target, given, ctx, start)
        self._publish(result)
        return self._summary(result)

    async def _execute(
        self, target: Step, given: object, ctx: Context, start: Mapping[str, object]
    ) -> RunResult:
        """Run on in ``ctx``; once the history is long, continue as a new workflow run that
        carries the log (and the approvals) up to the model call it stopped before."""
        try:
            return await execute(target, given, ctx)
        except _Rollover:
            assert self._mark is not None  # set by the check that raised it
            del self._events[self._mark :]  # the run_finished its stop logged
            carried: Carried = {
                "events": [e.to_dict() for e in self._events],
                "approvals": self._book.to_dicts(),
                "wall_seconds": ctx.usage.wall_seconds,
            }
            workflow.continue_as_new({**start, "carried": carried})

    def _long(self) -> bool:
        """Whether the run continues as a new workflow run now: its history is long and
        none of its activities is in flight."""
        info = workflow.info()
        long = (
            info.get_current_history_length() >= self._limit or info.is_continue_as_new_suggested()
        )
        if long and self._flight.n == 0:
            self._mark = len(self._events)
            return True
        return False

    def _unloaded(self, why: str) -> RunSummary:
        """A run whose target or model cannot be made on the worker: it ends ``error``."""
        ended: RunSummary = {
            "status": str(Status.ERROR),
            "detail": why,
            "output": None,
            "events": [],
        }
        workflow.upsert_memo(
            {MEMO_KEY: {**(workflow.memo_value(MEMO_KEY, default={}) or {}), **ended}}
        )
        return ended

    def _context(self, target: Step, opts: RunOptions, spec: str, timeout: timedelta) -> Context:
        ctx = new_context(target, opts)
        ctx.offload = lambda work: self._offload(work, spec, timeout)
        return ctx

    def _resumed(self, target: Step, paused: RunResult, opts: RunOptions) -> JSONObject:
        decided = self._book.approvals(self._book.run_id)
        return {
            "target": target.name,
            "after_seq": self._events[-1].seq if self._events else 0,
            "from_status": str(paused.status),
            "model": model_name(opts.model),
            "decisions": [a.to_dict() for a in decided if a.status != "pending"],
        }

    async def _offload(self, work: Work, spec: str, timeout: timedelta) -> object:
        if work.kind == "judgement":
            return await self._judge(work, spec, timeout)
        self._flight.n += 1
        try:
            answer = await self._tool(work, spec, timeout)
        finally:
            self._flight.n -= 1
        return _returned(answer)

    async def _tool(self, work: Work, spec: str, timeout: timedelta) -> ToolAnswer:
        answer: ToolAnswer = await workflow.execute_activity(
            "loopwise.tool",
            {
                "spec": spec,
                "tool": work.tool,
                "args": work.args,
                "key": work.key,
                "run_id": workflow.info().workflow_id,
                "step": work.step,
            },
            start_to_close_timeout=timeout,
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
        )
        return answer

    async def _judge(
        self, work: Work, spec: str, timeout: timedelta
    ) -> Approved | Denied | Escalate:
        """A policy's judgement as a local activity: done by this worker process (where the
        policy is, with the plan it judges), its verdict kept in the history."""
        self._judged += 1
        self._flight.n += 1
        token = f"{workflow.info().workflow_id}/{workflow.info().run_id}/{self._judged}"
        remember(token, work)
        try:
            verdict: JudgeAnswer = await workflow.execute_local_activity(
                "loopwise.judge",
                {"token": token, "spec": spec, "run_id": workflow.info().workflow_id},
                start_to_close_timeout=timeout,
            )
        finally:
            forget(token)
            self._flight.n -= 1
        return _verdict(verdict)

    def record(self, run_id: str, event: Event) -> None:
        """Keep an event (the run's log lives in the workflow)."""
        self._events.append(event)
        self._book.note(event)

    def record_many(self, run_id: str, events: list[Event]) -> None:
        """Keep several events at once."""
        for event in events:
            self.record(run_id, event)

    @workflow.signal(name=DECIDE_SIGNAL)
    def decide(self, decision: dict[str, Any]) -> None:
        """A person's decision (a :class:`~.messages.Decision`, as JSON: Temporal's converter
        reads this annotation); the first one on an approval counts."""
        self._book.apply(decision)

    @workflow.query(name=PENDING_QUERY)
    def pending(self) -> list[dict[str, Any]]:
        """The run's undecided approvals (``dict[str, Any]``: Temporal's converter reads
        a handler's annotations at run time, and cannot resolve the recursive JSON alias)."""
        return [a.to_dict() for a in self._book.pending(None)]

    @workflow.query(name=EVENTS_QUERY)
    def events(self) -> list[dict[str, Any]]:
        """The run's log so far (``dict[str, Any]``, as :meth:`pending`)."""
        return [e.to_dict() for e in self._events]

    def _publish(self, result: RunResult) -> None:
        """What a client reads without a worker: status, approvals, the log (when short)."""
        log = [e.to_dict() for e in self._events]
        shown = log if len(json.dumps(log, default=str)) <= _MEMO_EVENTS_LIMIT else None
        workflow.upsert_memo(
            {
                MEMO_KEY: {
                    **(workflow.memo_value(MEMO_KEY, default={}) or {}),
                    **self._summary(result, events=shown),
                    "approvals": self._book.to_dicts(),
                    "updated_at": workflow.now().isoformat(),
                }
            }
        )

    def _summary(
        self, result: RunResult, events: list[JSONObject] | EllipsisType | None = ...
    ) -> RunSummary:
        return {
            "status": str(result.status),
            "detail": result.detail,
            "output": jsonable(result.output),
            "usage": result.usage.to_dict(),
            "events": [e.to_dict() for e in self._events] if events is ... else events,
        }


def _returned(answer: ToolAnswer) -> JSONValue:
    """What a tool activity answered, as the tool's own call would have ended."""
    if "value" in answer:
        return answer["value"]
    if "halt" in answer:
        raise Halt(Status(answer["halt"]), str(answer.get("detail") or ""))
    if answer.get("timeout"):
        raise TimeoutError(answer["message"])
    raised = type(str(answer.get("raised") or "Exception"), (Exception,), {})
    raise raised(answer.get("message", ""))


def _verdict(data: JudgeAnswer) -> Approved | Denied | Escalate:
    kind = data.get("verdict")
    if kind == "approved":
        return Approved(by=str(data.get("by") or "policy"), reason=data.get("reason"))
    if kind == "escalate":
        return Escalate(str(data.get("reason") or "the policy asks a human to decide"))
    return Denied(str(data.get("reason") or "denied"), by=str(data.get("by") or "policy"))
