"""Waiting out a store that cannot be reached: :func:`retrying`.

A PostgreSQL server restarting, failing over or dropping a connection makes a transaction
fail with :class:`~loopwise.errors.StoreError` ``code="unreachable"``. The run store tries
such a transaction again, whole, for a while (:attr:`~loopwise.store.sql.SQLStore.retry_seconds`,
half the lease), so a run waits out a restart and goes on. When the store stays away,
:class:`~loopwise.store.sql.SQLStore` drops nothing: what could not be written goes back
to its group, first, and the process's next write commits it; the error reaches the run,
which ends ``error`` (its ``run_finished`` written with the rest once the store answers),
resumable, its log whole. A process that ends before then is a crash (the store's
durability rules). Other failures (a constraint refused) are not tried again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from loopwise.errors import StoreError

__all__ = ["retrying"]

T = TypeVar("T")


def retrying(attempt: Callable[[], T], seconds: float) -> T:
    """``attempt()``, tried again while the store is ``unreachable`` for up to ``seconds``,
    waiting longer each time (50 ms doubling to 1 s); then its error is raised. Each
    attempt must be a whole transaction, so one that failed left nothing behind."""
    deadline, pause = time.monotonic() + seconds, 0.05
    while True:
        try:
            return attempt()
        except StoreError as e:
            if e.code != "unreachable" or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 1.0)
