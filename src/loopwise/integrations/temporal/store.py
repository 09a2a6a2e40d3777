"""The store behind a ``temporal://HOST:PORT/NAMESPACE`` URL: runs read from their
workflows, decisions sent as signals.

The verbs ``pending``, ``approve``/``deny``, ``runs list``/``show`` and the inbox
(``serve``) read and decide through :class:`TemporalStore` as they do through a SQL
store. What it reads needs no worker: a run's status, approvals and log are in its
workflow's memo (published at each pause and at the end, :mod:`.workflow`), and decisions
signalled since (which Temporal accepts while no worker runs) are read back from the
workflow's history, so a run decided once is not decided twice.
:meth:`TemporalStore.start` starts a run; the workers run it.

The roles a Temporal run does not have — leases and the workers' queue (Temporal hands
runs to workers), writing events (the workflow keeps its own log), conversations and eval
history — raise :class:`~loopwise.errors.StoreError` (``code="temporal"``) in one line.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import UTC, datetime
from typing import NoReturn, TypeVar

from loopwise.core.events import Event, jsonable
from loopwise.core.jsontypes import JSONObject, JSONValue
from loopwise.errors import ConfigError, StoreError, missing_extra
from loopwise.integrations.temporal.address import (
    DECIDE_SIGNAL,
    MEMO_KEY,
    WORKFLOW,
    TemporalAddress,
)
from loopwise.integrations.temporal.book import Book, event_of, page_of
from loopwise.integrations.temporal.codec import DATA_CONVERTER
from loopwise.integrations.temporal.messages import RunMemo
from loopwise.store.base import PAGE, ApprovalPage, StoredApproval, StoredRun
from loopwise.store.open import TEMPORAL_VERBS

try:
    from temporalio.client import Client, WorkflowExecution, WorkflowExecutionDescription
    from temporalio.runtime import Runtime, TelemetryConfig
    from temporalio.service import RPCError, RPCStatusCode
except ImportError as e:
    raise missing_extra("temporal", e, needed_by="a temporal:// store") from None

__all__ = ["TemporalStore", "connect"]

T = TypeVar("T")


async def connect(address: TemporalAddress, runtime: Runtime | None = None) -> Client:
    """A client of the server at ``address`` (on ``runtime``, default the SDK's own);
    :class:`StoreError` (``unreachable``) when it does not answer."""
    try:
        return await asyncio.wait_for(
            Client.connect(
                address.target_host,
                namespace=address.namespace,
                runtime=runtime,
                data_converter=DATA_CONVERTER,
            ),
            10,
        )
    except (RuntimeError, TimeoutError, RPCError) as e:
        raise StoreError(
            f"cannot reach Temporal at {address.target_host} (namespace "
            f"{address.namespace}): {str(e).splitlines()[0] if str(e) else type(e).__name__}",
            code="unreachable",
        ) from None


class TemporalStore:
    """A ``temporal://`` store for the verbs that read and decide runs (see module docs)."""

    lease_seconds = 0.0

    def __init__(self, url: str) -> None:
        self.address = TemporalAddress.parse(url)
        self.name = url
        self._loop = asyncio.new_event_loop()
        # One caller at a time on the loop (the inbox serves requests from threads).
        self._lock = threading.RLock()
        self._client: Client | None = None
        # Its own runtime, dropped on close: the SDK's threads then end before the
        # interpreter does (a default runtime's may outlive it and abort the process at
        # exit, temporalio/sdk-python#300).
        self._runtime: Runtime | None = Runtime(telemetry=TelemetryConfig())

    def call(self, work: Coroutine[object, object, T]) -> T:
        """Run ``work`` (a coroutine of this store's client) to its end."""
        with self._lock:
            try:
                self.client  # connected first: ``work`` reads it as it runs  # noqa: B018
            except BaseException:
                work.close()  # never started: not left to warn that it was never awaited
                raise
            return self._loop.run_until_complete(work)

    @property
    def client(self) -> Client:
        """The Temporal client (connected on first use)."""
        with self._lock:
            if self._client is None:
                connecting = connect(self.address, self._runtime)
                self._client = self._loop.run_until_complete(connecting)
            return self._client

    def __enter__(self) -> TemporalStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the client, its runtime and the event loop it ran on."""
        self._client = self._runtime = None
        gc.collect()  # the runtime's threads end when the last reference to it goes
        if not self._loop.is_closed():
            self._loop.close()

    def _describe(self, run_id: str) -> WorkflowExecutionDescription:
        try:
            return self.call(self.client.get_workflow_handle(run_id).describe())
        except RPCError as e:
            if e.status is RPCStatusCode.NOT_FOUND:
                raise ConfigError(f"no run {run_id!r} in {self.name}", name=run_id) from None
            raise StoreError(f"Temporal refused to describe run {run_id!r}: {e}") from None

    def _memo(self, described: WorkflowExecution) -> RunMemo:
        memo: RunMemo | None = self.call(described.memo_value(MEMO_KEY, default={}))
        return memo or {}

    def start(
        self,
        spec: str,
        input: JSONValue,
        *,
        target: str,
        model: str | None,
        options: JSONObject,
        run_id: str,
    ) -> str:
        """Start a run of ``spec`` as a workflow whose id is ``run_id``; a worker runs it
        (``model``: the name a worker resolves, as a queued run's)."""
        begin = {
            "spec": spec,
            "input": input,
            "model": model,
            "options": options,
            "activity_timeout": self.address.activity_timeout,
            "continue_after": self.address.continue_after,
        }
        memo: RunMemo = {
            "target": target,
            "spec": spec,
            "input": input,
            "model": model,
            "options": options,
            "status": "queued",
            "created_at": datetime.now(UTC).isoformat(),
        }
        start = self.client.start_workflow(
            WORKFLOW,
            begin,
            id=run_id,
            task_queue=self.address.task_queue,
            memo={MEMO_KEY: memo},
        )
        self.call(start)
        return run_id

    async def astatus(self, run_id: str) -> str:
        """The run's status as its workflow last published it."""
        described = await self.client.get_workflow_handle(run_id).describe()
        memo: RunMemo | None = await described.memo_value(MEMO_KEY, default={})
        return _row(run_id, memo or {}, described).status

    def get_run(self, run_id: str) -> StoredRun:
        """The run as its workflow last published it."""
        described = self._describe(run_id)
        return _row(run_id, self._memo(described), described)

    def list_runs(
        self,
        *,
        limit: int = 50,
        conversation: str | None = None,
        status: str | None = None,
        target: str | None = None,
        since: str | None = None,
    ) -> list[StoredRun]:
        """The most recent runs first (this namespace's ``loopwise.run`` workflows)."""
        if conversation is not None:
            self._unsupported("conversations")
        rows: list[StoredRun] = []

        async def listed() -> None:
            query = f'WorkflowType = "{WORKFLOW}" AND TaskQueue = "{self.address.task_queue}"'
            async for w in self.client.list_workflows(query):
                memo: RunMemo | None = await w.memo_value(MEMO_KEY, default={})
                row = _row(w.id, memo or {}, w)
                if (
                    status in (None, row.status)
                    and target in (None, row.spec, row.target)
                    and (since is None or row.created_at >= since)
                ):
                    rows.append(row)
                if len(rows) >= limit:
                    return

        self.call(listed())
        return rows

    def conversation_runs(self, conversation: str) -> list[StoredRun]:
        """No conversations on Temporal (raises)."""
        self._unsupported("conversations")

    def events(self, run_id: str) -> list[Event]:
        """The run's log as its workflow last published it."""
        memo = self._memo(self._describe(run_id))
        if "events" not in memo:
            return []  # not yet paused or ended: nothing published yet
        if memo["events"] is None:
            raise StoreError(
                f"run {run_id!r} has a log too long for its memo: read it with "
                f"`temporal workflow query --type loopwise.events --workflow-id {run_id}`",
                code="temporal",
            )
        return [event_of(e) for e in memo["events"]]

    def show(self, run_id: str) -> JSONObject:
        """The audit log ``{"run_id", "target", "status", "usage", "output", "events"}``."""
        run = self.get_run(run_id)
        return {
            **{k: v for k, v in run.to_dict().items() if k not in ("owner", "lease_until")},
            "thread": [],
            "approvals": [a.to_dict() for a in self.approvals(run_id)],
            "events": [e.to_dict() for e in self.events(run_id)],
        }

    def _book(self, run_id: str) -> Book:
        """The run's approvals: the memo's, then the decisions signalled since."""
        memo = self._memo(self._describe(run_id))
        book = Book.from_dicts(run_id, memo.get("approvals") or [])
        for signal in self.call(self._signals(run_id)):
            book.apply(signal)
        return book

    async def _signals(self, run_id: str) -> list[JSONObject]:
        handle = self.client.get_workflow_handle(run_id)
        found: list[JSONObject] = []
        async for event in handle.fetch_history_events():
            if not event.HasField("workflow_execution_signaled_event_attributes"):
                continue
            signaled = event.workflow_execution_signaled_event_attributes
            if signaled.signal_name == DECIDE_SIGNAL:
                decoded = await self.client.data_converter.decode(signaled.input.payloads, [dict])
                found.extend(d for d in decoded if isinstance(d, dict))
        return found

    def pending(self, run_id: str | None = None) -> list[StoredApproval]:
        """Undecided approvals, of one run or of every running one."""
        if run_id is not None:
            return self._book(run_id).pending(run_id)
        return [
            a for r in self.list_runs(limit=1000) for a in self._book(r.run_id).pending(r.run_id)
        ]

    def pending_page(self, *, limit: int = PAGE, after: str | None = None) -> ApprovalPage:
        """One page of the undecided approvals of every run, newest first."""
        return page_of(self.pending(None), limit=limit, after=after)

    def approvals(self, run_id: str) -> list[StoredApproval]:
        """Every approval of a run."""
        return self._book(run_id).approvals(run_id)

    def approval(self, run_id: str, approval_id: str) -> StoredApproval | None:
        """One approval, or ``None``."""
        return self._book(run_id).approval(run_id, approval_id)

    def decide(
        self,
        run_id: str,
        approval_id: str,
        *,
        decision: str,
        by: str,
        reason: str | None = None,
        edited_args: Mapping[str, object] | None = None,
        seen_hash: str | None = None,
    ) -> StoredApproval:
        """Signal a decision on a pending approval, checked as :meth:`Book.decide` checks
        it (as a SQL store does)."""
        edited = None if edited_args is None else jsonable(dict(edited_args))  # a copy
        book = self._book(run_id)
        decided = book.decide(
            run_id,
            approval_id,
            decision=decision,
            by=by,
            reason=reason,
            edited_args=edited,
            seen_hash=seen_hash,
        )
        signal = Book.signal(
            approval_id,
            decision=decision,
            by=by,
            at=str(decided.decided_at),
            reason=reason,
            edited_args=edited,
        )
        handle = self.client.get_workflow_handle(run_id)
        self.call(handle.signal(DECIDE_SIGNAL, signal))
        return decided

    def _unsupported(self, what: str) -> NoReturn:
        raise StoreError(
            f"{self.name} runs on Temporal, which keeps no {what} here: only "
            f"{TEMPORAL_VERBS} work with it",
            code="temporal",
        )

    def record(self, run_id: str, event: Event) -> NoReturn:
        """The workflow keeps its own log (raises)."""
        self._unsupported("events written from outside its workflow")

    def record_many(self, run_id: str, events: list[Event]) -> NoReturn:
        """The workflow keeps its own log (raises)."""
        self._unsupported("events written from outside its workflow")

    def journal(self, run_id: str) -> NoReturn:
        """The workflow replays its own journal (raises)."""
        self._unsupported("journal outside its workflow")

    def flush(self) -> None:
        """Nothing is grouped here."""

    def create_run(self, run_id: str, **row: object) -> NoReturn:
        """Runs start with :meth:`start` (raises)."""
        self._unsupported("runs started but by `loopwise run`")

    def claim(self, run_id: str, owner: str, *, alive: Callable[[str], bool]) -> NoReturn:
        """Temporal hands runs to workers (raises)."""
        self._unsupported("leases (Temporal hands runs to workers; `loopwise resume`)")

    def claim_next(self, owner: str, *, decided_only: bool = False) -> NoReturn:
        """Temporal hands runs to workers (raises)."""
        self._unsupported("queue (Temporal hands runs to workers)")

    def hold(self, run_id: str, owner: str) -> NoReturn:
        """Temporal hands runs to workers (raises)."""
        self._unsupported("leases (Temporal hands runs to workers)")

    def wait_for_work(self, timeout: float) -> NoReturn:
        """Temporal hands runs to workers (raises)."""
        self._unsupported("queue (Temporal hands runs to workers)")

    def mark_paused(self, run_id: str, detail: str) -> NoReturn:
        """The workflow records its own status (raises)."""
        self._unsupported("statuses written from outside its workflow")

    def mark_failed(self, run_id: str, detail: str) -> NoReturn:
        """The workflow records its own status (raises)."""
        self._unsupported("statuses written from outside its workflow")

    def save_eval(self, eval_id: str, **summary: object) -> NoReturn:
        """No eval history on Temporal (raises)."""
        self._unsupported("eval history")

    def last_eval(self, target: str, **which: object) -> NoReturn:
        """No eval history on Temporal (raises)."""
        self._unsupported("eval history")

    def live_targets(self) -> NoReturn:
        """No live evidence on Temporal (raises)."""
        self._unsupported("live evidence")

    def live_cases(self, targets: Sequence[str], **which: object) -> NoReturn:
        """No live evidence on Temporal (raises)."""
        self._unsupported("live evidence")


_CLOSED = {
    "TERMINATED": "cancelled",
    "CANCELED": "cancelled",
    "TIMED_OUT": "cancelled",
    "FAILED": "error",
}
"""A workflow Temporal closed before the run published its end: the status it shows."""


def _row(run_id: str, memo: RunMemo, described: WorkflowExecution) -> StoredRun:
    started = described.start_time.isoformat() if described.start_time else ""
    closed = described.close_time
    status = str(memo.get("status") or "running")
    ended = _CLOSED.get(described.status.name) if described.status is not None else None
    if ended is not None and status in ("queued", "running"):
        status = ended  # closed by Temporal (terminated, failed), not by the run's own end
    return StoredRun(
        run_id=run_id,
        target=str(memo.get("target") or ""),
        spec=memo.get("spec"),
        status=status,
        detail=memo.get("detail"),
        input=memo.get("input"),
        output=memo.get("output"),
        usage=memo.get("usage"),
        model=memo.get("model"),
        options=memo.get("options") or {},
        owner=None,
        lease_until=None,
        created_at=str(memo.get("created_at") or started),
        updated_at=str(memo.get("updated_at") or (closed.isoformat() if closed else started)),
    )
