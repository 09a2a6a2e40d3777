"""Which run store: a path or URL opened as the right store, once per process.

``LOOPWISE_STORE``, ``--store`` and ``store=`` take the same forms:

* a path (``runs.db``, ``/var/loopwise/runs.db``) or ``sqlite:///path`` (``sqlite:////abs``
  for an absolute one) → :class:`~loopwise.store.sqlite.SQLiteStore`;
* ``postgresql://…`` or ``postgres://…`` → :class:`~loopwise.store.postgres.PostgresStore`
  (the ``loopwise[postgres]`` extra);
* ``temporal://HOST:PORT/NAMESPACE`` → runs on a Temporal server (the ``loopwise[temporal]``
  extra): not a store this module opens; the verbs that work with it (``run``, ``worker``,
  ``pending``, ``approve``, ``deny``, ``runs``, ``serve``) open it themselves
  (:mod:`loopwise.integrations.temporal`), and :func:`open_store` refuses it in one line
  for every other reader.

Anything else that looks like a URL (``scheme:…``) is refused with
:class:`~loopwise.errors.StoreError` (``code="bad-url"``) rather than taken as a file name,
so a mistyped URL never creates a file or folder named after it.

:func:`shared_store` keeps one store per location open for the life of the process (the
runs of one process then share its connection, and a run does not pay for opening it);
they are closed at exit. A forked child forgets its parent's stores and opens its own.
"""

from __future__ import annotations

import atexit
import enum
import os
import re
import threading
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias

from loopwise.errors import StoreError
from loopwise.store.base import RunStore, default_store_path, redact
from loopwise.store.sql import SQLStore

__all__ = [
    "DEFAULT",
    "TEMPORAL_VERBS",
    "StoreLike",
    "close_shared_stores",
    "new_store_folder",
    "open_existing",
    "open_store",
    "require_folder",
    "shared_store",
    "store_location",
]


class _Default(enum.Enum):
    DEFAULT = "DEFAULT"

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Final = _Default.DEFAULT
"""``store=DEFAULT``: the store at ``$LOOPWISE_STORE`` or ``.loopwise/runs.db``."""

StoreLike: TypeAlias = RunStore | str | os.PathLike[str] | Literal[_Default.DEFAULT] | None
"""Where a run is recorded: a store object (``open_store(...)``, ``SQLiteStore(...)``), a
path or URL (``sqlite:///...``, ``postgresql://...``) opened once per process,
:data:`DEFAULT` (``$LOOPWISE_STORE`` or ``.loopwise/runs.db``), or ``None`` (nothing
recorded)."""

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
_POSTGRES = ("postgresql", "postgres")
_TEMPORAL = re.compile(r"^temporal://[^/:?#\s]+:\d+/[^/?#\s]+/?(\?[^#\s]*)?$")
TEMPORAL_VERBS = "run, worker, pending, approve, deny, runs list, runs show, serve"
"""The verbs that work with a ``temporal://`` store."""


def store_location(where: str | os.PathLike[str] | None = None) -> tuple[str, str]:
    """``("sqlite", absolute path)``, ``("postgresql", url)`` or ``("temporal", url)``.

    ``None`` means ``$LOOPWISE_STORE``, else ``.loopwise/runs.db``. Raises
    :class:`StoreError` (``code="bad-url"``) for an unknown scheme or a malformed URL.
    """
    if where is None or where == "":
        where = os.environ.get("LOOPWISE_STORE") or None
    if where is None or isinstance(where, os.PathLike):
        return "sqlite", str(default_store_path(where).resolve())
    match = _SCHEME.match(where)
    if match is None:
        return "sqlite", str(Path(where).resolve())
    scheme = match.group(1).lower()
    if scheme == "sqlite":
        path = where[match.end() :]
        if not path.startswith("///") or len(path) == 3:
            raise StoreError(
                f"bad store URL {redact(where)!r}: write sqlite:///relative/path.db or "
                "sqlite:////absolute/path.db",
                code="bad-url",
            )
        return "sqlite", str(Path(path[3:]).resolve())
    if scheme in _POSTGRES:
        if not where[match.end() :].startswith("//"):
            raise StoreError(
                f"bad store URL {redact(where)!r}: write "
                "postgresql://user:password@host:5432/database",
                code="bad-url",
            )
        return "postgresql", where
    if scheme == "temporal":
        if not _TEMPORAL.match(where):
            raise StoreError(
                f"bad store URL {redact(where)!r}: write temporal://HOST:PORT/NAMESPACE "
                "(e.g. temporal://127.0.0.1:7233/default)",
                code="bad-url",
            )
        return "temporal", where
    raise StoreError(
        f"unknown store scheme {scheme!r} in {where[: match.end()]}…: use a file path, "
        "sqlite:///path.db, postgresql://user@host/database or "
        "temporal://host:port/namespace",
        code="bad-url",
    )


