"""Deciding approvals, and what a person sees before deciding.

:func:`decide` is the one way a person's decision reaches the store: ``loopwise
approve``/``deny`` and the inbox (``loopwise serve``) both call it, so a decision is
checked the same way wherever it is made, *when* it is made:

* it is bound to the arguments the person saw (``seen_hash``,
  :func:`~loopwise.tools.gates.args_hash`):
  when they are not the request's any more, nothing is decided (``stale``);
* edited arguments are loaded against the run's target, validated by the tool's schema
  and judged by its policies (:func:`loopwise.tools.edits.judge_edit`, the same judgement the
  executor makes again before the call runs); an edit that fails is refused and the
  approval stays pending;
* a whole-plan approval is approved or denied, never edited;
* a denial says why (the model, or the planner, reads it);
* who decides (``by``) is a name printed back to the people who read the run, so it
  holds no control character (:func:`loopwise.core.names.shown_name_problem`).

A refused decision raises :class:`~loopwise.errors.DecisionError` (its ``code`` says
why) and changes nothing. :func:`view` gathers what the decider is shown: the planner's
reason for the step, the plan around it with each step's state, the money at stake when
the action estimates it, and the decisions already made on the run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loopwise.core.events import Event, EventType
from loopwise.core.jsontypes import JSONMapping, JSONObject, JSONValue, json_list, json_object
from loopwise.core.names import shown_name_problem
from loopwise.errors import AnswerError, DecisionError
from loopwise.store.base import EventLog, RunStore, StoredApproval, not_pending
from loopwise.store.sql import SQLStore

if TYPE_CHECKING:
    from loopwise.core.step import Step

# Checking an edit loads the run's target, its tools and pydantic; listing and plain
# approvals (`loopwise pending/approve/deny`) must not: those imports are made where used.

__all__ = [
    "SHORTEST_HASH",
    "WHOLE_PLAN",
    "ApprovalView",
    "PlanItem",
    "asked_again",
    "check_decider",
    "decide",
    "plan_items",
    "view",
    "views",
]

WHOLE_PLAN = "approve_plan"
"""The action name of a hybrid's whole-plan approval (``approve_plan=True``)."""


def decide(
    store: RunStore,
    run_id: str,
    approval_id: str,
    *,
    decision: str,
    by: str,
    reason: str | None = None,
    edited_args: Mapping[str, object] | None = None,
    seen_hash: str | None = None,
    deps: object = None,
    step: Step | None = None,
) -> StoredApproval:
    """Record a person's ``decision`` (``approved`` or ``denied``) on a pending approval.

    ``edited_args`` approves other arguments (any mapping of JSON data, checked first and
    copied: see the module docstring);
    ``seen_hash`` binds the decision to the arguments the person saw. A policy judging an
    edit gets a context whose ``deps`` are ``deps`` or, without them, what the run's
    target module's ``make_deps()`` makes (the factory ``loopwise resume`` uses; called
    only when an edit is checked). An edit is checked against the run's step: ``step``
    when given (as ``resume(step=...)``), else the one its recorded spec loads, else, for
    a run of a script's ``__main__`` (no spec), the step of the run's name defined there
    (:func:`loopwise.running.deciding.check_edit`). Returns the decided approval; raises
    :class:`DecisionError` (nothing recorded) when it is refused, and
    :class:`~loopwise.errors.ConfigError` for an unknown run.
    """
    if decision not in {"approved", "denied"}:
        raise DecisionError(f"a decision is approved or denied, not {decision!r}", name="decision")
    by = check_decider(by)
    edited = None if edited_args is None else _checked_shape(edited_args)
    found = _pending(store, run_id, approval_id)
    seen_hash = _seen(found, seen_hash)
    if decision == "denied" and not (reason or "").strip():
        raise DecisionError(
            "a denial needs a reason (the model reads it)", name=approval_id, code="no-reason"
        )
    changed = edited is not None and _differ(found, edited)
    if edited is not None and found.tool == WHOLE_PLAN:
        raise DecisionError(
            f"approval {approval_id!r} of run {run_id!r} approves a whole plan: it is approved "
            "or denied, not edited (deny it with a reason to have it planned again)",
            name=approval_id,
            code="not-editable",
        )
    question = _answer_schema(store, found)
    if question is not None:
        if decision == "approved":  # the answer is the arguments approved, edited or not
            _check_answer(question, edited if edited is not None else found.args)
    elif changed:
        assert edited is not None
        # What is recorded is what runs: the arguments as the tool's schema read them.
        from loopwise.running.deciding import check_edit  # loads the target and pydantic

        edited = check_edit(store, found, edited, deps=deps, step=step)
        changed = _differ(found, edited)
    return store.decide(
        run_id,
        approval_id,
        decision="edited" if changed else decision,
        by=by,
        reason=reason,
        edited_args=edited if changed else None,
        seen_hash=seen_hash,
    )


