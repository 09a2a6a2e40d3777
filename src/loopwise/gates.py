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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TextIO, get_args

from loopwise.audit import asked_lines, os_user
from loopwise.errors import ConfigError
from loopwise.journal import Journal
from loopwise.step import EventType, Halt, Status, jsonable, running_context
from loopwise.tools import json_value

if TYPE_CHECKING:
    from loopwise.step import Context

__all__ = [
    "ApprovalRequest",
    "Approved",
    "Ask",
    "Denied",
    "Edited",
    "Escalate",
    "Gate",
    "GateKind",
    "Handler",
    "Pending",
    "TerminalApprovals",
    "Verdict",
    "args_hash",
    "ask",
    "authorize",
    "authorize_all",
    "denial_message",
    "handler_name",
    "human",
    "os_user",
    "pause",
    "policy",
    "policy_then_human",
    "recheck_edited",
    "request_lines",
    "run_taint",
    "takes_ctx",
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
PolicyFn = Callable[..., Any]
"""A policy: a (sync or async) function of the validated arguments (a dict) returning ``Approved``,
``Denied``, ``Escalate``, ``True`` (approve), ``False`` or a string (deny, the string being
the reason). ``None`` (a function that fell off its end) approves a ``read``/``write`` call
but never an ``irreversible`` one: there it escalates, so a person decides or, with no
person behind the gate, the call is denied. A ``ctx`` parameter gets the run's context
(its ``deps``); a hybrid's action policy may take the plan as its second parameter."""

GateKind = Literal["human", "policy", "policy_then_human"]
"""The kinds of gate: a person, an automatic policy, or the policy then a person."""

_KINDS: frozenset[str] = frozenset(get_args(GateKind))


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
    why: str | None = None
    """The planner's reason for this step, when a plan proposed it."""
    at_stake: float | None = None
    """The money or cost at stake (the action's own estimate), when it says."""
    note: str | None = None
    """What else the person should know about this ask (a plan approved already, and why
    its step still asks), when anything."""

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
            "why": self.why,
            "at_stake": self.at_stake,
            "note": self.note,
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

    kind: GateKind
    """``human``, ``policy`` or ``policy_then_human``."""
    check: PolicyFn | None = None
    """The automatic policy, if any."""

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ConfigError(
                f"gate kind {self.kind!r} is not one of {', '.join(sorted(_KINDS))}",
                name="kind",
            )
        if (self.check is None) != (self.kind == "human"):
            raise ConfigError(
                f"a {self.kind} gate {'takes no' if self.kind == 'human' else 'needs a'} "
                "policy; build gates with human(), policy(fn) or policy_then_human(fn)",
                name="check",
            )

    @property
    def asks_human(self) -> bool:
        """Whether a person can be asked (``human`` and ``policy_then_human``)."""
        return self.kind != "policy"

    async def run_policy(self, args: Any, *, effect: str = "write") -> Approved | Denied | Escalate:
        """The policy's verdict on ``args`` of a call with ``effect`` (``Escalate`` for a
        plain human gate). A policy with a ``ctx`` parameter gets the run's context (its
        ``deps``)."""
        if self.check is None:
            return Escalate("this tool is gated by a human")
        try:
            check: Any = self.check
            result = check(args, ctx=running_context()) if takes_ctx(check) else check(args)
            if inspect.isawaitable(result):
                result = await result
        except Exception as e:
            # Fail closed, as a result: a raising policy must neither approve nor end the
            # run (which would cancel sibling calls between their effect and its record).
            return Denied(f"the policy raised {type(e).__name__}: {e}")
        return _policy_verdict(result, effect)


def takes_ctx(fn: Any) -> bool:
    """Whether a policy has a ``ctx`` parameter (it is then passed the run's context)."""
    try:
        return "ctx" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _policy_verdict(result: Any, effect: str) -> Approved | Denied | Escalate:
    if isinstance(result, Approved | Denied | Escalate):
        return result
    if isinstance(result, Edited):
        return Denied("a policy cannot edit arguments; it may approve, deny or escalate")
    if result is None and effect == "irreversible":
        return Escalate(
            "the policy returned None, which never approves an irreversible call "
            "(return True or Approved() to approve)"
        )
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
    through its input. The run's journal keeps it from the log (a resumed run's too), so
    the taint survives a pause.
    """
    return ctx.journal.taint


Handler = Callable[[ApprovalRequest], Any] | Any
"""An approval handler: an object with ``async decide(request)``, or a function of the
request (sync or async); it returns a verdict, ``True``/``False``, or ``None`` (undecided)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Ask:
    """One call a gate must judge, in the context (step path) that makes it."""

    ctx: Context
    """The context of the step making the call (its path scopes the journal keys)."""
    tool: str
    """The tool or plan action."""
    effect: str
    """``read``, ``write`` or ``irreversible``."""
    args: Any
    """The validated arguments (a pydantic model or a dict)."""
    call_id: str
    """The id that binds the approval (unique in the run)."""
    gate: Gate | None
    """The tool's gate (a bare function is taken as a :func:`policy`)."""
    tainted_by: str | None = None
    """The untrusted source that preceded the call, when the caller knows it better
    than the run's journal does."""
    why: str | None = None
    """The planner's reason for the call (a plan step's), shown to the person asked."""
    at_stake: float | None = None
    """The money or cost at stake, when the caller knows it."""
    note: str | None = None
    """What else the person asked should know (see :attr:`ApprovalRequest.note`)."""
    covered_by: Approved | None = None
    """A person's approval that already covers these exact arguments (a whole plan's,
    with ``plan_approval_covers_gates``): it answers where a person would be asked. A
    policy's denial still denies."""


