"""What the workflow, its activities and the store send each other through Temporal: plain
JSON, named here so each side reads the same shape (no SDK).

Temporal hands these over as plain dicts: a workflow's or an activity's own parameters stay
``dict[str, Any]``, which Temporal's converter reads as "JSON as sent" (it converts a
payload by its parameter's annotation at run time, and a recursive JSON alias is no type it
can convert to); what is read from them and what is answered is one of these.
"""

from __future__ import annotations

from typing import NotRequired, Required, TypedDict

from loopwise.core.jsontypes import JSONObject, JSONValue
from loopwise.models.port import DecisionBackend, StructuredMode

__all__ = [
    "Carried",
    "Decision",
    "Declared",
    "JudgeAnswer",
    "ModelAnswer",
    "RunMemo",
    "RunSummary",
    "ToolAnswer",
]


class Carried(TypedDict):
    """What a run continuing as a new workflow run carries over (continue-as-new)."""

    events: list[JSONObject]
    """Its log so far (each :meth:`~loopwise.core.events.Event.to_dict`)."""
    approvals: list[JSONObject]
    """Its approvals (each :meth:`~loopwise.store.base.StoredApproval.to_dict`)."""
    wall_seconds: float
    """The wall time it had used."""


class Declared(TypedDict, total=False):
    """The ``loopwise.load`` activity's answer: what the run's model declares, or why the
    target or model cannot be made on the worker (``error``)."""

    error: str
    structured_mode: StructuredMode | None
    decision_backends: list[DecisionBackend]
    endpoint: list[str] | None
    """The real model's ``[base URL, model name]``, when it has one."""


class ModelAnswer(TypedDict, total=False):
    """The ``loopwise.model`` activity's answer: the turn, or the error the call raised."""

    turn: JSONObject
    error: str
    status_code: int | None


class ToolAnswer(TypedDict, total=False):
    """The ``loopwise.tool`` activity's answer: the tool's value, or how its call ended."""

    value: JSONValue
    halt: str
    """A :class:`~loopwise.core.step.Status` the call ended the run with."""
    detail: str | None
    timeout: bool
    raised: str
    """The type name of the exception the call raised."""
    message: str


class JudgeAnswer(TypedDict, total=False):
    """The ``loopwise.judge`` local activity's answer: a policy's verdict."""

    verdict: Required[str]
    """``approved``, ``escalate`` or ``denied``."""
    by: str | None
    reason: str | None


class Decision(TypedDict):
    """The payload of a decision signal (:meth:`~.book.Book.signal`)."""

    approval_id: str
    decision: str
    by: str | None
    at: str | None
    reason: str | None
    edited_args: JSONValue


class RunSummary(TypedDict):
    """How a run ended, as the workflow returns it and publishes it in its memo."""

    status: str
    detail: str | None
    output: JSONValue
    usage: NotRequired[JSONObject]
    """What it used (none when its target or model could not be made on the worker)."""
    events: list[JSONObject] | None
    """The log, or ``None`` when too long for the memo (read it by query)."""


class RunMemo(TypedDict, total=False):
    """The workflow's memo (:data:`~.address.MEMO_KEY`): what a client reads without a
    worker. The store writes the first keys when it starts the run; the workflow adds its
    :class:`RunSummary`, approvals and ``updated_at`` at each pause and at the end."""

    target: str
    spec: str
    input: JSONValue
    model: str | None
    options: JSONObject
    status: str
    created_at: str
    detail: str | None
    output: JSONValue
    usage: JSONObject
    events: list[JSONObject] | None
    approvals: list[JSONObject]
    updated_at: str
