"""The local Chat Completions server, driven through the real ``openai`` client."""

from __future__ import annotations

import asyncio
import http.client
import json
from collections.abc import Awaitable, Callable
from typing import Any

import openai
import pytest

import loopwise
from loopwise import ConfigError, ModelAPIError, ModelRequest, OpenAIModel, Status, Turn
from loopwise.errors import ResponseFormatRejected
from loopwise.testing import FakeChatServer, Fault, ScriptedModel, call, calls, refuse, reply

HELLO = ModelRequest(messages=[{"role": "user", "content": "hello"}])


def _complete(model: OpenAIModel, *requests: ModelRequest) -> list[Turn | Exception]:
    """Send ``requests`` in order in one event loop; an error is returned, not raised."""

    async def go() -> list[Turn | Exception]:
        out: list[Turn | Exception] = []
        try:
            for request in requests:
                try:
                    out.append(await model.complete(request))
                except Exception as e:
                    out.append(e)
        finally:
            await model.aclose()
        return out

    return asyncio.run(go())


def _in_loop(model: OpenAIModel, body: Callable[[], Awaitable[Any]]) -> Any:
    async def go() -> Any:
        try:
            return await body()
        finally:
            await model.aclose()

    return asyncio.run(go())


def test_text_tool_calls_refusal_and_usage_round_trip() -> None:
    script = [
        reply("hi there"),
        calls(("lookup", {"id": 7}, "call_1"), ("fetch", '{"url": broken', "call_2")),
        refuse("no"),
    ]
    with FakeChatServer(script) as server:
        text, tools, refusal = _complete(server.model("m-1"), HELLO, HELLO, HELLO)
    assert isinstance(text, Turn) and text.text == "hi there" and text.model == "m-1"
    assert text.finish_reason == "stop" and text.input_tokens > 0 and text.output_tokens > 0
    assert isinstance(tools, Turn) and tools.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in tools.tool_calls] == [
        ("call_1", "lookup", '{"id": 7}'),
        ("call_2", "fetch", '{"url": broken'),
    ]
    assert isinstance(refusal, Turn) and refusal.refusal == "no"
    assert [body["model"] for body in server.requests] == ["m-1"] * 3


def test_requests_are_recorded_and_reach_a_callable_script_as_model_requests() -> None:
    seen: list[ModelRequest] = []

    def script(request: ModelRequest) -> Turn:
        seen.append(request)
        return call("lookup", {"id": 1})

    request = ModelRequest(
        messages=[{"role": "user", "content": "x"}],
        tools=[{"type": "function", "function": {"name": "lookup", "parameters": {}}}],
        tool_choice="auto",
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "A", "schema": {"type": "object"}, "strict": True},
        },
        temperature=0.0,
        max_output_tokens=50,
    )
    with FakeChatServer(script) as server:
        _complete(server.model(), request)
    assert server.requests[0]["max_completion_tokens"] == 50
    got = seen[0]
    assert got.messages == request.messages and got.tools == request.tools
    assert got.tool_choice == "auto" and got.temperature == 0.0
    assert got.output_schema == {"type": "object"} and got.max_output_tokens == 50


def test_no_script_answers_offline_like_the_scripted_model() -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 3}},
        "required": ["n"],
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "N", "schema": schema}}
    with FakeChatServer() as server:
        (turn,) = _complete(server.model(), ModelRequest(messages=[], response_format=fmt))
    assert isinstance(turn, Turn) and json.loads(turn.text or "") == {"n": 3}


