"""The run store on PostgreSQL: many workers on many machines share runs and approvals.

Install the extra (``pip install 'loopwise[postgres]'``: psycopg 3 and psycopg-pool) and
point ``LOOPWISE_STORE``, ``--store`` or ``store=`` at ``postgresql://user:pw@host/db``.
The semantics are SQLite's (:class:`~loopwise.store.sql.SQLStore` holds the statements both
run); what differs is here: a connection pool, row locks for claims (``FOR UPDATE``, and
``SKIP LOCKED`` so workers never wait on one another's claim), the database's clock for
leases, and LISTEN/NOTIFY so that a decided approval or a queued run wakes the workers.
A pooled connection the server closed (a restart) is replaced before it is used, so a
process that keeps its store fails no call after a restart (:class:`_Idle`).

The schema is versioned in a ``loopwise_schema`` table and migrated under a transaction
advisory lock, so processes starting together migrate once. A database whose current
schema already holds a ``runs``, ``events`` or ``approvals`` table of another program is
refused (give loopwise a database, or a schema via ``options=-csearch_path=...``, of its
own), and so is a schema newer than this loopwise knows.
"""

from __future__ import annotations

import functools
import select
import sys
import time
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from loopwise.errors import StoreError, missing_extra
from loopwise.store.base import DEFAULT_LEASE_SECONDS, Tx, redact
from loopwise.store.sql import SQLStore

try:
    import psycopg
    from psycopg.rows import TupleRow, dict_row
    from psycopg_pool import ConnectionPool
except ImportError as e:
    raise missing_extra("postgres", e, needed_by="a postgresql:// store") from e

__all__ = ["CHANNEL", "PostgresStore"]

CHANNEL = "loopwise_runs"
"""The NOTIFY channel: a run id whose run may have become claimable."""

_LOCK_KEY = 0x6C6F6F70_77697365 & 0x7FFF_FFFF_FFFF_FFFF
"""The advisory lock migrations run under ("loopwise" in ASCII, as a bigint)."""

_OWN_TABLES = frozenset({"runs", "events", "approvals", "eval_results", "live_cases"})

