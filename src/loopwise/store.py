"""The run store: runs, their ordered events and their approvals, in one SQLite file.

:class:`RunStore` is the interface (a server database can implement it later);
:class:`SQLiteStore` is the embedded default. A store is an
:class:`~loopwise.step.EventSink`: a run streams every event into it as it happens,
and the store keeps the ``runs`` row (status, output, usage) and the ``approvals``
rows (from ``gate_requested``/``gate_decided`` events) in step with the log.

Durability: every event is committed before :meth:`SQLiteStore.record` returns. In WAL
mode with ``synchronous=NORMAL`` a commit is a write into the WAL file without an
fsync, so it survives the process being killed (SIGKILL) at any later point — a tool
result recorded is never lost — without an fsync per event (``benchmarks`` measures
the cost). A power cut may lose the last few commits; use
``synchronous="FULL"`` when that matters more than speed.

Concurrency: one connection per store object, guarded by a lock, so concurrent runs in
one process write through it in turn; several processes share the file through
SQLite's own locking (``busy_timeout``, short transactions). A run's ``seq`` is
assigned by its context and ``PRIMARY KEY(run_id, seq)`` refuses a duplicate, so two
runs never interleave and a lost or doubled event cannot pass silently.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from loopwise.errors import ConfigError, StoreError
from loopwise.step import Event, EventType, Status, jsonable

__all__ = ["DEFAULT_STORE_PATH", "RESUMABLE", "RunStore", "SQLiteStore", "default_store_path"]

DEFAULT_STORE_PATH = ".loopwise/runs.db"
"""Where the store lives when neither an argument nor ``LOOPWISE_STORE`` says."""

_MIGRATIONS: list[str] = [
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        target TEXT NOT NULL,
        spec TEXT,
        status TEXT NOT NULL,
        input TEXT,
        output TEXT,
        usage TEXT,
        model TEXT,
        options TEXT NOT NULL DEFAULT '{}',
        detail TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE INDEX runs_created ON runs(created_at);
    CREATE TABLE events (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        type TEXT NOT NULL,
        step TEXT NOT NULL,
        at TEXT NOT NULL,
        key TEXT,
        data TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE approvals (
        run_id TEXT NOT NULL,
        approval_id TEXT NOT NULL,
        step TEXT NOT NULL,
        tool TEXT NOT NULL,
        call_id TEXT,
        args TEXT NOT NULL,
        effect TEXT,
        reason TEXT,
        tainted_by TEXT,
        args_hash TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'pending',
        requested_at TEXT NOT NULL,
        decided_by TEXT,
        decided_at TEXT,
        decision_reason TEXT,
        edited_args TEXT,
        PRIMARY KEY (run_id, approval_id)
    );
    CREATE INDEX approvals_status ON approvals(status);
    """,
    # Which process runs a run, so that two resumes of one run cannot both go on.
    "ALTER TABLE runs ADD COLUMN owner TEXT;",
    # Eval history: one summary per target and eval (the eval's runs are rows of `runs`).
    # IF NOT EXISTS: before this version, loopwise.evals created the table itself.
    """
    CREATE TABLE IF NOT EXISTS eval_results (
        eval_id TEXT NOT NULL,
        target TEXT NOT NULL,
        dataset TEXT NOT NULL,
        created_at TEXT NOT NULL,
        summary TEXT NOT NULL,
        PRIMARY KEY (eval_id, target)
    );
    """,
]
"""The schema, one script per version; ``PRAGMA user_version`` says how many ran."""

_FINISHED = {EventType.RUN_FINISHED, EventType.RUN_PAUSED}
RESUMABLE = frozenset(
    {"running", Status.AWAITING_APPROVAL.value, Status.ERROR.value, Status.CANCELLED.value}
)
"""Stored statuses a resume continues: ``running`` (the process died mid-run), ``error``
(the model API failed, a step raised) and ``cancelled`` (interrupted) too, so a run is
not started over (its effects done again under new keys) once the cause is fixed."""


