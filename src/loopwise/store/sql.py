""":class:`SQLStore`: the statements and rules both run stores share
(:class:`~loopwise.store.sqlite.SQLiteStore` and
:class:`~loopwise.store.postgres.PostgresStore` supply the connection). The interface it
implements is :class:`~loopwise.store.base.RunStore`; rows are built in :mod:`loopwise.store.rows`
and the conversation rules are :mod:`loopwise.store.conversations`'s.

Durability points: events are grouped and committed together, and a commit happens no
later than when an event that matters reaches the store — the ``tool_call`` of a
``write`` or ``irreversible`` tool (before the tool runs) and its ``tool_result`` (as
soon as it returned), a gate requested or decided, a run paused or finished — or when
the group is full, or before any read. A crash (SIGKILL, a lost machine) may lose the
events since the last such point: step events, model turns and read-only tool calls,
which a resume asks and reads again. It never loses a recorded effect: an effect whose
process died while it ran (after its call was committed, before its result was) is
called again with the same idempotency key (run id + call id), which an effectful tool
uses to act once. In SQLite's WAL mode with ``synchronous=NORMAL`` a commit survives the process
being killed; a power cut may lose the last few (``synchronous="FULL"`` when it matters).

A store that cannot be reached (``unreachable``: a PostgreSQL restart) is waited out and
drops nothing (:mod:`loopwise.store.retries`).

Leases: a run being executed is owned (``host:pid``) and holds a lease its process renews
in the background (:meth:`SQLStore.hold`); another process takes a ``running`` run over
only once the lease lapsed (or, on one machine, once the owner's pid is gone).

Concurrency: writes of one store object go through one lock, so concurrent runs in one
process write in turn; several processes share the database through its own locking.
A run's ``seq`` is assigned by its context and ``PRIMARY KEY(run_id, seq)`` refuses a
duplicate, so two runs never interleave and a lost or doubled event cannot pass silently.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from loopwise.core.events import Event, EventType, Status
from loopwise.errors import ConfigError, ConversationError, DecisionError, StoreError
from loopwise.store.base import (
    DEFAULT_LEASE_SECONDS,
    QUEUED,
    RESUMABLE,
    StoredApproval,
    StoredRun,
    Tx,
    not_pending,
)
from loopwise.store.conversations import busy, next_turn, refuse_superseded
from loopwise.store.live import LiveBook
from loopwise.store.retries import retrying
from loopwise.store.rows import (
    Statement,
    approval_row,
    collector_paused,
    event_row,
    from_json,
    run_row,
    side_effects,
    to_json,
    utc_now,
)

__all__ = ["SQLStore"]

_DURABLE = frozenset(
    {
        EventType.GATE_REQUESTED,
        EventType.GATE_DECIDED,
        EventType.RUN_PAUSED,
        EventType.RUN_FINISHED,
    }
)

_EFFECTFUL = frozenset({"write", "irreversible"})

_GROUP = 64
"""Events a store may hold before committing them even without a durability point."""


def _runs_of(batch: list[Statement]) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
    """``batch`` as runs of one statement with several parameter rows (the grouped
    events' inserts), executed at once (SQLite's ``executemany``, PostgreSQL's pipeline)."""
    i = 0
    while i < len(batch):
        sql, j = batch[i][0], i + 1
        while j < len(batch) and batch[j][0] == sql:
            j += 1
        yield sql, [params for _, params in batch[i:j]]
        i = j


class SQLStore(LiveBook):
    """The statements and rules both stores share; a subclass supplies the connection.

    Subclasses implement :meth:`_transaction` (one write transaction), :meth:`_reading`,
    :meth:`close` and :meth:`wait_for_work`, and set the dialect fragments below. SQL here
    is written with ``?`` placeholders in the subset SQLite and PostgreSQL share.
    """

    name: str = "?"
    """The store as messages name it (a path, or a URL without its password)."""
    _clock = "0"
    """SQL for the database's clock in seconds since the epoch (leases use it)."""
    _locking = ""
    """What makes a claim's SELECT lock the rows it reads (SQLite locks the file)."""
    _skip_locked = ""
    """What makes a worker's SELECT skip runs another worker is claiming."""
    _insertion_order = "rowid"
    """The column that orders rows created at the same instant."""
    _eval_mark = "json_extract(options, '$.eval')"
    """SQL for a run's eval mark (:attr:`StoredRun.eval_id`), NULL for a real run."""

    def __init__(self, *, lease_seconds: float = DEFAULT_LEASE_SECONDS) -> None:
        if not lease_seconds > 0:
            raise ConfigError(
                f"lease_seconds must be positive, not {lease_seconds}", name="lease_seconds"
            )
        self.lease_seconds = lease_seconds
        self.retry_seconds = lease_seconds / 2
        """How long a write or read is tried again while the store is unreachable (half
        the lease: a run waits out a server restart and still holds its lease after)."""
        self._lock = threading.RLock()
        self._grouped: list[tuple[str | None, Statement]] = []  # (run id, statement)
        self._held: dict[str, str] = {}
        self._holds: dict[str, int] = {}  # nesting depth: a claimed run is held, then run
        self._reads_running: set[tuple[str, str]] = set()
        self._renewer: threading.Thread | None = None
        self._stopping = threading.Event()

    def __enter__(self) -> SQLStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def _transaction(self) -> AbstractContextManager[Tx]:
        """A context manager: one write transaction, yielding a :class:`Tx`."""
        raise NotImplementedError

    def _reading(self) -> AbstractContextManager[Tx]:
        """A context manager yielding a :class:`Tx` for reads."""
        raise NotImplementedError

    def _notify(self, tx: Tx, run_id: str) -> None:
        """Tell waiting workers that ``run_id`` may be claimable (PostgreSQL: NOTIFY)."""

    def wait_for_work(self, timeout: float) -> None:
        """Return when a run may have become claimable, or after ``timeout`` (polling)."""
        self._stopping.wait(timeout)

    def close(self) -> None:
        """Commit what is grouped and stop renewing leases (subclasses close connections)."""
        self._stopping.set()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            self._renewer.join()
        self._renewer = None
        with self._lock:
            if self._grouped:
                self._write([])

    def _write(self, statements: list[Statement], *, held: str | None = None) -> int:
        """Commit the grouped events and ``statements`` in one transaction.

        Returns the rows the last statement changed. With ``held`` (a run id this store
        holds, whose events ``statements`` are), the run's lease is renewed first and, when
        another process owns the run now, none of that run's events are written (the
        other runs' grouped ones are) and :class:`StoreError` (``code="lease-lost"``) is
        raised. An unreachable store is tried again (:mod:`loopwise.store.retries`); when
        it stays away, the statements go back to the group, first, and the error is raised.
        """
        with self._lock:
            batch, self._grouped = [*self._grouped, *((held, s) for s in statements)], []
            try:
                changed, lost = retrying(lambda: self._commit(batch, held), self.retry_seconds)
            except StoreError as e:
                if e.code == "unreachable":
                    self._grouped[:0] = batch
                raise
        if lost:
            raise StoreError(
                f"run {held!r} was taken over by another process after its lease lapsed; "
                f"this process stopped it (store {self.name})",
                code="lease-lost",
            )
        return changed

    def _commit(
        self, batch: list[tuple[str | None, Statement]], held: str | None
    ) -> tuple[int, bool]:
        """One transaction of :meth:`_write`: the rows its last statement changed, and
        whether ``held``'s lease was lost (its events then left out)."""
        changed, lost = 0, False
        owner = None if held is None else self._held.get(held)
        with self._transaction() as tx:
            if held is not None and owner is not None and not self._renew(tx, held, owner):
                # Another run's events grouped alongside are its own: dropping them would
                # leave a gap in its log.
                lost, batch = True, [(run, s) for run, s in batch if run != held]
            for sql, rows in _runs_of([s for _, s in batch]):
                changed = tx.run(sql, rows[0]) if len(rows) == 1 else tx.run_many(sql, rows)
        return changed, lost

    def _renew(self, tx: Tx, run_id: str, owner: str) -> bool:
        """Extend ``owner``'s lease on ``run_id``; ``False`` when it owns the run no more."""
        return bool(
            tx.run(
                f"UPDATE runs SET lease_until = {self._clock} + ? WHERE id = ? AND owner = ?",
                (self.lease_seconds, run_id, owner),
            )
        )

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[Mapping[str, Any]]:
        with self._lock:
            if self._grouped:
                self._write([])
            return retrying(lambda: self._rows(sql, params), self.retry_seconds)

    def _rows(self, sql: str, params: tuple[Any, ...]) -> list[Mapping[str, Any]]:
        with self._reading() as tx:
            return tx.rows(sql, params)

    def flush(self) -> None:
        """Commit the events grouped since the last durability point."""
        with self._lock:
            if self._grouped:
                self._write([])

    def record(self, run_id: str, event: Event) -> None:
        """Add ``event`` and what it changes in ``runs``/``approvals``; commit at a
        durability point (see the module docs), else group it with the next ones."""
        self.record_many(run_id, [event])

    def record_many(self, run_id: str, events: list[Event]) -> None:
        """Add several events in one transaction: after a crash the log holds all of them
        or none (the gate requests of one turn); committed at once when one is a
        durability point."""
        statements = [s for e in events for s in (event_row(run_id, e), *side_effects(run_id, e))]
        # A list, not a generator: _durable must see every event (it tracks running reads).
        if not any([self._durable(run_id, e) for e in events]):
            with self._lock:
                self._grouped.extend((run_id, s) for s in statements)
                if len(self._grouped) < _GROUP:
                    return
            statements = []
        self._write(statements, held=run_id)

    def _durable(self, run_id: str, event: Event) -> bool:
        """Whether ``event`` is a durability point (committed before the run goes on)."""
        call = (run_id, str(event.data.get("call_id")))
        if event.type is EventType.TOOL_CALL:
            if event.data.get("effect") in _EFFECTFUL:
                return True
            self._reads_running.add(call)
            return False
        if event.type is EventType.TOOL_RESULT:
            # Only the result of a call seen to be read-only may wait: an effect's result (or
            # one whose call this process did not see, e.g. before a resume) is committed.
            if call in self._reads_running:
                self._reads_running.discard(call)
                return False
            return True
        return event.type in _DURABLE

    def create_run(
        self,
        run_id: str,
        *,
        target: str,
        spec: str | None,
        input: Any,
        model: str | None,
        options: dict[str, Any],
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
                "lease_until, created_at, updated_at, conversation, turn) VALUES (?, ?, ?, ?, "
                f"?, ?, ?, ?, {self._clock} + ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
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
            "updated_at = ? WHERE id = ?",
            (owner, self.lease_seconds, utc_now(), run_id),
        )

    def claim_next(self, owner: str) -> StoredRun | None:
        """Take the oldest run a worker should execute now, for ``owner``.

        Workers execute, in arrival order, runs that are ``queued``, ``awaiting_approval``
        with every approval decided, or ``running`` with a lapsed lease — and only runs
        with a target spec a worker can load, never an eval's. Returns the run as it was
        before the claim (its status says whether to start or resume it), or ``None``.
        """
        with self._lock, self._transaction() as tx:
            rows = tx.rows(
                # An eval's run is the eval's to run: never a worker's (nor its deps').
                f"SELECT * FROM runs WHERE spec IS NOT NULL AND {self._eval_mark} IS NULL AND "
                "(status = ? OR "
                # A process never takes over its own run: its lease lapsing (a slow import
                # under load) must not start the run a second time beside itself.
                f"(status = 'running' AND lease_until < {self._clock} "
                "AND COALESCE(owner, '') <> ?) OR "
                "(status = ? AND NOT EXISTS (SELECT 1 FROM approvals a "
                "WHERE a.run_id = runs.id AND a.status = 'pending'))) "
                f"ORDER BY created_at, {self._insertion_order} LIMIT 1{self._skip_locked}",
                (QUEUED, owner, Status.AWAITING_APPROVAL.value),
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
                )
            ]
        )

    def mark_failed(self, run_id: str, detail: str) -> None:
        """Mark a run that raised (a configuration mistake) as ``error``.

        A run another process has taken over meanwhile is left to that process.
        """
        sql = "UPDATE runs SET status = 'error', detail = ?, updated_at = ? WHERE id = ?"
        params: tuple[Any, ...] = (detail, utc_now(), run_id)
        owner = self._held.get(run_id)
        if owner is not None:
            sql += " AND (owner IS NULL OR owner = ?)"
            params = (*params, owner)
        self._write([(sql, params)])

    def get_run(self, run_id: str) -> StoredRun:
        """The run; :class:`ConfigError` (exit 2 in the CLI) for an unknown id."""
        rows = self._read("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            raise ConfigError(f"no run {run_id!r} in {self.name}", name=run_id)
        return run_row(rows[0])

    def list_runs(
        self, *, limit: int = 50, conversation: str | None = None, status: str | None = None
    ) -> list[StoredRun]:
        """The most recent ``limit`` runs, newest first (of ``conversation`` only, when
        given: :class:`ConversationError`, ``unknown``, when it has no run; with
        ``status``, only the runs that have it)."""
        if conversation is None:
            where, params = ("WHERE status = ? ", (status,)) if status is not None else ("", ())
            rows = self._read(
                f"SELECT * FROM runs {where}ORDER BY created_at DESC, "
                f"{self._insertion_order} DESC LIMIT ?",
                (*params, limit),
            )
            return [run_row(r) for r in rows]
        runs = self.conversation_runs(conversation)
        if not runs:
            raise ConversationError(
                f"no conversation {conversation!r} in {self.name}",
                conversation=conversation,
                code="unknown",
            )
        return [r for r in runs[::-1] if status in (None, r.status)][:limit]

    def conversation_runs(self, conversation: str) -> list[StoredRun]:
        """The runs of ``conversation``, first message first (empty when unknown)."""
        rows = self._read(
            "SELECT * FROM runs WHERE conversation = ? ORDER BY turn", (conversation,)
        )
        return [run_row(r) for r in rows]

    def events(self, run_id: str) -> list[Event]:
        """The run's events in ``seq`` order."""
        with collector_paused():
            rows = self._read(
                "SELECT seq, type, step, at, data FROM events WHERE run_id = ? ORDER BY seq",
                (run_id,),
            )
            return [
                Event(
                    seq=r["seq"],
                    type=EventType(r["type"]),
                    step=r["step"],
                    at=r["at"],
                    data=json.loads(r["data"]),
                )
                for r in rows
            ]

    def show(self, run_id: str) -> dict[str, Any]:
        """The audit log ``{"run_id", "target", "status", "usage", "output", "events"}``."""
        run = self.get_run(run_id)
        with collector_paused():
            events = [e.to_dict() for e in self.events(run_id)]
        return {
            "run_id": run.run_id,
            "target": run.target,
            "spec": run.spec,
            "status": run.status,
            "detail": run.detail,
            "model": run.model,
            "input": run.input,
            "usage": run.usage,
            "output": run.output,
            "created_at": run.created_at,
            "updated_at": run.updated_at,
            "conversation": run.conversation,
            "turn": run.turn,
            "thread": [] if run.conversation is None else self._thread(run.conversation),
            "approvals": [a.to_dict() for a in self.approvals(run_id)],
            "events": events,
        }

    def _thread(self, conversation: str) -> list[dict[str, Any]]:
        """The messages of a conversation as ``runs show`` lists them."""
        return [
            {
                "run_id": r.run_id,
                "turn": r.turn,
                "status": r.status,
                "input": r.input,
                "output": r.output,
            }
            for r in self.conversation_runs(conversation)
        ]

    def journal(self, run_id: str) -> dict[str, dict[str, Any]]:
        """``{key: data}`` for replay; a later event with the same key wins."""
        with collector_paused():
            rows = self._read(
                "SELECT key, data FROM events WHERE run_id = ? AND key IS NOT NULL ORDER BY seq",
                (run_id,),
            )
            return {r["key"]: json.loads(r["data"]) for r in rows}

    def pending(self, run_id: str | None = None) -> list[StoredApproval]:
        """Undecided approvals, oldest first: of ``run_id``, or of every run but an eval's."""
        evals = f"run_id NOT IN (SELECT id FROM runs WHERE {self._eval_mark} IS NOT NULL)"
        which, params = (evals, ()) if run_id is None else ("run_id = ?", (run_id,))
        sql = f"SELECT * FROM approvals WHERE status = 'pending' AND {which} ORDER BY requested_at"
        return [approval_row(r) for r in self._read(sql, params)]

    def approvals(self, run_id: str) -> list[StoredApproval]:
        """Every approval of ``run_id``, in the order they were requested."""
        rows = self._read(
            "SELECT * FROM approvals WHERE run_id = ? ORDER BY requested_at", (run_id,)
        )
        return [approval_row(r) for r in rows]

    def approval(self, run_id: str, approval_id: str) -> StoredApproval | None:
        """One approval of ``run_id``, or ``None`` when there is no such request."""
        rows = self._read(
            "SELECT * FROM approvals WHERE run_id = ? AND approval_id = ?",
            (run_id, approval_id),
        )
        return approval_row(rows[0]) if rows else None

    def save_eval(
        self,
        eval_id: str,
        *,
        dataset: str,
        created_at: str,
        summaries: Mapping[str, dict[str, Any]],
    ) -> None:
        """Keep an eval's summary per target in ``eval_results``, in one transaction."""
        self._write(
            [
                (
                    "INSERT INTO eval_results VALUES (?, ?, ?, ?, ?)",
                    (eval_id, target, dataset, created_at, to_json(summary)),
                )
                for target, summary in summaries.items()
            ]
        )

    def last_eval(
        self, target: str, *, dataset: str | None, before: str, model: str | None = None,
        having: str | None = None,
    ) -> dict[str, Any] | None:  # fmt: skip
        """The newest summary of ``target`` on ``dataset`` (``None``: any) from an eval no
        later than ``before``; given ``model`` or ``having``, the newest whose summary
        names that model or holds that key."""
        # The model lives in the summary (no column: the history stays schema-compatible);
        # a target's evals are few, so reading them newest first is cheap.
        where = "target = ? AND created_at <= ?" + ("" if dataset is None else " AND dataset = ?")
        rows = self._read(
            f"SELECT created_at, eval_id, summary FROM eval_results WHERE {where} "
            "ORDER BY created_at DESC",
            (target, before) if dataset is None else (target, before, dataset),
        )
        for row in rows:
            summary = from_json(row["summary"])
            if model in (None, summary.get("model")) and having in (None, *summary):
                return {"created_at": row["created_at"], "eval_id": row["eval_id"], **summary}
        return None

    def decide(
        self,
        run_id: str,
        approval_id: str,
        *,
        decision: str,
        by: str,
        reason: str | None = None,
        edited_args: dict[str, Any] | None = None,
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
        self.get_run(run_id)
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
            self._notify(tx, run_id)
            rows = tx.rows(
                "SELECT * FROM approvals WHERE run_id = ? AND approval_id = ?",
                (run_id, approval_id),
            )
        return approval_row(rows[0])
