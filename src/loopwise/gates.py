"""Gates in front of tools and plan actions: human approval, automatic policies, taint.

A :class:`Gate` is one of three kinds:

* :func:`human` — pause and ask a person;
* :func:`policy` — an automatic, stricter check of the validated arguments that approves
  or denies (a policy that escalates, with no human behind it, denies);
* :func:`policy_then_human` — the policy first; a person only when it says
  :class:`Escalate`.

Verdicts are values: :class:`Approved`, :class:`Denied` (with a reason) and
:class:`Edited` (approved with new arguments, validated again by the caller). A request
for a person is plain data (:class:`ApprovalRequest`) bound to the exact tool and
arguments by :func:`args_hash`.

**Taint.** Once the output of a tool declared ``untrusted_output`` is in the run (in this
transcript, or read by a nested or earlier step: :func:`run_taint`), every later
``write``/``irreversible`` call needs a person whatever the policy says (a policy may
still deny); the request names the source in ``tainted_by``.

**Who answers.** :func:`authorize` asks ``ctx.approvals``, the run's approval handler: an
object with ``async decide(request)``, or a plain (sync or async) function of the
request, returning a verdict, ``True``/``False``, or ``None`` for "not decided yet".
:class:`TerminalApprovals` asks on a terminal (y/n/edit). The run store's handler (in
:mod:`loopwise.runner`) answers from decisions made with ``loopwise approve``/``deny``
and ``None`` before: the caller then collects every :class:`Pending` of the turn and
raises :func:`pause`, which ends the run ``awaiting_approval`` with all of them listed.

Every decision is journaled (``gate_decided`` with a ``key``), so a resumed run applies
it again without asking twice; a request already made is not made twice either.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import inspect
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from loopwise.errors import ConfigError
from loopwise.step import EventType, Halt, Status, jsonable

if TYPE_CHECKING:
    from loopwise.step import Context

__all__ = [
    "ApprovalRequest",
    "Approved",
    "Denied",
    "Edited",
    "Escalate",
    "Gate",
    "Handler",
    "Pending",
    "TerminalApprovals",
    "Verdict",
    "args_hash",
    "ask",
    "authorize",
    "denial_message",
    "human",
    "pause",
    "policy",
    "policy_then_human",
    "recheck_edited",
    "run_taint",
    "verdict_from_data",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Approved:
    """The call may run as requested."""

    by: str = "policy"
    """Who approved (``policy``, ``no-gate``, a person's name)."""
    reason: str | None = None
    """Why, when said."""
    at: str | None = None
    """When it was decided (ISO 8601, UTC), when known before the run records it."""


@dataclass(frozen=True, slots=True)
class Denied:
    """The call must not run; the tool answers with an error that carries ``reason``."""

    reason: str
    """Why it was denied (shown to the model and in the audit log)."""
    by: str = "policy"
    """Who denied."""
    at: str | None = None
    """When it was decided (ISO 8601, UTC), when known before the run records it."""


@dataclass(frozen=True, slots=True)
class Edited:
    """Approved with different arguments; the caller validates them again before running."""

    args: dict[str, Any]
    """The arguments to run with instead."""
    by: str = "human"
    """Who edited."""
    reason: str | None = None
    """Why, when said."""
    at: str | None = None
    """When it was decided (ISO 8601, UTC), when known before the run records it."""


@dataclass(frozen=True, slots=True)
class Escalate:
    """A policy's answer: "a person must decide" (only :func:`policy_then_human` asks one)."""

    reason: str = "the policy asks a human to decide"
    """Why a person is needed (shown in the approval request)."""


Verdict = Approved | Denied | Edited
PolicyFn = Callable[[Any], Any]
"""A policy: a (sync or async) function of the validated arguments (a dict) returning ``Approved``,
``Denied``, ``Escalate``, ``True``/``None`` (approve), ``False`` or a string (deny, the
string being the reason)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalRequest:
    """A call waiting for a person: plain data, bound to the tool and args by ``args_hash``."""

    run_id: str
    """The run it belongs to."""
    approval_id: str
    """Its id within the run (the tool call's id)."""
    tool: str
    """The tool (or plan action) to run."""
    args: dict[str, Any]
    """The validated arguments it would run with."""
    effect: str
    """``read``, ``write`` or ``irreversible``."""
    reason: str
    """Why a person must decide."""
    tainted_by: str | None = None
    """The untrusted source that preceded it (``fetch_page (call_3)``), if any."""
    args_hash: str = ""
    """:func:`args_hash` of ``tool`` and ``args``."""
    call_id: str = ""
    """The tool call's id."""
    step: str = ""
    """The step path that asked."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict (what ``loopwise pending --json`` lists)."""
        return {
            "run_id": self.run_id,
            "approval_id": self.approval_id,
            "tool": self.tool,
            "args": self.args,
            "effect": self.effect,
            "reason": self.reason,
            "tainted_by": self.tainted_by,
            "args_hash": self.args_hash,
            "call_id": self.call_id,
            "step": self.step,
        }


@dataclass(frozen=True, slots=True)
class Pending:
    """No decision yet: the run must pause with this request outstanding."""

    request: ApprovalRequest
    """What waits for a person."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Gate:
    """What stands in front of a tool; build with :func:`human`, :func:`policy` or
    :func:`policy_then_human`."""

    kind: str
    """``human``, ``policy`` or ``policy_then_human``."""
    check: PolicyFn | None = None
    """The automatic policy, if any."""

    @property
    def asks_human(self) -> bool:
        """Whether a person can be asked (``human`` and ``policy_then_human``)."""
        return self.kind != "policy"

    async def run_policy(self, args: Any) -> Approved | Denied | Escalate:
        """The policy's verdict on ``args`` (``Escalate`` for a plain human gate)."""
        if self.check is None:
            return Escalate("this tool is gated by a human")
        try:
            result = self.check(args)
            if inspect.isawaitable(result):
                result = await result
        except Exception as e:
            # Fail closed, as a result: a raising policy must neither approve nor end the
            # run (which would cancel sibling calls between their effect and its record).
            return Denied(f"the policy raised {type(e).__name__}: {e}")
        return _policy_verdict(result)


def _policy_verdict(result: Any) -> Approved | Denied | Escalate:
    if isinstance(result, Approved | Denied | Escalate):
        return result
    if isinstance(result, Edited):
        return Denied("a policy cannot edit arguments; it may approve, deny or escalate")
    if result is True or result is None:
        return Approved()
    if isinstance(result, str):
        return Denied(result)
    return Denied("denied by policy")


def human() -> Gate:
    """Pause and ask a person before every call."""
    return Gate(kind="human")


def policy(fn: PolicyFn) -> Gate:
    """An automatic check only; an :class:`Escalate` from it denies (no person to ask)."""
    return Gate(kind="policy", check=fn)


def policy_then_human(fn: PolicyFn) -> Gate:
    """The policy first; a person decides when it answers :class:`Escalate`."""
    return Gate(kind="policy_then_human", check=fn)


def args_hash(tool: str, args: Any) -> str:
    """A stable hash of a tool name and its arguments (canonical JSON, SHA-256)."""
    text = json.dumps([tool, jsonable(args)], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


_EFFECTS = frozenset({"write", "irreversible"})


def run_taint(ctx: Context) -> str | None:
    """The first untrusted output anywhere in the run so far (``tool (call id)``), or ``None``.

    Taint is per run, not per transcript: what a nested agent or workflow read reaches
    its caller through its output, and what the caller read reaches the nested step
    through its input. The run's log holds every result flagged ``untrusted`` (a resumed
    run's too), so the taint survives a pause.
    """
    for event in ctx.events:
        if event.type is EventType.TOOL_RESULT and event.data.get("untrusted"):
            return f"{event.data.get('tool')} ({event.data.get('call_id')})"
    return None


Handler = Callable[[ApprovalRequest], Any] | Any
"""An approval handler: an object with ``async decide(request)``, or a function of the
request (sync or async); it returns a verdict, ``True``/``False``, or ``None`` (undecided)."""


async def authorize(
    ctx: Context,
    *,
    tool: str,
    effect: str,
    args: Any,
    call_id: str,
    gate: Gate | None,
    tainted_by: str | None = None,
) -> Verdict | Pending:
    """Decide whether one call may run: the seam agents and hybrids call before a tool.

    Returns :class:`Approved` (run it), :class:`Edited` (validate ``args`` again, then run
    them), :class:`Denied` (answer with an error result) or :class:`Pending` (collect it
    and :func:`pause` once the turn's other calls are done). Decisions are journaled by
    ``call_id``, so a resumed run gets the same verdict without asking again.
    """
    effect = str(effect)
    gate = _as_gate(gate, tool)
    if ctx.refuse_effects is not None and effect in _EFFECTS:
        return _refused_here(ctx, tool, call_id, ctx.refuse_effects)
    if tainted_by is None and effect in _EFFECTS:
        tainted_by = run_taint(ctx)
    tainted = tainted_by is not None and effect in _EFFECTS
    if gate is None and not tainted:
        return Approved(by="no-gate")
    decided_key = f"{ctx.step_path}:gate_decided:{call_id}"
    recorded = ctx.replay.get(decided_key)
    if recorded is not None:
        return verdict_from_data(recorded)
    requested_key = f"{ctx.step_path}:gate_requested:{call_id}"
    asked = ctx.replay.get(requested_key)
    first = await gate.run_policy(_as_dict(args)) if gate is not None else Escalate()
    # Once a person was asked (the run paused), only they decide; the policy, asked again
    # on resume, may still deny, but its approval must not overrule their denial.
    verdict = _without_human(first, gate, tainted or asked is not None)
    if verdict is not None:
        _emit_decision(ctx, decided_key, tool, call_id, verdict)
        return verdict
    if asked is not None:
        tainted_by = asked.get("tainted_by")
    request = ApprovalRequest(
        run_id=ctx.run_id,
        approval_id=call_id,
        tool=tool,
        args=jsonable(args),
        effect=effect,
        reason=str(asked["reason"]) if asked else _human_reason(first, tainted_by, tainted),
        tainted_by=tainted_by if tainted or asked else None,
        args_hash=args_hash(tool, args),
        call_id=call_id,
        step=ctx.step_path,
    )
    return await _ask_person(ctx, request, requested_key if asked is None else None)


def _refused_here(ctx: Context, tool: str, call_id: str, why: str) -> Denied:
    """A write or irreversible call where effects are refused (under a hybrid's planner)."""
    refused = Denied(why, by="loopwise")
    key = f"{ctx.step_path}:gate_decided:{call_id}"
    if key not in ctx.replay:  # a resumed run replays it; the log says it once
        _emit_decision(ctx, key, tool, call_id, refused)
    return refused


async def _ask_person(
    ctx: Context, request: ApprovalRequest, requested_key: str | None
) -> Verdict | Pending:
    """Log the request (unless a resumed run logged it already) and ask the handler."""
    if requested_key is not None:
        ctx.emit(EventType.GATE_REQUESTED, {"key": requested_key, **request.to_dict()})
    answer = await ask(ctx.approvals, request)
    if answer is None:
        return Pending(request)
    decided_key = f"{ctx.step_path}:gate_decided:{request.call_id}"
    _emit_decision(ctx, decided_key, request.tool, request.call_id, answer)
    return answer


async def recheck_edited(gate: Gate | PolicyFn | None, tool: str, args: Any) -> Denied | None:
    """The policy's denial of edited arguments, or ``None`` when they may run.

    A person's edit answers an escalation, so only a denial counts: arguments the policy
    refuses do not run because a person typed them.
    """
    checked = _as_gate(gate, tool)
    if checked is None or checked.check is None:
        return None
    verdict = await checked.run_policy(_as_dict(args))
    return verdict if isinstance(verdict, Denied) else None


def _as_dict(args: Any) -> Any:
    """Policies see a dict of the validated arguments, from an agent or a hybrid alike.

    Always a copy: a policy that changes what it is given must not change what the
    person is shown and the hash binds (while the call runs with the original).
    """
    dump = getattr(args, "model_dump", None)
    return dump() if callable(dump) else copy.deepcopy(args)


def _as_gate(gate: Any, tool: str) -> Gate | None:
    """A :class:`Gate`; a bare function is taken as a :func:`policy`."""
    if gate is None or isinstance(gate, Gate):
        return gate
    if callable(gate):
        return policy(gate)
    raise ConfigError(
        f"tool {tool!r}: gate {gate!r} is not a gate; use gates.human(), gates.policy(fn) "
        "or gates.policy_then_human(fn)",
        name=tool,
    )


def _without_human(
    first: Approved | Denied | Escalate, gate: Gate | None, tainted: bool
) -> Verdict | None:
    """The verdict when no person is needed, or ``None`` when one must be asked."""
    if isinstance(first, Denied):
        return first
    if tainted:
        return None
    if isinstance(first, Approved):
        return first
    if gate is not None and not gate.asks_human:
        return Denied(f"{first.reason} (this gate has no human to ask)", by="policy")
    return None


def _human_reason(
    first: Approved | Denied | Escalate, tainted_by: str | None, tainted: bool
) -> str:
    if tainted and tainted_by is not None:
        return (
            f"untrusted output from {tainted_by} is in the transcript: every later write or "
            "irreversible call needs a human"
        )
    return first.reason if isinstance(first, Escalate) else "this tool is gated by a human"


def _emit_decision(ctx: Context, key: str, tool: str, call_id: str, verdict: Verdict) -> None:
    data: dict[str, Any] = {
        "key": key,
        "approval_id": call_id,
        "call_id": call_id,
        "tool": tool,
        "decision": _decision_name(verdict),
        "by": verdict.by,
        "reason": verdict.reason,
        # A person's decision was made at `loopwise approve` time, before this event.
        "decided_at": verdict.at or datetime.now(UTC).isoformat(),
    }
    if isinstance(verdict, Edited):
        data["args"] = jsonable(verdict.args)
    ctx.emit(EventType.GATE_DECIDED, data)


def _decision_name(verdict: Verdict) -> str:
    if isinstance(verdict, Approved):
        return "approved"
    return "denied" if isinstance(verdict, Denied) else "edited"


def verdict_from_data(data: dict[str, Any]) -> Verdict:
    """The verdict a ``gate_decided`` event (or an approvals row) records."""
    decision, by = data.get("decision"), str(data.get("by") or "human")
    reason, at = data.get("reason"), data.get("decided_at")
    if decision == "approved":
        return Approved(by=by, reason=reason, at=at)
    if decision == "edited":
        return Edited(dict(data.get("args") or {}), by=by, reason=reason, at=at)
    return Denied(str(reason or "denied"), by=by, at=at)


async def ask(handler: Handler, request: ApprovalRequest) -> Verdict | None:
    """Ask ``handler`` about ``request``: a verdict, or ``None`` while undecided."""
    if handler is None:
        return None
    decide = getattr(handler, "decide", None)
    fn: Callable[[ApprovalRequest], Any] = decide if callable(decide) else handler
    result = fn(request)
    if inspect.isawaitable(result):
        result = await result
    return _human_verdict(result)


def _human_verdict(result: Any) -> Verdict | None:
    if result is None or isinstance(result, Approved | Denied | Edited):
        return result
    if result is True:
        return Approved(by="human")
    if isinstance(result, str):
        return Denied(result, by="human")
    return Denied("denied by a human", by="human")


def pause(pending: list[Pending]) -> Halt:
    """The :class:`Halt` that ends a run ``awaiting_approval`` with every request listed."""
    names = ", ".join(f"{p.request.tool} ({p.request.approval_id})" for p in pending)
    return Halt(
        Status.AWAITING_APPROVAL,
        f"{len(pending)} call(s) await approval: {names}",
        pending=[p.request.to_dict() for p in pending],
    )


def denial_message(tool: str, verdict: Denied) -> str:
    """The error result a denied call answers with (the model reads it)."""
    return (
        f"the call to {tool!r} was denied by {verdict.by}: {verdict.reason}. It did not run; "
        "do not retry it with the same arguments."
    )


class TerminalApprovals:
    """Ask on a terminal: ``y`` approves, ``n`` denies (asks why), ``e`` edits the arguments
    as JSON. End of input leaves the call undecided, so the run pauses durably instead."""

    def __init__(
        self, *, by: str = "terminal", stdin: TextIO | None = None, stdout: TextIO | None = None
    ) -> None:
        self.by = by
        self._in = stdin
        self._out = stdout
        self._lock: asyncio.Lock | None = None

    async def decide(self, request: ApprovalRequest) -> Verdict | None:
        """One question at a time, even when several calls of a turn wait together."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            return await asyncio.to_thread(self._ask, request)

    def _line(self, prompt: str) -> str | None:
        out, inp = self._out or sys.stderr, self._in or sys.stdin
        out.write(prompt)
        out.flush()
        line = inp.readline()
        return None if not line else line.strip()

    def _ask(self, request: ApprovalRequest) -> Verdict | None:
        out = self._out or sys.stderr
        out.write(
            f"\n{request.tool}({json.dumps(request.args)}) [{request.effect}] "
            f"needs approval: {request.reason}\n"
        )
        while True:
            answer = self._line("approve? [y]es / [n]o / [e]dit: ")
            if answer is None:
                return None
            if answer.lower() in {"y", "yes"}:
                return Approved(by=self.by)
            if answer.lower() in {"n", "no"}:
                reason = self._line("reason: ") or "denied at the terminal"
                return Denied(reason, by=self.by)
            if answer.lower() in {"e", "edit"}:
                edited = self._edited()
                if edited is not None:
                    return edited

    def _edited(self) -> Edited | None:
        raw = self._line("new arguments as a JSON object: ")
        try:
            args = json.loads(raw or "")
        except json.JSONDecodeError as e:
            (self._out or sys.stderr).write(f"not JSON: {e.msg}\n")
            return None
        if not isinstance(args, dict):
            (self._out or sys.stderr).write("the arguments must be a JSON object\n")
            return None
        return Edited(args, by=self.by)