def default_store_path(path: str | os.PathLike[str] | None = None) -> Path:
    """``path``, else ``$LOOPWISE_STORE``, else ``.loopwise/runs.db``."""
    return Path(path or os.environ.get("LOOPWISE_STORE") or DEFAULT_STORE_PATH)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _dump(value: Any) -> str:
    # Event data is JSON-ready already; jsonable() only converts what json cannot.
    return json.dumps(value, default=jsonable)


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class RunStore(Protocol):
    """What loopwise needs from a run store (SQLite today, a server database later)."""

    def record(self, run_id: str, event: Event) -> None:
        """Append ``event`` to the run's log durably (the :class:`EventSink` method)."""
        ...

    def record_many(self, run_id: str, events: list[Event]) -> None:
        """Append several events durably, all or none (the gate requests of one turn)."""
        ...

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
    ) -> None:
        """Register a run before its first event, with what resuming it needs."""
        ...

    def claim(self, run_id: str, owner: str, *, alive: Callable[[str], bool]) -> bool:
        """Take a paused or interrupted run for resuming, atomically (see SQLiteStore)."""
        ...

    def get_run(self, run_id: str) -> dict[str, Any]:
        """The run's row as a dict; :class:`ConfigError` when there is no such run."""
        ...

    def list_runs(self, *, limit: int = 50) -> list[dict[str, Any]]:
        """The most recent runs first."""
        ...

    def events(self, run_id: str) -> list[Event]:
        """The run's events in ``seq`` order."""
        ...

    def show(self, run_id: str) -> dict[str, Any]:
        """The audit log: run fields plus every event (DESIGN §11)."""
        ...

    def journal(self, run_id: str) -> dict[str, dict[str, Any]]:
        """``{key: data}`` of every event that carries a journal ``key``."""
        ...

    def pending(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Undecided approvals (of one run, or of all)."""
        ...

    def approvals(self, run_id: str) -> list[dict[str, Any]]:
        """Every approval of a run, decided or not."""
        ...

    def approval(self, run_id: str, approval_id: str) -> dict[str, Any] | None:
        """One approval of a run, or ``None``."""
        ...

    def decide(
        self,
        run_id: str,
        approval_id: str,
        *,
        decision: str,
        by: str,
        reason: str | None = None,
        edited_args: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Record a human decision on a pending approval; return the updated approval."""
        ...

    def mark_paused(self, run_id: str, detail: str) -> None:
        """Mark a ``running`` run of a dead process that waits on approvals as paused."""
        ...

    def mark_failed(self, run_id: str, detail: str) -> None:
        """Mark a run that raised before finishing as ``error``."""
        ...

    def save_eval(
        self,
        eval_id: str,
        *,
        dataset: str,
        created_at: str,
        summaries: Mapping[str, dict[str, Any]],
    ) -> None:
        """Keep an eval's summary per target (its runs are runs of this store already)."""
        ...

    def last_eval(self, target: str, *, dataset: str, before: str) -> dict[str, Any] | None:
        """The newest summary of ``target`` on ``dataset`` from an eval no later than
        ``before``, with its ``created_at`` and ``eval_id``; ``None`` when there is none."""
        ...

    def close(self) -> None:
        """Release the store's resources."""
        ...


class SQLiteStore:
    """The embedded :class:`RunStore`: one SQLite file in WAL mode (see the module docs).

    ``path`` defaults to ``$LOOPWISE_STORE`` or ``.loopwise/runs.db``; the file and its
    directory are created on first use. Raises :class:`StoreError` when the file cannot
    be opened or is a newer schema than this loopwise knows.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        synchronous: str = "NORMAL",
        busy_timeout_ms: int = 10_000,
    ) -> None:
        self.path = default_store_path(path)
        self._synchronous = synchronous
        self._busy_timeout_ms = busy_timeout_ms
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    def close(self) -> None:
        """Close the connection (a later use opens it again)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._open()
        return self._conn

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: we issue BEGIN ourselves, so each write is one
            # short explicit transaction and reads never hold a lock open.
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
            self._prepare(conn)
        except (sqlite3.Error, OSError) as e:
            raise StoreError(f"cannot open run store {self.path}: {e}") from e
        return conn

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """Check, configure and migrate a new connection.

        Several processes opening one file at once race to rebuild its WAL index, and
        SQLite answers that race with an immediate "database is locked" that its busy
        handler does not cover, so the steps are retried until ``busy_timeout``.
        """
        deadline = time.monotonic() + self._busy_timeout_ms / 1000
        while True:
            try:
                _refuse_foreign(conn, self.path)
                if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    conn.execute("PRAGMA journal_mode = WAL")
                conn.execute(f"PRAGMA synchronous = {self._synchronous}")
                _migrate(conn, self.path)
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                time.sleep(0.01)

    def _write(self, statements: list[tuple[str, tuple[Any, ...]]]) -> int:
        """Run ``statements`` in one transaction; return the rows the last one changed."""
        changed = 0
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                for sql, params in statements:
                    changed = conn.execute(sql, params).rowcount
                conn.execute("COMMIT")
            except sqlite3.Error as e:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise StoreError(f"run store {self.path}: {e}") from e
        return changed

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            conn = self._connection()
            try:
                cursor = conn.execute(sql, params)
                cursor.row_factory = sqlite3.Row
                return list(cursor.fetchall())
            except sqlite3.Error as e:
                raise StoreError(f"run store {self.path}: {e}") from e

    def record(self, run_id: str, event: Event) -> None:
        """Commit ``event`` and what it changes in ``runs``/``approvals`` in one transaction."""
        self._write(_statements(run_id, event))

    def record_many(self, run_id: str, events: list[Event]) -> None:
        """Commit several events (the gate requests of one turn) in one transaction:
        after a crash the log holds all of them or none."""
        self._write([st for event in events for st in _statements(run_id, event)])

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
    ) -> None:
        """Register a run with its target spec, input, model name, limits and owner."""
        now = _now()
        # OR IGNORE + the row count tell a reused id apart from a store failure.
        added = self._write(
            [
                (
                    "INSERT OR IGNORE INTO runs (id, target, spec, status, input, model, options, "
                    "owner, created_at, updated_at) VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?, ?)",
                    (run_id, target, spec, _dump(input), model, _dump(options), owner, now, now),
                )
            ]
        )
        if not added:
            raise ConfigError(
                f"run id {run_id!r} is already in the store {self.path}; pass a new run_id "
                "(or none), or resume that run",
                name=run_id,
            )

    def claim(self, run_id: str, owner: str, *, alive: Callable[[str], bool]) -> bool:
        """Take a run for resuming: ``True`` when ``owner`` may now continue it.

        A run qualifies when it is ``awaiting_approval`` with every approval decided,
        ``error`` or ``cancelled``, or ``running`` while ``alive(previous_owner)`` says its
        process is gone. Checked and
        taken in one write transaction, so of two processes resuming at once one wins.
        Raises :class:`ConfigError` when the run is still running in a live process.
        """
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                ok = self._claimable(conn, run_id, alive)
                if ok:
                    conn.execute(
                        "UPDATE runs SET status = 'running', owner = ?, updated_at = ? "
                        "WHERE id = ?",
                        (owner, _now(), run_id),
                    )
                conn.execute("COMMIT")
            except (sqlite3.Error, ConfigError) as e:
                conn.execute("ROLLBACK")
                if isinstance(e, ConfigError):
                    raise
                raise StoreError(f"run store {self.path}: {e}") from e
        return ok

    def _claimable(
        self, conn: sqlite3.Connection, run_id: str, alive: Callable[[str], bool]
    ) -> bool:
        row = conn.execute("SELECT status, owner FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            return False
        status, previous = row
        if status == "running" and previous and alive(previous):
            raise ConfigError(
                f"run {run_id!r} is still running (in {previous}); resume it once that process "
                "has ended (or force it if that process is gone)",
                name=run_id,
            )
        waiting = conn.execute(
            "SELECT count(*) FROM approvals WHERE run_id = ? AND status = 'pending'", (run_id,)
        ).fetchone()[0]
        return status in RESUMABLE and not waiting

    def mark_paused(self, run_id: str, detail: str) -> None:
        """Mark a run left ``running`` by a dead process, with undecided approvals, as
        ``awaiting_approval`` (what it is: it waits for people, not for a process)."""
        self._write(
            [
                (
                    "UPDATE runs SET status = 'awaiting_approval', detail = ?, updated_at = ? "
                    "WHERE id = ? AND status = 'running'",
                    (detail, _now(), run_id),
                )
            ]
        )

    def mark_failed(self, run_id: str, detail: str) -> None:
        """Mark a run that raised (a configuration mistake) as ``error``."""
        self._write(
            [
                (
                    "UPDATE runs SET status = 'error', detail = ?, updated_at = ? WHERE id = ?",
                    (detail, _now(), run_id),
                )
            ]
        )

    def get_run(self, run_id: str) -> dict[str, Any]:
        """The run's row; :class:`ConfigError` (exit 2 in the CLI) for an unknown id."""
        rows = self._read("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            raise ConfigError(f"no run {run_id!r} in {self.path}", name=run_id)
        return _run_dict(rows[0])

    def list_runs(self, *, limit: int = 50) -> list[dict[str, Any]]:
        """The most recent ``limit`` runs, newest first."""
        rows = self._read(
            "SELECT * FROM runs ORDER BY created_at DESC, rowid DESC LIMIT ?", (limit,)
        )
        return [_run_dict(r) for r in rows]

    def events(self, run_id: str) -> list[Event]:
        """The run's events in ``seq`` order."""
        with _collector_paused():
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
        with _collector_paused():
            events = [e.to_dict() for e in self.events(run_id)]
        return {
            "run_id": run["run_id"],
            "target": run["target"],
            "spec": run["spec"],
            "status": run["status"],
            "detail": run["detail"],
            "model": run["model"],
            "input": run["input"],
            "usage": run["usage"],
            "output": run["output"],
            "created_at": run["created_at"],
            "updated_at": run["updated_at"],
            "approvals": self.approvals(run_id),
            "events": events,
        }

    def journal(self, run_id: str) -> dict[str, dict[str, Any]]:
        """``{key: data}`` for replay; a later event with the same key wins."""
        with _collector_paused():
            rows = self._read(
                "SELECT key, data FROM events WHERE run_id = ? AND key IS NOT NULL ORDER BY seq",
                (run_id,),
            )
            return {r["key"]: json.loads(r["data"]) for r in rows}

    def pending(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Undecided approvals, oldest first (of ``run_id``, or of every run)."""
        if run_id is None:
            rows = self._read(
                "SELECT * FROM approvals WHERE status = 'pending' ORDER BY requested_at"
            )
        else:
            rows = self._read(
                "SELECT * FROM approvals WHERE status = 'pending' AND run_id = ? "
                "ORDER BY requested_at",
                (run_id,),
            )
        return [_approval_dict(r) for r in rows]

    def approvals(self, run_id: str) -> list[dict[str, Any]]:
        """Every approval of ``run_id``, in the order they were requested."""
        rows = self._read(
            "SELECT * FROM approvals WHERE run_id = ? ORDER BY requested_at", (run_id,)
        )
        return [_approval_dict(r) for r in rows]

    def decide(
        self,
        run_id: str,
        approval_id: str,
        *,
        decision: str,
        by: str,
        reason: str | None = None,
        edited_args: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Record ``decision`` (``approved``/``denied``/``edited``) on a pending approval.

        Raises :class:`ConfigError` for an unknown run or approval, or one already decided.
        """
        if decision not in {"approved", "denied", "edited"}:
            raise ConfigError(f"unknown decision {decision!r}", name="decision")
        self.get_run(run_id)
        with self._lock:
            current = self._approval(run_id, approval_id)
            if current["status"] != "pending":
                raise ConfigError(
                    f"approval {approval_id!r} of run {run_id!r} is already {current['status']}",
                    name=approval_id,
                )
            changed = self._write(
                [
                    (
                        "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?, "
                        "decision_reason = ?, edited_args = ? "
                        "WHERE run_id = ? AND approval_id = ? AND status = 'pending'",
                        (
                            decision,
                            by,
                            _now(),
                            reason,
                            None if edited_args is None else _dump(edited_args),
                            run_id,
                            approval_id,
                        ),
                    )
                ]
            )
            done = self._approval(run_id, approval_id)
        if not changed:  # another process decided it between our read and our write
            raise ConfigError(
                f"approval {approval_id!r} of run {run_id!r} is already {done['status']}",
                name=approval_id,
            )
        return done

    def approval(self, run_id: str, approval_id: str) -> dict[str, Any] | None:
        """One approval of ``run_id``, or ``None`` when there is no such request."""
        rows = self._read(
            "SELECT * FROM approvals WHERE run_id = ? AND approval_id = ?",
            (run_id, approval_id),
        )
        return _approval_dict(rows[0]) if rows else None

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
                    (eval_id, target, dataset, created_at, _dump(summary)),
                )
                for target, summary in summaries.items()
            ]
        )

    def last_eval(self, target: str, *, dataset: str, before: str) -> dict[str, Any] | None:
        """The newest summary of ``target`` on ``dataset`` from an eval no later than ``before``."""
        rows = self._read(
            "SELECT created_at, eval_id, summary FROM eval_results WHERE target = ? "
            "AND dataset = ? AND created_at <= ? ORDER BY created_at DESC LIMIT 1",
            (target, dataset, before),
        )
        if not rows:
            return None
        row = rows[0]
        return {"created_at": row["created_at"], "eval_id": row["eval_id"], **_load(row["summary"])}

    def _approval(self, run_id: str, approval_id: str) -> dict[str, Any]:
        found = self.approval(run_id, approval_id)
        if found is None:
            raise ConfigError(f"run {run_id!r} has no approval {approval_id!r}", name=approval_id)
        return found


