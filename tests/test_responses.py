"""The Responses API port: the canonical examples answer alike over both OpenAI APIs.

Every run goes through the real ``openai`` client to the fake server, whose
``/v1/responses`` answers from the same script as its ``/chat/completions`` and, like a
reasoning model with nothing stored, gives each turn an encrypted reasoning item that
it checks comes back with that turn on every later call.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise import Status
from loopwise.running.targets import load_target
from loopwise.testing import FakeChatServer, ScriptedModel

ROOT = Path(__file__).resolve().parent.parent
LOOPWISE = str(Path(sys.executable).with_name("loopwise"))
QUESTION = "Why did customer C-1004's last three orders fail?"
APIS = ["chat", "responses"]


def _responder(spec: str) -> Any:
    """The script of a target's offline model, for the fake server to answer with."""
    offline = load_target(spec).module.offline_model
    model: ScriptedModel = offline if isinstance(offline, ScriptedModel) else offline()
    return model.script_entry


def _sent_reasoning_back(server: FakeChatServer, api: str) -> None:
    """Every request went to the API asked for; on Responses, earlier reasoning came back."""
    if api == "responses":
        assert all("input" in body for body in server.requests)
        assert server.responses.received and not server.responses.missing
    else:
        assert all("messages" in body for body in server.requests)


def _investigation(api: str) -> tuple[loopwise.RunResult, FakeChatServer]:
    spec = "agents/order_investigation.py:investigate"
    with FakeChatServer(_responder(spec)) as server:
        result = loopwise.run(load_target(spec).step, QUESTION, model=server.model(api=api))
    return result, server


@pytest.mark.parametrize("api", APIS)
def test_the_canonical_agent_investigates_alike(api: str) -> None:
    result, server = _investigation(api)
    assert result.status is Status.COMPLETED, result.detail
    reference, _ = _investigation("chat")
    assert result.output == reference.output and "O-1017" in result.output
    assert result.usage.to_dict() | {"wall_seconds": 0} == reference.usage.to_dict() | {
        "wall_seconds": 0
    }
    tools = [e.data["tool"] for e in result.events if e.type == "tool_call"]
    assert tools[:2] == ["lookup_customer", "list_orders"] and len(tools) == 8
    _sent_reasoning_back(server, api)
    if api == "responses":
        # Turn 4 sends the reasoning of turns 1, 2 and 3; parallel calls share one.
        last = server.requests[-1]["input"]
        assert [i["id"] for i in last if i.get("type") == "reasoning"] == [
            "rs_resp_fake_1",
            "rs_resp_fake_2",
            "rs_resp_fake_3",
        ]
        assert sum(1 for i in last if i.get("type") == "function_call") == 8


def test_a_turn_sent_back_without_its_reasoning_is_refused() -> None:
    from loopwise.errors import ModelAPIError
    from loopwise.testing import call, reply

    async def calls_in_one_loop(model: Any, server: FakeChatServer) -> None:
        first = [{"role": "user", "content": "find x"}]
        turn = await model.complete(loopwise.ModelRequest(messages=first))
        assert turn.tool_calls[0].id == "c1" and turn.reasoning[0]["encrypted_content"]
        result = {"role": "tool", "tool_call_id": "c1", "content": "found"}
        forgetful = {k: v for k, v in turn.to_message().items() if k != "reasoning_items"}
        with pytest.raises(ModelAPIError, match="without its reasoning item 'rs_resp_fake_1'"):
            await model.complete(loopwise.ModelRequest(messages=[*first, forgetful, result]))
        assert len(server.responses.missing) == 1 and server.responses.received == []
        request = loopwise.ModelRequest(messages=[*first, turn.to_message(), result])
        answer = await model.complete(request)
        assert answer.text == "b" and server.responses.received == ["rs_resp_fake_1"]
        await model.aclose()

    with FakeChatServer([call("lookup", {"q": "x"}, id="c1"), reply("b")]) as server:
        asyncio.run(calls_in_one_loop(server.model(api="responses"), server))


def test_the_request_is_the_one_responses_create_sends() -> None:
    """The port posts its body itself (no SDK transform per call): the same keys, in the
    same order, with the same values, as ``client.responses.create`` sends."""
    from loopwise.testing import calls, reply

    tool = {
        "type": "function",
        "function": {"name": "get", "description": "Get one.", "parameters": {"type": "object"}},
    }

    async def both(model: Any) -> None:
        first = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "go"}]
        turn = await model.complete(loopwise.ModelRequest(messages=first))
        request = loopwise.ModelRequest(
            messages=[
                *first,
                turn.to_message(),
                {"role": "tool", "tool_call_id": "c1", "content": "one"},
                {"role": "tool", "tool_call_id": "c2", "content": "two"},
            ],
            tools=[tool],
            tool_choice={"type": "function", "function": {"name": "get"}},
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "A", "schema": {"type": "object"}, "strict": True},
            },
            temperature=0.2,
            max_output_tokens=50,
        )
        await model.complete(request)
        await model.client.responses.create(**model.responses_params(request))
        await model.aclose()

    script = [calls(("get", {"id": 1}, "c1"), ("get", {"id": 2}, "c2")), reply("x"), reply("x")]
    with FakeChatServer(script) as server:
        asyncio.run(both(server.model(api="responses")))
    ours, sdks = server.requests[1], server.requests[2]
    assert json.dumps(ours) == json.dumps(sdks)  # key for key, in order
    assert ours["store"] is False and ours["include"] == ["reasoning.encrypted_content"]
    assert ours["text"] == {
        "format": {"type": "json_schema", "name": "A", "schema": {"type": "object"}, "strict": True}
    }
    assert ours["tool_choice"] == {"type": "function", "name": "get"}
    assert ours["tools"][0]["strict"] is False  # Responses' default is strict: said out loud
    kinds = [i.get("type", i.get("role")) for i in ours["input"]]
    assert kinds == [
        "system",
        "user",
        "reasoning",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
    ]
