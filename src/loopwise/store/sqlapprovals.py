"""The approval book of the SQL run stores (:class:`~loopwise.store.base.ApprovalBook`):
undecided gates listed, decisions recorded once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from loopwise.errors import ConfigError, DecisionError
from loopwise.store.base import (
    PAGE,
    ApprovalPage,
    StoredApproval,
    cursor_after,
    not_pending,
    place_of,
)
from loopwise.store.rows import answered_row, approval_row, to_json, utc_now
from loopwise.store.sqlbase import SQLBase, in_batches

__all__ = ["SQLApprovals"]

_REAL = "status = 'pending' AND eval_id IS NULL"
"""The undecided approvals of real runs: the very condition of the ``approvals_waiting``
index (a query must say it in these words for the planner to use that index)."""

_OPEN = (
    "EXISTS (SELECT 1 FROM runs WHERE runs.id = approvals.run_id "
    "AND runs.status IN ('awaiting_approval', 'running'))"
)
"""The approval's run may still get to it: paused, or running (a branch that paused while
others run). A run that ended otherwise (``error``, ``denied``...) closed its approvals: a
decision on one would take its effect on a resume of a run that ended for another reason
(checked per row by the runs' primary key, after the index found the page)."""

_DECIDABLE = ("awaiting_approval", "running")


class SQLApprovals(SQLBase):
    """Pending approvals and their decisions."""

    def pending(self, run_id: str | None = None) -> list[StoredApproval]:
        """Undecided approvals, oldest first: of ``run_id``, or of every run but an eval's
        (all of them: :meth:`pending_page` lists them a page at a time)."""
        mine = f"run_id = ? AND status = 'pending' AND {_OPEN}"
        which, params = (f"{_REAL} AND {_OPEN}", ()) if run_id is None else (mine, (run_id,))
        sql = f"SELECT * FROM approvals WHERE {which} ORDER BY requested_at"
        return [approval_row(r) for r in self._read(sql, params)]

    def pending_page(self, *, limit: int = PAGE, after: str | None = None) -> ApprovalPage:
        """One page of the undecided approvals of real runs, newest first (see
        :class:`~loopwise.store.base.ApprovalPage`); each query is served by the partial
        index on exactly these approvals, so a page costs the same at any store size.

        Raises :class:`ConfigError` for a ``limit`` below 1 and for an ``after`` that is
        not a page's :attr:`~loopwise.store.base.ApprovalPage.next`."""
        if limit < 1:
            raise ConfigError(f"a page lists at least 1 approval, not {limit}", name="limit")
        where = f"{_REAL} AND {_OPEN}"
        params: tuple[str, ...] = ()
        if after is not None:
            where += " AND (requested_at, run_id, approval_id) < (?, ?, ?)"
            params = place_of(after)
        rows = self._read(
            f"SELECT * FROM approvals WHERE {where} ORDER BY requested_at DESC, "
            "run_id DESC, approval_id DESC LIMIT ?",
            (*params, limit + 1),
        )
        total = self._read(f"SELECT count(*) AS n FROM approvals WHERE {_REAL} AND {_OPEN}")
        total = total[0]["n"]
        shown = [approval_row(r) for r in rows[:limit]]
        more = cursor_after(shown[-1]) if len(rows) > limit else None
        return ApprovalPage(approvals=shown, total=int(total), next=more)

    def approvals(self, run_id: str) -> list[StoredApproval]:
        """Every approval of ``run_id``, in the order they were requested."""
        rows = self._read(
            "SELECT * FROM approvals WHERE run_id = ? ORDER BY requested_at", (run_id,)
        )
        return [approval_row(r) for r in rows]

    def approvals_of(self, run_ids: Sequence[str]) -> dict[str, list[StoredApproval]]:
        """``{run id: its approvals in the order they were requested}`` for several runs,
        read together (one query, not one per run)."""
        found: dict[str, list[StoredApproval]] = {run_id: [] for run_id in run_ids}
        for some in in_batches(run_ids):
            rows = self._read(
                f"SELECT * FROM approvals WHERE run_id IN ({', '.join('?' * len(some))}) "
                "ORDER BY requested_at",
                tuple(some),
            )
            for r in rows:
                found[r["run_id"]].append(approval_row(r))
        return found

    def approval(self, run_id: str, approval_id: str) -> StoredApproval | None:
        """One approval of ``run_id``, or ``None`` when there is no such request."""
        rows = self._read(
            "SELECT * FROM approvals WHERE run_id = ? AND approval_id = ?",
            (run_id, approval_id),
        )
        return approval_row(rows[0]) if rows else None

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
        """Record ``decision`` (``approved``/``denied``/``edited``) on a pending approval.

        Wakes the waiting workers. Raises :class:`ConfigError` for an unknown run, and
        :class:`DecisionError` for an unknown approval, one already decided (here or by
        another process) or, with ``seen_hash``, one whose arguments hash otherwise
        (``stale``), checked in the same transaction as the write. Checks of the decision
        itself (edited arguments) are :func:`loopwise.running.approvals.decide`'s.
        """
        if decision not in {"approved", "denied", "edited"}:
            raise ConfigError(f"unknown decision {decision!r}", name="decision")
        self._run(run_id)  # an unknown run is a ConfigError
        with self._lock, self._transaction() as tx:
            rows = tx.rows(
                f"SELECT * FROM approvals WHERE run_id = ? AND approval_id = ?{self._locking}",
                (run_id, approval_id),
            )
            if not rows:
                raise DecisionError(
                    f"run {run_id!r} has no approval {approval_id!r}",
                    name=approval_id,
                    code="unknown-approval",
                )
            if rows[0]["status"] != "pending":
                raise not_pending(run_id, approval_id, rows[0]["status"])
            run = tx.rows("SELECT status FROM runs WHERE id = ?", (run_id,))
            if run and run[0]["status"] not in _DECIDABLE:
                raise DecisionError(
                    f"run {run_id!r} ended {run[0]['status']} while approval {approval_id!r} "
                    "waited, so the approval is closed and nothing was decided; `loopwise "
                    "resume` continues the run, and asks it again if the run gets there",
                    name=approval_id,
                    code="run-ended",
                )
            if seen_hash is not None and rows[0]["args_hash"] != seen_hash:
                raise DecisionError(
                    f"approval {approval_id!r} of run {run_id!r} now asks about other "
                    "arguments than the ones shown when deciding; nothing was decided",
                    name=approval_id,
                    code="stale",
                )
            tx.run(
                "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?, "
                "decision_reason = ?, edited_args = ? WHERE run_id = ? AND approval_id = ?",
                (
                    decision,
                    by,
                    utc_now(),
                    reason,
                    None if edited_args is None else to_json(edited_args),
                    run_id,
                    approval_id,
                ),
            )
            tx.run(*answered_row(run_id, utc_now()))
            self._notify(tx, run_id)
            rows = tx.rows(
                "SELECT * FROM approvals WHERE run_id = ? AND approval_id = ?",
                (run_id, approval_id),
            )
        return approval_row(rows[0])
