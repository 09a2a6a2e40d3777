"""The Responses API port: the canonical examples answer alike over both OpenAI APIs.

Every run goes through the real ``openai`` client to the fake server, whose
``/v1/responses`` answers from the same script as its ``/chat/completions`` and, like a
reasoning model with nothing stored, gives each turn an encrypted reasoning item that
it checks comes back with that turn on every later call.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pydantic
import pytest

import loopwise
from loopwise import Status
from loopwise.running.targets import load_target, model_for
from loopwise.testing import FakeChatServer, ScriptedModel

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


TICKET = {
    "subject": "Charged twice this month",
    "body": "My card shows two charges of $49 on March 3. Please refund the duplicate.",
}


@pytest.mark.parametrize("api", APIS)
def test_the_triage_workflow_classifies_alike(api: str) -> None:
    spec = "workflows/ticket_triage.py:triage"
    with FakeChatServer(_responder(spec)) as server:
        result = loopwise.run(load_target(spec).step, TICKET, model=server.model(api=api))
    assert result.status is Status.COMPLETED, result.detail
    assert result.output.model_dump() == {
        "summary": result.output.summary,
        "category": "billing",
        "urgency": result.output.urgency,
        "queue": "billing",
    }
    target = load_target(spec)
    offline = loopwise.run(target.step, TICKET, model=model_for(target, "scripted"))
    assert result.output == offline.output and result.usage.model_calls == 1
    (body,) = server.requests
    if api == "responses":
        assert body["text"]["format"]["type"] == "json_schema" and "response_format" not in body
    else:
        assert body["response_format"]["type"] == "json_schema"


@pytest.mark.parametrize("api", APIS)
def test_the_refund_desk_pauses_and_resumes_alike(api: str) -> None:
    spec = "workflows/refund_desk.py:refund_desk"
    desk = load_target(spec).step
    complaint = "Order O-1003 arrived broken and I want my money back."
    with FakeChatServer(_responder(spec)) as server:
        model = server.model(api=api)
        paused = loopwise.run(desk, complaint, model=model)
        assert paused.status is Status.AWAITING_APPROVAL, paused.detail
        pending = {p["tool"]: p["args"] for p in paused.pending}
        assert pending["issue_refund"]["amount_cents"] == 18900
        loopwise.approve(paused.run_id, all_pending=True, by="alice")
        done = loopwise.resume(paused.run_id, step=desk, model=model)
    assert done.status is Status.COMPLETED, done.detail
    assert {k: r.status for k, r in done.output.results.items()} == {
        "s1": "done",
        "s2": "done",
        "s3": "done",
    }
    _sent_reasoning_back(server, api)


@pytest.mark.parametrize("api", APIS)
def test_a_conversation_follow_up_sends_the_earlier_turns_reasoning(api: str) -> None:
    spec = "agents/order_investigation.py:investigate"
    agent = load_target(spec).step
    with FakeChatServer(_responder(spec)) as server:
        model = server.model(api=api)
        first = loopwise.run(agent, QUESTION, model=model, conversation="dana")
        asked = len(server.requests)
        follow = loopwise.run(agent, "And about the last one?", model=model, conversation="dana")
    assert first.status is follow.status is Status.COMPLETED
    assert "O-1017" in follow.output and "declined" in follow.output
    assert follow.usage.tool_calls == 0
    _sent_reasoning_back(server, api)
    if api == "responses":
        # The follow-up's one call carries the reasoning of all four earlier turns.
        sent = [i["id"] for i in server.requests[asked]["input"] if i.get("type") == "reasoning"]
        assert sent == [f"rs_resp_fake_{n}" for n in range(1, 5)]


DESK = '''
import loopwise
from loopwise import gates


@loopwise.tool
def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return f"{order_id}: 80.00, delivered broken"


@loopwise.tool(effect="irreversible", gate=gates.human())
def issue_refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount} on {order_id}"


refund_agent = loopwise.Agent(name="refund_agent", tools=[lookup_order, issue_refund])
'''


def _desk_script(request: loopwise.ModelRequest) -> Any:
    """Look the order up, refund it (a person approves), then say so: pure, so resumes
    replay alike."""
    from loopwise.testing import call, reply

    done = [m["content"] for m in request.messages if m["role"] == "tool"]
    if not done:
        return call("lookup_order", {"order_id": "O-1"}, id="c_look")
    if len(done) == 1:
        return call("issue_refund", {"order_id": "O-1", "amount": 80.0}, id="c_refund")
    return reply("done: " + done[-1])


@pytest.mark.slow
@pytest.mark.parametrize("api", APIS)
def test_a_run_resumed_in_another_process_sends_the_earlier_reasoning_back(
    api: str, tmp_path: Path
) -> None:
    (tmp_path / "desk.py").write_text(DESK)
    spec = f"{tmp_path / 'desk.py'}:refund_agent"
    with FakeChatServer(_desk_script) as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "fake-key"}

        def cli(*args: str) -> tuple[int, Any]:
            done = subprocess.run(
                [LOOPWISE, *args], capture_output=True, text=True, env=env, check=False
            )
            assert "Traceback" not in done.stderr, done.stderr
            as_json = "--json" in args
            return done.returncode, json.loads(done.stdout) if as_json else done.stdout

        start = ("run", spec, "--input", '"refund O-1"', "--model", "m", "--api", api, "--json")
        code, paused = cli(*start)
        assert code == 1 and paused["status"] == "awaiting_approval", paused
        assert cli("approve", paused["run_id"], "--by", "alice")[0] == 0
        # A third process resumes: the API named by the environment this time.
        env["LOOPWISE_API"] = api
        code, resumed = cli("resume", paused["run_id"], "--json")
    assert code == 0 and resumed["status"] == "completed", resumed
    assert resumed["output"] == "done: refunded 80.0 on O-1"
    assert len(server.requests) == 3  # two turns before the pause, one after
    _sent_reasoning_back(server, api)
    if api == "responses":
        # The call after the resume carried both earlier turns' reasoning, from the journal.
        sent = [i for i in server.requests[-1]["input"] if i.get("type") == "reasoning"]
        assert [i["id"] for i in sent] == ["rs_resp_fake_1", "rs_resp_fake_2"]
        assert all(i["encrypted_content"].startswith("gAAAA-fake-") for i in sent)
        assert server.responses.received[-2:] == ["rs_resp_fake_1", "rs_resp_fake_2"]


ANSWER = "Order O-1 left the warehouse on Monday and arrives on Thursday."


def _streamed(stream: bool) -> tuple[list[Any], loopwise.RunResult, FakeChatServer]:
    from loopwise.testing import calls, reply

    @loopwise.tool
    def lookup(order_id: str) -> str:
        """Look up an order."""
        return f"{order_id}: shipped Monday"

    agent = loopwise.Agent(name="clerk", tools=[lookup], max_steps=4)
    script = [calls(("lookup", {"order_id": "O-1"}, "c1"), ("lookup", {"order_id": "O-2"}, "c2"))]
    with FakeChatServer([*script, reply(ANSWER)]) as server:

        async def main() -> tuple[list[Any], loopwise.RunStream]:
            model = server.model(api="responses")
            run = loopwise.astream(agent, "where is O-1?", model=model, stream=stream)
            try:
                return [item async for item in run], run
            finally:
                await model.aclose()

        seen, run = asyncio.run(main())
    assert run.result is not None
    return seen, run.result, server


def test_a_streamed_responses_call_gives_text_deltas_and_the_same_turns() -> None:
    timing = {"started_at", "duration_seconds"}

    def calls_of(items: list[Any]) -> list[dict[str, Any]]:
        return [
            {k: v for k, v in e.data.items() if k not in timing}
            for e in items
            if isinstance(e, loopwise.Event) and e.type == "model_call"
        ]

    streamed, result, server = _streamed(True)
    assert result.status is Status.COMPLETED and result.output == ANSWER
    assert all(body.get("stream") is True for body in server.requests)
    deltas = [d.text for d in streamed if isinstance(d, loopwise.TextDelta)]
    assert len(deltas) > 1 and "".join(deltas) == ANSWER
    assert server.responses.received == ["rs_resp_fake_1"]  # the streamed item came back
    plain, _, _ = _streamed(False)
    assert calls_of(streamed) == calls_of(plain)
    first = calls_of(streamed)[0]["turn"]
    assert [c["id"] for c in first["tool_calls"]] == ["c1", "c2"]
    assert first["reasoning"][0]["encrypted_content"].startswith("gAAAA-fake-")


@pytest.mark.parametrize("api", APIS)
def test_reasoning_and_cached_tokens_reach_the_usage_and_the_cost(api: str) -> None:
    from loopwise import Price, Pricing

    answer = loopwise.Turn(
        text="ok", input_tokens=1000, output_tokens=300, reasoning_tokens=200, cached_tokens=800
    )
    agent = loopwise.Agent(name="plain")
    cheap = Pricing(extra={"fake-model": Price(input=1.0, output=2.0, cached_input=0.1)})
    with FakeChatServer([answer, answer]) as server:
        model = server.model(api=api)
        result = loopwise.run(agent, "hi", model=model, pricing=cheap)
        unknown = loopwise.run(agent, "hi", model=model, pricing=Pricing(extra={
            "fake-model": Price(input=1.0, output=2.0)}))  # fmt: skip
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens) == (1000, 300)
    assert (usage.reasoning_tokens, usage.cached_tokens) == (200, 800)
    assert usage.to_dict()["reasoning_tokens"] == 200 and usage.to_dict()["cached_tokens"] == 800
    # 200 fresh input at $1, 800 cached at $0.1, 300 output at $2 (per million).
    assert usage.cost_usd == pytest.approx((200 * 1.0 + 800 * 0.1 + 300 * 2.0) / 1e6)
    # Without a cached price the cache is not assumed to be cheaper.
    assert unknown.usage.cost_usd == pytest.approx((1000 * 1.0 + 300 * 2.0) / 1e6)
    call = next(e for e in result.events if e.type == "model_call")
    assert call.data["turn"]["reasoning_tokens"] == 200


@pytest.mark.parametrize("api", APIS)
def test_a_refusal_and_a_filtered_answer_end_refused_alike(api: str) -> None:
    from loopwise.testing import refuse

    agent = loopwise.Agent(name="plain")
    filtered = loopwise.Turn(text="partial", finish_reason="content_filter")
    with FakeChatServer([refuse("No."), filtered]) as server:
        model = server.model(api=api)
        refused = loopwise.run(agent, "hi", model=model)
        stopped = loopwise.run(agent, "hi", model=model)
    assert refused.status is Status.REFUSED and "No." in str(refused.detail)
    assert stopped.status is Status.REFUSED and "filter" in str(stopped.detail)
    if api == "responses":
        assert server.requests  # and the fake sent the filter as an incomplete response:
        assert all("input" in body for body in server.requests)


class Assessment(pydantic.BaseModel):
    category: str
    urgency: int


@pytest.mark.parametrize("api", APIS)
def test_a_cut_off_structured_answer_is_re_asked_then_invalid_alike(api: str) -> None:
    step = loopwise.Structured("assess", Assessment, "Assess.", max_retries=1)
    cut = loopwise.Turn(text='{"category": "bil', finish_reason="length")
    with FakeChatServer([cut, cut]) as server:
        result = loopwise.run(step, "x", model=server.model(api=api))
    assert result.status is Status.INVALID_OUTPUT and result.usage.model_calls == 2


def test_a_server_that_rejects_text_format_json_schema_steps_down() -> None:
    good = {"category": "billing", "urgency": 2}
    step = loopwise.Structured("assess", Assessment, "Assess.")
    with FakeChatServer(lambda request: good, reject={"json_schema"}) as server:
        model = server.model(api="responses")
        first = loopwise.run(step, "x", model=model)
        again = loopwise.run(step, "y", model=model)
    assert first.status is again.status is Status.COMPLETED
    assert first.output == Assessment(**good)
    formats = [(b.get("text") or {}).get("format", {}).get("type") for b in server.requests]
    # Refused once, then JSON mode (the schema in the prompt: Responses' JSON mode takes
    # none); the next run starts at the rung that worked, remembered for /v1/responses.
    assert formats == ["json_schema", "json_object", "json_object"]
    where = (server.base_url + "/responses", "fake-model")
    assert model.structured_modes == {where: "json_object_schema"}


def test_store_true_chains_each_call_to_the_last_turn() -> None:
    spec = "agents/order_investigation.py:investigate"
    agent = load_target(spec).step
    with FakeChatServer(_responder(spec)) as server:
        model = server.model(api="responses", store=True)
        result = loopwise.run(agent, QUESTION, model=model, conversation="d")
        follow = loopwise.run(agent, "And about the last one?", model=model, conversation="d")
    reference, _ = _investigation("chat")
    assert result.status is Status.COMPLETED and result.output == reference.output
    assert follow.status is Status.COMPLETED and "declined" in follow.output
    # The follow-up chains to the first run's last turn and sends only its question.
    assert server.requests[-1]["previous_response_id"] == "resp_fake_4"
    assert server.requests[-1]["input"] == [{"role": "user", "content": "And about the last one?"}]
    first, second = server.requests[0], server.requests[1]
    # The reasoning comes back encrypted even so: a chain the server forgets is sent whole.
    assert first["store"] is True and first["include"] == ["reasoning.encrypted_content"]
    assert "previous_response_id" not in first
    # The second call sends only the tool results; the server holds the rest.
    assert second["previous_response_id"] == "resp_fake_1"
    assert {i["type"] for i in second["input"]} == {"function_call_output"}
    assert not any(i.get("type") == "reasoning" for b in server.requests for i in b["input"])


def test_a_cassette_records_a_responses_run_and_replays_its_reasoning(tmp_path: Path) -> None:
    from loopwise.testing import Cassette

    spec = "agents/order_investigation.py:investigate"
    agent = load_target(spec).step
    tape = tmp_path / "run.json"
    with FakeChatServer(_responder(spec)) as server:
        recorded = loopwise.run(
            agent, QUESTION, model=Cassette(tape, model=server.model(api="responses"))
        )
    replayed = loopwise.run(agent, QUESTION, model=Cassette(tape))
    assert replayed.status is recorded.status is Status.COMPLETED
    assert replayed.output == recorded.output
    turns = [e.data["turn"] for e in replayed.events if e.type == "model_call"]
    assert [t["reasoning"][0]["id"] for t in turns] == [f"rs_resp_fake_{n}" for n in range(1, 5)]


def test_the_cli_names_a_wrong_api_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopwise.cli.main import main

    spec = "workflows/ticket_triage.py:triage"
    argv = ["run", spec, "--input", json.dumps(TICKET), "--model", "scripted", "--json"]
    assert main([*argv, "--api", "soap"]) == 2
    err = capsys.readouterr().err
    assert "--api" in err and "responses" in err and err.count("\n") == 1
    assert main([*argv, "--api", "soap", "--queue"]) == 2
    err = capsys.readouterr().err
    assert "--api" in err and "'soap'" in err and err.count("\n") == 1
    monkeypatch.setenv("LOOPWISE_API", "soap")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "LOOPWISE_API" in err and "'soap'" in err and err.count("\n") == 1
    with pytest.raises(loopwise.ConfigError, match="api: unknown API 'soap'"):
        loopwise.OpenAIModel("m", base_url="http://127.0.0.1:9/v1", api="soap")


def test_concurrent_runs_with_the_same_call_ids_each_send_their_own_reasoning() -> None:
    from loopwise.testing import call, reply

    @loopwise.tool
    def lookup(order_id: str) -> str:
        """Look up an order."""
        return f"{order_id}: shipped"

    def script(request: loopwise.ModelRequest) -> Any:
        done = any(m["role"] == "tool" for m in request.messages)
        return reply("shipped") if done else call("lookup", {"order_id": "O-1"}, id="c1")

    agent = loopwise.Agent(name="clerk", tools=[lookup])
    with FakeChatServer(script, hold_until=2) as server:
        model = server.model(api="responses")

        async def both() -> list[loopwise.RunResult]:
            try:
                runs = (loopwise.arun(agent, "where?", model=model, store=None) for _ in "ab")
                return list(await asyncio.gather(*runs))
            finally:
                await model.aclose()

        results = asyncio.run(both())
    assert [r.status for r in results] == [Status.COMPLETED, Status.COMPLETED]
    assert not server.responses.missing
    assert sorted(server.responses.received) == ["rs_resp_fake_1", "rs_resp_fake_2"]