_OWN_TABLES = frozenset({"runs", "events", "approvals", "eval_results"})


def _refuse_foreign(conn: sqlite3.Connection, path: Path) -> None:
    """Refuse another program's database: migrating it would add our tables (and WAL) to it."""
    # One read transaction: the version and the tables come from one snapshot, even while
    # other processes open, recover or migrate the same file.
    conn.execute("BEGIN")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    finally:
        conn.execute("COMMIT")
    names = {r[0] for r in rows}
    if version == 0 and names - _OWN_TABLES:
        conn.close()
        raise StoreError(
            f"{path} is not a loopwise run store (it holds other tables: "
            f"{', '.join(sorted(names)[:5])}); point --store or LOOPWISE_STORE at a file of its own"
        )


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Bring the schema to the latest version; one process migrates, others wait."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > len(_MIGRATIONS):
        raise StoreError(
            f"run store {path} has schema version {version}; this loopwise knows "
            f"{len(_MIGRATIONS)} (upgrade loopwise)"
        )
    if version == len(_MIGRATIONS):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Re-read under the write lock: another process may have migrated meanwhile.
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for script in _MIGRATIONS[version:]:
            for statement in script.split(";"):
                if statement.strip():
                    conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {len(_MIGRATIONS)}")
        conn.execute("COMMIT")
    except sqlite3.Error:
        conn.execute("ROLLBACK")
        raise


