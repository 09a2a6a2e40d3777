"""The conversation rules of the SQL stores, as functions of an open transaction: the
number of a conversation's next message (:func:`next_turn`, refusing it while the last
run is running, queued or paused) and the refusal to resume a run a later message
followed (:func:`refuse_superseded`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loopwise.core.events import Status
from loopwise.errors import ConversationError
from loopwise.store.base import QUEUED, Tx

__all__ = ["busy", "next_turn", "paused", "refuse_superseded"]


def next_turn(tx: Tx, conversation: str, target: str, *, locking: str = "") -> int:
    """The number of the conversation's next message: its last run must be of
    ``target`` and done (not running, queued, or waiting for approvals).
    ``locking`` makes the read lock the row it reads (the store's dialect)."""
    rows = tx.rows(
        "SELECT id, target, status, turn FROM runs WHERE conversation = ? "
        f"ORDER BY turn DESC LIMIT 1{locking}",
        (conversation,),
    )
    if not rows:
        return 1
    last = rows[0]
    if last["target"] != target:
        raise ConversationError(
            f"conversation {conversation!r} belongs to {last['target']!r}, not {target!r}; "
            "use a new conversation id for this target",
            conversation=conversation,
            code="other-target",
        )
    if last["status"] == QUEUED:
        raise busy(conversation, f"its run {last['id']} is queued for a worker")
    if last["status"] == "running":
        raise busy(
            conversation,
            f"its run {last['id']} is still running; if its process is gone, finish it "
            f"first with loopwise resume {last['id']}",
        )
    if last["status"] == Status.AWAITING_APPROVAL.value:
        raise paused(tx, conversation, str(last["id"]))
    return int(last["turn"]) + 1


def busy(conversation: str, why: str) -> ConversationError:
    return ConversationError(
        f"conversation {conversation!r} is answering another message ({why}); send this one "
        "when it has finished",
        conversation=conversation,
        code="busy",
    )


def paused(tx: Tx, conversation: str, run_id: str) -> ConversationError:
    """The refusal of a message to a conversation whose last run waits for people."""
    rows = tx.rows(
        "SELECT approval_id, tool FROM approvals WHERE run_id = ? AND status = 'pending' "
        "ORDER BY requested_at",
        (run_id,),
    )
    if rows:
        waiting = ", ".join(f"{r['approval_id']} ({r['tool']})" for r in rows)
        todo = (
            f"waits for approval(s) {waiting}; decide them (loopwise approve/deny {run_id}), "
            f"then resume it (loopwise resume {run_id})"
        )
    else:
        todo = (
            f"has every approval decided but was not resumed; resume it (loopwise resume {run_id})"
        )
    return ConversationError(
        f"conversation {conversation!r} cannot take a new message: its run {run_id} {todo}",
        conversation=conversation,
        code="paused",
    )


def refuse_superseded(tx: Tx, run_id: str, row: Mapping[str, Any]) -> None:
    """A run of a conversation continues only while it is the conversation's last: once a
    later message was sent, resuming it would interleave two exchanges."""
    later = tx.rows(
        "SELECT id FROM runs WHERE conversation = ? AND turn > ? ORDER BY turn LIMIT 1",
        (row["conversation"], row["turn"]),
    )
    if later:
        raise ConversationError(
            f"run {run_id!r} cannot continue: conversation {row['conversation']!r} went on "
            f"with run {later[0]['id']}; send a new message instead",
            conversation=str(row["conversation"]),
            code="superseded",
        )
