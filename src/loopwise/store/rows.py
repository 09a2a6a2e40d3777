"""How runs, events and approvals become SQL rows and back: the statements an event
adds (:func:`event_row`, :func:`side_effects`, :func:`live_row`) and the typed rows a read returns
(:func:`run_row`, :func:`approval_row`), shared by both stores through
:class:`~loopwise.store.sql.SQLStore`.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from loopwise.core.events import LIVE, Event, EventType, jsonable
from loopwise.core.jsontypes import JSONMapping, JSONValue, json_object
from loopwise.store.base import StoredApproval, StoredRun

__all__ = [
    "Statement",
    "answered_row",
    "approval_row",
    "collector_paused",
    "decision_row",
    "event_row",
    "from_json",
    "live_row",
    "request_row",
    "run_row",
    "side_effects",
    "to_json",
    "utc_now",
]


def utc_now() -> str:
    return datetime.now(UTC).isoformat()


_ENCODER = json.JSONEncoder(default=jsonable)
"""One encoder for every row: ``json.dumps(default=...)`` would build a new one per call,
a fifth of what encoding an event costs."""


def to_json(value: object) -> str:
    # Event data is JSON-ready already; jsonable() only converts what json cannot.
    return _ENCODER.encode(value)


def from_json(text: str | None) -> JSONValue:
    return None if text is None else json.loads(text)


Statement = tuple[str, tuple[object, ...]]
"""One SQL statement with ``?`` placeholders and its parameters."""


def event_row(run_id: str, event: Event) -> Statement:
    key = event.data.get("key")
    return (
        "INSERT INTO events (run_id, seq, type, step, at, key, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            run_id,
            event.seq,
            str(event.type),
            event.step,
            event.at,
            None if key is None else str(key),
            to_json(event.data),
        ),
    )


def side_effects(run_id: str, event: Event) -> list[Statement]:
    """What an event changes besides the log: the run row, the approvals."""
    # Most events (model calls, tool calls and results) change nothing else: the clock is
    # read only for the few that update a row.
    data = event.data
    if event.type is EventType.RUN_STARTED:
        now = utc_now()
        # A run started without create_run (a plain sink user) still gets a row.
        return [
            (
                "INSERT INTO runs (id, target, status, input, created_at, updated_at) "
                "VALUES (?, ?, 'running', ?, ?, ?) ON CONFLICT DO NOTHING",
                (run_id, str(data.get("target", "?")), to_json(data.get("input")), now, now),
            )
        ]
    if event.type is EventType.RUN_RESUMED:
        return [
            (
                "UPDATE runs SET status = 'running', detail = NULL, updated_at = ? WHERE id = ?",
                (utc_now(), run_id),
            )
        ]
    if event.type in _FINISHED:
        return [
            (
                "UPDATE runs SET status = ?, detail = ?, output = ?, usage = ?, updated_at = ? "
                "WHERE id = ?",
                (
                    data.get("status"),
                    data.get("detail"),
                    to_json(data.get("output")),
                    to_json(data.get("usage")),
                    utc_now(),
                    run_id,
                ),
            ),
            answered_row(run_id, event.at),
        ]
    if event.type is EventType.GATE_REQUESTED:
        return [request_row(run_id, event)]
    if event.type is EventType.GATE_DECIDED and data.get("approval_id") is not None:
        return [decision_row(run_id, data, event.at), answered_row(run_id, event.at)]
    if event.type is EventType.STEP_FINISHED and LIVE in data:
        return live_row(run_id, event)
    return []


_LIVE_COLUMNS = "run_id, key, target, kind, step, input, output, reference, agree, status, detail"


def live_row(run_id: str, event: Event) -> list[Statement]:
    """The statement keeping the live case a ``step_finished`` carries (none without a
    journal key): one row per ``(run_id, key)``, the target read from the run's row."""
    case, key = event.data.get(LIVE), event.data.get("key")
    if not isinstance(case, Mapping) or key is None:
        return []
    agree = case.get("agree")
    return [
        (
            f"INSERT INTO live_cases ({_LIVE_COLUMNS}, created_at) "
            "SELECT ?, ?, COALESCE(spec, target), ?, ?, ?, ?, ?, ?, ?, ?, ? FROM runs "
            "WHERE id = ? ON CONFLICT DO NOTHING",
            (
                run_id,
                str(key),
                str(case.get("kind", "shadow")),
                event.step,
                to_json(case.get("input")),
                to_json(case.get("output")),
                to_json(case.get("reference")),
                None if agree is None else int(bool(agree)),
                str(case.get("status", "")),
                case.get("detail"),
                event.at,
                run_id,
            ),
        )
    ]


