"""A run in the kernel: its context made, its target executed, how it ended recorded.

:func:`new_context` turns :class:`~loopwise.core.options.RunOptions` into the run's
:class:`~loopwise.core.step.Context`; :func:`execute` runs a step in it and turns how it
ended (an output, a :class:`~loopwise.core.result.Halt`, a model API error, a cancellation,
a mistake) into a :class:`~loopwise.core.result.RunResult`, always ending the run's log with
``run_finished`` or ``run_paused``. :func:`running_context` is the run the calling code is
in. Starting a run from options, a store or the sync wrapper is
:mod:`loopwise.running.runner`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
from collections.abc import Awaitable
from typing import Any, TypeVar

from loopwise.core.events import EventType, Status, jsonable, sink_member
from loopwise.core.journal import Journal
from loopwise.core.jsontypes import JSONObject
from loopwise.core.members import step_member
from loopwise.core.options import RunOptions, check_options
from loopwise.core.result import Halt, RunResult
from loopwise.core.step import Context, Step
from loopwise.core.usage import Budget
from loopwise.errors import ConfigError, ContextLengthExceeded, LoopwiseError, ModelAPIError

__all__ = ["execute", "new_context", "new_run_id", "running_context"]

T = TypeVar("T")


def new_run_id() -> str:
    """A fresh run id: 12 random hex digits, the form ``uuid4().hex[:12]`` gave (a uuid4's
    version bits come after its first 12 digits)."""
    return os.urandom(6).hex()


def new_context(target: Step, opts: RunOptions) -> Context:
    """The context a run of ``target`` starts with (a new run, or a resumed one)."""
    check_options(opts)
    model = opts.model
    if isinstance(model, str):
        # The kernel knows the model port, not the adapters that names resolve to.
        raise ConfigError(
            f"model {model!r} is a name: the runner resolves names "
            "(loopwise.resolve_model) before a context is made",
            name="model",
        )
    own_budget = step_member(target, "budget")
    if own_budget is not None and not isinstance(own_budget, Budget):
        # A budget the run would silently ignore is worse than no run.
        raise ConfigError(
            f"step {target.name!r}: budget must be a loopwise.Budget, not "
            f"{type(own_budget).__name__}",
            name="budget",
        )
    budget = (own_budget or Budget()).merged(opts.budget)
    return Context(
        run_id=opts.run_id or new_run_id(),
        model=model,
        budget=budget,
        pricing=opts.pricing,
        max_steps=opts.max_steps,
        approvals=opts.approvals,
        sinks=opts.sinks,
        _pacers=tuple(p for s in opts.sinks if (p := sink_member(s, "pace")) is not None),
        _watchers=tuple(
            w for s in opts.sinks if (w := sink_member(s, "before_effect")) is not None
        ),
        journal=Journal(opts.replay),
        clock=opts.clock,
        stream=opts.stream,
        started_at=opts.clock(),
        safety_identifier=opts.safety_identifier,
        _deps=opts.deps,
    )


async def execute(target: Step, input: object, ctx: Context) -> RunResult:
    """Run ``target`` in a prepared context and turn how it ended into a :class:`RunResult`."""
    if not ctx.events:
        ctx.emit(EventType.RUN_STARTED, {"target": target.name, "input": jsonable(input)})
    running = _RUNNING.set(ctx)
    try:
        return await _execute(target, input, ctx)
    finally:
        _RUNNING.reset(running)


_RUNNING: contextvars.ContextVar[Context] = contextvars.ContextVar("loopwise_run")


def running_context() -> Context | None:
    """The context of the run this code runs in (``None`` outside any run): how a gate's
    policy gets it (a policy with a ``ctx`` parameter)."""
    return _RUNNING.get(None)


async def _execute(target: Step, input: object, ctx: Context) -> RunResult:
    status, output, detail, pending = Status.COMPLETED, None, None, []
    extra: JSONObject = {}
    try:
        output = await _closing_resources(ctx.run_step(target, input), ctx)
    except Halt as halt:
        status, output, detail = halt.status, halt.output, halt.detail
        pending = list(halt.pending)
    except ContextLengthExceeded as e:
        # A request too long for the model's context is a limit reached, not an outage.
        status, detail = Status.BUDGET_EXCEEDED, str(e)
        extra.update(error_type=e.code, sent_tokens=e.sent_tokens)
        if e.body:
            extra["error_body"] = e.body
    except ModelAPIError as e:
        status, detail = Status.ERROR, str(e)
        extra["error_type"] = e.code
        if e.body:  # the server's whole error body: kept for the audit, not in the detail line
            extra["error_body"] = e.body
    except asyncio.CancelledError:
        status, detail = Status.CANCELLED, "the run was cancelled"
        _finish(ctx, status, detail, output)
        task = asyncio.current_task()
        if task is None or task.cancelling():
            # The caller's cancellation (a timeout, a task group, a shutdown) is theirs:
            # recorded as the run's status, then passed on to them.
            raise
        return _result(ctx, status, output, detail, pending)
    except (ConfigError, KeyboardInterrupt, SystemExit) as e:
        # A mistake raised mid-run (a ToolError from call_tools) still ends the run's log
        # with run_finished, so its sinks close what they opened, then reaches the caller.
        _finish(ctx, Status.ERROR, f"{type(e).__name__}: {e}", output, _error_type(e))
        raise
    except (LoopwiseError, Exception) as e:
        status, detail = Status.ERROR, f"{type(e).__name__}: {e}"
        extra = _error_type(e)
    except BaseException as e:
        # Neither an Exception nor an exit (a library's own BaseException, GeneratorExit):
        # the run's log still ends, then it reaches the caller.
        _finish(ctx, Status.ERROR, f"{type(e).__name__}: {e}", output, _error_type(e))
        raise
    _finish(ctx, status, detail, output, extra)
    return _result(ctx, status, output, detail, pending)


def _error_type(e: BaseException) -> JSONObject:
    """``error_type`` of a run that ended ``error``: its code, free of the message's text
    (which may quote model or user input; a tracing sink keeps only this)."""
    return {"error_type": e.code if isinstance(e, LoopwiseError) else type(e).__name__}


def _result(
    ctx: Context, status: Status, output: object, detail: str | None, pending: list[Any]
) -> RunResult:
    return RunResult(
        run_id=ctx.run_id,
        status=status,
        output=output,
        usage=ctx.usage,
        steps=ctx.steps[0],
        events=ctx.events,
        detail=detail,
        pending=pending,
    )


def _finish(
    ctx: Context,
    status: Status,
    detail: str | None,
    output: object,
    extra: JSONObject | None = None,
) -> None:
    """The run's last event: ``run_paused`` when it waits for a person, else ``run_finished``
    (``extra`` adds fields, such as a failed model call's whole ``error_body``)."""
    ctx.elapsed()
    finished = (
        EventType.RUN_PAUSED if status is Status.AWAITING_APPROVAL else EventType.RUN_FINISHED
    )
    ctx.emit(
        finished,
        {
            "status": str(status),
            "detail": detail,
            "usage": ctx.usage.to_dict(),
            "output": jsonable(output),
            **(extra or {}),
        },
    )


async def _closing_resources(work: Awaitable[T], ctx: Context) -> T:
    """Await ``work``, then close what the run opened (:attr:`Context.resources`).

    A resource that fails to close does not change how the run ended.
    """
    try:
        return await work
    finally:
        while ctx.resources:
            _, resource = ctx.resources.popitem()
            with contextlib.suppress(Exception):
                await resource.aclose()