@dataclass(frozen=True, slots=True)
class _Judged:
    """What deciding one ask produced, before anything is journaled."""

    verdict: Verdict | None = None
    """Decided without a person (``None``: a person must be asked)."""
    new: bool = False
    """Whether ``verdict`` is a fresh decision the journal must record."""
    request: ApprovalRequest | None = None
    """What to ask a person."""
    asked: bool = False
    """Whether ``request`` was journaled already (a resumed run)."""


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
    """Decide whether one call may run (:func:`authorize_all` of one :class:`Ask`)."""
    one = Ask(
        ctx=ctx,
        tool=tool,
        effect=effect,
        args=args,
        call_id=call_id,
        gate=gate,
        tainted_by=tainted_by,
    )
    return (await authorize_all([one]))[0]


async def authorize_all(asks: Sequence[Ask]) -> list[Verdict | Pending]:
    """Decide the calls of one turn (or one plan) together, in order.

    Returns per ask :class:`Approved` (run it), :class:`Edited` (validate ``args`` again,
    then run them), :class:`Denied` (answer with an error result) or :class:`Pending`
    (collect them and :func:`pause`). Deciding comes first (journal, taint, policy);
    then every fresh decision and every new request for a person is journaled in one
    step, so a crash leaves either all of the turn's requests or none; then the approval
    handler is asked. A resumed run gets the same verdicts without asking again.
    """
    judged = [await _judge(a) for a in asks]
    entries = [e for a, j in zip(asks, judged, strict=True) for e in _journal_entries(a, j)]
    if entries:
        asks[0].ctx.emit_together(entries)
    verdicts: list[Verdict | Pending] = []
    for a, j in zip(asks, judged, strict=True):
        if j.request is None:
            assert j.verdict is not None  # a _Judged holds one or the other
            verdicts.append(j.verdict)
            continue
        answer = await ask(a.ctx.approvals, j.request)
        if answer is None:
            verdicts.append(Pending(j.request))
        else:
            a.ctx.emit(EventType.GATE_DECIDED, _decision_data(a, answer))
            verdicts.append(answer)
    return verdicts


def _journal_entries(a: Ask, j: _Judged) -> list[tuple[str, EventType, dict[str, Any]]]:
    path = a.ctx.step_path
    if j.verdict is not None and j.new:
        return [(path, EventType.GATE_DECIDED, _decision_data(a, j.verdict))]
    if j.request is not None and not j.asked:
        key = _key(a, "gate_requested")
        return [(path, EventType.GATE_REQUESTED, {"key": key, **j.request.to_dict()})]
    return []


async def _judge(a: Ask) -> _Judged:
    """The verdict on ``a`` when no person is needed, else the request for one."""
    ctx, effect = a.ctx, str(a.effect)
    gate = _as_gate(a.gate, a.tool)
    effectful = effect in _EFFECTS
    if ctx.refuse_effects is not None and effectful:
        # Under a hybrid's planner; a resumed run replays it, the log says it once.
        refused = Denied(ctx.refuse_effects, by="loopwise")
        return _Judged(verdict=refused, new=_key(a, "gate_decided") not in ctx.journal)
    tainted_by = (a.tainted_by or ctx.journal.taint) if effectful else None
    if gate is None and tainted_by is None:
        return _Judged(verdict=Approved(by="no-gate"))
    recorded = ctx.journal.recall(_key(a, "gate_decided"))
    if recorded is not None:
        return _Judged(verdict=verdict_from_data(recorded))
    asked = ctx.journal.recall(_key(a, "gate_requested"))
    first = await gate.run_policy(_as_dict(a.args), effect=effect) if gate else Escalate()
    # Once a person was asked (the run paused), only they decide; the policy, asked again
    # on resume, may still deny, but its approval must not overrule their denial.
    verdict = _without_human(first, gate, tainted_by is not None or asked is not None)
    if verdict is None and asked is None:
        verdict = a.covered_by
    if verdict is not None:
        return _Judged(verdict=verdict, new=True)
    if asked is not None:
        request = _request(a, str(asked["reason"]), asked.get("tainted_by"))
        return _Judged(request=request, asked=True)
    return _Judged(request=_request(a, _human_reason(first, tainted_by), tainted_by))


