"""Gates in front of tools and plan actions: human approval, automatic policies, taint.

A :class:`Gate` is one of three kinds:

* :func:`human` — pause and ask a person;
* :func:`policy` — an automatic, stricter check of the validated arguments that approves
  or denies (a policy that escalates, with no human behind it, denies);
* :func:`policy_then_human` — the policy first; a person only when it says
  :class:`Escalate`.

Verdicts and requests are plain data (:mod:`loopwise.tools.verdicts`): :class:`Approved`,
:class:`Denied`, :class:`Edited`, and :class:`ApprovalRequest` bound to the exact tool and
arguments by :func:`args_hash`.

**Taint.** Once the output of a tool declared ``untrusted_output`` is in the run (in this
transcript, or read by a nested or earlier step: :func:`run_taint`), every later
``write``/``irreversible`` call needs a person whatever the policy says (a policy may
still deny); the request names the source in ``tainted_by``.

**Who answers.** :func:`authorize` asks ``ctx.approvals``, the run's approval handler
(:mod:`loopwise.tools.handlers`: a verdict, or ``None`` for "not decided yet"). The caller
collects every :class:`Pending` of the turn and raises :func:`pause`, which ends the run
``awaiting_approval`` with all of them listed.

Every decision is journaled (``gate_decided`` with a ``key``), so a resumed run applies
it again without asking twice; a request already made is not made twice either.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, get_args

from loopwise.core.events import EventType, Status, jsonable
from loopwise.core.execute import running_context
from loopwise.core.journal import Journal
from loopwise.core.jsontypes import JSONMapping, JSONObject, json_str
from loopwise.core.offload import Work
from loopwise.core.result import Halt
from loopwise.errors import ConfigError
from loopwise.tools.audit import changed_fields
from loopwise.tools.handlers import TerminalApprovals, ask
from loopwise.tools.verdicts import (
    ApprovalRequest,
    Approved,
    Denied,
    Edited,
    Escalate,
    Pending,
    Verdict,
    args_hash,
    verdict_from_data,
)

if TYPE_CHECKING:
    from pydantic import BaseModel

    from loopwise.core.step import Context

# The vocabulary users write beside a gate (`gates.Escalate(...)`, README), kept on
# this documented module for them; the package imports these from their homes.
__all__ = [
    "NO_CONTEXT",
    "ApprovalRequest",
    "Approved",
    "Ask",
    "Denied",
    "Edited",
    "Escalate",
    "Gate",
    "GateKind",
    "TerminalApprovals",
    "answer_problem",
    "authorize",
    "authorize_all",
    "changed_fields",
    "human",
    "pause",
    "policy",
    "policy_then_human",
    "recheck_edited",
    "run_taint",
    "takes_ctx",
]


PolicyFn = Callable[..., object]
"""A policy: a (sync or async) function of the validated arguments (a dict) returning ``Approved``,
``Denied``, ``Escalate``, ``True`` (approve), ``False`` or a string (deny, the string being
the reason). ``None`` (a function that fell off its end) approves a ``read``/``write`` call
but never an ``irreversible`` one: there it escalates, so a person decides or, with no
person behind the gate, the call is denied. A ``ctx`` parameter gets the run's context
(its ``deps``); a hybrid's action policy may take the plan as its second parameter."""

GateKind = Literal["human", "policy", "policy_then_human"]
"""The kinds of gate: a person, an automatic policy, or the policy then a person."""

_KINDS: frozenset[str] = frozenset(get_args(GateKind))

NO_CONTEXT = (
    "the policy takes ctx but was judged outside a run, with no context to give it: pass "
    "ctx= (loopwise.approvals.decide builds one with the run's deps)"
)
"""Why a policy with a ``ctx`` parameter denies when it is judged with no context."""


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

    async def run_policy(
        self,
        args: JSONObject,
        *,
        effect: str = "write",
        ctx: Context | None = None,
        tool: str | None = None,
    ) -> Approved | Denied | Escalate:
        """The policy's verdict on ``args`` of a call with ``effect`` (``Escalate`` for a
        plain human gate). A policy with a ``ctx`` parameter gets ``ctx`` or, without one,
        the running run's context (its ``deps``); with neither it denies, saying so.

        In a run whose engine takes its outside-world work (:mod:`loopwise.core.offload`),
        the judgement is handed to it (``tool`` names the tool judged)."""
        if self.check is None:
            return Escalate("this tool is gated by a human")
        run = ctx or running_context()
        if run is None or run.offload is None:
            return await self._judge(args, effect, ctx)
        work = Work(
            kind="judgement", tool=tool or "", args=args, effect=effect, key=None,
            step=run.step_path, do=partial(self._judge, args, effect),
        )  # fmt: skip
        verdict: Approved | Denied | Escalate = await run.offload(work)
        return verdict

    async def _judge(
        self, args: JSONObject, effect: str, ctx: Context | None
    ) -> Approved | Denied | Escalate:
        check: Any = self.check
        wants_ctx = takes_ctx(check)
        ctx = (ctx or running_context()) if wants_ctx else None
        if wants_ctx and ctx is None:
            return Denied(NO_CONTEXT, by="loopwise")
        try:
            result = check(args, ctx=ctx) if wants_ctx else check(args)
            if inspect.isawaitable(result):
                result = await result
        except Halt as halt:
            # ctx.deps in a run (or a decision) without deps: its own words, not a trace.
            return Denied(f"the policy could not judge it: {halt.detail}", by="loopwise")
        except Exception as e:
            # Fail closed, as a result: a raising policy must neither approve nor end the
            # run (which would cancel sibling calls between their effect and its record).
            return Denied(f"the policy raised {type(e).__name__}: {e}")
        return _policy_verdict(result, effect)