def test_reject_names_response_format_and_tool_choice() -> None:
    schema_fmt = {"type": "json_schema", "json_schema": {"name": "A", "schema": {}}}
    forced = ModelRequest(
        messages=[{"role": "user", "content": "x"}],
        tools=[{"type": "function", "function": {"name": "a", "parameters": {}}}],
        tool_choice={"type": "function", "function": {"name": "a"}},
    )
    reject = {"json_schema", "json_object", "tool_choice"}
    with FakeChatServer(reject=reject) as server:
        results = _complete(
            server.model(),
            ModelRequest(messages=[], response_format=schema_fmt),
            ModelRequest(messages=[], response_format={"type": "json_object"}),
            forced,
            HELLO,
        )
    assert all(isinstance(r, ResponseFormatRejected) for r in results[:3])
    assert "response_format" in str(results[0]) and "tool_choice" in str(results[2])
    assert isinstance(results[3], Turn)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/decisions"])
def test_a_json_body_that_is_no_object_is_a_400_and_the_server_answers_on(path: str) -> None:
    # A JSON array used to raise inside the server: the client saw its connection closed
    # with no answer, as if the server had died, instead of OpenAI's 400.
    with FakeChatServer() as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        try:
            conn.request("POST", path, body=b"[1, 2]", headers={"content-type": "application/json"})
            answer = conn.getresponse()
            said = json.loads(answer.read())
        finally:
            conn.close()
        assert answer.status == 400
        assert said["error"]["message"] == "the request body is not a JSON object"
        assert server.requests == []
        [turn] = _complete(server.model(), HELLO)
        assert isinstance(turn, Turn)


def test_unknown_reject_mode_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="json_mode"):
        FakeChatServer(reject={"json_mode"})


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        (Fault(status=429), "429"),
        (Fault(status=503), "503"),
        (Fault(empty_choices=True), "no choices"),
        (Fault(truncated_json=True), "malformed JSON"),
        (Fault(disconnect=True), "unreachable"),
        (Fault(body="<html>bad gateway</html>", status=502), "502"),
    ],
)
def test_faults_become_model_api_errors(fault: Fault, expected: str) -> None:
    with FakeChatServer([fault, reply("recovered")]) as server:
        error, after = _complete(server.model(), HELLO, HELLO)
    assert isinstance(error, ModelAPIError) and expected in str(error)
    assert isinstance(after, Turn) and after.text == "recovered"


def test_delay_past_the_client_timeout_is_a_timeout() -> None:
    with FakeChatServer([Fault(delay=2.0)]) as server:
        (error,) = _complete(server.model(timeout=0.2), HELLO)
    assert isinstance(error, ModelAPIError) and "timed out" in str(error)


def test_a_fault_can_answer_after_its_delay() -> None:
    with FakeChatServer([Fault(delay=0.01, answer="slow but fine")]) as server:
        (turn,) = _complete(server.model(), HELLO)
    assert isinstance(turn, Turn) and turn.text == "slow but fine"


def test_the_sdk_retries_are_the_sdks_own_and_each_takes_a_script_entry() -> None:
    fast = {"retry-after-ms": "1"}  # keeps the SDK's backoff out of the test's time
    script = [Fault(status=500, headers=fast), Fault(status=500, headers=fast), reply("ok")]
    with FakeChatServer(script) as server:
        (error,) = _complete(server.model(max_retries=1), HELLO)
        assert isinstance(error, ModelAPIError) and error.status_code == 500
        assert len(server.requests) == 2
        (turn,) = _complete(server.model(max_retries=1), HELLO)
    assert isinstance(turn, Turn) and turn.text == "ok"


def test_a_500_after_retries_ends_the_run_error() -> None:
    fast = {"retry-after-ms": "1"}

    @loopwise.step
    async def ask(text: str, ctx: loopwise.Context) -> str:
        return str((await ctx.call_model(HELLO)).text)

    with FakeChatServer([Fault(status=500, headers=fast)] * 2) as server:
        model = server.model(max_retries=1)
        result = _in_loop(model, lambda: loopwise.arun(ask, "x", model=model))
    assert result.status == Status.ERROR and "500" in (result.detail or "")
    assert len(server.requests) == 2 and result.usage.model_calls == 0