def check_decider(by: object) -> str:
    """``by`` when it can name who decides; else :class:`DecisionError` (``name="by"``,
    ``code="bad-name"``) saying which character, where (the module docstring)."""
    # Spaces around a name are no part of it (the inbox strips its field the same way).
    by = by.strip() if isinstance(by, str) else by
    problem = shown_name_problem(by)
    if problem is None:
        return str(by)
    raise DecisionError(
        f"the decider's name {by!r} {problem}; nothing was decided", name="by", code="bad-name"
    )


def _checked_shape(edited: object) -> JSONObject:
    """Edited arguments as a JSON object of their own (a copy: what is recorded is not the
    caller's to change after), or refused before anything reads them: not an object,
    nested deeper than a call's arguments may be, or not JSON (a number too long to
    write, a NaN); read or hashed further, they would fail or recurse past the stack."""
    from loopwise.core.events import jsonable, nests_deeper_than
    from loopwise.tools.arguments import MAX_DEPTH

    problem = None
    copied: JSONObject = {}
    if not isinstance(edited, Mapping):
        problem = f"must be a JSON object, not {type(edited).__name__}"
    elif nests_deeper_than(edited, MAX_DEPTH):
        problem = f"nest objects and arrays deeper than {MAX_DEPTH} levels"
    else:
        copied = jsonable({str(k): v for k, v in edited.items()})
        try:
            json.dumps(copied, allow_nan=False)
        except ValueError as e:  # a 5,000-digit int, a NaN
            problem = f"are not JSON data ({str(e)[:120]})"
    if problem is not None:
        raise DecisionError(
            f"the edited arguments {problem}; nothing was decided (send flatter, plain JSON "
            "arguments, or approve or deny as asked)",
            name="args",
            code="invalid-args",
        )
    return copied


SHORTEST_HASH = 8
"""The fewest leading hex digits of an arguments hash that ``seen_hash`` may give."""


def _seen(found: StoredApproval, seen_hash: str | None) -> str | None:
    """The full hash ``seen_hash`` (all of it, or a prefix a person copied) stands for."""
    if seen_hash is None:
        return None
    given = seen_hash.strip().lower()
    if len(given) < SHORTEST_HASH or any(c not in "0123456789abcdef" for c in given):
        raise DecisionError(
            f"the arguments hash {seen_hash[:80]!r} is not one: give the hash `loopwise "
            f"pending` shows ({SHORTEST_HASH} or more hex digits)",
            name="seen_hash",
            code="stale",
        )
    # The store checks the full hash again in the transaction that writes the decision.
    return found.args_hash if found.args_hash.startswith(given) else given


def asked_again(approval: StoredApproval, events: Sequence[Event]) -> bool:
    """Whether ``approval`` was asked after its run had paused before: a listing of the
    run's pending approvals from then showed other asks than this one."""
    asked = _request_event(approval, events)
    return any(
        e.type is EventType.RUN_PAUSED and (asked is None or e.seq < asked.seq) for e in events
    )


def _differ(found: StoredApproval, edited: JSONMapping) -> bool:
    from loopwise.tools.verdicts import args_hash

    return args_hash(found.tool, edited) != found.args_hash


