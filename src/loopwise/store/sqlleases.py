"""Runs created, claimed, held and marked (:class:`~loopwise.store.base.RunLeases`): the
workers' queue and the leases of the SQL run stores (see :mod:`loopwise.store.sql`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from loopwise.core.events import Status
from loopwise.errors import ConfigError, StoreError
from loopwise.store.base import QUEUED, RESUMABLE, StoredRun, Tx
from loopwise.store.conversations import busy, next_turn, refuse_superseded
from loopwise.store.rows import answered_row, run_row, to_json, utc_now
from loopwise.store.sqlbase import SQLBase

__all__ = ["SQLLeases"]

_LOOK = 32
"""Claimable runs of each kind a claim looks at: more than the workers that may be holding
some at once (PostgreSQL's SKIP LOCKED passes over those)."""


class SQLLeases(SQLBase):
    """Creating runs, claiming them (one at a time, atomically), holding their leases."""

    def create_run(
        self,
        run_id: str,
        *,
        target: str,
        spec: str | None,
        input: object,
        model: str | None,
        options: Mapping[str, object],
        owner: str | None = None,
        queued: bool = False,
        conversation: str | None = None,
    ) -> None:
        """Register a run with its target spec, input, model name, limits and owner.

        ``queued=True`` records it for a worker (status ``queued``, no owner) and wakes
        the waiting workers. With ``conversation`` the run is that conversation's next
        message, checked and numbered in the same transaction (see
        :func:`~loopwise.store.conversations.next_turn`), and a ``UNIQUE(conversation, turn)`` index
        refuses a second run with the same number, so two messages sent at once never
        both go on. Raises
        :class:`ConfigError` for a run id already stored, :class:`ConversationError`
        when the conversation cannot take a message now.
        """
        if queued and not spec:
            raise ConfigError(
                "a queued run needs its target spec (path.py:name) for a worker to load it",
                name="spec",
            )
        now = utc_now()
        with self._lock, self._transaction() as tx:
            turn = (
                None
                if conversation is None
                else next_turn(tx, conversation, target, locking=self._locking)
            )
            # ON CONFLICT + the row count tell a reused id apart from a store failure.
            added = tx.run(
                "INSERT INTO runs (id, target, spec, status, input, model, options, owner, "
                "lease_until, created_at, updated_at, conversation, turn, eval_id) VALUES (?, ?, "
                f"?, ?, ?, ?, ?, ?, {self._clock} + ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (
                    run_id,
                    target,
                    spec,
                    QUEUED if queued else "running",
                    to_json(input),
                    model,
                    to_json(options),
                    None if queued else owner,
                    None if queued or owner is None else self.lease_seconds,
                    now,
                    now,
                    conversation,
                    turn,
                    None if options.get("eval") is None else str(options["eval"]),
                ),
            )
            if added and queued:
                self._notify(tx, run_id)
            if not added and conversation is not None:
                known = tx.rows("SELECT 1 FROM runs WHERE id = ?", (run_id,))
                if not known:  # the turn's number was taken: another message won the race
                    raise busy(conversation, "another message was sent to it at the same time")
        if not added:
            raise ConfigError(
                f"run id {run_id!r} is already in the store {self.name}; pass a new run_id "
                "(or none), or resume that run",
                name=run_id,
            )

    def claim(self, run_id: str, owner: str, *, alive: Callable[[str], bool]) -> bool:
        """Take a run for resuming: ``True`` when ``owner`` may now continue it.

        A run qualifies when it is ``awaiting_approval`` with every approval decided,
        ``error`` or ``cancelled``, or ``running`` once its lease lapsed or
        ``alive(previous_owner)`` says that process is gone. Checked and taken in one
        transaction, so of two processes resuming at once one wins. Raises
        :class:`ConfigError` when the run is still running in a live process.
        """
        with self._lock, self._transaction() as tx:
            rows = tx.rows(
                f"SELECT status, owner, lease_until < {self._clock} AS lapsed, conversation, "
                f"turn FROM runs WHERE id = ?{self._locking}",
                (run_id,),
            )
            if not rows or not self._claimable(tx, run_id, rows[0], alive):
                return False
            self._take(tx, run_id, owner)
        return True

    def _claimable(
        self, tx: Tx, run_id: str, row: Mapping[str, Any], alive: Callable[[str], bool]
    ) -> bool:
        status, previous = row["status"], row["owner"]
        if row["conversation"] is not None:
            refuse_superseded(tx, run_id, row)
        if status == "running" and previous and not row["lapsed"] and alive(previous):
            raise ConfigError(
                f"run {run_id!r} is still running (in {previous}, whose lease has not "
                "lapsed); resume it once that process has ended (or force it if that process "
                "is gone)",
                name=run_id,
            )
        waiting = tx.rows(
            "SELECT count(*) AS n FROM approvals WHERE run_id = ? AND status = 'pending'",
            (run_id,),
        )[0]["n"]
        return status in RESUMABLE and not waiting

    def _take(self, tx: Tx, run_id: str, owner: str) -> None:
        tx.run(
            f"UPDATE runs SET status = 'running', owner = ?, lease_until = {self._clock} + ?, "
            "updated_at = ?, answered_at = NULL WHERE id = ?",
            (owner, self.lease_seconds, utc_now(), run_id),
        )

    def claim_next(self, owner: str, *, decided_only: bool = False) -> StoredRun | None:
        """Take the oldest run a worker should execute now, for ``owner``.

        Workers execute, in arrival order, runs that are ``queued``, ``awaiting_approval``
        with every approval decided, or ``running`` with a lapsed lease — and only runs
        with a target spec a worker can load, never an eval's. ``decided_only`` takes the
        decided paused runs alone (``loopwise serve --resume``). Returns the run as it was
        before the claim (its status says whether to start or resume it), or ``None``.
        """
        # Each kind of claimable run is looked up by its own index, oldest first (a few, in
        # case other workers hold some), and the oldest of those is taken: one OR over the
        # table let the planner read every run in creation order when none was claimable.
        order = f"ORDER BY created_at, {self._insertion_order}"
        real = f"spec IS NOT NULL AND {self._eval_mark} IS NULL"
        # A process never takes over its own run: its lease lapsing (a slow import under
        # load) must not start the run a second time beside itself.
        lapsed = f"lease_until < {self._clock} AND COALESCE(owner, '') <> ?"
        answered = "answered_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM approvals a " + (
            "WHERE a.run_id = runs.id AND a.status = 'pending')"
        )
        kinds = " UNION ALL ".join(
            f"SELECT id FROM (SELECT id FROM runs{index} WHERE status = '{status}' AND "
            f"{real}{also} {order} LIMIT {_LOOK}) AS {status}"
            for index, status, also in (
                (self._by_status, QUEUED, ""),
                (self._by_status, "running", f" AND {lapsed}"),
                (self._by_answered, Status.AWAITING_APPROVAL.value, f" AND {answered}"),
            )[2 if decided_only else 0 :]
        )
        queued, lapsed = ("FALSE", "FALSE") if decided_only else ("TRUE", lapsed)
        with self._lock, self._transaction() as tx:
            rows = tx.rows(
                # An eval's run is the eval's to run: never a worker's (nor its deps').
                # The conditions again outside: PostgreSQL checks them again on a row
                # another worker changed while this one waited for it. A CASE, not an OR:
                # an OR of statuses would lead SQLite to its status index again.
                f"SELECT * FROM runs WHERE id IN ({kinds}) AND {real} AND CASE status "
                f"WHEN '{QUEUED}' THEN {queued} WHEN 'running' THEN {lapsed} "
                f"WHEN '{Status.AWAITING_APPROVAL.value}' THEN {answered} ELSE FALSE END "
                f"{order} LIMIT 1{self._skip_locked}",
                () if decided_only else (owner, owner),
            )
            if not rows:
                return None
            self._take(tx, rows[0]["id"], owner)
        return run_row(rows[0])

    @contextmanager
    def hold(self, run_id: str, owner: str) -> Iterator[None]:
        """Renew ``owner``'s lease on ``run_id`` in the background while the block runs."""
        with self._lock:
            self._held[run_id] = owner
            self._holds[run_id] = self._holds.get(run_id, 0) + 1
            if self._renewer is None:
                self._stopping.clear()
                self._renewer = threading.Thread(
                    target=self._renew_leases, name="loopwise-leases", daemon=True
                )
                self._renewer.start()
        try:
            yield
        finally:
            with self._lock:
                left = self._holds.pop(run_id) - 1
                if left:
                    self._holds[run_id] = left
                else:
                    self._held.pop(run_id, None)

    def _renew_leases(self) -> None:
        while not self._stopping.wait(self.lease_seconds / 3):
            with self._lock:
                held = dict(self._held)
            if not held:
                continue
            try:
                with self._lock, self._transaction() as tx:
                    for run_id, owner in held.items():
                        self._renew(tx, run_id, owner)
            except StoreError:
                # The database is unreachable: the next renewal tries again, and a run whose
                # lease lapses meanwhile stops at its next durability point.
                continue

    def mark_paused(self, run_id: str, detail: str) -> None:
        """Mark a run left ``running`` by a dead process, with undecided approvals, as
        ``awaiting_approval`` (what it is: it waits for people, not for a process)."""
        self._write(
            [
                (
                    "UPDATE runs SET status = 'awaiting_approval', detail = ?, updated_at = ? "
                    "WHERE id = ? AND status = 'running'",
                    (detail, utc_now(), run_id),
                ),
                answered_row(run_id, utc_now()),
            ]
        )

    def mark_failed(self, run_id: str, detail: str) -> None:
        """Mark a run that raised (a configuration mistake) as ``error``.

        A run another process has taken over meanwhile is left to that process.
        """
        sql = "UPDATE runs SET status = 'error', detail = ?, updated_at = ? WHERE id = ?"
        params: tuple[object, ...] = (detail, utc_now(), run_id)
        owner = self._held.get(run_id)
        if owner is not None:
            sql += " AND (owner IS NULL OR owner = ?)"
            params = (*params, owner)
        self._write([(sql, params)])
