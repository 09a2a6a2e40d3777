"""The event log of the SQL run stores (:class:`~loopwise.store.base.EventLog`): events
recorded, grouped until a durability point (:mod:`loopwise.store.sql`) and read back."""

from __future__ import annotations

import json
from collections.abc import Sequence

from loopwise.core.events import Event, EventType
from loopwise.core.jsontypes import JSONObject
from loopwise.store.rows import collector_paused, event_row, side_effects
from loopwise.store.sqlbase import SQLBase, in_batches

__all__ = ["SQLLog"]

_DURABLE = frozenset(
    {
        EventType.GATE_REQUESTED,
        EventType.GATE_DECIDED,
        EventType.RUN_PAUSED,
        EventType.RUN_FINISHED,
    }
)

_EFFECTFUL = frozenset({"write", "irreversible"})

_GROUP = 64
"""Events a store may hold before committing them even without a durability point."""


class SQLLog(SQLBase):
    """Events in, events and the replay journal out."""

    def record(self, run_id: str, event: Event) -> None:
        """Add ``event`` and what it changes in ``runs``/``approvals``; commit at a
        durability point (see the module docs), else group it with the next ones."""
        self.record_many(run_id, [event])

    def record_many(self, run_id: str, events: list[Event]) -> None:
        """Add several events in one transaction: after a crash the log holds all of them
        or none (the gate requests of one turn); committed at once when one is a
        durability point."""
        statements = [s for e in events for s in (event_row(run_id, e), *side_effects(run_id, e))]
        # A list, not a generator: _durable must see every event (it tracks running reads).
        if not any([self._durable(run_id, e) for e in events]):
            with self._lock:
                self._grouped.extend((run_id, s) for s in statements)
                if len(self._grouped) < _GROUP:
                    return
            statements = []
        self._write(statements, held=run_id)

    def _durable(self, run_id: str, event: Event) -> bool:
        """Whether ``event`` is a durability point (committed before the run goes on)."""
        call = (run_id, str(event.data.get("call_id")))
        if event.type is EventType.TOOL_CALL:
            if event.data.get("effect") in _EFFECTFUL:
                return True
            self._reads_running.add(call)
            return False
        if event.type is EventType.TOOL_RESULT:
            # Only the result of a call seen to be read-only may wait: an effect's result (or
            # one whose call this process did not see, e.g. before a resume) is committed.
            if call in self._reads_running:
                self._reads_running.discard(call)
                return False
            return True
        return event.type in _DURABLE

    def events(self, run_id: str) -> list[Event]:
        """The run's events in ``seq`` order."""
        with collector_paused():
            rows = self._read(
                "SELECT seq, type, step, at, data FROM events WHERE run_id = ? ORDER BY seq",
                (run_id,),
            )
            return [
                Event(
                    seq=r["seq"],
                    type=EventType(r["type"]),
                    step=r["step"],
                    at=r["at"],
                    data=json.loads(r["data"]),
                )
                for r in rows
            ]

    def events_of(self, run_ids: Sequence[str]) -> dict[str, list[Event]]:
        """``{run id: its events in seq order}`` for several runs, read together (a page
        of approvals shows its runs' logs: one query, not one per run)."""
        logs: dict[str, list[Event]] = {run_id: [] for run_id in run_ids}
        with collector_paused():
            for some in in_batches(run_ids):
                rows = self._read(
                    "SELECT run_id, seq, type, step, at, data FROM events WHERE run_id IN "
                    f"({', '.join('?' * len(some))}) ORDER BY run_id, seq",
                    tuple(some),
                )
                for r in rows:
                    logs[r["run_id"]].append(
                        Event(
                            seq=r["seq"],
                            type=EventType(r["type"]),
                            step=r["step"],
                            at=r["at"],
                            data=json.loads(r["data"]),
                        )
                    )
        return logs

    def journal(self, run_id: str) -> dict[str, JSONObject]:
        """``{key: data}`` for replay; a later event with the same key wins."""
        with collector_paused():
            rows = self._read(
                "SELECT key, data FROM events WHERE run_id = ? AND key IS NOT NULL ORDER BY seq",
                (run_id,),
            )
            return {r["key"]: json.loads(r["data"]) for r in rows}
