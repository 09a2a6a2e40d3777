"""The one tool-call executor: validate → taint → gate → key → replay or run → record.

Every tool call on every path goes through :func:`execute`: an agent's turn, a hybrid's
plan action, a tool node of a workflow. Architectures decide *which* calls to make; only
this module makes them, in this order:

1. **replay** — a call whose result the run's journal holds is answered from it (the
   tool does not run again, the log does not grow);
2. **validate** — the tool must exist and the arguments must parse and pass the tool's
   argument model (its allow-lists). Arguments that cannot be read at all — not JSON,
   a 5,000-digit number, nesting deeper than :data:`~loopwise.tools.arguments.MAX_DEPTH` — are an
   ``ERROR:`` result like any invalid argument, never an exception that ends the run
   (a resumed run would replay the same turn and fail forever);
3. **once** — where the caller bounds it (``Call.once_in``: a hybrid's run, across its
   re-plans; a run of an agent, across its turns), a ``write``/``irreversible`` call
   whose tool and canonical arguments already took effect does not take effect again (it
   answers with the earlier result); the same call twice in one batch runs once;
4. **taint and gate** — :func:`loopwise.tools.gates.authorize_all` decides the batch: the
   gate's policy, a person (durable pause), and taint (after untrusted output, every
   ``write``/``irreversible`` call needs a person). The batch's gate requests are
   journaled together;
5. **run** — with ``ctx.idempotency_key`` (run id + call id) for effects, the tool's
   timeout, and the caller's output cap;
6. **record** — one ``tool_result`` event with the journal key. A result of a tool
   declared ``untrusted_output`` is flagged ``untrusted`` whatever it says (a value, the
   text of an exception, a truncated output): that text reached the model and taints the
   run.

Per batch at most ``max_calls`` run; the rest are answered with ``ERROR:`` results
without running, and the run's budget is checked before the batch's tools run.

The path is here whole; what it takes and gives (:class:`Call`, :class:`CallSettings`,
:class:`Outcome`) is :mod:`loopwise.tools.call_values`'s (re-exported here), the judgement
of a person's edit :mod:`loopwise.tools.edits`' and the text a call logs and returns
:mod:`loopwise.tools.call_text`'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pydantic import BaseModel

from loopwise.core.concurrency import concurrently
from loopwise.core.events import EventType, Status, jsonable
from loopwise.core.journal import Journal
from loopwise.core.jsontypes import JSONMapping, JSONObject
from loopwise.core.names import did_you_mean
from loopwise.core.result import Halt
from loopwise.core.step import Context
from loopwise.tools.arguments import ToolArgumentsError
from loopwise.tools.call_text import (
    call_event,
    readable_args,
    render_content,
    result_event,
    shortened,
    truncate,
)
from loopwise.tools.call_values import Call, CallSettings, CallStatus, Outcome
from loopwise.tools.edits import edit_data, edit_problem, judge_edit, judged_again, log_edit
from loopwise.tools.gates import Ask, authorize_all, pause
from loopwise.tools.tool import Arguments, Effect, Tool, require_gate
from loopwise.tools.verdicts import (
    Approved,
    Denied,
    Edited,
    Pending,
    Verdict,
    args_hash,
    denial_message,
    verdict_from_data,
)

__all__ = [
    "Call",
    "CallSettings",
    "CallStatus",
    "Outcome",
    "call_tools",
    "effect_id",
    "execute",
    "values_or_halt",
]


@dataclass(kw_only=True)
class _Ready:
    """A validated call waiting for its gate's verdict."""

    call: Call
    tool: Tool
    args: BaseModel
    ask: Ask
    verdict: Verdict | Pending | None = None
    judged_earlier: bool = False
    """Whether its gate decided before this batch and before any of the call was logged
    (a plan's steps, all authorized before its first action ran)."""


@dataclass(kw_only=True)
class _Batch:
    ctx: Context
    tools: Mapping[str, Tool]
    settings: CallSettings
    effects: set[str] = field(default_factory=set)


