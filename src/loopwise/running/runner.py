"""Running with the store: :func:`run`/:func:`arun` record, :func:`resume` continues.

These are the ``loopwise.run``/``loopwise.arun``/``loopwise.resume`` users call: the one
way to start or continue a run. They run the core (:func:`loopwise.core.execute.execute`, which
knows no store) with the run store as an event sink; all take a
:class:`~loopwise.core.options.RunOptions` and its fields as keyword arguments:

* every run is recorded in the default store (``$LOOPWISE_STORE`` or
  ``.loopwise/runs.db``) unless ``store=None`` is passed (then nothing is written);
  ``store=`` also takes a path or any :class:`~loopwise.store.base.RunStore`;
* ``spec=`` records how to load the target again (``path.py:name``), which a resume in
  another process needs; the CLI passes it, and without it the step's import spec
  (``package.module:name``) is found and recorded when the step is bound to a name in an
  importable module (:func:`~loopwise.running.targets.spec_of`);
* human gates with no interactive handler pause the run durably: it ends
  ``awaiting_approval`` and :func:`resume` continues it, in any later process, once every
  pending approval is decided (``loopwise approve``/``deny`` or
  :meth:`~loopwise.store.sql.SQLStore.decide`).

**Resume** reloads the run (target, input, model name, limits), replays its journal —
recorded model turns are not sent again, recorded tool results are not run again —
applies the decided approvals and continues the same run id, appending ``run_resumed``
and then new events after the last ``seq``. A run that ended ``error`` (a model API
failure, a step that raised) or ``cancelled`` continues the same way once the cause is
fixed. An approved call runs once (with its
idempotency key, run id + call id); a denied one answers the model with an error result
saying it was denied and the run goes on (a hybrid ends ``denied`` instead). Only runs
that are ``awaiting_approval``, ``error``, ``cancelled`` or were interrupted (still
``running`` in the store, e.g. the process was killed) continue; resuming a run that
finished otherwise returns it unchanged (:func:`loopwise.running.stored.stored_result`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator, Mapping
from contextlib import AsyncExitStack, contextmanager
from dataclasses import replace
from typing import Any, Unpack

from loopwise.architectures.history import History, PriorRun, check_conversation_id
from loopwise.core.events import EventType, jsonable
from loopwise.core.execute import execute, new_context, new_run_id
from loopwise.core.jsontypes import JSONObject
from loopwise.core.loops import blocking, closing_model
from loopwise.core.options import (
    ResumeOverrides,
    RunOptions,
    RunOverrides,
    check_options,
    check_run_id,
    merge_options,
)
from loopwise.core.replay import journaled_turn
from loopwise.core.result import RunResult
from loopwise.core.shape import Kind, kind_of
from loopwise.core.step import Context, Step, check_step
from loopwise.core.usage import Budget
from loopwise.errors import ConfigError, ConversationError
from loopwise.models.port import Model, model_member, model_name
from loopwise.models.scripted import ScriptedModel
from loopwise.running.conventions import close_model, module_deps, target_and_model
from loopwise.running.live import owner_alive, owner_id, running_here
from loopwise.running.store_approvals import StoreApprovals
from loopwise.running.stored import stored_result, typed_input
from loopwise.running.targets import calling_modules, load_target, spec_of
from loopwise.store.base import (
    QUEUED,
    RESUMABLE,
    RunLeases,
    RunStore,
    StoredRun,
)
from loopwise.store.open import DEFAULT, StoreLike, shared_store

__all__ = [
    "ResumeKeywords",
    "aresume",
    "arun",
    "enqueue",
    "execute_claimed",
    "resume",
    "run",
    "run_limits",
]


def _store_of(store: StoreLike) -> RunStore | None:
    """The store to use: an object as given (``None``: no store), else this process's
    store for ``DEFAULT``/a path/a URL (opened once, kept open across runs)."""
    if store is DEFAULT:
        return shared_store(None)
    if isinstance(store, str | os.PathLike):
        return shared_store(store)
    opened: RunStore | None = store
    return opened


def _new_context(target: Step, opts: RunOptions) -> Context:
    """The run's context, a model given by name resolved here (``"gpt-4o-mini"``,
    ``"scripted"``): the kernel takes models, not names."""
    if isinstance(opts.model, str):
        from loopwise.models.openai import resolve_model  # the SDK loads only when named

        opts = replace(opts, model=resolve_model(opts.model))
    return new_context(target, opts)


def run_limits(budget: Budget, max_steps: int | None) -> JSONObject:
    """The limits a run records to start or resume with (a stored run's ``options``)."""
    return {
        "budget": {
            "max_tokens": budget.max_tokens,
            "max_cost_usd": budget.max_cost_usd,
            "max_seconds": budget.max_seconds,
        },
        "max_steps": max_steps,
    }


_OWN_KEYWORDS = "store, spec, eval_id"


async def arun(
    target: Step,
    input: object = None,
    options: RunOptions | None = None,
    *,
    store: StoreLike = DEFAULT,
    spec: str | None = None,
    eval_id: str | None = None,
    **overrides: Unpack[RunOverrides],
) -> RunResult:
    """Run ``target`` on ``input`` and record it in ``store`` (see the module docs).

    ``options`` is a :class:`~loopwise.core.options.RunOptions`; keyword arguments set its fields
    (``model=``, ``budget=``, ``max_steps=``, ``sinks=``, ``approvals=``...). ``store=None``
    records nothing. ``spec`` is the loadable target (``path.py:name``) a resume in
    another process needs. ``eval_id`` marks the run as a measurement of that eval
    (``loopwise eval`` sets it; stored in the run's options as ``eval``): it is kept out of
    ``pending``, the inbox and the workers' queue. Every guardrail ends in the result's
    ``status``; configuration
    mistakes raise :class:`ConfigError`. Cancelling the caller (``asyncio.wait_for``, a
    task group) records the run ``cancelled``, then raises ``CancelledError`` as usual.
    """
    opts = merge_options(options, overrides, also=_OWN_KEYWORDS)
    if opts.run_id is not None:
        check_run_id(opts.run_id)
    step = check_step(target)
    st = _store_of(store)
    conversation = _conversation(opts.conversation, step, st)
    if st is not None:
        opts = replace(opts, sinks=(*opts.sinks, st), approvals=StoreApprovals(st, opts.approvals))
    ctx = _new_context(step, opts)
    if st is not None:
        st.create_run(
            ctx.run_id,
            target=step.name,
            spec=spec or spec_of(step, callers=calling_modules()),
            input=jsonable(input),
            model=model_name(ctx.model),
            options={
                **run_limits(ctx.budget, ctx.max_steps),
                **_marked(eval_id),
                **(model_member(ctx.model, "speaks") or {}),  # what a resume speaks
                **_for_whom(ctx.safety_identifier),
            },
            owner=owner_id(),
            conversation=conversation,
        )
        _join(st, ctx, st.get_run(ctx.run_id) if conversation else None)
    work = _execute(st, step, input, ctx)
    if isinstance(opts.model, str):
        # A model resolved from its name belongs to this run: release it with the run.
        work = closing_model(work, ctx.model)
    return await work


def _for_whom(safety_identifier: str | None) -> dict[str, str]:
    """The run's end user as recorded (its resumes send the same ``safety_identifier``)."""
    return {} if safety_identifier is None else {"safety_identifier": safety_identifier}


def _marked(eval_id: str | None) -> dict[str, str]:
    """What marks an eval's run in the store (see :attr:`StoredRun.eval_id`)."""
    return {} if eval_id is None else {"eval": str(eval_id)}


def _conversation(conversation: object, target: Step, st: RunStore | None) -> str | None:
    """The checked conversation id a run joins (``None``: the run stands alone)."""
    if conversation is None:
        return None
    checked = check_conversation_id(conversation)
    if st is None:
        raise ConversationError(
            f"conversation {conversation!r}: a conversation lives in a run store; drop store=None",
            conversation=checked,
            code="no-store",
        )
    if kind_of(target) is not Kind.AGENT:
        raise ConversationError(
            f"conversation {conversation!r}: {target.name!r} is a {kind_of(target)}, and only "
            "an agent continues a conversation (give a workflow the earlier exchange as part "
            "of its input instead)",
            conversation=checked,
            code="not-an-agent",
        )
    return checked


def _join(st: RunStore, ctx: Context, row: StoredRun | None) -> None:
    """Give a run of a conversation (``row``) its history: the earlier runs' messages,
    and their taint. A store that fails here marks the run failed (it never started)."""
    if row is None or row.conversation is None:
        return
    try:
        history = History(
            conversation=row.conversation,
            runs=tuple(
                PriorRun(
                    run_id=r.run_id,
                    status=r.status,
                    input=r.input,
                    events=tuple(st.events(r.run_id)),
                )
                for r in st.conversation_runs(row.conversation)
                if r.turn is not None and row.turn is not None and r.turn < row.turn
            ),
        )
    except Exception as e:
        st.mark_failed(row.run_id, f"{type(e).__name__}: {e}")
        raise
    ctx.history = history
    ctx.journal.inherit_taint(history.taint)


async def _execute(st: RunStore | None, target: Step, input: object, ctx: Context) -> RunResult:
    """Run in ``ctx``, holding the run's lease while it runs here; a raise marks it failed."""
    with running_here(ctx.run_id), _holding(st, ctx.run_id):
        try:
            return await execute(target, input, ctx)
        except Exception as e:
            if st is not None:
                # A configuration mistake raised mid-run: the stored run must not look alive.
                st.mark_failed(ctx.run_id, f"{type(e).__name__}: {e}")
            raise


@contextmanager
def _holding(st: RunLeases | None, run_id: str) -> Iterator[None]:
    if st is None:
        yield
        return
    with st.hold(run_id, owner_id()):
        yield


def enqueue(
    spec: str,
    input: object = None,
    *,
    model: str | None = None,
    store: StoreLike = DEFAULT,
    budget: Budget | None = None,
    max_steps: int | None = None,
    run_id: str | None = None,
    conversation: str | None = None,
    speaks: JSONObject | None = None,
    safety_identifier: str | None = None,
) -> str:
    """Record a run of the target at ``spec`` (``path.py:name``) as ``queued``; its run id.

    Nothing runs here: a ``loopwise worker`` on the same store starts queued runs in
    arrival order, with ``model`` (a name the worker resolves), the API and store setting
    ``speaks`` records (a model's ``speaks``: ``{"api": "responses", "api_store": True}``)
    and these limits, for the end user ``safety_identifier`` names (as ``run``'s); a run
    of a ``conversation`` continues its history there. Raises
    :class:`~loopwise.errors.TargetError` when ``spec`` cannot be loaded here, and
    :class:`~loopwise.errors.ConversationError` when the conversation cannot take it.
    """
    if run_id is not None:
        check_run_id(run_id)
    check_options(RunOptions(safety_identifier=safety_identifier))
    st = _store_of(store)
    if st is None:
        raise ConfigError("enqueue needs a run store (store=None records nothing)")
    target = load_target(spec).step
    conversation = _conversation(conversation, target, st)
    run_id = run_id or new_run_id()
    st.create_run(
        run_id,
        target=target.name,
        spec=spec,
        input=jsonable(input),
        model=model,
        options={
            **run_limits(budget or Budget(), max_steps),
            **_spoken(speaks),
            **_for_whom(safety_identifier),
        },
        queued=True,
        conversation=conversation,
    )
    return run_id


def _spoken(speaks: Mapping[str, object] | None) -> dict[str, object]:
    """What a queued run records of its model's API (checked: a worker makes the model)."""
    if not speaks:
        return {}
    from loopwise.models.openai import api_of  # the SDK loads only when an API is named

    return {"api": api_of(str(speaks.get("api"))), "api_store": bool(speaks.get("api_store"))}


async def execute_claimed(st: RunStore, row: StoredRun) -> RunResult:
    """Run a run a worker claimed (:meth:`~loopwise.store.base.RunStore.claim_next`): start a
    queued run, or continue a paused or abandoned one, with the model it recorded.

    A run whose target or model cannot be loaded here is marked ``error``. A run whose own
    code calls ``sys.exit()`` (a step, a tool, the module's ``make_deps()``) or raises
    another ``BaseException`` ends ``error`` with it in its detail and is returned: the
    worker running it beside others goes on. ``KeyboardInterrupt`` still reaches the
    caller (the person stopping the worker). The claim's lease is renewed from the start,
    loading the target included.
    """
    with st.hold(row.run_id, owner_id()):
        try:
            return await _execute_claimed(st, row)
        except (Exception, KeyboardInterrupt, asyncio.CancelledError):
            raise  # the run's own error (recorded), or the worker's own stop
        except BaseException as e:
            # A run's sys.exit() (or a library's BaseException) is that run's end, not the
            # worker's (nor its other runs'); left `running`, no worker would take it again.
            detail = f"{type(e).__name__}: {e}"
            if st.get_run(row.run_id).status == "running":
                st.mark_failed(row.run_id, detail)
            return stored_result(st, st.get_run(row.run_id))


async def _execute_claimed(st: RunStore, row: StoredRun) -> RunResult:
    async with AsyncExitStack() as scope:  # an eval's sandbox, left when the run ends
        return await _execute_claimed_in(st, row, scope)


async def _execute_claimed_in(st: RunStore, row: StoredRun, scope: AsyncExitStack) -> RunResult:
    try:
        target, chosen = target_and_model(row, None, None)
        deps = await module_deps(row, scope)
    except Exception as e:
        # Left `running`, the run would stay this worker's: no worker takes it again.
        st.mark_failed(row.run_id, f"{type(e).__name__}: {e}")
        raise
    try:
        options = RunOptions(model=chosen, sinks=(st,), approvals=StoreApprovals(st), deps=deps)
        if row.status != QUEUED:
            return await _continue(st, row, target, options)
        limits = row.options
        ctx = _new_context(
            target,
            replace(
                options,
                budget=Budget(**limits.get("budget", {})),
                max_steps=limits.get("max_steps"),
                safety_identifier=limits.get("safety_identifier"),
                run_id=row.run_id,
            ),
        )
        _join(st, ctx, row)
        return await _execute(st, target, typed_input(target, row.input), ctx)
    finally:
        await close_model(chosen)


async def aresume(
    run_id: str,
    options: RunOptions | None = None,
    *,
    step: Step | None = None,
    store: StoreLike = DEFAULT,
    force: bool = False,
    structured_mode: str | None = None,
    api: str | None = None,
    **overrides: Unpack[ResumeOverrides],
) -> RunResult:
    """Continue a paused or interrupted run (see the module docs).

    ``options`` and keyword arguments are the :class:`~loopwise.core.options.RunOptions` of
    :func:`arun`: ``model``, ``max_steps`` and ``budget`` override what the run started
    with; ``sinks`` receive the new events besides the store; ``approvals`` answers the
    gates still undecided. ``step`` is the target when resuming in-process (otherwise it
    is loaded from the recorded spec). A ``running`` run is taken over only when the
    process that ran it is gone; ``force=True`` takes it anyway (for a process on another
    machine known to be dead). ``structured_mode`` pins the structured-output rung of a
    model given or recorded by name (as ``--structured-mode``; default
    ``$LOOPWISE_STRUCTURED_MODE``) and ``api`` the OpenAI API it speaks (as ``--api``;
    default ``$LOOPWISE_API``, else Chat Completions: resume with the API the run began
    with, whose turns its journal holds).
    Raises :class:`ConfigError` for an unknown run, a run still running elsewhere, a run
    with no recorded spec and no ``step``, or a ``run_id``/``replay`` option (a resume
    continues its own run from its own journal).
    """
    opts = _resume_options(run_id, options, overrides)
    st = _store_of(store)
    if st is None:
        raise ConfigError("resume needs a run store (store=None records nothing)")
    row = st.get_run(run_id)
    waiting = st.pending(run_id)
    if waiting and row.status == "running":
        row = _settle_paused(st, row, len(waiting), force=force)
    if row.status not in RESUMABLE or waiting:
        return stored_result(st, row, pending=waiting)
    given = opts.model
    target, chosen = target_and_model(row, step, given, structured_mode, api)
    async with AsyncExitStack() as scope:  # an eval's sandbox, left when the run ends
        try:
            if opts.deps is None and step is None:
                opts = replace(opts, deps=await module_deps(row, scope))
            alive = (lambda owner: False) if force else owner_alive(run_id)
            if not st.claim(run_id, owner_id(), alive=alive):
                # Another process took it (or decided it) between our read and our claim.
                return stored_result(st, st.get_run(run_id), pending=st.pending(run_id))
            opts = replace(
                opts,
                model=chosen,
                sinks=(*opts.sinks, st),
                approvals=StoreApprovals(st, opts.approvals),
            )
            return await _continue(st, row, target, opts)
        finally:
            if not isinstance(given, Model):
                await close_model(chosen)


async def _continue(st: RunStore, row: StoredRun, target: Step, opts: RunOptions) -> RunResult:
    """Go on with a claimed run after its last recorded event."""
    ctx = _resumed_context(st, row, target, opts)
    return await _execute(st, target, typed_input(target, row.input), ctx)


def _resume_options(
    run_id: str, options: RunOptions | None, overrides: Mapping[str, Any]
) -> RunOptions:
    """The options of a resume; the ones that would start another run raise."""
    opts = merge_options(options, overrides, also="step, store, force, structured_mode, api")
    if opts.run_id not in (None, run_id):
        raise ConfigError(
            f"resume continues run {run_id!r}: drop run_id={opts.run_id!r} from its options",
            name="run_id",
        )
    if opts.replay:
        raise ConfigError("resume replays the run's own journal; drop replay=", name="replay")
    if opts.conversation is not None:
        raise ConfigError(
            f"resume continues run {run_id!r} in the conversation it started in: drop "
            "conversation=",
            name="conversation",
        )
    return opts


def _settle_paused(st: RunStore, row: StoredRun, waiting: int, *, force: bool) -> StoredRun:
    """A run its process left ``running`` after asking people (killed before it could
    record the pause) is stored as what it is: ``awaiting_approval``."""
    owner = row.owner
    if owner and not force and owner_alive(row.run_id)(owner):
        return row  # still running there: that process records its own pause
    st.mark_paused(row.run_id, f"{waiting} approval(s) still undecided")
    return st.get_run(row.run_id)


def _resumed_context(st: RunStore, row: StoredRun, target: Step, overrides: RunOptions) -> Context:
    """The run's context rebuilt: its limits, its journal, its log so far, ``run_resumed``."""
    run_id, limits = row.run_id, row.options
    opts = replace(
        overrides,
        budget=Budget(**limits.get("budget", {})).merged(overrides.budget),
        max_steps=limits.get("max_steps") if overrides.max_steps is None else overrides.max_steps,
        safety_identifier=overrides.safety_identifier or limits.get("safety_identifier"),
        run_id=run_id,
        replay=st.journal(run_id),
    )
    ctx = _new_context(target, opts)
    _join(st, ctx, row)  # before the run's own log: an earlier run's taint came first
    events = st.events(run_id)
    ctx.restore(events)
    if isinstance(opts.model, ScriptedModel):
        # A list script starts at its first entry; the journal answers the turns it gave.
        opts.model.resumed(
            [
                journaled_turn(e.data, run_id=run_id, key=str(e.data.get("key")))
                for e in events
                if e.type is EventType.MODEL_CALL and "turn" in e.data
            ]
        )
    # Wall time goes on from where the run stopped, so max_seconds stays per run.
    ctx.started_at -= float((row.usage or {}).get("wall_seconds", 0.0))
    resumed: JSONObject = {"target": target.name}
    if events and "trace" in events[0].data:
        # The trace context a tracing sink recorded at the start: the resume joins it.
        resumed["trace"] = events[0].data["trace"]
    ctx.emit(
        EventType.RUN_RESUMED,
        {
            **resumed,
            "after_seq": events[-1].seq if events else 0,
            "from_status": row.status,
            "model": model_name(opts.model),
            "decisions": [a.to_dict() for a in st.approvals(run_id) if a.status != "pending"],
        },
    )
    return ctx


def run(
    target: Step,
    input: object = None,
    options: RunOptions | None = None,
    *,
    store: StoreLike = DEFAULT,
    spec: str | None = None,
    **overrides: Unpack[RunOverrides],
) -> RunResult:
    """The sync wrapper of :func:`arun` (use ``arun`` inside an event loop).

    Each call behaves as ``asyncio.run`` (:mod:`loopwise.core.loops`), so the model's
    connections are released at the end of the run (it reopens them on its next use).
    """
    model = overrides.get("model", options.model if options else None)
    if spec is None and store is not None:
        # Here, not in arun: under the fresh event loop the caller's frames are gone.
        spec = spec_of(target, callers=calling_modules())
    return blocking(
        arun(target, input, options, store=store, spec=spec, **overrides), release=(model,)
    )


class ResumeKeywords(ResumeOverrides, total=False):
    """The keyword arguments of :func:`resume`: :func:`aresume`'s own and the run options."""

    step: Step | None
    store: StoreLike
    force: bool
    structured_mode: str | None
    api: str | None


def resume(
    run_id: str, options: RunOptions | None = None, **keywords: Unpack[ResumeKeywords]
) -> RunResult:
    """The sync wrapper of :func:`aresume`, with its arguments (``step=``, ``store=``,
    ``force=``, ``structured_mode=``, ``api=`` and the run options).

    A model given here has its connections released when the call ends, as :func:`run`'s.
    """
    model = keywords.get("model", options.model if options else None)
    return blocking(aresume(run_id, options, **keywords), release=(model,))