_FINISHED = {EventType.RUN_FINISHED, EventType.RUN_PAUSED}


def answered_row(run_id: str, at: str) -> Statement:
    """After a decision or a pause: when the run's last undecided approval was decided
    (``at``), or ``NULL`` while one waits. A worker's claim finds the paused runs nobody
    waits for by it (the ``runs_answered`` index), then checks the approvals themselves."""
    return (
        "UPDATE runs SET answered_at = CASE WHEN EXISTS (SELECT 1 FROM approvals a WHERE "
        "a.run_id = runs.id AND a.status = 'pending') THEN NULL ELSE ? END WHERE id = ?",
        (at, run_id),
    )


def decision_row(run_id: str, d: JSONMapping, at: str) -> Statement:
    """A decision made in the run (interactive, policy) closes its pending request."""
    edited = d.get("args") if d.get("decision") == "edited" else None
    return (
        "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?, decision_reason = ?, "
        "edited_args = ? WHERE run_id = ? AND approval_id = ? AND status = 'pending'",
        (
            d.get("decision"),
            d.get("by"),
            d.get("decided_at") or at,
            d.get("reason"),
            None if edited is None else to_json(edited),
            run_id,
            str(d["approval_id"]),
        ),
    )


def request_row(run_id: str, event: Event) -> Statement:
    d = event.data
    return (
        "INSERT INTO approvals (run_id, approval_id, step, tool, call_id, args, "
        "effect, reason, tainted_by, args_hash, requested_at, eval_id) "
        # The run's eval mark rides along, so listing real runs' approvals reads no run.
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, (SELECT eval_id FROM runs WHERE id = ?)) "
        "ON CONFLICT DO NOTHING",
        (
            run_id,
            str(d["approval_id"]),
            event.step,
            str(d["tool"]),
            d.get("call_id"),
            to_json(d.get("args")),
            d.get("effect"),
            d.get("reason"),
            d.get("tainted_by"),
            str(d["args_hash"]),
            event.at,
            run_id,
        ),
    )


def run_row(row: Mapping[str, Any]) -> StoredRun:
    usage = from_json(row["usage"])
    return StoredRun(
        run_id=row["id"],
        target=row["target"],
        spec=row["spec"],
        status=row["status"],
        detail=row["detail"],
        input=from_json(row["input"]),
        output=from_json(row["output"]),
        usage=usage if isinstance(usage, dict) else None,
        model=row["model"],
        options=json_object(from_json(row["options"])),
        owner=row["owner"],
        lease_until=row["lease_until"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        conversation=row["conversation"],
        turn=row["turn"],
    )


def approval_row(row: Mapping[str, Any]) -> StoredApproval:
    return StoredApproval(
        run_id=row["run_id"],
        approval_id=row["approval_id"],
        tool=row["tool"],
        args=from_json(row["args"]),
        effect=row["effect"],
        reason=row["reason"],
        tainted_by=row["tainted_by"],
        args_hash=row["args_hash"],
        call_id=row["call_id"],
        step=row["step"],
        status=row["status"],
        requested_at=row["requested_at"],
        decided_by=row["decided_by"],
        decided_at=row["decided_at"],
        decision_reason=row["decision_reason"],
        edited_args=from_json(row["edited_args"]),
    )


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cycle collector while a run's log decodes into fresh rows, dicts and lists.

    They hold no reference cycles, so a collection finds nothing in them, yet allocating
    them triggers collections, and the full ones rescan the whole heap: reading a long log
    grew faster than its length. Reference counting still frees what is dropped.
    """
    if not gc.isenabled():  # paused already (an outer read, another thread, the caller)
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
