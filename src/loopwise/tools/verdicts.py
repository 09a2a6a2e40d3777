"""What a gate decides, as plain data: verdicts and the request a person answers.

Verdicts are values: :class:`Approved`, :class:`Denied` (with a reason) and
:class:`Edited` (approved with new arguments, validated again by the caller);
:class:`Escalate` is a policy's "a person must decide". A request for a person is plain
data (:class:`ApprovalRequest`) bound to the exact tool and arguments by
:func:`args_hash`; :class:`Pending` is one still undecided. The gates that produce them
are :mod:`loopwise.tools.gates`'s, which re-exports every name here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loopwise.core.events import jsonable
from loopwise.core.jsontypes import JSONObject

__all__ = [
    "ApprovalRequest",
    "Approved",
    "Denied",
    "Edited",
    "Escalate",
    "Pending",
    "Verdict",
    "args_hash",
    "denial_message",
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
    at_stake_unit: str | None = None
    """What :attr:`at_stake` is in (``"EUR"``, ``"credits"``), when the action declares it."""
    note: str | None = None
    """What else the person should know about this ask (a plan approved already, and why
    its step still asks), when anything."""
    answer_schema: JSONObject | None = None
    """For a question rather than a call (an MCP server's elicitation): the JSON schema
    the person's answer — the edited arguments — must match."""
    edit_problem: Callable[[JSONObject], str | None] | None = field(
        default=None, compare=False, repr=False
    )
    """What the tool's schema finds wrong with edited arguments (read strictly, as the
    executor reads them before the call runs), or ``None`` when they fit; a handler asks
    it to refuse a bad edit while the person is there. ``None`` when no schema is known
    here (the executor still judges every edit). Not part of :meth:`to_dict`."""

    def to_dict(self) -> JSONObject:
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
            "at_stake_unit": self.at_stake_unit,
            "note": self.note,
            # Only a question has one: a call's request keeps its shape.
            **({"answer_schema": self.answer_schema} if self.answer_schema is not None else {}),
        }


@dataclass(frozen=True, slots=True)
class Pending:
    """No decision yet: the run must pause with this request outstanding."""

    request: ApprovalRequest
    """What waits for a person."""


def args_hash(tool: str, args: object) -> str:
    """A stable hash of a tool name and its arguments (canonical JSON, SHA-256)."""
    text = json.dumps([tool, jsonable(args)], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def verdict_from_data(data: dict[str, Any]) -> Verdict:
    """The verdict a ``gate_decided`` event (or an approvals row) records."""
    decision, by = data.get("decision"), str(data.get("by") or "human")
    reason, at = data.get("reason"), data.get("decided_at")
    if decision == "approved":
        return Approved(by=by, reason=reason, at=at)
    if decision == "edited":
        return Edited(dict(data.get("args") or {}), by=by, reason=reason, at=at)
    return Denied(str(reason or "denied"), by=by, at=at)


def denial_message(tool: str, verdict: Denied) -> str:
    """The error result a denied call answers with (the model reads it)."""
    return (
        f"the call to {tool!r} was denied by {verdict.by}: {verdict.reason}. It did not run; "
        "do not retry it with the same arguments."
    )
