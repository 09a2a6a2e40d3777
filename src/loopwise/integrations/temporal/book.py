"""A run's approvals as its workflow keeps them: the requests its log asked, the decisions
its gates and its signals made. Plain data, no SDK: the workflow keeps one, and a client
rebuilds one from the workflow's memo and the decisions signalled since.

The rules are the SQL store's (:mod:`loopwise.store.rows`): a request is kept once per
approval id (the first asks), and a decision closes a pending request only (the first
decision wins).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from loopwise.core.events import Event, EventType, jsonable
from loopwise.core.jsontypes import (
    JSONMapping,
    JSONObject,
    JSONValue,
    json_number,
    json_object,
    json_str,
)
from loopwise.errors import ConfigError, DecisionError
from loopwise.integrations.temporal.messages import Decision
from loopwise.store.base import (
    PAGE,
    ApprovalPage,
    StoredApproval,
    cursor_after,
    not_pending,
    place_of,
)

__all__ = ["DECISIONS", "Book", "event_of", "page_of"]

DECISIONS = frozenset({"approved", "denied", "edited"})
"""What a person's decision may be."""


class Book:
    """The approvals of one run, in the order they were asked."""

    def __init__(self, run_id: str, rows: list[StoredApproval] | None = None) -> None:
        self.run_id = run_id
        self._rows: dict[str, StoredApproval] = {r.approval_id: r for r in rows or []}

    @classmethod
    def from_dicts(cls, run_id: str, rows: list[dict[str, Any]]) -> Book:
        """A book from :meth:`to_dicts` (a workflow's memo)."""
        return cls(run_id, [StoredApproval(**row) for row in rows])

    def to_dicts(self) -> list[JSONObject]:
        """Every approval as JSON data."""
        return [r.to_dict() for r in self._rows.values()]

    def note(self, event: Event) -> None:
        """Keep what a ``gate_requested`` or ``gate_decided`` event says."""
        d = event.data
        if event.type is EventType.GATE_REQUESTED and str(d["approval_id"]) not in self._rows:
            self._rows[str(d["approval_id"])] = StoredApproval(
                run_id=self.run_id,
                approval_id=str(d["approval_id"]),
                step=event.step,
                tool=str(d["tool"]),
                call_id=json_str(d.get("call_id")),
                args=d.get("args"),
                effect=json_str(d.get("effect")),
                reason=json_str(d.get("reason")),
                tainted_by=json_str(d.get("tainted_by")),
                args_hash=str(d["args_hash"]),
                status="pending",
                requested_at=event.at,
                decided_by=None,
                decided_at=None,
                decision_reason=None,
                edited_args=None,
            )
        elif event.type is EventType.GATE_DECIDED and d.get("approval_id") is not None:
            edited = d.get("args") if d.get("decision") == "edited" else None
            self.close(
                str(d["approval_id"]),
                decision=str(d.get("decision")),
                by=json_str(d.get("by")),
                at=json_str(d.get("decided_at")) or event.at,
                reason=json_str(d.get("reason")),
                edited_args=edited,
            )

    def close(
        self,
        approval_id: str,
        *,
        decision: str,
        by: str | None,
        at: str | None,
        reason: str | None = None,
        edited_args: JSONValue = None,
    ) -> StoredApproval | None:
        """Close a pending approval with a decision; the approval after, or ``None`` when
        there is no such approval or it was decided already (the first decision wins)."""
        row = self._rows.get(approval_id)
        if row is None or row.status != "pending" or decision not in DECISIONS:
            return None
        row = replace(
            row,
            status=decision,
            decided_by=by,
            decided_at=at,
            decision_reason=reason,
            edited_args=edited_args,
        )
        self._rows[approval_id] = row
        return row

    def apply(self, signal: JSONMapping) -> StoredApproval | None:
        """Apply a decision as signalled (:meth:`signal`: a :class:`Decision`)."""
        return self.close(
            str(signal.get("approval_id")),
            decision=str(signal.get("decision")),
            by=json_str(signal.get("by")),
            at=json_str(signal.get("at")),
            reason=json_str(signal.get("reason")),
            edited_args=signal.get("edited_args"),
        )

    @staticmethod
    def signal(
        approval_id: str,
        *,
        decision: str,
        by: str,
        at: str,
        reason: str | None,
        edited_args: JSONValue,
    ) -> Decision:
        """The payload of a decision signal."""
        return {
            "approval_id": approval_id,
            "decision": decision,
            "by": by,
            "at": at,
            "reason": reason,
            "edited_args": edited_args,
        }

    def approval(self, run_id: str, approval_id: str) -> StoredApproval | None:
        """One approval, or ``None`` (what :class:`StoreApprovals` reads)."""
        return self._rows.get(approval_id) if run_id == self.run_id else None

    def approvals(self, run_id: str) -> list[StoredApproval]:
        """Every approval, decided or not."""
        return list(self._rows.values()) if run_id == self.run_id else []

    def pending(self, run_id: str | None = None) -> list[StoredApproval]:
        """The undecided approvals."""
        if run_id not in (None, self.run_id):
            return []
        return [r for r in self._rows.values() if r.status == "pending"]

    def pending_page(self, *, limit: int = PAGE, after: str | None = None) -> ApprovalPage:
        """One page of the undecided approvals, newest first (:func:`page_of`)."""
        return page_of(self.pending(None), limit=limit, after=after)

    def decide(
        self,
        run_id: str,
        approval_id: str,
        *,
        decision: str,
        by: str,
        reason: str | None = None,
        edited_args: Mapping[str, object] | None = None,
        seen_hash: str | None = None,
    ) -> StoredApproval:
        """Check and record a person's decision as a SQL store does
        (:meth:`~loopwise.store.sql.SQLStore.decide`): :class:`DecisionError` for an
        unknown approval, one decided already, or a ``seen_hash`` that no longer matches."""
        if decision not in DECISIONS:
            raise ConfigError(f"unknown decision {decision!r}", name="decision")
        row = self.approval(run_id, approval_id)
        if row is None:
            raise DecisionError(
                f"run {run_id!r} has no approval {approval_id!r}",
                name=approval_id,
                code="unknown-approval",
            )
        if row.status != "pending":
            raise not_pending(run_id, approval_id, row.status)
        if seen_hash is not None and row.args_hash != seen_hash:
            raise DecisionError(
                f"approval {approval_id!r} of run {run_id!r} now asks about other arguments "
                "than the ones shown when deciding; nothing was decided",
                name=approval_id,
                code="stale",
            )
        at = datetime.now(UTC).isoformat()
        edited = None if edited_args is None else jsonable(dict(edited_args))  # a copy
        closed = self.close(
            approval_id, decision=decision, by=by, at=at, reason=reason, edited_args=edited
        )
        assert closed is not None  # pending a moment ago
        return closed


def page_of(pending: list[StoredApproval], *, limit: int, after: str | None) -> ApprovalPage:
    """One page of ``pending``, newest first, in the SQL stores' order and cursors
    (:meth:`~loopwise.store.sqlapprovals.SQLApprovals.pending_page`)."""
    if limit < 1:
        raise ConfigError(f"a page lists at least 1 approval, not {limit}", name="limit")
    ordered = sorted(pending, key=_place, reverse=True)
    if after is not None:
        place = place_of(after)
        ordered = [a for a in ordered if _place(a) < place]
    shown = ordered[:limit]
    more = cursor_after(shown[-1]) if len(ordered) > limit else None
    return ApprovalPage(approvals=shown, total=len(pending), next=more)


def _place(a: StoredApproval) -> tuple[str, str, str]:
    return (a.requested_at, a.run_id, a.approval_id)


def event_of(data: JSONMapping) -> Event:
    """An event from its :meth:`~loopwise.core.events.Event.to_dict` (a memo's, a carried log's)."""
    return Event(
        seq=int(json_number(data["seq"])),
        type=EventType(str(data["type"])),
        step=str(data["step"]),
        at=str(data["at"]),
        data=dict(json_object(data["data"])),
    )