def takes_ctx(fn: Callable[..., object]) -> bool:
    """Whether a policy has a ``ctx`` parameter (it is then passed the run's context)."""
    try:
        return "ctx" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _policy_verdict(result: object, effect: str) -> Approved | Denied | Escalate:
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


_EFFECTS = frozenset({"write", "irreversible"})


def run_taint(ctx: Context) -> str | None:
    """The first untrusted output anywhere in the run so far (``tool (call id)``), or ``None``.

    Taint is per run, not per transcript: what a nested agent or workflow read reaches
    its caller through its output, and what the caller read reaches the nested step
    through its input. The run's journal keeps it from the log (a resumed run's too), so
    the taint survives a pause.
    """
    return ctx.journal.taint


@dataclass(frozen=True, kw_only=True, slots=True)
class Ask:
    """One call a gate must judge, in the context (step path) that makes it."""

    ctx: Context
    """The context of the step making the call (its path scopes the journal keys)."""
    tool: str
    """The tool or plan action."""
    effect: str
    """``read``, ``write`` or ``irreversible``."""
    args: BaseModel | JSONObject
    """The validated arguments (a pydantic model or a dict)."""
    call_id: str
    """The id that binds the approval (unique in the run)."""
    gate: Gate | PolicyFn | None
    """The tool's gate (a bare function is taken as a :func:`policy`)."""
    tainted_by: str | None = None
    """The untrusted source that preceded the call, when the caller knows it better
    than the run's journal does."""
    why: str | None = None
    """The planner's reason for the call (a plan step's), shown to the person asked."""
    at_stake: float | None = None
    """The money or cost at stake, when the caller knows it."""
    at_stake_unit: str | None = None
    """What :attr:`at_stake` is in (a currency code or a unit), when the caller knows it."""
    note: str | None = None
    """What else the person asked should know (see :attr:`ApprovalRequest.note`)."""
    answer_schema: JSONObject | None = None
    """For a question (an MCP server's elicitation): the schema the answer must match
    (:attr:`ApprovalRequest.answer_schema`)."""
    covered_by: Approved | None = None
    """A person's approval that already covers these exact arguments (a whole plan's,
    with ``plan_approval_covers_gates``): it answers where a person would be asked. A
    policy's denial still denies."""
    recheck: str | None = None
    """Why a person must decide this call (again) whatever its policy says — a plan step
    whose dependency a person edited — or ``None``. A policy may still deny."""
    edit_problem: Callable[[JSONObject], str | None] | None = None
    """What the tool's schema finds wrong with an edit (:attr:`ApprovalRequest.edit_problem`)."""


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
    judge_after: Gate | None = None
    """The gate whose policy judges the call once the person has answered, unless they
    edited it (a resumed run: an edit is judged on the arguments it runs with)."""


async def authorize(ctx: Context, **call: Any) -> Verdict | Pending:
    """Decide whether one call may run: :func:`authorize_all` of ``Ask(ctx=ctx, **call)``
    (``tool``, ``effect``, ``args``, ``call_id``, ``gate``, and optionally the other
    fields of :class:`Ask`)."""
    return (await authorize_all([Ask(ctx=ctx, **call)]))[0]


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
        if j.judge_after is not None and not isinstance(answer, Edited):
            again = await j.judge_after.run_policy(
                _as_dict(a.args), effect=str(a.effect), tool=a.tool
            )
            answer = again if isinstance(again, Denied) else answer
        if answer is None:
            verdicts.append(Pending(j.request))
        else:
            a.ctx.emit(EventType.GATE_DECIDED, _decision_data(a, answer))
            verdicts.append(answer)
    return verdicts


def _journal_entries(a: Ask, j: _Judged) -> list[tuple[str, EventType, JSONObject]]:
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
    if gate is None and tainted_by is None and a.recheck is None:
        return _Judged(verdict=Approved(by="no-gate"))
    recorded = _decided_for(a)
    if recorded is not None:
        return _Judged(verdict=verdict_from_data(recorded))
    asked = ctx.journal.recall(_key(a, "gate_requested"))
    if asked is not None:
        # Once a person was asked (the run paused), only they decide; the policy, asked
        # again on resume, may still deny, but its approval must not overrule their denial.
        # Their answer comes first: an edit replaces these arguments, and the executor
        # judges the edited ones (a denial of the replaced ones must not deny it).
        request = _request(a, str(asked["reason"]), json_str(asked.get("tainted_by")))
        return _Judged(request=request, asked=True, judge_after=gate)
    first = (
        await gate.run_policy(_as_dict(a.args), effect=effect, tool=a.tool) if gate else Escalate()
    )
    person = tainted_by is not None or a.recheck is not None
    verdict = _without_human(first, gate, person)
    if verdict is None:
        verdict = a.covered_by
    if verdict is not None:
        return _Judged(verdict=verdict, new=True)
    reason = a.recheck or _human_reason(first, tainted_by)
    return _Judged(request=_request(a, reason, tainted_by))


