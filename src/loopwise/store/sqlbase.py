"""The base of both SQL run stores (:class:`~loopwise.store.sql.SQLStore`): transactions,
grouped writes committed together, reads, and the lease a write renews.

The rules these follow (durability points, leases, concurrency) are described in
:mod:`loopwise.store.sql`; each role of the store builds on :class:`SQLBase` in a module of
its own (``sqllog``, ``sqlleases``, ``sqlqueries``, ``sqlapprovals``, ``sqlevals``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Self

from loopwise.errors import ConfigError, StoreError
from loopwise.store.base import DEFAULT_LEASE_SECONDS, Tx
from loopwise.store.retries import retrying
from loopwise.store.rows import Statement

__all__ = ["SQLBase", "in_batches"]

_IN_LIST = 500
"""Ids one ``IN (...)`` asks at most (old SQLite allows 999 parameters a statement)."""


def in_batches(ids: Sequence[str]) -> Iterator[list[str]]:
    """``ids`` (distinct, in order) a batch at a time, each small enough for one ``IN``."""
    listed = list(dict.fromkeys(ids))
    for i in range(0, len(listed), _IN_LIST):
        yield listed[i : i + _IN_LIST]


def _runs_of(batch: list[Statement]) -> Iterator[tuple[str, list[tuple[object, ...]]]]:
    """``batch`` as runs of one statement with several parameter rows (the grouped
    events' inserts), executed at once (SQLite's ``executemany``, PostgreSQL's pipeline)."""
    i = 0
    while i < len(batch):
        sql, j = batch[i][0], i + 1
        while j < len(batch) and batch[j][0] == sql:
            j += 1
        yield sql, [params for _, params in batch[i:j]]
        i = j


class SQLBase:
    """What every role of :class:`~loopwise.store.sql.SQLStore` builds on: the connection's
    transactions, grouped writes, reads and the lease renewal of a write; a subclass
    supplies the connection.

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
    _by_status = ""
    """What makes the workers' claim read ``runs`` by its status index, whatever the
    planner's statistics say (after ``ANALYZE`` SQLite preferred reading every run in
    creation order: the whole table when nothing is claimable)."""
    _by_answered = ""
    """The same for the paused runs nobody waits for any more (``runs_answered``)."""
    _insertion_order = "rowid"
    """The column that orders rows created at the same instant."""
    _eval_mark = "eval_id"
    """SQL for a run's eval mark (:attr:`StoredRun.eval_id`), NULL for a real run: a column,
    written by :meth:`create_run` from ``options["eval"]``."""

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

    def __enter__(self) -> Self:
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

    def _run(self, run_id: str) -> Mapping[str, Any]:
        """The run's row; :class:`ConfigError` (exit 2 in the CLI) for an unknown id."""
        rows = self._read("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            raise ConfigError(f"no run {run_id!r} in {self.name}", name=run_id)
        return rows[0]

    def _read(self, sql: str, params: tuple[object, ...] = ()) -> list[Mapping[str, Any]]:
        with self._lock:
            if self._grouped:
                self._write([])
            return retrying(lambda: self._rows(sql, params), self.retry_seconds)

    def _rows(self, sql: str, params: tuple[object, ...]) -> list[Mapping[str, Any]]:
        with self._reading() as tx:
            return tx.rows(sql, params)

    def flush(self) -> None:
        """Commit the events grouped since the last durability point."""
        with self._lock:
            if self._grouped:
                self._write([])
