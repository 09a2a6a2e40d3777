"""The benchmark compares like with like: both sides send the same requests."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from tests.support import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_script
import lw_side
import raw_loop
import run as bench
import server as bench_server

from loopwise.testing import FakeChatServer


def _both(job: str, payload: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any, Any]:
    async def go(server: FakeChatServer) -> tuple[Any, Any]:
        client = bench._client(server.base_url)
        model = lw_side.openai_model(bench.MODEL, client)
        try:
            if job == "agent":
                raw = await raw_loop.agent(client, bench.MODEL, payload)
                split = len(server.requests)
                lw = await lw_side.run(lw_side.make_agent(), payload, model)
            else:
                raw = await raw_loop.triage(client, bench.MODEL, payload)
                split = len(server.requests)
                lw = await lw_side.run(lw_side.make_triage(), payload, model)
            return (raw, split), lw
        finally:
            await client.close()

    with FakeChatServer(bench_script.respond) as server:
        (raw, split), lw = asyncio.run(go(server))
    return server.requests[:split], server.requests[split:], raw, lw


def test_the_agent_sides_make_the_same_calls() -> None:
    raw_reqs, lw_reqs, raw, lw = _both("agent", bench.QUESTION)
    assert lw.status == "completed" and lw.output == raw == bench_script.ANSWER
    assert len(raw_reqs) == len(lw_reqs) == 6
    for a, b in zip(raw_reqs, lw_reqs, strict=True):
        assert [m["role"] for m in a["messages"]] == [m["role"] for m in b["messages"]]
        # The same message shapes, so both sides pay the SDK's transform for the same keys.
        assert [sorted(m) for m in a["messages"]] == [sorted(m) for m in b["messages"]]
        assert [m.get("content") for m in a["messages"]] == [
            m.get("content") for m in b["messages"]
        ]
        assert [t["function"]["name"] for t in a["tools"]] == [
            t["function"]["name"] for t in b["tools"]
        ]


def test_the_triage_sides_send_the_same_request() -> None:
    raw_reqs, lw_reqs, raw, lw = _both("triage", bench.TICKET)
    assert lw.status == "completed" and lw.output == raw
    assert raw_reqs == lw_reqs


def test_the_responses_agent_sides_make_the_same_calls() -> None:
    async def go(server: FakeChatServer) -> tuple[Any, int, Any]:
        client = bench._client(server.base_url)
        model = lw_side.openai_model(bench.MODEL, client, api="responses")
        try:
            raw = await raw_loop.responses_agent(client, bench.MODEL, bench.QUESTION)
            split = len(server.requests)
            lw = await lw_side.run(lw_side.make_agent(), bench.QUESTION, model)
            return raw, split, lw
        finally:
            await client.close()

    with FakeChatServer(bench_script.respond) as server:
        raw, split, lw = asyncio.run(go(server))
    raw_reqs, lw_reqs = server.requests[:split], server.requests[split:]
    assert lw.status == "completed" and lw.output == raw == bench_script.ANSWER
    assert len(raw_reqs) == len(lw_reqs) == 6 and not server.responses.missing
    for a, b in zip(raw_reqs, lw_reqs, strict=True):
        # loopwise's schemas carry pydantic's titles: the tools are named alike.
        assert {k: v for k, v in a.items() if k not in {"input", "tools"}} == {
            k: v for k, v in b.items() if k not in {"input", "tools"}
        }
        assert [t["name"] for t in a["tools"]] == [t["name"] for t in b["tools"]]
        # The same items; the raw loop sends the server's output items back whole.
        assert [i.get("type", i.get("role")) for i in a["input"]] == [
            i.get("type", i.get("role")) for i in b["input"]
        ]


def test_the_judge_sides_send_the_same_decision_and_read_the_same_answer() -> None:
    async def go(server: FakeChatServer) -> tuple[Any, Any]:
        client = bench._client(server.base_url)
        model = lw_side.openai_model(bench.MODEL, client)
        try:
            raw = await raw_loop.judge(client, bench.MODEL, bench.TICKET)
            lw = await lw_side.run(lw_side.make_judge(), bench.TICKET, model)
            return raw, lw
        finally:
            await client.close()

    with FakeChatServer(bench_script.respond) as server:
        raw, lw = asyncio.run(go(server))
        raw_req, lw_req = server.requests
    assert lw.status == "completed" and lw.output.backend == "decisions"
    assert (lw.output.answer, lw.output.confidence) == (raw[0], round(raw[1], 6))
    assert raw_req == lw_req


def test_the_bench_server_closes_its_pipe_when_it_stops() -> None:
    """Its stdout was left open: a ResourceWarning whenever the object was collected."""
    with bench_server.Server() as running:
        assert running.base_url.startswith("http://127.0.0.1:")
    assert running.proc is not None and running.proc.stdout is not None
    assert running.proc.returncode == 0 and running.proc.stdout.closed