def _pending(store: RunStore, run_id: str, approval_id: str) -> StoredApproval:
    """The approval, pending; ``seen_hash`` is checked where the decision is written."""
    store.get_run(run_id)
    found = store.approval(run_id, approval_id)
    if found is None:
        raise DecisionError(
            f"run {run_id!r} has no approval {approval_id!r}",
            name=approval_id,
            code="unknown-approval",
        )
    if found.status != "pending":
        raise not_pending(run_id, approval_id, found.status)
    return found


def _answer_schema(store: EventLog, found: StoredApproval) -> JSONObject | None:
    """The schema an answer must match when the approval asks a question (an MCP
    server's elicitation), from the request in the run's log; ``None`` for a call."""
    asked = _request_event(found, store.events(found.run_id))
    schema = asked.data.get("answer_schema") if asked is not None else None
    return schema if isinstance(schema, dict) else None


def _check_answer(schema: JSONObject, answer: object) -> None:
    """Refuse an answer that does not match the question's schema (nothing is recorded)."""
    from loopwise.tools.gates import answer_problem  # the terminal checks it the same way

    problem = answer_problem(schema, answer)
    if problem is not None:
        raise AnswerError(
            f"{problem} (answer with --args, a JSON object matching {json.dumps(schema)[:300]})",
            problem=problem,
            schema=schema,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanItem:
    """One step of a proposed plan, as the run has it so far."""

    id: str
    """The plan's step id (``s1``)."""
    action: str
    """The action it runs."""
    args: JSONValue
    """Its arguments as planned."""
    depends_on: tuple[str, ...]
    """The steps it waits for."""
    reason: str
    """The planner's one line on why it is needed."""
    effect: str | None
    """``read``/``write``/``irreversible`` when the log says; ``None`` when not yet."""
    state: str
    """``planned``, ``pending`` (waits for a person), ``approved``, ``done``,
    ``denied``, ``skipped`` or ``failed``."""
    approval_id: str | None = None
    """The approval that gates it, when one was asked."""
    ran_with: JSONValue = None
    """The arguments it ran with when a person's edit replaced :attr:`args` (the
    planner's proposal); ``None`` when it ran as planned or has not run."""
    edited_by: str | None = None
    """Who edited the arguments it ran with, when somebody did."""

    def to_dict(self) -> JSONObject:
        """A JSON-ready dict (``ran_with`` and ``edited_by`` when a person's edit ran)."""
        return {
            "id": self.id,
            "action": self.action,
            "args": self.args,
            "depends_on": list(self.depends_on),
            "reason": self.reason,
            "effect": self.effect,
            "state": self.state,
            "approval_id": self.approval_id,
            **({"ran_with": self.ran_with, "edited_by": self.edited_by} if self.ran_with else {}),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalView:
    """An approval with what a person needs to decide it."""

    approval: StoredApproval
    """The request (and its decision, once made)."""
    why: str | None = None
    """The planner's reason for this step, when a plan proposed it."""
    plan: tuple[PlanItem, ...] = ()
    """The plan around it (empty when no plan proposed it)."""
    plan_step: str | None = None
    """Its step id in :attr:`plan`."""
    at_stake: float | None = None
    """What the action estimates it costs (money), when it says."""
    at_stake_unit: str | None = None
    """What :attr:`at_stake` is in (a currency code or a unit), when the action declares it."""
    note: str | None = None
    """What else the request says (e.g. that the plan was approved and why this step
    asks again), when anything."""
    target: str | None = None
    """The name of the step the run runs (from its ``run_started`` event)."""
    editable: bool = True
    """Whether its arguments may be edited (not a whole-plan approval)."""
    decided: tuple[StoredApproval, ...] = field(default=())
    """The run's other approvals that were decided already (who decided what)."""
    answer_schema: JSONObject | None = None
    """For a question (an MCP server's elicitation): the schema the answer must match."""

    def to_dict(self) -> JSONObject:
        """The approval's fields plus ``why``, ``plan``, ``plan_step``, ``at_stake``,
        ``at_stake_unit``,
        ``note``, ``target``, ``editable`` and ``decided``
        (``[{approval_id, tool, status, decided_by, ...}]``); ``answer_schema`` for a
        question."""
        return {
            **self.approval.to_dict(),
            "why": self.why,
            "plan": [p.to_dict() for p in self.plan],
            "plan_step": self.plan_step,
            "at_stake": self.at_stake,
            "at_stake_unit": self.at_stake_unit,
            "note": self.note,
            "target": self.target,
            "editable": self.editable,
            "decided": [_decision(a) for a in self.decided],
            **({"answer_schema": self.answer_schema} if self.answer_schema is not None else {}),
        }


def _decision(a: StoredApproval) -> JSONObject:
    return {
        "approval_id": a.approval_id,
        "tool": a.tool,
        "status": a.status,
        "decided_by": a.decided_by,
        "decided_at": a.decided_at,
        "decision_reason": a.decision_reason,
    }


def views(store: RunStore, approvals: Sequence[StoredApproval]) -> list[ApprovalView]:
    """:func:`view` of each approval, reading each run's log once (a SQL store reads the
    logs and approvals of all the runs together: two queries for a page, not two a run)."""
    runs = list(dict.fromkeys(a.run_id for a in approvals))
    logs: Mapping[str, list[Event]]
    rows: Mapping[str, list[StoredApproval]]
    if isinstance(store, SQLStore):
        logs, rows = store.events_of(runs), store.approvals_of(runs)
    else:
        logs = {run_id: store.events(run_id) for run_id in runs}
        rows = {run_id: store.approvals(run_id) for run_id in runs}
    return [view(a, logs[a.run_id], rows[a.run_id]) for a in approvals]


def view(
    approval: StoredApproval, events: Sequence[Event], approvals: Sequence[StoredApproval]
) -> ApprovalView:
    """What to show about ``approval``, from its run's log and approvals."""
    asked = _request_event(approval, events)
    data = asked.data if asked is not None else {}
    hybrid, round_no, sid = _plan_place(approval)
    plan = plan_items(events, approvals, hybrid=hybrid, before=asked.seq if asked else None)
    mine = next((p for p in plan if p.id == sid and round_no is not None), None)
    schema = data.get("answer_schema")
    return ApprovalView(
        approval=approval,
        why=_text(data.get("why")) or (mine.reason if mine else None),
        plan=plan,
        plan_step=mine.id if mine else None,
        at_stake=_number(data.get("at_stake", _args_field(approval, "estimated_cost"))),
        at_stake_unit=_text(data.get("at_stake_unit")),
        note=_text(data.get("note")),
        target=next(
            (str(e.data.get("target")) for e in events if e.type is EventType.RUN_STARTED), None
        ),
        editable=approval.tool != WHOLE_PLAN,
        decided=tuple(a for a in approvals if a.status != "pending"),
        answer_schema=schema if isinstance(schema, dict) else None,
    )


def _args_field(approval: StoredApproval, name: str) -> JSONValue:
    return approval.args.get(name) if isinstance(approval.args, Mapping) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _request_event(approval: StoredApproval, events: Sequence[Event]) -> Event | None:
    for e in events:
        if (
            e.type is EventType.GATE_REQUESTED
            and e.data.get("approval_id") == approval.approval_id
            and e.step == approval.step
        ):
            return e
    return None


def _plan_place(approval: StoredApproval) -> tuple[str | None, int | None, str | None]:
    """The hybrid's step path, the round and the plan step id an approval belongs to.

    A plan action's gate asks at ``{hybrid}/execute[_N]/{step id}``; a whole-plan
    approval at ``{hybrid}`` itself.
    """
    if approval.tool == WHOLE_PLAN:
        return approval.step, None, None
    parts = approval.step.rsplit("/", 2)
    if len(parts) != 3:
        return None, None, None
    hybrid, execute, sid = parts
    round_no = _round_of(execute)
    return (hybrid, round_no, sid) if round_no is not None else (None, None, None)


def _round_of(execute: str) -> int | None:
    if execute == "execute":
        return 1
    head, _, n = execute.rpartition("_")
    return int(n) if head == "execute" and n.isdigit() else None


def _plans(events: Sequence[Event], hybrid: str | None) -> list[tuple[str, Event]]:
    """Each accepted plan of the run as ``(hybrid path, event)``, in order."""
    found = []
    for e in events:
        if e.type is EventType.STEP_FINISHED and e.step.endswith("/validate"):
            where = e.step.removesuffix("/validate")
            if isinstance(e.data.get("plan"), Mapping) and hybrid in (None, where):
                found.append((where, e))
    return found


def plan_items(
    events: Sequence[Event],
    approvals: Sequence[StoredApproval],
    *,
    hybrid: str | None = None,
    before: int | None = None,
) -> tuple[PlanItem, ...]:
    """The latest plan a hybrid of the run proposed (before event ``before``), each step
    with its state; empty when no plan was proposed."""
    plans = _plans(events, hybrid)
    if before is not None:
        plans = [(h, e) for h, e in plans if e.seq < before]
    if not plans:
        return ()
    where, latest = plans[-1]
    round_no = sum(1 for h, _ in plans if h == where)
    execute = f"{where}/execute" + ("" if round_no == 1 else f"_{round_no}")
    steps = json_list(json_object(latest.data["plan"]).get("steps"))
    effects = latest.data.get("effects")
    planned = effects if isinstance(effects, Mapping) else {}
    return tuple(
        _item(s, execute, events, approvals, planned.get(str(s.get("id"))))
        for s in steps
        if isinstance(s, Mapping)
    )


def _item(
    s: JSONMapping,
    execute: str,
    events: Sequence[Event],
    approvals: Sequence[StoredApproval],
    effect: JSONValue,
) -> PlanItem:
    path = f"{execute}/{s.get('id')}"
    # A step asked again after an edit upstream (architectures/edits.py) has two: the
    # one still waiting is its state, else the latest.
    mine = [a for a in approvals if a.step == path]
    asked = next((a for a in mine if a.status == "pending"), mine[-1] if mine else None)
    # A plan records each step's effect (older runs' logs may not: then from its ask or call).
    ran = _finished(path, events)
    edit = ran if isinstance(ran.get("ran_with"), Mapping) else {}
    return PlanItem(
        id=str(s.get("id")),
        action=str(s.get("action")),
        args=s.get("args"),
        depends_on=tuple(str(d) for d in json_list(s.get("depends_on"))),
        reason=str(s.get("reason") or ""),
        effect=str(effect) if effect else _effect(path, events, asked),
        state=_state(ran, path, events, asked),
        approval_id=asked.approval_id if asked else None,
        ran_with=edit.get("ran_with"),
        edited_by=str(edit["edited_by"]) if edit.get("edited_by") else None,
    )


def _effect(path: str, events: Sequence[Event], asked: StoredApproval | None) -> str | None:
    if asked is not None and asked.effect:
        return asked.effect
    for e in events:
        if e.step.startswith(path) and e.type is EventType.TOOL_CALL and e.data.get("effect"):
            return str(e.data["effect"])
    return None


_FINAL = {"done", "denied", "skipped", "failed"}


def _finished(path: str, events: Sequence[Event]) -> JSONMapping:
    """The plan step's result as its last ``step_finished`` recorded it (its ``status``,
    and ``ran_with``/``edited_by`` when an edit ran); empty before it finished."""
    for e in reversed(events):
        if e.step == path and e.type is EventType.STEP_FINISHED:
            output = e.data.get("output")
            if isinstance(output, Mapping) and output.get("status") in _FINAL:
                return output
    return {}


def _state(
    ran: JSONMapping, path: str, events: Sequence[Event], asked: StoredApproval | None
) -> str:
    if ran:
        return str(ran["status"])
    if asked is not None:
        return {"edited": "approved"}.get(asked.status, asked.status)
    for e in reversed(events):
        if e.step == path and e.type is EventType.GATE_DECIDED:
            return "denied" if e.data.get("decision") == "denied" else "approved"
    return "planned"
