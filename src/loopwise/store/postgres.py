"""The run store on PostgreSQL: many workers on many machines share runs and approvals.

Install the extra (``pip install 'loopwise[postgres]'``: psycopg 3) and point
``LOOPWISE_STORE``, ``--store`` or ``store=`` at ``postgresql://user:pw@host/db``.
The semantics are SQLite's (:class:`~loopwise.store.sql.SQLStore` holds the statements both
run); what differs is here: row locks for claims (``FOR UPDATE``, and ``SKIP LOCKED`` so
workers never wait on one another's claim), the database's clock for leases, and
LISTEN/NOTIFY so that a decided approval or a queued run wakes the workers.

A store holds one connection (its transactions take turns under the store's lock, so a
pool would hand out no second one) in autocommit mode: a read is one statement and one
round trip, a write is ``BEGIN`` … ``COMMIT``. A connection the server closed (a restart)
is replaced before it is used, so a process that keeps its store fails no call after a
restart (:class:`_Idle`).

The schema is versioned in a ``loopwise_schema`` table. Opening a store asks its version in
one round trip on the connection it then keeps; only a store that is not at this loopwise's
version is migrated, under a transaction advisory lock, so processes starting together
migrate once. A database whose current schema already holds a ``runs``, ``events`` or
``approvals`` table of another program is refused (give loopwise a database, or a schema via
``options=-csearch_path=...``, of its own), and so is a schema newer than this loopwise knows.
"""

from __future__ import annotations

import functools
import os
import select
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

from loopwise.errors import StoreError, missing_extra
from loopwise.store.base import DEFAULT_LEASE_SECONDS, Tx, redact
from loopwise.store.sql import SQLStore

try:
    import psycopg
    from psycopg.rows import TupleRow, dict_row
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
    # The runs an undecided approval still counts for (issue 43): `pending`'s total asks
    # of every undecided approval whether its run is still paused or running, and read
    # each such run's row for it (180 ms at 1M runs); this index answers alone (20 ms).
    """
    CREATE INDEX runs_open ON runs(id) WHERE status IN ('awaiting_approval', 'running');
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

    Connects (and migrates when the schema is older) on construction, so a wrong URL, a
    server that does not answer or a refused login raise :class:`StoreError`
    (``code="unreachable"``) at once, naming the URL without its password.
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
        connect_timeout: float = 5.0,
    ) -> None:
        super().__init__(lease_seconds=lease_seconds)
        self.url = url
        self.name = redact(url)
        self._timeout = connect_timeout
        self._pid = os.getpid()
        self._conn: psycopg.Connection[TupleRow] | None = self._connect(autocommit=True)
        self._idle = _Idle()
        try:
            if not _current(self._conn):
                _migrate(self._conn, self.name, url)
        except BaseException:
            self._conn.close()
            raise
        self._listener: psycopg.Connection[TupleRow] | None = None

    def __enter__(self) -> PostgresStore:
        return self

    def __del__(self) -> None:
        # A store nobody closed takes its connections with it, quietly, as the pool it
        # replaced did (psycopg warns of a connection collected open, which fails a test
        # suite run with -W error): only its grouped events need close(), at exit or before.
        # Not in a forked child: the sessions are the parent's (closing would end them).
        if getattr(self, "_pid", None) != os.getpid():
            return
        for conn in (getattr(self, "_conn", None), getattr(self, "_listener", None)):
            if conn is not None:
                with suppress(Exception):  # at interpreter exit psycopg may be half gone
                    conn.close()

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
        """Commit what is grouped, then close the connection and the listening one (a
        later use opens them again)."""
        super().close()
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            if self._listener is not None:
                self._listener.close()
                self._listener = None

    def _connection(self) -> psycopg.Connection[TupleRow]:
        """The store's connection, checked (:class:`_Idle`), or a new one."""
        conn = self._conn
        if conn is not None and not conn.closed:
            try:
                self._idle.check(conn)
                return conn
            except psycopg.Error:
                conn.close()  # the server ended the session: a new one below
        self._conn = None
        self._conn = self._connect(autocommit=True)
        return self._conn

    @contextmanager
    def _transaction(self) -> Iterator[Tx]:
        with self._lock, self._using() as conn, conn.transaction():
            yield _PgTx(conn)

    @contextmanager
    def _reading(self) -> Iterator[Tx]:
        # A read is one statement (SQLBase._rows): in autocommit, its own transaction.
        with self._lock, self._using() as conn:
            yield _PgTx(conn)

    @contextmanager
    def _using(self) -> Iterator[psycopg.Connection[TupleRow]]:
        """The connection for one transaction, its failures as :class:`StoreError`; a
        connection left broken is dropped (the next transaction opens another)."""
        conn = None
        try:
            conn = self._connection()
            yield conn
        except psycopg.OperationalError as e:
            # A connection lost or refused, the server shutting down or starting up, a
            # serialization failure: a transaction tried again may pass (SQLStore does).
            said = _said(e, self.url)
            raise StoreError(f"run store {self.name}: {said}", code="unreachable") from e
        except psycopg.Error as e:
            raise StoreError(f"run store {self.name}: {_said(e, self.url)}") from e
        finally:
            if conn is not None:
                if conn.broken or conn.info.transaction_status != _IDLE:
                    # Lost, or left mid-transaction (an interrupt during a query).
                    conn.close()
                    self._conn = None
                else:
                    self._idle.returned(conn)

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
            heard = list(self._listener.notifies(timeout=timeout, stop_after=1))
            if heard:
                # One look answers every notice already here (many runs queued at once,
                # or while a busy worker did not listen): drained, not one wake each.
                list(self._listener.notifies(timeout=0))
        except (psycopg.Error, StoreError):
            # The server went away: wait as a poller would, and reconnect next time.
            self._listener = None
            self._stopping.wait(timeout)


