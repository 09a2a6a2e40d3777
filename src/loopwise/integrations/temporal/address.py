"""Where runs on Temporal live: a ``temporal://HOST:PORT/NAMESPACE`` URL, and the names the
workflow, its workers and its clients share.

The URL's query may set ``task_queue`` (default ``loopwise``), ``activity_timeout``
(seconds a model call, a tool call or a policy may take on a worker before Temporal
gives it to another worker, default 300) and ``continue_after`` (history events after
which a run continues as a new workflow run before its next model call, default 10,000;
Temporal's own suggestion counts too): ``temporal://127.0.0.1:7233/default?task_queue=desk``.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from loopwise.errors import StoreError
from loopwise.store.open import store_location

__all__ = [
    "DECIDE_SIGNAL",
    "EVENTS_QUERY",
    "MEMO_KEY",
    "PENDING_QUERY",
    "WORKFLOW",
    "TemporalAddress",
]

WORKFLOW = "loopwise.run"
"""The one workflow type: runs any loopwise target."""
DECIDE_SIGNAL = "loopwise.decide"
"""The signal a person's decision is sent as (accepted while no worker runs)."""
PENDING_QUERY = "loopwise.pending"
"""The query that answers a run's undecided approvals."""
EVENTS_QUERY = "loopwise.events"
"""The query that answers a run's events so far."""
MEMO_KEY = "loopwise"
"""The memo field holding what a client reads without a worker (status, approvals, log)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TemporalAddress:
    """A parsed ``temporal://`` store URL."""

    url: str
    """The URL as given."""
    target_host: str
    """``HOST:PORT`` of the Temporal frontend."""
    namespace: str
    """The Temporal namespace runs live in."""
    task_queue: str = "loopwise"
    """The task queue workers poll."""
    activity_timeout: float = 300.0
    """Seconds one activity may take before Temporal retries it on another worker."""
    continue_after: int = 10_000
    """History events after which a run continues as a new workflow run."""

    @classmethod
    def parse(cls, url: str) -> TemporalAddress:
        """The address of ``url``; :class:`StoreError` (``bad-url``) when it is none."""
        kind, _ = store_location(url)
        if kind != "temporal":
            raise StoreError(f"{url!r} is not a temporal:// URL", code="bad-url")
        parts = urllib.parse.urlsplit(url)
        query = dict(urllib.parse.parse_qsl(parts.query))
        unknown = sorted(set(query) - {"task_queue", "activity_timeout", "continue_after"})
        if unknown:
            raise StoreError(
                f"bad store URL {url!r}: unknown parameter {unknown[0]!r} (it takes "
                "task_queue, activity_timeout and continue_after)",
                code="bad-url",
            )
        after = query.get("continue_after", "10000")
        if not (after.isdigit() and int(after) >= 10):
            raise StoreError(
                f"bad store URL {url!r}: continue_after must be a number of events >= 10",
                code="bad-url",
            )
        queue = query.get("task_queue") or "loopwise"
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", queue):
            raise StoreError(
                f"bad store URL {url!r}: task_queue takes letters, digits, '.', '_' and '-'",
                code="bad-url",
            )
        try:
            timeout = float(query.get("activity_timeout", 300.0))
        except ValueError:
            timeout = -1.0
        if not timeout > 0:
            raise StoreError(
                f"bad store URL {url!r}: activity_timeout must be seconds > 0", code="bad-url"
            )
        return cls(
            url=url,
            target_host=parts.netloc,
            namespace=parts.path.strip("/"),
            task_queue=queue,
            activity_timeout=timeout,
            continue_after=int(after),
        )
