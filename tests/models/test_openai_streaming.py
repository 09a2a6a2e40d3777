"""Streamed model output: text deltas reach astream as it arrives, and what is recorded is
exactly what a plain call records (through the real `openai` client and FakeChatServer)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pydantic

import loopwise
from loopwise import Event, SQLiteStore, TextDelta
from loopwise.testing import FakeChatServer, Fault, ScriptedModel, calls, reply

ANSWER = "Order O-1 left the warehouse on Monday and arrives on Thursday."


@loopwise.tool
def lookup(order_id: str) -> str:
    """Look up an order. Call it for any order named in the question."""
    return f"{order_id}: shipped Monday"


def _agent() -> loopwise.Agent:
    return loopwise.Agent(name="clerk", instructions="help", tools=[lookup], max_steps=4)


def _script() -> list[Any]:
    long = {"order_id": "O-1", "note": "x" * 40}
    return [
        calls(("lookup", {"order_id": "O-1"}, "c1"), ("lookup", long, "c2")),
        reply(ANSWER),
    ]


async def _watch(stream: loopwise.RunStream) -> list[Event | TextDelta]:
    return [item async for item in stream]


def _run(db: Path, *, stream: bool) -> tuple[list[Event | TextDelta], loopwise.RunResult, Any]:
    with FakeChatServer(_script()) as server:

        async def main() -> tuple[list[Event | TextDelta], loopwise.RunStream]:
            model = server.model()
            run = loopwise.astream(_agent(), "where is O-1?", model=model, store=db, stream=stream)
            try:
                return await _watch(run), run
            finally:
                await model.aclose()

        seen, run = asyncio.run(main())
        assert run.result is not None
        return seen, run.result, server.requests


def _model_calls(events: list[Any]) -> list[dict[str, Any]]:
    timing = {"started_at", "duration_seconds"}
    return [
        {k: v for k, v in e.data.items() if k not in timing}
        for e in events
        if isinstance(e, Event) and e.type == "model_call"
    ]


def test_deltas_concatenate_to_the_stored_answer_and_nothing_else_changes(
    tmp_path: Path,
) -> None:
    streamed, result, requests = _run(tmp_path / "a.db", stream=True)
    assert result.status == "completed" and result.output == ANSWER
    assert all(r.get("stream") is True for r in requests)
    deltas = [d for d in streamed if isinstance(d, TextDelta)]
    assert len(deltas) > 1 and "".join(d.text for d in deltas) == ANSWER
    assert {d.step for d in deltas} == {"clerk"} and deltas[0].type == "text_delta"
    with SQLiteStore(tmp_path / "a.db") as store:
        stored = store.events(result.run_id)
    events = [e for e in streamed if isinstance(e, Event)]
    assert [e.to_dict() for e in events] == [e.to_dict() for e in stored]  # deltas not stored
    (last_call,) = [e for e in events if e.type == "model_call"][-1:]
    assert deltas[-1].key == last_call.data["key"]
    assert last_call.data["turn"]["text"] == ANSWER

    plain, plain_result, plain_requests = _run(tmp_path / "b.db", stream=False)
    assert not any(r.get("stream") for r in plain_requests)
    assert not any(isinstance(d, TextDelta) for d in plain)
    assert _model_calls(streamed) == _model_calls(plain)
    assert plain_result.usage.total_tokens == result.usage.total_tokens


def test_tool_calls_split_across_chunks_are_reassembled(tmp_path: Path) -> None:
    streamed, result, _ = _run(tmp_path / "a.db", stream=True)
    first = _model_calls(streamed)[0]["turn"]
    assert [(c["id"], c["name"], json.loads(c["arguments"])) for c in first["tool_calls"]] == [
        ("c1", "lookup", {"order_id": "O-1"}),
        ("c2", "lookup", {"order_id": "O-1", "note": "x" * 40}),
    ]
    assert first["text"] is None and first["finish_reason"] == "tool_calls"
    assert result.usage.tool_calls == 2


class Ticket(pydantic.BaseModel):
    summary: str
    urgency: int


def test_a_structured_answer_streams_its_json() -> None:
    triage = loopwise.Structured("triage", Ticket, "Summarise; rate urgency 1-5.")
    seen: list[str] = []

    class Printer:
        def record(self, run_id: str, event: Event) -> None:
            pass

        def text(self, run_id: str, delta: TextDelta) -> None:
            seen.append(delta.text)

    with FakeChatServer([reply({"summary": "charged twice", "urgency": 4})]) as server:
        result = loopwise.run(
            triage, "charged twice", model=server.model(), stream=True, sinks=(Printer(),)
        )
    assert result.output == Ticket(summary="charged twice", urgency=4)
    assert json.loads("".join(seen)) == {"summary": "charged twice", "urgency": 4}


def test_the_scripted_model_streams_in_process_too() -> None:
    async def main() -> list[str]:
        stream = loopwise.astream(
            _agent(), "hi", model=ScriptedModel([reply(ANSWER)]), stream=True, store=None
        )
        return [d.text async for d in stream if isinstance(d, TextDelta)]

    assert "".join(asyncio.run(main())) == ANSWER


def test_a_stream_that_breaks_off_ends_the_run_with_an_error() -> None:
    with FakeChatServer([Fault(answer=reply(ANSWER), truncated_json=True)]) as server:
        result = loopwise.run(_agent(), "hi", model=server.model(), stream=True, store=None)
    assert result.status == "error" and "stream ended before its answer" in (result.detail or "")