def test_an_exhausted_script_answers_500_and_says_why() -> None:
    with FakeChatServer([reply("only one")]) as server:
        first, second = _complete(server.model(), HELLO, HELLO)
    assert isinstance(first, Turn) and isinstance(second, ModelAPIError)
    assert server.errors and "ScriptExhausted" in server.errors[0]


def test_keep_alive_reuses_one_connection() -> None:
    with FakeChatServer() as server:
        _complete(server.model(), *[HELLO] * 5)
    assert len(server.requests) == 5 and server.connections == 1


def test_concurrent_requests_are_served_concurrently() -> None:
    # No answer leaves before the 100th request arrives: all 100 were sent at once.
    with FakeChatServer(hold_until=100) as server:
        model = server.model()

        async def many() -> list[Turn]:
            return await asyncio.gather(*(model.complete(HELLO) for _ in range(100)))

        turns = _in_loop(model, many)
    assert len(turns) == 100 and server.peak_in_flight == 100


def test_the_real_client_sees_an_openai_style_error_body() -> None:
    with FakeChatServer(reject={"json_object"}) as server:
        client = openai.OpenAI(api_key="k", base_url=server.base_url, max_retries=0)
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(
                model="m", messages=[], response_format={"type": "json_object"}
            )
        client.close()
    assert info.value.body == {
        "message": "Invalid parameter: 'response_format' of type 'json_object' is not "
        "supported by this server.",
        "type": "invalid_request_error",
        "param": "response_format",
        "code": None,
    }


def test_start_and_stop_without_a_context_manager() -> None:
    server = FakeChatServer().start()
    assert server.base_url.startswith("http://127.0.0.1:") and server.port > 0
    server.stop()
    server.stop()


def test_faults_work_in_process_with_the_scripted_model() -> None:
    @loopwise.step
    async def ask(text: str, ctx: loopwise.Context) -> str:
        return str((await ctx.call_model(HELLO)).text)

    model = ScriptedModel([Fault(status=429), Fault(delay=0.01, answer="late")])
    first = loopwise.run(ask, "x", model=model)
    assert first.status == Status.ERROR and "429" in (first.detail or "")
    assert loopwise.run(ask, "x", model=model).output == "late"


def _tool_turn_body(*calls: tuple[str, str, str | None]) -> dict[str, Any]:
    """A raw completion whose tool calls carry the given ids (``None``: no id at all)."""
    tool_calls = [
        {"type": "function", "function": {"name": n, "arguments": a}, **({"id": i} if i else {})}
        for n, a, i in calls
    ]
    message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    return {
        "id": "chatcmpl-raw",
        "object": "chat.completion",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
    }


@pytest.mark.parametrize("ids", [(None, None), ("call_0", "call_0")])
def test_missing_or_repeated_call_ids_from_a_server_become_unique(
    ids: tuple[str | None, str | None],
) -> None:
    """Results are bound, journaled and gated by call id: two calls never share one."""

    @loopwise.tool
    def look(q: str) -> str:
        """Look something up. Call it to look."""
        return f"seen {q}"

    raw = _tool_turn_body(("look", '{"q": "a"}', ids[0]), ("look", '{"q": "b"}', ids[1]))
    with FakeChatServer([Fault(body=raw), reply("done")]) as server:
        agent = loopwise.Agent(name="a", tools=[look])
        result = loopwise.run(agent, "q", model=server.model(), store=None)
        sent = server.requests[1]["messages"]
    assert result.status is Status.COMPLETED
    bound = [e.data["call_id"] for e in result.events if e.type == "tool_result"]
    assert len(set(bound)) == 2 and all(bound)
    call_ids = [c["id"] for m in sent if m["role"] == "assistant" for c in m["tool_calls"]]
    answered = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    assert all(call_ids) and answered == call_ids
    if ids[0]:
        # The server is sent back its own ids, repeated as it gave them, never a renamed one.
        assert call_ids == list(ids) and bound[0] == ids[0]
    else:
        assert call_ids == bound  # it gave none: loopwise's are the only ones