def _key(a: Ask, kind: str) -> str:
    return Journal.key(a.ctx.step_path, kind, a.call_id)


def _request(a: Ask, reason: str, tainted_by: str | None) -> ApprovalRequest:
    return ApprovalRequest(
        run_id=a.ctx.run_id,
        approval_id=a.call_id,
        tool=a.tool,
        args=jsonable(a.args),
        effect=str(a.effect),
        reason=reason,
        tainted_by=tainted_by,
        args_hash=args_hash(a.tool, a.args),
        call_id=a.call_id,
        step=a.ctx.step_path,
        why=a.why,
        at_stake=a.at_stake,
        note=a.note,
    )


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


def _human_reason(first: Approved | Denied | Escalate, tainted_by: str | None) -> str:
    if tainted_by is not None:
        return (
            f"untrusted output from {tainted_by} is in the transcript: every later write or "
            "irreversible call needs a human"
        )
    return first.reason if isinstance(first, Escalate) else "this tool is gated by a human"


def _decision_data(a: Ask, verdict: Verdict) -> dict[str, Any]:
    data: dict[str, Any] = {
        "key": _key(a, "gate_decided"),
        "approval_id": a.call_id,
        "call_id": a.call_id,
        "tool": a.tool,
        "decision": _decision_name(verdict),
        "by": verdict.by,
        "reason": verdict.reason,
        # A person's decision was made at `loopwise approve` time, before this event.
        "decided_at": verdict.at or datetime.now(UTC).isoformat(),
    }
    if isinstance(verdict, Edited):
        data["args"] = jsonable(verdict.args)
    return data


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
    """Ask ``handler`` about ``request``: a verdict, or ``None`` while undecided.

    A verdict that does not say who decided is recorded under the handler's name (its
    ``by`` or ``name`` attribute, else its function or class name), never as a generic
    "policy": the audit log must tell an in-code approver from a person and from a policy.
    """
    if handler is None:
        return None
    decide = getattr(handler, "decide", None)
    fn: Callable[[ApprovalRequest], Any] = decide if callable(decide) else handler
    result = fn(request)
    if inspect.isawaitable(result):
        result = await result
    return _human_verdict(result, handler_name(handler))


def handler_name(handler: Any) -> str:
    """Who an approval handler is in the audit log."""
    for attr in ("by", "name"):
        named = getattr(handler, attr, None)
        if isinstance(named, str) and named:
            return named
    name = getattr(handler, "__name__", None) or type(handler).__name__
    return "approvals handler" if name == "<lambda>" else str(name)


_UNNAMED = {Approved: "policy", Denied: "policy", Edited: "human"}
"""The ``by`` each verdict type gets when its maker does not say."""


def _human_verdict(result: Any, by: str) -> Verdict | None:
    if result is None:
        return None
    if isinstance(result, Approved | Denied | Edited):
        unnamed = result.by == _UNNAMED[type(result)]
        return replace(result, by=by) if unnamed else result
    if result is True:
        return Approved(by=by)
    if isinstance(result, str):
        return Denied(result, by=by)
    return Denied(f"denied by {by}", by=by)


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


def request_lines(request: ApprovalRequest) -> list[str]:
    """What a person reads before deciding ``request`` on a terminal: the call, why the
    gate asks, the planner's reason, the money at stake and the note, one per line."""
    taint = f" (tainted by {request.tainted_by})" if request.tainted_by else ""
    steps = request.args.get("plan") if request.tool == "approve_plan" else None
    call = "the whole plan" if isinstance(steps, list) else request.tool
    if not isinstance(steps, list):
        call += f"({json.dumps(request.args)})"
    lines = [f"{call} [{request.effect}] needs approval: {request.reason}{taint}"]
    for s in steps if isinstance(steps, list) else ():
        # A plan is read step by step, not as one line of JSON with Mermaid source in it.
        after = f" after {', '.join(s.get('depends_on') or [])}" if s.get("depends_on") else ""
        lines.append(
            f"    {s.get('id')} {s.get('action')}({json.dumps(s.get('args'))}){after}: "
            f"{s.get('reason')}"
        )
    lines += asked_lines(request.why, request.at_stake, request.note)
    return lines


class TerminalApprovals:
    """Ask on a terminal: ``y`` approves, ``n`` denies (asks why), ``e`` edits the arguments
    as JSON. End of input leaves the call undecided, so the run pauses durably instead."""

    def __init__(
        self, *, by: str | None = None, stdin: TextIO | None = None, stdout: TextIO | None = None
    ) -> None:
        self.by = by or os_user()
        """Who decides, as the audit log records it (default: the OS user)."""
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
        out.write("\n" + "\n".join(request_lines(request)) + "\n")
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
            args = json_value(raw or "")
        except json.JSONDecodeError as e:
            (self._out or sys.stderr).write(f"not JSON: {e.msg}\n")
            return None
        if not isinstance(args, dict):
            (self._out or sys.stderr).write("the arguments must be a JSON object\n")
            return None
        return Edited(args, by=self.by)