class _Idle:
    """The check of the store's connection before each use, so that a dead one is
    replaced before use and never fails a transaction.

    A server that restarts, shuts down or ends a session (``pg_terminate_backend``) says so
    and closes the socket: an idle connection with something to read is dead, or about to
    be, and is asked an empty query (which fails: the store opens a new connection). Looking
    costs no round trip, so the connection is looked at before every use, however recently
    it was used. One idle for :data:`_CHECK_AFTER` seconds or more is asked in any case (a
    server that vanished without closing: a failover, a cut network).

    Why not try a failed transaction again instead: reads and the grouped event writes are
    (:mod:`loopwise.store.retries`: a transaction that failed before its commit left
    nothing), but a claim, a decision or a new run's row is not tried again by the store,
    and a commit whose answer was lost may have taken effect: trying it again could claim
    or decide twice. A connection checked before use keeps those from failing at all.
    """

    def __init__(self) -> None:
        self._returned = time.monotonic()

    def returned(self, conn: psycopg.Connection[TupleRow]) -> None:
        self._returned = time.monotonic()

    def check(self, conn: psycopg.Connection[TupleRow]) -> None:
        """Raise :class:`psycopg.Error` when ``conn`` is dead."""
        if time.monotonic() - self._returned >= _CHECK_AFTER or _readable(conn):
            conn.execute("")  # autocommit: an empty query, one round trip


def _readable(conn: psycopg.Connection[TupleRow]) -> bool:
    """Whether an idle connection has something to read (it never listens, so only a
    server ending the session sends anything): a look, not a round trip."""
    if sys.platform == "win32":
        return bool(select.select([conn.fileno()], [], [], 0)[0])
    poll = select.poll()  # unlike select(), any descriptor number: a server keeps many
    poll.register(conn.fileno(), select.POLLIN)
    return bool(poll.poll(0))


_CHECK_AFTER = 1.0

_IDLE = psycopg.pq.TransactionStatus.IDLE


def _said(e: psycopg.Error, url: str) -> str:
    """The first line of what the server or libpq said (its others point into the SQL), with
    the password out: libpq may quote the part of a URL it could not parse."""
    text = str(e).strip()
    return redact(text.splitlines()[0], url) if text else type(e).__name__


def _current(conn: psycopg.Connection[TupleRow]) -> bool:
    """Whether the schema is this loopwise's version, asked in one round trip: the
    ``loopwise_schema`` of the current schema (the one :func:`_migrate` reads) holds
    ``len(_MIGRATIONS)``. Anything else (no such table, another version, a table of that
    name found elsewhere on the search path) is :func:`_migrate`'s to settle and say."""
    try:
        row = conn.execute(
            "SELECT version, to_regclass('loopwise_schema') = "
            "to_regclass(quote_ident(current_schema()) || '.loopwise_schema') FROM loopwise_schema"
        ).fetchone()
    except psycopg.Error:
        return False
    return row is not None and row[0] == len(_MIGRATIONS) and row[1] is True


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