async def execute(
    ctx: Context,
    calls: Sequence[Call],
    tools: Mapping[str, Tool],
    settings: CallSettings | None = None,
) -> list[Outcome]:
    """Make ``calls`` (one batch: a model turn, a plan step) and return their outcomes in
    order. Calls whose gate waits for a person come back ``pending``: the caller pauses
    the run (:func:`loopwise.tools.gates.pause`) once it has what the others produced."""
    batch = _Batch(ctx=ctx, tools=tools, settings=settings or CallSettings())
    cap = batch.settings.max_calls
    admitted, excess = (calls, []) if cap is None else (calls[:cap], calls[cap:])
    slots = [_prepare(batch, c) for c in admitted]
    ready = [s for s in slots if isinstance(s, _Ready)]
    if ready:
        for slot, verdict in zip(ready, await authorize_all([r.ask for r in ready]), strict=True):
            slot.verdict = verdict
        ctx.check_budget()
    finished = await concurrently([_settled(_finish(batch, s)) for s in slots]) if slots else []
    paused = [f for f in finished if isinstance(f, Halt)]
    if paused:
        raise _paused_together(paused)
    outcomes = [f for f in finished if isinstance(f, Outcome)]
    return outcomes + _refuse_excess(batch, excess)


async def _settled(finishing: Awaitable[Outcome]) -> Outcome | Halt:
    """A call's outcome, or the pause it raised (a nested step waits for a person).

    A pause only stops the run for now, so the batch's other calls finish and are
    recorded first: cancelling an effect midway would not take back what it sent, only
    hide it, and the resumed run would make it again. A call that ends the run still
    cancels its siblings (nothing takes effect after the run has ended).
    """
    try:
        return await finishing
    except Halt as halt:
        if halt.status is not Status.AWAITING_APPROVAL:
            raise
        return halt


def _paused_together(halts: list[Halt]) -> Halt:
    if len(halts) == 1:
        return halts[0]
    pending = [p for h in halts for p in h.pending]
    names = ", ".join(f"{p.get('tool')} ({p.get('approval_id')})" for p in pending)
    detail = f"{len(pending)} call(s) await approval: {names}"
    return Halt(Status.AWAITING_APPROVAL, detail, output=halts[0].output, pending=pending)


async def call_tools(
    ctx: Context,
    calls: Sequence[tuple[Tool, Arguments]],
    *,
    once_in: str | None = None,
) -> list[Any]:
    """Make tool calls from code in a step (a workflow node) and return their values.

    ``calls`` are ``(tool, arguments)`` pairs, made as one batch through :func:`execute`:
    validated, gated (the batch's asks together), journaled and keyed like an agent's.
    Approval ids are the step's path and the tool's name (``flow/node/publish``; a second
    batch of the step adds ``@2``, a tool twice in a batch ``.i``). A call waiting for a
    person ends the run ``awaiting_approval``; resumed, the step runs again from its top
    and its calls that already ran are replayed, not repeated (so the step must decide
    its calls the same way again: code, not chance). A denial ends the run ``denied``, a
    failing tool ``tool_failed``, invalid arguments ``error``. ``once_in`` bounds "an effect
    at most once" (:class:`Call`): a ``write``/``irreversible`` call whose tool and
    arguments already took effect in that scope answers with the earlier result.

    Raises :class:`~loopwise.errors.ToolError` for an ``irreversible`` tool without a
    gate, as an agent, a hybrid and a workflow node refuse one.
    """
    for tool, _ in calls:
        fix = "give it one (@tool(effect='irreversible', gate=human())) before calling it"
        require_gate(tool, holder="call_tools: ", fix=fix)
    path = ctx.step_path
    n = ctx.journal.counted(path, "calls")
    names = [tool.name for tool, _ in calls]
    batch = []
    for i, (tool, args) in enumerate(calls, 1):
        bind = f"{path}/{tool.name}"
        if n > 1 or names.count(tool.name) > 1:
            bind += f"@{n}.{i}"
        batch.append(
            Call(
                name=tool.name,
                arguments=args,
                call_id=bind,
                bind_id=bind,
                key=Journal.key(path, "calls", n, i),
                once_in=once_in,
            )
        )
    tools = {tool.name: tool for tool, _ in calls}
    made = await execute(ctx, batch, tools, CallSettings(keep_value=True))
    return values_or_halt(made)


_ENDS: dict[CallStatus, Status] = {
    "denied": Status.DENIED,
    "failed": Status.TOOL_FAILED,
}