_MIGRATIONS: list[str] = [
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        n BIGINT GENERATED ALWAYS AS IDENTITY,
        target TEXT NOT NULL,
        spec TEXT,
        status TEXT NOT NULL,
        input TEXT,
        output TEXT,
        usage TEXT,
        model TEXT,
        options TEXT NOT NULL DEFAULT '{}',
        detail TEXT,
        owner TEXT,
        lease_until DOUBLE PRECISION,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE INDEX runs_created ON runs(created_at);
    CREATE INDEX runs_status ON runs(status, created_at);
    CREATE TABLE events (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        type TEXT NOT NULL,
        step TEXT NOT NULL,
        at TEXT NOT NULL,
        key TEXT,
        data TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
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
    CREATE TABLE eval_results (
        eval_id TEXT NOT NULL,
        target TEXT NOT NULL,
        dataset TEXT NOT NULL,
        created_at TEXT NOT NULL,
        summary TEXT NOT NULL,
        PRIMARY KEY (eval_id, target)
    );
    """,
    # Conversations (SQLite's version 5): a run is the `turn`-th message of its
    # conversation; the unique index refuses a second message numbered alike.
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
    # Listings bounded and indexed (SQLite's version 7, issue 43): the eval mark in a
    # column, real runs' undecided approvals from a partial index, the claim's check for a
    # run's pending approvals by the primary key.
    """
    ALTER TABLE runs ADD COLUMN eval_id TEXT;
    ALTER TABLE approvals ADD COLUMN eval_id TEXT;
    UPDATE runs SET eval_id = options::jsonb ->> 'eval' WHERE options LIKE '%"eval"%';
    UPDATE approvals SET eval_id = runs.eval_id FROM runs
        WHERE runs.id = approvals.run_id AND runs.eval_id IS NOT NULL;
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
"""The schema, one script per version; ``loopwise_schema.version`` says how many ran."""


@functools.lru_cache(maxsize=256)
def _dialect(sql: str) -> bytes:
    """The shared ``?``-placeholder SQL in psycopg's ``%s`` style."""
    return sql.replace("%", "%%").replace("?", "%s").encode()


class _PgTx:
    def __init__(self, conn: psycopg.Connection[TupleRow]) -> None:
        self._conn = conn

    def rows(self, sql: str, params: tuple[object, ...] = ()) -> list[Mapping[str, Any]]:
        with self._conn.cursor(row_factory=dict_row) as cur:
            cur.execute(_dialect(sql), params)
            return list(cur.fetchall())

    def run(self, sql: str, params: tuple[object, ...] = ()) -> int:
        with self._conn.cursor() as cur:
            cur.execute(_dialect(sql), params)
            return cur.rowcount

    def run_many(self, sql: str, rows: list[tuple[object, ...]]) -> int:
        # psycopg sends the rows in one pipeline: one round trip, not one per event.
        with self._conn.cursor() as cur:
            cur.executemany(_dialect(sql), rows)
            return cur.rowcount


class PostgresStore(SQLStore):
    """The :class:`~loopwise.store.base.RunStore` on a PostgreSQL database (see the module docs).

    Connects (and migrates) on construction, so a wrong URL, a server that does not
    answer or a refused login raise :class:`StoreError` (``code="unreachable"``) at once,
    naming the URL without its password.
    """

    _clock = "extract(epoch from clock_timestamp())::float8"
    _locking = " FOR UPDATE"
    _skip_locked = " FOR UPDATE OF runs SKIP LOCKED"
    _insertion_order = "n"

    def __init__(
        self,
        url: str,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        max_connections: int = 4,
        connect_timeout: float = 5.0,
    ) -> None:
        super().__init__(lease_seconds=lease_seconds)
        self.url = url
        self.name = redact(url)
        self._timeout = connect_timeout
        self._max_connections = max_connections
        with self._connect() as conn:
            _migrate(conn, self.name, url)
        self._pool: ConnectionPool | None = None
        self._listener: psycopg.Connection[TupleRow] | None = None

    def __enter__(self) -> PostgresStore:
        return self

    def _connect(self, *, autocommit: bool = False) -> psycopg.Connection[TupleRow]:
        try:
            return psycopg.connect(
                self.url, autocommit=autocommit, connect_timeout=max(1, round(self._timeout))
            )
        except psycopg.Error as e:
            raise StoreError(
                f"cannot reach the PostgreSQL run store {self.name}: {_said(e, self.url)}; "
                "check that the server runs and the URL, user and password are right",
                code="unreachable",
            ) from e

    def close(self) -> None:
        """Commit what is grouped, then close the pool and the listening connection (a
        later use opens them again)."""
        super().close()
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None
            if self._listener is not None:
                self._listener.close()
                self._listener = None

    @contextmanager
    def _transaction(self) -> Iterator[Tx]:
        with self._lock:
            try:
                if self._pool is None:
                    idle = _Idle()
                    self._pool = ConnectionPool(
                        self.url,
                        min_size=1,
                        max_size=self._max_connections,
                        open=False,
                        timeout=self._timeout,
                        kwargs={"connect_timeout": max(1, round(self._timeout))},
                        check=idle.check,
                        reset=idle.returned,
                    )
                    self._pool.open(wait=True, timeout=self._timeout)
                with self._pool.connection() as conn:
                    yield _PgTx(conn)
            except psycopg.OperationalError as e:
                # A connection lost or refused, the server shutting down or starting up, a
                # serialization failure: a transaction tried again may pass (SQLStore does).
                said = _said(e, self.url)
                raise StoreError(f"run store {self.name}: {said}", code="unreachable") from e
            except psycopg.Error as e:
                raise StoreError(f"run store {self.name}: {_said(e, self.url)}") from e

    _reading = _transaction

    def _notify(self, tx: Tx, run_id: str) -> None:
        tx.rows(f"SELECT pg_notify('{CHANNEL}', ?)", (run_id,))

    def wait_for_work(self, timeout: float) -> None:
        """Return on the next NOTIFY (a decided approval, a queued run) or after ``timeout``."""
        if self._stopping.is_set():
            return
        try:
            if self._listener is None or self._listener.closed:
                self._listener = self._connect(autocommit=True)
                self._listener.execute("LISTEN loopwise_runs")
            for _ in self._listener.notifies(timeout=timeout, stop_after=1):
                pass
        except (psycopg.Error, StoreError):
            # The server went away: wait as a poller would, and reconnect next time.
            self._listener = None
            self._stopping.wait(timeout)


class _Idle:
    """The pool's check of a connection before handing it out, so that a dead one is
    replaced before use and never fails a transaction.

    A server that restarts, shuts down or ends a session (``pg_terminate_backend``) says so
    and closes the socket: an idle connection with something to read is dead, or about to
    be, and is asked an empty query (which fails: the pool drops it and hands out another
    or a new one). Looking costs no round trip, so every connection is looked at, however
    recently it was returned. One idle for :data:`_CHECK_AFTER` seconds or more is asked
    in any case (a server that vanished without closing: a failover, a cut network).

    Why not try a failed transaction again instead: reads and the grouped event writes are
    (:mod:`loopwise.store.retries`: a transaction that failed before its commit left
    nothing), but a claim, a decision or a new run's row is not tried again by the store,
    and a commit whose answer was lost may have taken effect: trying it again could claim
    or decide twice. A connection checked before use keeps those from failing at all.
    """

    def __init__(self) -> None:
        self._returned: weakref.WeakKeyDictionary[psycopg.Connection[TupleRow], float] = (
            weakref.WeakKeyDictionary()
        )

    def returned(self, conn: psycopg.Connection[TupleRow]) -> None:
        self._returned[conn] = time.monotonic()

    def check(self, conn: psycopg.Connection[TupleRow]) -> None:
        idle = time.monotonic() - self._returned.get(conn, 0.0)
        if idle >= _CHECK_AFTER or _readable(conn):
            ConnectionPool.check_connection(conn)


def _readable(conn: psycopg.Connection[TupleRow]) -> bool:
    """Whether an idle connection has something to read (it never listens, so only a
    server ending the session sends anything): a look, not a round trip."""
    if sys.platform == "win32":
        return bool(select.select([conn.fileno()], [], [], 0)[0])
    poll = select.poll()  # unlike select(), any descriptor number: a server keeps many
    poll.register(conn.fileno(), select.POLLIN)
    return bool(poll.poll(0))


_CHECK_AFTER = 1.0


def _said(e: psycopg.Error, url: str) -> str:
    """The first line of what the server or libpq said (its others point into the SQL), with
    the password out: libpq may quote the part of a URL it could not parse."""
    text = str(e).strip()
    return redact(text.splitlines()[0], url) if text else type(e).__name__


def _migrate(conn: psycopg.Connection[TupleRow], name: str, url: str) -> None:
    """Bring the schema to the latest version under the advisory lock (one process does)."""
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            tables = {
                r[0]
                for r in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                )
            }
            version = _version(conn, tables, name)
            for script in _MIGRATIONS[version:]:
                conn.execute(script.encode())
            conn.execute("UPDATE loopwise_schema SET version = %s", (len(_MIGRATIONS),))
    except psycopg.Error as e:
        raise StoreError(f"cannot prepare the run store {name}: {_said(e, url)}") from e


def _version(conn: psycopg.Connection[TupleRow], tables: set[str], name: str) -> int:
    if "loopwise_schema" not in tables:
        clash = tables & _OWN_TABLES
        if clash:
            raise StoreError(
                f"{name} is not a loopwise run store (its schema already has a "
                f"{', '.join(sorted(clash))} table of another program); give loopwise a "
                "database or schema of its own",
                code="foreign",
            )
        conn.execute("CREATE TABLE loopwise_schema (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO loopwise_schema VALUES (0)")
        return 0
    row = conn.execute("SELECT version FROM loopwise_schema").fetchone()
    if row is None:
        raise StoreError(
            f"run store {name} has an empty loopwise_schema table, so its version is "
            "unknown; restore its row (SELECT count(*) FROM runs says whether it held runs) "
            "or give loopwise a database of its own",
            code="foreign",
        )
    version = int(row[0])
    if version > len(_MIGRATIONS):
        raise StoreError(
            f"run store {name} has schema version {version}; this loopwise knows "
            f"{len(_MIGRATIONS)} (upgrade loopwise)",
            code="newer-schema",
        )
    return version
