"""Cassettes: a whole agent run recorded once against the fake server, replayed offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import loopwise
from loopwise import Agent, ConfigError, tool
from loopwise.testing import Cassette, CassetteMismatch, FakeChatServer, call, reply


@tool
def stock(sku: str) -> int:
    """Return how many units of a product are in stock. Call it before promising a date."""
    return {"KX-200": 0}.get(sku, 5)


clerk = Agent(name="clerk", instructions="Answer stock questions.", tools=[stock])


def test_record_once_then_replay_the_whole_run_without_a_server(tmp_path: Path) -> None:
    tape = tmp_path / "clerk.json"
    script = [call("stock", {"sku": "KX-200"}), reply("KX-200 is out of stock.")]
    with FakeChatServer(script) as server:
        recorded = loopwise.run(
            clerk, "Is KX-200 in stock?", model=Cassette(tape, model=server.model()), store=None
        )
        assert len(server.requests) == 2
    assert recorded.status == "completed"
    assert len(json.loads(tape.read_text())["interactions"]) == 2

    replayed = loopwise.run(clerk, "Is KX-200 in stock?", model=Cassette(tape), store=None)
    assert replayed.status == "completed" and replayed.output == recorded.output
    assert replayed.usage.total_tokens == recorded.usage.total_tokens
    tools = [e.data["tool"] for e in replayed.events if e.type == "tool_call"]
    assert tools == ["stock"]


def test_a_changed_prompt_fails_loudly_and_a_missing_tape_is_a_config_error(
    tmp_path: Path,
) -> None:
    tape = tmp_path / "clerk.json"
    with FakeChatServer([reply("Yes.")]) as server:
        loopwise.run(clerk, "Is A-1 in stock?", model=Cassette(tape, model=server.model()))
    result = loopwise.run(clerk, "Is B-2 in stock?", model=Cassette(tape), store=None)
    assert result.status == "error" and "CassetteMismatch" in str(result.detail)
    with pytest.raises(CassetteMismatch):
        raise CassetteMismatch("is an AssertionError, so pytest shows it as a failure")
    with pytest.raises(ConfigError, match="record it first"):
        Cassette(tmp_path / "missing.json")
