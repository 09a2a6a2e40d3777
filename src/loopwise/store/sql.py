""":class:`SQLStore`: the statements and rules both run stores share
(:class:`~loopwise.store.sqlite.SQLiteStore` and
:class:`~loopwise.store.postgres.PostgresStore` supply the connection). The interface it
implements is :class:`~loopwise.store.base.RunStore`, one module per role: the event log
(:mod:`~loopwise.store.sqllog`), leases and the queue (:mod:`~loopwise.store.sqlleases`),
queries (:mod:`~loopwise.store.sqlqueries`), approvals (:mod:`~loopwise.store.sqlapprovals`),
eval history (:mod:`~loopwise.store.sqlevals`) and live cases (:mod:`~loopwise.store.live`),
on :mod:`~loopwise.store.sqlbase`'s transactions; rows are built in
:mod:`loopwise.store.rows` and the conversation rules are :mod:`loopwise.store.conversations`'s.

Durability points: events are grouped and committed together, and a commit happens no
later than when an event that matters reaches the store — the ``tool_call`` of a
``write`` or ``irreversible`` tool (before the tool runs) and its ``tool_result`` (as
soon as it returned), a gate requested or decided, a run paused or finished — or when
the group is full, or before any read. A crash (SIGKILL, a lost machine) may lose the
events since the last such point: step events, model turns and read-only tool calls,
which a resume asks and reads again. It never loses a recorded effect: an effect whose
process died while it ran (after its call was committed, before its result was) is
called again with the same idempotency key (run id + call id), which an effectful tool
uses to act once. In SQLite's WAL mode with ``synchronous=NORMAL`` a commit survives the process
being killed; a power cut may lose the last few (``synchronous="FULL"`` when it matters).

A store that cannot be reached (``unreachable``: a PostgreSQL restart) is waited out and
drops nothing (:mod:`loopwise.store.retries`).

Leases: a run being executed is owned (``host:pid``) and holds a lease its process renews
in the background (:meth:`SQLStore.hold`); another process takes a ``running`` run over
only once the lease lapsed (or, on one machine, once the owner's pid is gone).

Concurrency: writes of one store object go through one lock, so concurrent runs in one
process write in turn; several processes share the database through its own locking.
A run's ``seq`` is assigned by its context and ``PRIMARY KEY(run_id, seq)`` refuses a
duplicate, so two runs never interleave and a lost or doubled event cannot pass silently.
"""

from __future__ import annotations

from loopwise.core.jsontypes import JSONObject, JSONValue
from loopwise.store.live import LiveBook
from loopwise.store.rows import collector_paused
from loopwise.store.sqlapprovals import SQLApprovals
from loopwise.store.sqlevals import SQLEvalHistory
from loopwise.store.sqlleases import SQLLeases
from loopwise.store.sqllog import SQLLog
from loopwise.store.sqlqueries import SQLQueries

__all__ = ["SQLStore"]


class SQLStore(SQLLog, SQLLeases, SQLQueries, SQLApprovals, SQLEvalHistory, LiveBook):
    """The statements and rules both stores share; a subclass supplies the connection.

    Subclasses implement :meth:`_transaction` (one write transaction), :meth:`_reading`,
    :meth:`close` and :meth:`wait_for_work`, and set the dialect fragments of
    :class:`~loopwise.store.sqlbase.SQLBase`. SQL here is written with ``?`` placeholders in
    the subset SQLite and PostgreSQL share. The audit log, which reads every role, is here.
    """

    def show(self, run_id: str) -> JSONObject:
        """The audit log ``{"run_id", "target", "status", "usage", "output", "events"}``."""
        run = self.get_run(run_id)
        with collector_paused():
            events: list[JSONValue] = [e.to_dict() for e in self.events(run_id)]
        approvals: list[JSONValue] = [a.to_dict() for a in self.approvals(run_id)]
        return {
            "run_id": run.run_id,
            "target": run.target,
            "spec": run.spec,
            "status": run.status,
            "detail": run.detail,
            "model": run.model,
            "input": run.input,
            "usage": run.usage,
            "output": run.output,
            "created_at": run.created_at,
            "updated_at": run.updated_at,
            "conversation": run.conversation,
            "turn": run.turn,
            "thread": [] if run.conversation is None else self._thread(run.conversation),
            "approvals": approvals,
            "events": events,
        }

    def _thread(self, conversation: str) -> list[JSONValue]:
        """The messages of a conversation as ``runs show`` lists them."""
        return [
            {
                "run_id": r.run_id,
                "turn": r.turn,
                "status": r.status,
                "input": r.input,
                "output": r.output,
            }
            for r in self.conversation_runs(conversation)
        ]
