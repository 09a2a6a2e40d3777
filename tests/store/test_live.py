"""Live cases in the run store (issue 41): a ``step_finished`` that carries ``live`` data is
kept as one row of its run and journal key, on SQLite and PostgreSQL, read back by target,
never twice, never from an eval's runs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from loopwise.core.events import Event, EventType
from loopwise.store.open import open_store
from loopwise.store.sqlite import SQLiteStore


def _finished(seq: int, key: str | None, **live: object) -> Event:
    data: dict[str, object] = {"output": "x", "live": {"kind": "shadow", **live}}
    if key is not None:
        data["key"] = key
    return Event(
        seq=seq,
        type=EventType.STEP_FINISHED,
        step="s/shadow",
        at=f"2026-12-04T00:00:0{seq}+00:00",
        data=data,
    )


def _run(store: object, run_id: str, spec: str, **options: object) -> None:
    store.create_run(  # type: ignore[attr-defined]
        run_id, target="s", spec=spec, input={"q": 1}, model=None, options=dict(options)
    )


def test_a_live_case_is_kept_once_per_run_and_key_and_read_by_target(store_at: str) -> None:
    store = open_store(store_at)
    try:
        _run(store, "r1", "flow.py:s")
        _run(store, "r2", "other.py:s")
        _run(store, "e1", "flow.py:s", eval="ev")
        case = {"input": {"q": 1}, "output": {"a": 1}, "reference": {"a": 2}, "agree": False}
        store.record("r1", _finished(1, "s:shadow:1", status="completed", **case))
        # a resumed run (or a second worker) writes the same key again: still one case
        store.record("r1", _finished(2, "s:shadow:1", status="completed", **case))
        store.record("r1", _finished(3, "s:shadow:2", status="error", detail="boom"))
        store.record("r1", _finished(4, None, status="completed", agree=True))  # no key: none
        store.record("r2", _finished(1, "s:shadow:1", status="completed", agree=True))
        store.record("e1", _finished(1, "s:shadow:1", status="completed", agree=True))
        cases = store.live_cases(["flow.py:s"])
        assert [(c.run_id, c.key, c.agree, c.status) for c in cases] == [
            ("r1", "s:shadow:1", False, "completed"),
            ("r1", "s:shadow:2", None, "error"),
        ]
        first = cases[0]
        assert (first.input, first.output, first.reference) == ({"q": 1}, {"a": 1}, {"a": 2})
        assert (first.kind, first.step, first.target) == ("shadow", "s/shadow", "flow.py:s")
        assert cases[1].detail == "boom"
        assert store.live_cases(["flow.py:s"], since="2026-12-04T00:00:03") == [cases[1]]
        assert store.live_cases(["flow.py:s"], kind="person") == []
        assert store.live_cases([]) == []
        assert sorted(store.live_targets()) == ["flow.py:s", "other.py:s"]
    finally:
        store.close()


def test_a_store_of_the_version_before_gains_the_live_table(tmp_path: Path) -> None:
    from loopwise.store.sqlite import _SQLITE_MIGRATIONS  # the schema as version 5 had it

    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    for script in _SQLITE_MIGRATIONS[:5]:  # as a store written by the version before
        conn.executescript(script)
    conn.execute("PRAGMA user_version = 5")
    conn.close()
    with SQLiteStore(db) as store:
        assert store.live_targets() == []