def values_or_halt(made: Sequence[Outcome]) -> list[Any]:
    """The values of calls made by code: every pending ask pauses the run (together); a
    denial, a failure or bad arguments end it (code has no model to read an error)."""
    waiting = [o.pending for o in made if o.pending is not None]
    if waiting:
        raise pause(waiting)
    for o in made:
        if o.status != "done":
            detail = f"{o.call.call_id}: {o.reason or o.content}"
            raise Halt(_ENDS.get(o.status, Status.ERROR), detail)
    return [o.value for o in made]


def _prepare(batch: _Batch, call: Call) -> Outcome | _Ready:
    """Replay, log and validate one call; a validated effect that already happened (or
    that the batch holds twice) is answered without asking its gate."""
    ctx = batch.ctx
    if call.counted:
        ctx.count_tool_call()
    found = batch.tools.get(call.name)
    recorded = ctx.journal.recall(call.key)
    if recorded is not None:
        ctx.journal.advance(recorded.get("counters"), run_id=ctx.run_id, record=call.key)
        return _replayed(call, recorded)
    parsed: BaseModel | ToolArgumentsError | None = None
    if found is not None:
        try:
            parsed = found.parse(call.arguments, strict=call.edited_by is not None)
        except ToolArgumentsError as e:
            parsed = e
    first_try = Journal.call_key(call.key) not in ctx.journal
    if first_try:  # logged before a pause or a crash: not twice
        _log_call(ctx, call, found, parsed)
    if found is None:
        names = ", ".join(sorted(batch.tools)) or "(none)"
        hint = did_you_mean(call.name, batch.tools)
        message = f"there is no tool named {call.name!r}{hint}; the tools are: {names}"
        return _record(batch, call, None, "unknown", message)
    if isinstance(parsed, ToolArgumentsError):
        return _record(batch, call, found, "invalid", str(parsed))
    assert parsed is not None  # found is a tool: its arguments parsed or raised
    args = parsed
    decided = Journal.key(ctx.step_path, "gate_decided", call.bind_id) in ctx.journal
    return _once(batch, call, found, args) or _Ready(
        call=call,
        tool=found,
        args=args,
        ask=_ask(ctx, call, found, args),
        judged_earlier=first_try and decided,
    )


def _log_call(
    ctx: Context, call: Call, tool: Tool | None, args: BaseModel | ToolArgumentsError | None
) -> None:
    """Log the call's ``tool_call`` event: as asked or, when a person's edit of it is on
    record already (a plan step decided before it runs), as it will run
    (:func:`~loopwise.tools.edits.edit_data`)."""
    data = call_event(call, readable_args(call.arguments), str(tool.effect) if tool else None)
    if call.edited_by is not None:
        data.update(edited_by=call.edited_by, edited_from=jsonable(call.edited_from))
    decided = ctx.journal.recall(Journal.key(ctx.step_path, "gate_decided", call.bind_id))
    if (
        tool is not None
        and isinstance(args, BaseModel)
        and decided is not None
        and decided.get("decision") == "edited"
        and decided.get("args_hash") in (None, args_hash(tool.name, args))
    ):
        edited = verdict_from_data(decided)
        assert isinstance(edited, Edited)  # its decision says so
        data.update(edit_data(tool, edited, data["args"]))
    ctx.emit(EventType.TOOL_CALL, data)


def _once(batch: _Batch, call: Call, tool: Tool, args: BaseModel) -> Outcome | None:
    """The answer to an effect already taken in the call's scope (or twice in this batch)."""
    effect_key = effect_id(call.once_in, tool, args)
    if effect_key is None:
        return None
    earlier = batch.ctx.journal.effect(effect_key)
    if earlier is not None:
        return _repeated(batch, call, tool, earlier)
    if effect_key in batch.effects:
        message = (
            f"the same {tool.name!r} call (same arguments) appears twice in this batch; it "
            "takes effect once"
        )
        return _record(batch, call, tool, "invalid", message)
    batch.effects.add(effect_key)
    return None


def effect_id(scope: str | None, tool: Tool, args: BaseModel | JSONMapping) -> str | None:
    """What identifies the effect of ``tool`` on ``args`` within ``scope`` (a call's
    ``once_in``); ``None`` for a ``read`` tool or when there is no scope."""
    if tool.effect is Effect.READ or scope is None:
        return None
    return f"{scope}|{args_hash(tool.name, args)}"


