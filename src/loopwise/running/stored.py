"""A stored run read back: its input as the type its target declares, its end as a
:class:`~loopwise.core.result.RunResult`.

:func:`stored_result` is what resuming a run that finished (or still waits for a person)
returns without running anything, and what a run on Temporal reads from the store;
:func:`typed_input` turns the stored JSON input back into the target's pydantic input.
"""

from __future__ import annotations

from pydantic import BaseModel

from loopwise.core.events import Event, EventType, Status
from loopwise.core.jsontypes import JSONObject, JSONValue
from loopwise.core.members import step_member
from loopwise.core.result import RunResult
from loopwise.core.step import Step
from loopwise.core.usage import Usage
from loopwise.store.base import EventLog, StoredApproval, StoredRun
from loopwise.tools.verdicts import ApprovalRequest

__all__ = ["stored_result", "typed_input"]


def typed_input(target: Step, stored: JSONValue) -> object:
    """The stored (JSON) input as the type the target declares, when it is a pydantic model."""
    kind = step_member(target, "input_type")
    if isinstance(kind, type) and issubclass(kind, BaseModel) and isinstance(stored, dict):
        return kind.model_validate(stored)
    return stored


def stored_result(
    st: EventLog, row: StoredRun, *, pending: list[StoredApproval] | None = None
) -> RunResult:
    """A run as the store has it (resuming a finished or still-waiting run changes nothing;
    a run on Temporal, read from its workflow)."""
    try:
        status = Status(row.status)
    except ValueError:  # `running`: killed after asking a person, before pausing
        status = Status.AWAITING_APPROVAL if pending else Status.ERROR
    events = st.events(row.run_id)
    return RunResult(
        run_id=row.run_id,
        status=status,
        output=row.output,
        usage=Usage.from_dict(row.usage or {}),
        events=events,
        detail=row.detail or (f"{len(pending)} approval(s) still undecided" if pending else None),
        pending=[_public_request(p, events) for p in pending or []],
    )


_REQUEST_KEYS = ApprovalRequest.__dataclass_fields__.keys()


def _public_request(approval: StoredApproval, events: list[Event]) -> JSONObject:
    """A stored approval as the request a paused run lists (no decision fields); what
    the store keeps no column for (the planner's reason, the money at stake, the note)
    is read from the request's event."""
    row = approval.to_dict()
    asked = next(
        (
            e.data
            for e in events
            if e.type is EventType.GATE_REQUESTED
            and e.data.get("approval_id") == approval.approval_id
            and e.step == approval.step
        ),
        {},
    )
    return {k: row[k] if k in row else asked.get(k) for k in _REQUEST_KEYS}