def _statements(run_id: str, event: Event) -> list[tuple[str, tuple[Any, ...]]]:
    """The writes that store ``event``: its row, and what it changes besides the log."""
    data = event.data
    key = data.get("key")
    row = (
        "INSERT INTO events (run_id, seq, type, step, at, key, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            run_id,
            event.seq,
            str(event.type),
            event.step,
            event.at,
            None if key is None else str(key),
            _dump(data),
        ),
    )
    return [row, *_side_effects(run_id, event)]


def _side_effects(run_id: str, event: Event) -> list[tuple[str, tuple[Any, ...]]]:
    """What an event changes besides the log: the run row, the approvals."""
    # Most events (model calls, tool calls and results) change nothing else: the clock is
    # read only for the few that update a row.
    data = event.data
    if event.type is EventType.RUN_STARTED:
        now = _now()
        # A run started without create_run (a plain sink user) still gets a row.
        return [
            (
                "INSERT OR IGNORE INTO runs (id, target, status, input, created_at, updated_at) "
                "VALUES (?, ?, 'running', ?, ?, ?)",
                (run_id, str(data.get("target", "?")), _dump(data.get("input")), now, now),
            )
        ]
    if event.type is EventType.RUN_RESUMED:
        return [
            (
                "UPDATE runs SET status = 'running', detail = NULL, updated_at = ? WHERE id = ?",
                (_now(), run_id),
            )
        ]
    if event.type in _FINISHED:
        return [
            (
                "UPDATE runs SET status = ?, detail = ?, output = ?, usage = ?, updated_at = ? "
                "WHERE id = ?",
                (
                    data.get("status"),
                    data.get("detail"),
                    _dump(data.get("output")),
                    _dump(data.get("usage")),
                    _now(),
                    run_id,
                ),
            )
        ]
    if event.type is EventType.GATE_REQUESTED:
        return [_request_row(run_id, event)]
    if event.type is EventType.GATE_DECIDED and data.get("approval_id") is not None:
        return [_decision_row(run_id, data, event.at)]
    return []