def _ask(ctx: Context, call: Call, tool: Tool, args: BaseModel) -> Ask:
    return Ask(
        ctx=ctx, tool=tool.name, effect=str(tool.effect), args=args, call_id=call.bind_id,
        gate=tool.gate, recheck=call.recheck, edit_problem=partial(edit_problem, tool),
    )  # fmt: skip


async def _finish(batch: _Batch, slot: Outcome | _Ready) -> Outcome:
    """Apply the verdict: run the call, or answer why it did not run."""
    if isinstance(slot, Outcome):
        return slot
    call, tool, verdict = slot.call, slot.tool, slot.verdict
    if isinstance(verdict, Pending):
        return Outcome(call=call, status="pending", content="", pending=verdict)
    if isinstance(verdict, Denied):
        return _record(batch, call, tool, "denied", denial_message(tool.name, verdict), why=verdict)
    args, edited_by = slot.args, call.edited_by
    if isinstance(verdict, Edited):
        log_edit(batch.ctx, call, tool, verdict)
        edited = await _edited(batch, call, tool, verdict)
        if isinstance(edited, Outcome):
            return edited
        args, edited_by = edited, verdict.by
    elif isinstance(verdict, Approved) and slot.judged_earlier and tool.effect is not Effect.READ:
        refused = await judged_again(tool, args, call.policies)
        if refused is not None:
            message = denial_message(tool.name, refused)
            return _record(batch, call, tool, "denied", message, why=refused)
    return await _run(batch, call, tool, args, edited_by)


async def _edited(batch: _Batch, call: Call, tool: Tool, verdict: Edited) -> BaseModel | Outcome:
    """A person's edit, judged again when it runs (:func:`judge_edit`)."""
    args = await judge_edit(tool, verdict.args, call.policies)
    if isinstance(args, ToolArgumentsError):
        return _record(batch, call, tool, "denied", f"the edited arguments were rejected: {args}")
    if isinstance(args, Denied):
        # Of the arguments that would have run (the edit), judged again as they were to run.
        message = f"the edited arguments were rejected by the policy: {args.reason}"
        why = Denied(f"{args.reason} (judging the arguments {verdict.by} edited)", by=args.by)
        return _record(batch, call, tool, "denied", message, why=why)
    effect_key = effect_id(call.once_in, tool, args)
    earlier = None if effect_key is None else batch.ctx.journal.effect(effect_key)
    return args if earlier is None else _repeated(batch, call, tool, earlier)


async def _run(
    batch: _Batch, call: Call, tool: Tool, args: BaseModel, edited_by: str | None = None
) -> Outcome:
    """Run the tool (with its idempotency key when it has an effect) and record it; the
    record of a call a person edited says who and the arguments it ran with."""
    ctx = batch.ctx
    child = ctx.child(tool.name)
    child.performing = tool  # what lets Tool.perform take its effect (here, and only here)
    if tool.effect is not Effect.READ:
        await ctx.before_effect()  # a run whose watcher has left starts no new effect
        # Lets an effect interrupted between doing and recording be made safe on resume.
        child.idempotency_key = Journal.idempotency_key(ctx.run_id, call.bind_id)
    try:
        value = await tool.perform(args, child)
    except Halt:
        raise
    except TimeoutError as e:
        message = str(e) or f"tool {tool.name!r} timed out"
        if tool.effect is Effect.READ:
            return _record(batch, call, tool, "failed", message)
        # Its thread runs on, or its request went out before it was cut off: the effect
        # may still happen, so within its scope it counts as taken (a retry would pay twice).
        message += "; it could not be stopped and may still take effect: do not retry it"
        took = effect_id(call.once_in, tool, args)
        return _record(batch, call, tool, "failed", message, took_effect=took)
    except Exception as e:
        reason = f"{type(e).__name__}: {e}"
        return _record(
            batch, call, tool, "failed", f"tool {tool.name!r} raised {reason}", why=reason
        )
    content = truncate(render_content(value), batch.settings.max_output_chars)
    extra: JSONObject = {}
    effect_key = effect_id(call.once_in, tool, args)
    if effect_key is not None:
        extra["took_effect"] = effect_key
    if edited_by is not None:
        extra.update(edited_by=edited_by, ran_with=jsonable(args))
    if batch.settings.keep_value:
        extra["value"] = jsonable(value)
    _log_result(batch, call, tool, status="done", content=content, reason=None, extra=extra)
    return Outcome(
        call=call, status="done", content=content, value=value,
        edited_by=edited_by, ran_with=extra.get("ran_with"),
    )  # fmt: skip