def open_store(where: str | os.PathLike[str] | None = None, **options: Any) -> SQLStore:
    """A new store for a path or URL (see the module docs); ``options`` go to its class.

    Raises :class:`StoreError`: ``bad-url``, ``unreachable``, ``foreign`` or
    ``newer-schema``; :class:`~loopwise.errors.MissingExtra` without ``loopwise[postgres]``.
    """
    kind, location = store_location(where)
    if kind == "temporal":
        raise StoreError(
            f"{location} runs on Temporal: only {TEMPORAL_VERBS} work with it (a worker "
            "continues a decided run by itself)",
            code="temporal",
        )
    if kind == "postgresql":
        from loopwise.store.postgres import PostgresStore  # the optional extra

        return PostgresStore(location, **options)
    from loopwise.store.sqlite import SQLiteStore

    # Opened now, as a PostgresStore is: a directory, an unwritable place or another
    # program's file is refused here, before a worker or the inbox says it is up.
    return SQLiteStore(location, **options).connect()


def require_folder(where: str | os.PathLike[str] | None = None) -> None:
    """Refuse a SQLite store whose folder does not exist, for verbs that read runs: a
    mistyped ``--store`` or ``LOOPWISE_STORE`` must not read as an empty store (nor create
    one). Raises :class:`StoreError` (``code="missing"``); a PostgreSQL URL passes."""
    kind, location = store_location(where)
    folder = Path(location).parent
    if kind == "sqlite" and not folder.is_dir():
        raise StoreError(
            f"no store at {location}: the folder {folder} does not exist (a mistyped --store "
            "or LOOPWISE_STORE? `loopwise run` makes a store where it records)",
            code="missing",
        )


def new_store_folder(where: str | os.PathLike[str] | None = None) -> Path | None:
    """The folder a SQLite store at ``where`` would have to create, ``None`` when it
    exists (or the store is PostgreSQL): a verb that records says it made one."""
    kind, location = store_location(where)
    folder = Path(location).parent
    return folder if kind == "sqlite" and not folder.exists() else None


def open_existing(where: str | os.PathLike[str] | None = None) -> SQLStore | None:
    """The store at ``where`` when there is one, for readers that must not create one:
    ``None`` for a SQLite file that does not exist yet."""
    kind, location = store_location(where)
    if kind == "sqlite" and not Path(location).exists():
        return None
    return open_store(location)


class _Shared:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: dict[tuple[str, str], SQLStore] = {}
        self.inherited: list[SQLStore] = []
        # What a path or URL, as given, resolved to: resolving a path reads the file
        # system, and a process running runs one after another asks again every run.
        self.resolved: dict[tuple[str, str, str], tuple[str, str]] = {}

    def forget_after_fork(self) -> None:
        # The parent's connections are the parent's: closing them here would close its
        # sessions too. Keep them referenced (unused) so no finalizer touches them.
        self.lock = threading.Lock()
        self.inherited.extend(self.open.values())
        self.open.clear()
        self.resolved.clear()


_shared = _Shared()
os.register_at_fork(after_in_child=_shared.forget_after_fork)


def shared_store(where: str | os.PathLike[str] | None = None) -> SQLStore:
    """This process's store for ``where``, opened on first use and kept open until exit."""
    key = _resolved(where)
    with _shared.lock:
        store = _shared.open.get(key)
        if store is None:
            store = open_store(key[1] if key[0] == "postgresql" else Path(key[1]))
            _shared.open[key] = store
        return store


def _resolved(where: str | os.PathLike[str] | None) -> tuple[str, str]:
    try:
        # A relative path (or $LOOPWISE_STORE's) names another file in another directory.
        given = (os.fspath(where or ""), os.environ.get("LOOPWISE_STORE", ""), os.getcwd())
    except OSError:  # the working directory was removed: resolve as given
        return store_location(where)
    key = _shared.resolved.get(given)
    if key is None:
        key = _shared.resolved[given] = store_location(where)
    return key


@atexit.register
def close_shared_stores() -> None:
    """Close every store :func:`shared_store` opened (at exit; tests call it between tests)."""
    with _shared.lock:
        stores = list(_shared.open.values())
        _shared.open.clear()
        _shared.resolved.clear()
    for store in stores:
        store.close()