def _decided_for(a: Ask) -> JSONObject | None:
    """The journaled decision on ``a``'s call, if it was made for these arguments.

    A resumed step may make its call with other arguments than before (a plain step
    upstream ran again and read a changed world): a decision bound to the call's id alone
    would let a policy's approval of 40 pay 4,000. Such a call is judged afresh.
    """
    recorded = a.ctx.journal.recall(_key(a, "gate_decided"))
    if recorded is None:
        return None
    made_for = recorded.get("args_hash")  # absent from logs written before it was kept
    return recorded if made_for in (None, args_hash(a.tool, a.args)) else None


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
        at_stake_unit=a.at_stake_unit,
        note=a.note,
        answer_schema=a.answer_schema,
        edit_problem=a.edit_problem or _answer_check(a.answer_schema),
    )


def _answer_check(schema: JSONObject | None) -> Callable[[JSONObject], str | None] | None:
    """For a question (its answer's JSON schema), what the schema finds wrong with an answer
    a person types, so a terminal asks again (``loopwise approve`` refuses it the same)."""
    return None if schema is None else partial(answer_problem, schema)


def answer_problem(schema: JSONMapping, answer: object) -> str | None:
    """What ``schema`` (a question's, as an MCP server's elicitation or a cascade's label
    pick declares it) finds wrong with a person's ``answer`` — its first five problems —
    or ``None`` when it matches."""
    from jsonschema import Draft202012Validator  # a question's answers only

    found = sorted(Draft202012Validator(schema).iter_errors(answer), key=lambda e: e.path)
    said = "; ".join(
        f"{'.'.join(map(str, e.absolute_path)) or '(answer)'}: {e.message}" for e in found[:5]
    )
    return f"the answer does not match the question's schema: {said}" if found else None


async def recheck_edited(
    gate: Gate | PolicyFn | None,
    tool: str,
    args: BaseModel | JSONMapping,
    ctx: Context | None = None,
) -> Denied | None:
    """The policy's denial of edited arguments, or ``None`` when they may run.

    A person's edit answers an escalation, so only a denial counts: arguments the policy
    refuses do not run because a person typed them. ``ctx`` is what a policy with a
    ``ctx`` parameter gets (default: the running run's context).
    """
    checked = _as_gate(gate, tool)
    if checked is None or checked.check is None:
        return None
    verdict = await checked.run_policy(_as_dict(args), ctx=ctx, tool=tool)
    return verdict if isinstance(verdict, Denied) else None


def _as_dict(args: Any) -> Any:
    """Policies see a dict of the validated arguments, from an agent or a hybrid alike.

    Always a copy: a policy that changes what it is given must not change what the
    person is shown and the hash binds (while the call runs with the original).
    """
    # getattr: a pydantic model, known by its method (this module loads without pydantic).
    dump = getattr(args, "model_dump", None)
    return dump() if callable(dump) else copy.deepcopy(args)


def _as_gate(gate: object, tool: str) -> Gate | None:
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
    first: Approved | Denied | Escalate, gate: Gate | None, person: bool
) -> Verdict | None:
    """The verdict when no person is needed, or ``None`` when one must be asked
    (``person``: one must be, whatever the policy approves)."""
    if isinstance(first, Denied):
        return first
    if person:
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


def _decision_data(a: Ask, verdict: Verdict) -> JSONObject:
    data: JSONObject = {
        "key": _key(a, "gate_decided"),
        "approval_id": a.call_id,
        "call_id": a.call_id,
        "tool": a.tool,
        "decision": _decision_name(verdict),
        "args_hash": args_hash(a.tool, a.args),
        "by": verdict.by,
        "reason": verdict.reason,
        # A person's decision was made at `loopwise approve` time, before this event.
        "decided_at": verdict.at or datetime.now(UTC).isoformat(),
    }
    if isinstance(verdict, Edited):
        # What the person changed, beside what runs: the audit log says both.
        data["args"] = jsonable(verdict.args)
        data["edited_hash"] = args_hash(a.tool, verdict.args)
        data["changed"] = changed_fields(jsonable(a.args), data["args"])
    return data


def _decision_name(verdict: Verdict) -> str:
    if isinstance(verdict, Approved):
        return "approved"
    return "denied" if isinstance(verdict, Denied) else "edited"


def pause(pending: list[Pending]) -> Halt:
    """The :class:`Halt` that ends a run ``awaiting_approval`` with every request listed."""
    names = ", ".join(f"{p.request.tool} ({p.request.approval_id})" for p in pending)
    return Halt(
        Status.AWAITING_APPROVAL,
        f"{len(pending)} call(s) await approval: {names}",
        pending=[p.request.to_dict() for p in pending],
    )