def _record(
    batch: _Batch,
    call: Call,
    tool: Tool | None,
    status: CallStatus,
    message: str,
    *,
    why: Denied | str | None = None,
    took_effect: str | None = None,
) -> Outcome:
    """Log an error result and return it (the model reads ``ERROR: message``)."""
    content = truncate(f"ERROR: {message}", batch.settings.max_output_chars)
    reason = f"denied by {why.by}: {why.reason}" if isinstance(why, Denied) else why or message
    extra = {} if took_effect is None else {"took_effect": took_effect}
    _log_result(batch, call, tool, status=status, content=content, reason=reason, extra=extra)
    return Outcome(call=call, status=status, content=content, reason=reason)


def _log_result(
    batch: _Batch,
    call: Call,
    tool: Tool | None,
    *,
    status: CallStatus,
    content: str,
    reason: str | None,
    extra: JSONMapping,
) -> None:
    ctx = batch.ctx
    ran = status in ("done", "failed")
    data = result_event(
        call,
        status,
        content,
        reason=reason,
        # Whatever an untrusted tool said reached the model: its value, its error text.
        untrusted=bool(ran and tool is not None and tool.untrusted_output),
        counters=ctx.journal.counters_under(f"{ctx.step_path}/{call.name}"),
        **extra,
    )
    ctx.emit(EventType.TOOL_RESULT, data)


def _replayed(call: Call, recorded: dict[str, Any]) -> Outcome:
    is_error = bool(recorded.get("is_error"))
    status: CallStatus = recorded.get("status") or ("failed" if is_error else "done")
    return Outcome(
        call=call,
        status=status,
        content=str(recorded.get("content", "")),
        reason=recorded.get("reason"),
        value=recorded.get("value"),
        edited_by=recorded.get("edited_by"),
        ran_with=recorded.get("ran_with"),
    )


def _repeated(batch: _Batch, call: Call, tool: Tool, earlier: JSONMapping) -> Outcome:
    """An effect already taken: not again; answer with what it gave then, saying so (a
    model that asks twice must not believe it paid twice), and log the answer."""
    reason = f"already took effect in this run (call {earlier.get('call_id')}); not repeated"
    content = f"{earlier.get('content', '')}\n[{reason}: an effect is taken once]"
    extra = {"value": earlier.get("value")} if batch.settings.keep_value else {}
    status: CallStatus = "failed" if earlier.get("is_error") else "done"  # timed out then
    _log_result(batch, call, tool, status=status, content=content, reason=reason, extra=extra)
    return Outcome(
        call=call,
        status=status,
        content=content,
        reason=reason,
        value=earlier.get("value"),
    )


def _refuse_excess(batch: _Batch, calls: Sequence[Call]) -> list[Outcome]:
    """Answer calls over the batch's cap without running them (logged in one write)."""
    if not calls:
        return []
    cap = batch.settings.max_calls
    entries: list[tuple[str, EventType, JSONObject]] = []
    outcomes = []
    path = batch.ctx.step_path
    for call in calls:
        message = (
            f"ERROR: too many tool calls in one turn: at most {cap} run per turn, so this "
            f"call to {call.name!r} did not run; make fewer calls per turn"
        )
        outcomes.append(Outcome(call=call, status="excess", content=message, reason=message))
        if call.key in batch.ctx.journal:
            continue
        # The arguments as sent (shortened): a flood of calls is not worth parsing to log.
        logged = call_event(call, shortened(str(call.arguments)), None)
        entries.append((path, EventType.TOOL_CALL, logged))
        entries.append(
            (path, EventType.TOOL_RESULT, result_event(call, "excess", message, untrusted=False))
        )
    if entries:
        batch.ctx.emit_together(entries)
    return outcomes
