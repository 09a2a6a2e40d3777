"""The runs this process is running now, and whether a run's owner still runs it.

A stored run names its owner (``host:pid``, :func:`owner_id`). Before taking over a run
left ``running``, a resume asks :func:`owner_alive`: a process on this machine that is gone
gives its runs up; this process gives up a run only when it no longer runs it (the
module-global registry :func:`running_here` keeps).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

__all__ = ["owner_alive", "owner_id", "running_here"]


class _Active:
    """Run ids this process is running now (its own runs are alive only while listed)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: set[str] = set()

    def __contains__(self, run_id: object) -> bool:
        with self._lock:
            return run_id in self._ids

    @contextmanager
    def running(self, run_id: str) -> Iterator[None]:
        with self._lock:
            self._ids.add(run_id)
        try:
            yield
        finally:
            with self._lock:
                self._ids.discard(run_id)


_live = _Active()


def owner_id() -> str:
    """This process as a run's owner: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_alive(run_id: str) -> Callable[[str], bool]:
    """Whether the process named by an ``owner`` (``host:pid``) still runs ``run_id``."""

    def alive(owner: str) -> bool:
        host, _, pid = owner.rpartition(":")
        if host != socket.gethostname() or not pid.isdigit():
            return True  # another machine: it cannot be checked from here
        if int(pid) == os.getpid():
            return run_id in _live
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    return alive


def running_here(run_id: str) -> AbstractContextManager[None]:
    """List ``run_id`` as running in this process for the ``with`` block."""
    return _live.running(run_id)