def _decision_row(run_id: str, d: dict[str, Any], at: str) -> tuple[str, tuple[Any, ...]]:
    """A decision made in the run (interactive, policy) closes its pending request."""
    edited = d.get("args") if d.get("decision") == "edited" else None
    return (
        "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?, decision_reason = ?, "
        "edited_args = ? WHERE run_id = ? AND approval_id = ? AND status = 'pending'",
        (
            d.get("decision"),
            d.get("by"),
            d.get("decided_at") or at,
            d.get("reason"),
            None if edited is None else _dump(edited),
            run_id,
            str(d["approval_id"]),
        ),
    )


def _request_row(run_id: str, event: Event) -> tuple[str, tuple[Any, ...]]:
    d = event.data
    return (
        "INSERT OR IGNORE INTO approvals (run_id, approval_id, step, tool, call_id, args, "
        "effect, reason, tainted_by, args_hash, requested_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            run_id,
            str(d["approval_id"]),
            event.step,
            str(d["tool"]),
            d.get("call_id"),
            _dump(d.get("args")),
            d.get("effect"),
            d.get("reason"),
            d.get("tainted_by"),
            str(d["args_hash"]),
            event.at,
        ),
    )


def _run_dict(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "run_id": row["id"],
        "target": row["target"],
        "spec": row["spec"],
        "status": row["status"],
        "detail": row["detail"],
        "input": _load(row["input"]),
        "output": _load(row["output"]),
        "usage": _load(row["usage"]),
        "model": row["model"],
        "options": _load(row["options"]) or {},
        "owner": row["owner"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }


def _approval_dict(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "run_id": row["run_id"],
        "approval_id": row["approval_id"],
        "tool": row["tool"],
        "args": _load(row["args"]),
        "effect": row["effect"],
        "reason": row["reason"],
        "tainted_by": row["tainted_by"],
        "args_hash": row["args_hash"],
        "call_id": row["call_id"],
        "step": row["step"],
        "status": row["status"],
        "requested_at": row["requested_at"],
        "decided_by": row["decided_by"],
        "decided_at": row["decided_at"],
        "decision_reason": row["decision_reason"],
        "edited_args": _load(row["edited_args"]),
    }


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cycle collector while a run's log decodes into fresh rows, dicts and lists.

    They hold no reference cycles, so a collection finds nothing in them, yet allocating
    them triggers collections, and the full ones rescan the whole heap: reading a long log
    grew faster than its length. Reference counting still frees what is dropped.
    """
    if not gc.isenabled():  # paused already (an outer read, another thread, the caller)
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
