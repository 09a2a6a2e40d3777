"""Watching runs: ``loopwise.astream`` yields the events the store records, as they happen."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import loopwise
from loopwise import ConfigError, Event, SQLiteStore, gates
from loopwise.testing import ScriptedModel, call, reply


@loopwise.tool
def lookup(order_id: str) -> str:
    """Look up an order. Call it for any order named in the question."""
    return f"{order_id}: shipped"


def _agent(*tools: loopwise.Tool) -> loopwise.Agent:
    return loopwise.Agent(name="clerk", instructions="help", tools=list(tools), max_steps=5)


def _stored(db: Path, run_id: str) -> list[Event]:
    with SQLiteStore(db) as store:
        return store.events(run_id)


def test_astream_yields_every_event_in_order_as_the_store_records_them(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    model = ScriptedModel([call("lookup", {"order_id": "O-1"}), reply("O-1 shipped")])

    async def main() -> tuple[list[Event], loopwise.RunStream]:
        stream = loopwise.astream(_agent(lookup), "where is O-1?", model=model, store=db)
        return [event async for event in stream], stream

    seen, stream = asyncio.run(main())
    assert stream.result is not None and stream.result.status == "completed"
    assert stream.result.output == "O-1 shipped"
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert [e.to_dict() for e in seen] == [e.to_dict() for e in _stored(db, _only_run(db))]
    assert seen == stream.result.events
    assert [e.type for e in seen][:2] == ["run_started", "step_started"]
    assert seen[1].data["kind"] == "agent"  # what kind of step it is (loopwise.core.shape.Kind)
    assert {"model_call", "tool_call", "tool_result"} <= {str(e.type) for e in seen}
    assert seen[-1].type == "run_finished"
    for model_call in (e for e in seen if e.type == "model_call"):
        timing = model_call.data
        assert timing["started_at"] <= model_call.at and timing["duration_seconds"] >= 0
        assert timing["request_model"] == "scripted" and timing["model"]


def _hanging() -> tuple[loopwise.Tool, asyncio.Event]:
    never = asyncio.Event()

    @loopwise.tool(name="lookup")
    async def hang(order_id: str) -> str:
        """Look up an order. Call it for any order named in the question."""
        await never.wait()
        return "unreachable"

    return hang, never


def test_breaking_out_of_the_stream_cancels_the_run_and_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    model = ScriptedModel([call("lookup", {"order_id": "O-1"}), reply("never sent")])
    hang, _ = _hanging()
    seen: list[Event] = []

    async def main() -> None:
        ended = asyncio.Event()

        class End:
            def record(self, run_id: str, event: Event) -> None:
                if event.type == "run_finished":
                    ended.set()

        stream = loopwise.astream(_agent(hang), "O-1?", model=model, store=db, sinks=(End(),))
        async for event in stream:
            seen.append(event)
            if event.type == "tool_call":
                break
        del stream  # what leaving a bare `async for loopwise.astream(...)` does
        await asyncio.wait_for(ended.wait(), 5)  # the run ends now, not at loop shutdown

    asyncio.run(main())
    stored = _stored(db, _only_run(db))
    assert [e.to_dict() for e in stored[: len(seen)]] == [e.to_dict() for e in seen]
    assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
    assert stored[-1].type == "run_finished" and stored[-1].data["status"] == "cancelled"
    with SQLiteStore(db) as store:
        assert store.get_run(_only_run(db)).status == "cancelled"


def _only_run(db: Path) -> str:
    with SQLiteStore(db) as store:
        (row,) = store.list_runs()
        return str(row.run_id)


def test_closing_the_stream_waits_until_the_run_is_recorded_cancelled(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    model = ScriptedModel([call("lookup", {"order_id": "O-1"}), reply("never sent")])
    hang, _ = _hanging()

    async def main() -> str:
        async with loopwise.astream(_agent(hang), "O-1?", model=model, store=db) as events:
            async for event in events:
                if event.type == "tool_call":
                    break
        assert events.result is None  # left early: no result, the store says how it ended
        with SQLiteStore(db) as store:  # already recorded, inside the same event loop
            return str(store.get_run(_only_run(db)).status)

    assert asyncio.run(main()) == "cancelled"


def test_a_cancelled_consumer_cancels_the_run_it_watches(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    model = ScriptedModel([call("lookup", {"order_id": "O-1"}), reply("never sent")])
    hang, _ = _hanging()

    async def watch() -> None:
        async for _ in loopwise.astream(_agent(hang), "O-1?", model=model, store=db):
            pass

    async def main() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(watch(), 0.05)

    asyncio.run(main())
    with SQLiteStore(db) as store:
        assert store.get_run(_only_run(db)).status == "cancelled"


def test_a_resumed_run_streams_its_new_events(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"

    @loopwise.tool(effect="irreversible", gate=gates.human())
    def refund(order_id: str) -> str:
        """Refund an order. Call it when a refund is owed."""
        return f"refunded {order_id}"

    agent = _agent(refund)
    paused = loopwise.run(
        agent, "refund O-1", model=ScriptedModel([call("refund", {"order_id": "O-1"})]), store=db
    )
    assert paused.status == "awaiting_approval"
    with SQLiteStore(db) as store:
        store.decide(paused.run_id, paused.pending[0]["approval_id"], decision="approved", by="a")

    async def main() -> tuple[list[Event], loopwise.RunStream]:
        stream = loopwise.astream_resume(
            paused.run_id, step=agent, model=ScriptedModel([reply("refunded")]), store=db
        )
        return [event async for event in stream], stream

    seen, stream = asyncio.run(main())
    assert seen[0].type == "run_resumed" and seen[0].seq == len(paused.events) + 1
    assert stream.result is not None and stream.result.output == "refunded"
    assert [e.to_dict() for e in _stored(db, paused.run_id)[len(paused.events) :]] == [
        e.to_dict() for e in seen
    ]


def test_stream_mistakes_raise_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown run option 'modle'"):
        loopwise.astream(_agent(lookup), "q", modle="x")

    async def main() -> None:
        with pytest.raises(ConfigError, match="calls a model but the run has none"):
            async for _ in loopwise.astream(_agent(lookup), "q", store=None):
                pass

    asyncio.run(main())
