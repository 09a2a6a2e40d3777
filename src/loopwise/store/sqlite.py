"""The embedded run store: one SQLite file in WAL mode (the default).

Many processes on one machine share the file through SQLite's own locking
(``busy_timeout``, short transactions). The schema is versioned by ``PRAGMA
user_version``; a newer file, or another program's database, is refused.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from loopwise.errors import StoreError
from loopwise.store.base import DEFAULT_LEASE_SECONDS, Tx, default_store_path
from loopwise.store.sql import SQLStore

__all__ = ["SQLiteStore"]


class _SQLiteTx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def rows(self, sql: str, params: tuple[object, ...] = ()) -> list[Mapping[str, Any]]:
        cursor = self._conn.execute(sql, params)
        cursor.row_factory = sqlite3.Row
        return list(cursor.fetchall())

    def run(self, sql: str, params: tuple[object, ...] = ()) -> int:
        return self._conn.execute(sql, params).rowcount

    def run_many(self, sql: str, rows: list[tuple[object, ...]]) -> int:
        return self._conn.executemany(sql, rows).rowcount


_SQLITE_MIGRATIONS: list[str] = [
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
    # IF NOT EXISTS: before this version, loopwise.evidence.evals.harness created the table itself.
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
    # Leases (seconds since the epoch) and the workers' queue.
    """
    ALTER TABLE runs ADD COLUMN lease_until REAL;
    CREATE INDEX runs_status ON runs(status, created_at);
    """,
    # Conversations: a run is the `turn`-th message of its conversation; the unique index
    # is what refuses a second message numbered alike (two sent at once).
    """
    ALTER TABLE runs ADD COLUMN conversation TEXT;
    ALTER TABLE runs ADD COLUMN turn INTEGER;
    CREATE UNIQUE INDEX runs_conversation ON runs(conversation, turn);
    """,
    # Live evidence (store/live.py): a shadow's pairs and people's decisions, one row per
    # run and journal key, written with the event that carries it.
    """
    CREATE TABLE live_cases (
        run_id TEXT NOT NULL,
        key TEXT NOT NULL,
        target TEXT NOT NULL,
        kind TEXT NOT NULL,
        step TEXT NOT NULL,
        input TEXT,
        output TEXT,
        reference TEXT,
        agree INTEGER,
        status TEXT NOT NULL,
        detail TEXT,
        created_at TEXT NOT NULL,
        PRIMARY KEY (run_id, key)
    );
    CREATE INDEX live_cases_target ON live_cases(target, created_at);
    """,
    # Listings bounded and indexed (issue 43): the eval mark in a column (runs, and each
    # approval as it is asked) instead of the options JSON; real runs' undecided approvals
    # listed newest first from a partial index; the claim's check for a run's pending
    # approvals takes the primary key (led by the status index, it read every pending one).
    """
    ALTER TABLE runs ADD COLUMN eval_id TEXT;
    ALTER TABLE approvals ADD COLUMN eval_id TEXT;
    UPDATE runs SET eval_id = json_extract(options, '$.eval') WHERE options LIKE '%"eval"%';
    UPDATE approvals SET eval_id = (SELECT eval_id FROM runs WHERE runs.id = approvals.run_id)
        WHERE run_id IN (SELECT id FROM runs WHERE eval_id IS NOT NULL);
    DROP INDEX IF EXISTS approvals_status;
    CREATE INDEX approvals_waiting ON approvals(requested_at, run_id, approval_id)
        WHERE status = 'pending' AND eval_id IS NULL;
    """,
    # Paused runs nobody waits for any more (issue 43): `answered_at`, kept by every
    # decision and pause, lets a worker's claim find them from a small partial index
    # instead of asking the approvals of every paused run.
    """
    ALTER TABLE runs ADD COLUMN answered_at TEXT;
    UPDATE runs SET answered_at = updated_at WHERE status = 'awaiting_approval' AND NOT EXISTS
        (SELECT 1 FROM approvals a WHERE a.run_id = runs.id AND a.status = 'pending');
    CREATE INDEX runs_answered ON runs(created_at)
        WHERE status = 'awaiting_approval' AND answered_at IS NOT NULL;
    """,
]
"""The schema, one script per version; ``PRAGMA user_version`` says how many ran."""


class SQLiteStore(SQLStore):
    """The embedded :class:`RunStore`: one SQLite file in WAL mode (see the module docs).

    ``path`` defaults to ``$LOOPWISE_STORE`` or ``.loopwise/runs.db``; the file and its
    directory are created on first use. Raises :class:`StoreError` when the file cannot
    be opened or is a newer schema than this loopwise knows.
    """

    _clock = "((julianday('now') - 2440587.5) * 86400.0)"
    _by_status = " INDEXED BY runs_status"
    _by_answered = " INDEXED BY runs_answered"

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        synchronous: str = "NORMAL",
        busy_timeout_ms: int = 10_000,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        super().__init__(lease_seconds=lease_seconds)
        self.path = default_store_path(path)
        self.name = str(self.path)
        self._synchronous = synchronous
        self._busy_timeout_ms = busy_timeout_ms
        self._conn: sqlite3.Connection | None = None

    def __enter__(self) -> SQLiteStore:
        return self

    def close(self) -> None:
        """Commit what is grouped and close the connection (a later use opens it again)."""
        super().close()
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def connect(self) -> SQLiteStore:
        """Open, check and migrate the file now rather than at first use (so a file that
        cannot be a store fails before anything else happens); returns the store."""
        with self._lock:
            self._connection()
        return self

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
                # An error raised without a result code is never "locked" (getattr: only
                # sqlite3's own errors carry sqlite_errorcode).
                code = getattr(e, "sqlite_errorcode", 0) & 0xFF
                if code not in _BUSY or time.monotonic() > deadline:
                    raise
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                time.sleep(0.01)

    @contextmanager
    def _transaction(self) -> Iterator[Tx]:
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                yield _SQLiteTx(conn)
                conn.execute("COMMIT")
            except sqlite3.Error as e:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise StoreError(f"run store {self.path}: {e}") from e
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    @contextmanager
    def _reading(self) -> Iterator[Tx]:
        with self._lock:
            conn = self._connection()
            try:
                yield _SQLiteTx(conn)
            except sqlite3.Error as e:
                raise StoreError(f"run store {self.path}: {e}") from e


_BUSY = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
"""The result codes of "database is locked" and "table is locked" (an extended code, such
as ``SQLITE_BUSY_RECOVERY``, carries its primary one in its low byte)."""

_OWN_TABLES = frozenset({"runs", "events", "approvals", "eval_results", "live_cases"})


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
            f"{', '.join(sorted(names)[:5])}); point --store or LOOPWISE_STORE at a file "
            "of its own",
            code="foreign",
        )


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Bring the schema to the latest version; one process migrates, others wait."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > len(_SQLITE_MIGRATIONS):
        raise StoreError(
            f"run store {path} has schema version {version}; this loopwise knows "
            f"{len(_SQLITE_MIGRATIONS)} (upgrade loopwise)",
            code="newer-schema",
        )
    if version == len(_SQLITE_MIGRATIONS):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Re-read under the write lock: another process may have migrated meanwhile.
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for script in _SQLITE_MIGRATIONS[version:]:
            for statement in script.split(";"):
                if statement.strip():
                    conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {len(_SQLITE_MIGRATIONS)}")
        conn.execute("COMMIT")
    except sqlite3.Error:
        conn.execute("ROLLBACK")
        raise
