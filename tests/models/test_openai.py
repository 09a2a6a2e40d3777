"""OpenAI's APIs, durably: the server's call ids go back to it, a chain it forgot heals.

Every run goes through the real ``openai`` client to the fake server, which refuses what
OpenAI refuses (an unknown ``previous_response_id``, an output for a call not in the
chain, reasoning it did not issue or out of order) and records every call id a request
named that it never gave out (``server.call_ids.foreign``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import loopwise
from loopwise import Status
from loopwise.testing import FakeChatServer, Fault, ScriptedModel, call, calls, reply
from tests.support import ROOT

SETTINGS = [("chat", False), ("responses", False), ("responses", True)]
"""Each API with each store setting it has (Chat Completions stores nothing)."""

DOTTED = "functions.lookup:0"
LONG = "call_" + "x" * 70
CASES = {
    # A server that numbers its calls per turn gives every turn the same id.
    "across turns": [[("lookup", {"q": "a"}, "call_0")], [("lookup", {"q": "b"}, "call_0")]],
    "within a turn": [[("lookup", {"q": "a"}, "call_0"), ("lookup", {"q": "b"}, "call_0")]],
    "dots and colons": [[("lookup", {"q": "a"}, DOTTED)]],
    "over 64 characters": [[("lookup", {"q": "a"}, LONG)]],
}


@loopwise.tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


def _script(turns: list[list[tuple[str, dict[str, Any], str]]]) -> Any:
    """The case's tool turns, one per model call, then an answer."""

    def answer(request: loopwise.ModelRequest) -> Any:
        done = sum(1 for m in request.messages if m["role"] == "assistant")
        return calls(*turns[done]) if done < len(turns) else reply("done")

    return answer


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize(("api", "store"), SETTINGS)
def test_a_renamed_call_goes_back_under_the_servers_id(api: str, store: bool, case: str) -> None:
    turns = CASES[case]
    agent = loopwise.Agent(name="clerk", tools=[lookup])
    with FakeChatServer(_script(turns)) as server:
        result = loopwise.run(agent, "look", model=server.model(api=api, store=store))
    assert result.status is Status.COMPLETED, result.detail
    assert result.output == "done"
    # loopwise keys its journal by its own ids: unique, 1-64 plain characters...
    bound = [e.data["call_id"] for e in result.events if e.type == "tool_call"]
    assert len(bound) == sum(map(len, turns)) == len(set(bound))
    assert all(len(i) <= 64 and "." not in i and ":" not in i for i in bound)
    # ...while every request names each call as the server did, and no other way.
    assert server.call_ids.foreign == []
    given = {c[2] for turn in turns for c in turn}
    if api == "chat":
        named = {
            c["id"] for b in server.requests for m in b["messages"] for c in m.get("tool_calls", ())
        }
    else:
        named = {
            i["call_id"]
            for b in server.requests
            for i in b["input"]
            if i.get("type", "")[:8] == "function"
        }
    assert named == given


def _post(server: FakeChatServer, **body: Any) -> Any:
    """One ``responses.create`` straight through the SDK (no loopwise in between)."""

    async def once() -> Any:
        async with openai.AsyncOpenAI(
            api_key="k", base_url=server.base_url, max_retries=0
        ) as client:
            return await client.responses.create(model="m", **body)

    return asyncio.run(once())


def test_the_fake_refuses_what_openai_refuses() -> None:
    include = ["reasoning.encrypted_content"]
    with FakeChatServer([call("lookup", {"q": "a"}, id="c1")] + [reply("ok")] * 9) as server:
        first = _post(server, input="look", store=True, include=include)
        rs, fc = first.output[0].to_dict(), first.output[1].to_dict()
        assert rs["type"] == "reasoning" and fc["call_id"] == "c1"
        output = {"type": "function_call_output", "call_id": "c1", "output": "found a"}
        with pytest.raises(openai.NotFoundError) as unknown:
            _post(server, input=[output], previous_response_id="resp_nobody", store=True)
        assert unknown.value.code == "previous_response_not_found"
        assert unknown.value.param == "previous_response_id"
        orphan = {**output, "call_id": "c9"}
        with pytest.raises(openai.BadRequestError, match=r"No tool call found .* c9"):
            _post(server, input=[orphan], previous_response_id=first.id, store=True)
        with pytest.raises(openai.BadRequestError, match=r"No tool call found .* c1"):
            _post(server, input=[output], store=True)  # the chain is not named
        user = {"role": "user", "content": "look"}
        forged = {**rs, "id": "rs_forged"}
        with pytest.raises(openai.BadRequestError, match="'rs_forged' not found"):
            _post(server, input=[user, forged, fc, output], store=False, include=include)
        resealed = {**rs, "encrypted_content": "gAAAA-other"}
        with pytest.raises(openai.BadRequestError, match="could not be verified") as sealed:
            _post(server, input=[user, resealed, fc, output], store=False, include=include)
        assert sealed.value.code == "invalid_encrypted_content"
        with pytest.raises(openai.BadRequestError, match="without its required following item"):
            _post(server, input=[user, fc, rs, output], store=False, include=include)
        # The same items, whole and in order, are accepted; so is the chain, once.
        assert _post(server, input=[user, rs, fc, output], store=False, include=include).id
        assert _post(server, input=[output], previous_response_id=first.id, store=True).id
        server.responses.forget(first.id)
        with pytest.raises(openai.NotFoundError):
            _post(server, input=[output], previous_response_id=first.id, store=True)
    assert server.call_ids.foreign == ["c9"]


REFUNDS: list[str] = []


@loopwise.tool
def look_up_order(order_id: str) -> str:
    """Look an order up."""
    return f"{order_id}: 80.00, delivered broken"


@loopwise.tool(effect="irreversible", gate=loopwise.gates.human())
def refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    REFUNDS.append(order_id)
    return f"refunded {amount} on {order_id}"


def _desk(request: loopwise.ModelRequest) -> Any:
    done = [m["content"] for m in request.messages if m["role"] == "tool"]
    if not done:
        return call("look_up_order", {"order_id": "O-1"}, id="call_look")
    if len(done) == 1:
        return call("refund", {"order_id": "O-1", "amount": 80.0}, id="call_refund")
    return reply("done: " + done[-1])


def test_a_paused_run_whose_stored_response_expired_completes_with_its_effect_once() -> None:
    REFUNDS.clear()
    agent = loopwise.Agent(name="desk", tools=[look_up_order, refund])
    with FakeChatServer(_desk) as server:
        model = server.model(api="responses", store=True)
        paused = loopwise.run(agent, "refund O-1", model=model)
        assert paused.status is Status.AWAITING_APPROVAL, paused.detail
        server.responses.forget()  # retention ran out while the run waited
        loopwise.approve(paused.run_id, all_pending=True, by="alice")
        done = loopwise.resume(paused.run_id, step=agent, model=model)
        again = loopwise.resume(paused.run_id, step=agent, model=model)
    assert done.status is again.status is Status.COMPLETED, done.detail
    assert done.output == "done: refunded 80.0 on O-1" and REFUNDS == ["O-1"]
    refused, whole = server.requests[-2:]
    assert refused["previous_response_id"] == "resp_fake_2"
    # Sent again whole: every turn, its reasoning (sealed) before its call, every result.
    assert "previous_response_id" not in whole and whole["store"] is True
    kinds = [i.get("type", "message") for i in whole["input"]]
    assert kinds == [
        *("message", "reasoning", "function_call", "function_call_output"),
        *("reasoning", "function_call", "function_call_output"),
    ]
    last = [e for e in done.events if e.type == "model_call"][-1].data["turn"]
    assert "refused previous_response_id 'resp_fake_2' (HTTP 404)" in last["resent"]


def test_a_chain_refused_with_a_400_naming_it_is_sent_whole() -> None:
    """Some servers answer an unknown stored response with a 400 and OpenAI's code."""
    gone = {
        "error": {
            "message": "Previous response with id 'resp_fake_1' not found.",
            "type": "invalid_request_error",
            "param": None,
            "code": "previous_response_not_found",
        }
    }
    script = [call("lookup", {"q": "a"}, id="c1"), Fault(status=400, body=gone), reply("done")]
    agent = loopwise.Agent(name="clerk", tools=[lookup])
    with FakeChatServer(script) as server:
        result = loopwise.run(agent, "look", model=server.model(api="responses", store=True))
    assert result.status is Status.COMPLETED and result.output == "done"
    assert [b.get("previous_response_id") for b in server.requests] == [None, "resp_fake_1", None]


def test_another_refusal_of_a_chained_call_is_not_retried() -> None:
    script = [call("lookup", {"q": "a"}, id="c1"), Fault(status=400), reply("done")]
    agent = loopwise.Agent(name="clerk", tools=[lookup])
    with FakeChatServer(script) as server:
        result = loopwise.run(agent, "look", model=server.model(api="responses", store=True))
    assert result.status is Status.ERROR and "HTTP 400" in (result.detail or "")
    assert len(server.requests) == 2


def test_a_conversation_that_turns_storage_on_sends_what_was_not_stored() -> None:
    agent = loopwise.Agent(name="clerk", tools=[lookup])
    script = _script(CASES["across turns"])
    with FakeChatServer(script) as server:
        first = loopwise.run(agent, "look", model=server.model(api="responses"), conversation="c")
        asked = len(server.requests)
        stored = server.model(api="responses", store=True)
        follow = loopwise.run(agent, "and then?", model=stored, conversation="c")
    assert first.status is follow.status is Status.COMPLETED, follow.detail
    sent = server.requests[asked]
    assert "previous_response_id" not in sent and sent["store"] is True
    assert sum(1 for i in sent["input"] if i.get("type") == "reasoning") == 3
    turn = next(e for e in follow.events if e.type == "model_call").data["turn"]
    assert "no earlier turn is stored" in turn["resent"]


CUT = "The refund of 5,000 was iss"
APIS = ["chat", "responses"]


def _limit(body: dict[str, Any]) -> Any:
    return body.get("max_output_tokens") or body.get("max_completion_tokens")


@pytest.mark.parametrize("api", APIS)
def test_a_cut_off_answer_is_no_answer(api: str) -> None:
    cut = loopwise.Turn(text=CUT, finish_reason="length", output_tokens=16)
    agent = loopwise.Agent(name="clerk", tools=[lookup])
    with FakeChatServer([cut]) as server:
        result = loopwise.run(agent, "refund?", model=server.model(api=api))
    assert result.status is Status.INVALID_OUTPUT and result.output != CUT
    assert "the answer was cut off at the output-token limit (16 tokens allowed" in (
        result.detail or ""
    )
    if api == "responses":
        assert server.requests[0]["include"] == ["reasoning.encrypted_content"]


@pytest.mark.parametrize("api", APIS)
def test_a_cut_off_tool_call_does_not_run(api: str) -> None:
    half = loopwise.ToolCall(id="c1", name="refund", arguments='{"order_id": "O-1", "amo')
    cut = loopwise.Turn(tool_calls=[half], finish_reason="length", output_tokens=12)
    REFUNDS.clear()
    agent = loopwise.Agent(name="desk", tools=[look_up_order, refund])
    with FakeChatServer([cut]) as server:
        result = loopwise.run(agent, "refund O-1", model=server.model(api=api))
    assert result.status is Status.INVALID_OUTPUT and not result.pending
    assert "a tool call was cut off" in (result.detail or "") and REFUNDS == []
    assert not [e for e in result.events if e.type == "tool_call"]


@pytest.mark.parametrize("api", APIS)
def test_a_cut_off_answer_is_asked_once_more_with_more_room(api: str) -> None:
    def script(request: loopwise.ModelRequest) -> Any:
        if request.max_output_tokens == 16:
            return loopwise.Turn(text=CUT, finish_reason="length", output_tokens=16)
        return loopwise.Turn(text=CUT + "ued.", finish_reason="stop", output_tokens=20)

    options = loopwise.OpenAIOptions(max_output_tokens=16, retry_cut_off=64)
    agent = loopwise.Agent(name="clerk", tools=[lookup])
    with FakeChatServer(script) as server:
        model = server.model(api=api, options=options)
        result = loopwise.run(agent, "refund?", model=model)
        small = loopwise.OpenAIOptions(max_output_tokens=16, retry_cut_off=17)
        script_cut = FakeChatServer([loopwise.Turn(text=CUT, finish_reason="length")] * 2)
    assert result.status is Status.COMPLETED and result.output == CUT + "ued."
    assert [_limit(b) for b in server.requests] == [16, 64]
    # Both calls were made and billed: the run counts both.
    assert result.usage.model_calls == 1 and result.usage.output_tokens == 36
    with script_cut as again:
        still = loopwise.run(agent, "refund?", model=again.model(api=api, options=small))
    assert still.status is Status.INVALID_OUTPUT and len(again.requests) == 2


def test_a_request_with_its_own_limit_is_not_asked_again() -> None:
    """A judge asks for one token on purpose: its length stop is its answer."""
    options = loopwise.OpenAIOptions(max_output_tokens=16, retry_cut_off=64)
    with FakeChatServer([loopwise.Turn(text="A", finish_reason="length")]) as server:
        model = server.model(options=options)

        async def ask() -> loopwise.Turn:
            request = loopwise.ModelRequest(messages=[{"role": "user", "content": "x"}])
            request.max_output_tokens = 1
            try:
                return await model.complete(request)
            finally:
                await model.aclose()

        turn = asyncio.run(ask())
    assert turn.finish_reason == "length" and len(server.requests) == 1


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"max_output_tokens": True}, "max_output_tokens"),
        ({"retry_cut_off": 64}, "retry_cut_off"),
        ({"max_output_tokens": 64, "retry_cut_off": 64}, "retry_cut_off"),
        ({"service_tier": "cheap"}, "service_tier"),
        ({"prompt_cache_key": "k" * 65}, "prompt_cache_key"),
        ({"poll_seconds": 0}, "poll_seconds"),
    ],
)
def test_openai_options_are_checked_when_built(given: dict[str, Any], named: str) -> None:
    with pytest.raises(loopwise.ConfigError) as error:
        loopwise.OpenAIOptions(**given)
    assert error.value.name == named


@pytest.mark.parametrize("api", APIS)
def test_the_prompt_cache_key_is_one_per_step_and_overridable(api: str) -> None:
    clerk = loopwise.Agent(name="clerk", instructions="You look things up.", tools=[lookup])
    other = loopwise.Agent(name="other", instructions="You file things.", tools=[lookup])
    script = _script(CASES["dots and colons"])
    per_step = loopwise.OpenAIOptions(prompt_cache_key="per-step", service_tier="flex")
    with FakeChatServer(script) as server:
        model = server.model(api=api, options=per_step)
        for agent in (clerk, clerk, other):
            assert loopwise.run(agent, "look", model=model).status is Status.COMPLETED
        keys = [b["prompt_cache_key"] for b in server.requests]
        assert {b["service_tier"] for b in server.requests} == {"flex"}
        mine = server.model(api=api, options=loopwise.OpenAIOptions(prompt_cache_key="desk-1"))
        loopwise.run(clerk, "look", model=mine)
        plain = server.model(api=api)  # not OpenAI's API: nothing is sent unasked
        loopwise.run(clerk, "look", model=plain)
    # The same step's calls share one key, across runs; another step has its own.
    assert keys[:4] == [keys[0]] * 4 and keys[4:] == [keys[4]] * 2 and keys[0] != keys[4]
    assert keys[0].startswith("lw-") and len(keys[0]) == 27
    assert [b["prompt_cache_key"] for b in server.requests[6:8]] == ["desk-1", "desk-1"]
    assert not any("prompt_cache_key" in b or "service_tier" in b for b in server.requests[8:])


DESK_MODULE = '''
import loopwise
from loopwise import gates


@loopwise.tool
def look_up_order(order_id: str) -> str:
    """Look an order up."""
    return f"{order_id}: 80.00, delivered broken"


@loopwise.tool(effect="irreversible", gate=gates.human())
def refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount} on {order_id}"


desk = loopwise.Agent(name="desk", tools=[look_up_order, refund])
'''


@pytest.fixture
def desk_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[tuple[Any, FakeChatServer, str]]:
    """The ``loopwise`` command in-process, in ``tmp_path``, against a fake server."""
    from loopwise.cli.main import main

    (tmp_path / "desk.py").write_text(DESK_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOOPWISE_API", raising=False)

    def cli(*args: str) -> tuple[int, Any, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, json.loads(out) if "--json" in args and out else out, err

    with FakeChatServer(_desk) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "fake-key")
        yield cli, server, str(tmp_path / "desk.py") + ":desk"


def test_a_plain_resume_speaks_the_api_the_run_began_with(desk_cli: Any) -> None:
    cli, server, spec = desk_cli
    start = ("run", spec, "--input", '"refund O-1"', "--model", "m", "--api", "responses")
    code, paused, _ = cli(*start, "--json")
    assert code == 1 and paused["status"] == "awaiting_approval"
    assert cli("approve", paused["run_id"], "--by", "alice")[0] == 0
    code, _, err = cli("resume", paused["run_id"], "--api", "chat", "--json")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "began on the 'responses' API" in err and "--api responses" in err
    code, done, _ = cli("resume", paused["run_id"], "--json")
    assert code == 0 and done["status"] == "completed", done
    assert len(server.requests) == 3 and all("input" in b for b in server.requests)
    sent = [i["id"] for i in server.requests[-1]["input"] if i.get("type") == "reasoning"]
    assert sent == ["rs_resp_fake_1", "rs_resp_fake_2"]


def test_a_queued_run_keeps_its_api_for_the_worker(desk_cli: Any) -> None:
    from loopwise.running.worker import awork

    cli, server, spec = desk_cli
    queue = ("run", spec, "--input", '"refund O-1"', "--model", "m", "--api", "responses")
    code, queued, _ = cli(*queue, "--queue", "--store", "runs.db", "--json")
    assert code == 0 and queued["status"] == "queued"
    with loopwise.open_store("runs.db") as st:

        async def work() -> None:
            stop = asyncio.Event()
            worker = asyncio.create_task(awork(st, poll_seconds=0.02, stop=stop))
            while st.get_run(queued["run_id"]).status == "queued":
                await asyncio.sleep(0.02)
            while st.get_run(queued["run_id"]).status == "running":
                await asyncio.sleep(0.02)
            stop.set()
            await worker

        asyncio.run(work())
        assert st.get_run(queued["run_id"]).status == "awaiting_approval"
    assert len(server.requests) == 2 and all("input" in b for b in server.requests)


def test_a_resume_by_model_name_keeps_the_store_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    agent = loopwise.Agent(name="desk", tools=[look_up_order, refund])
    store = str(tmp_path / "runs.db")
    with FakeChatServer(_desk) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "fake-key")
        model = loopwise.OpenAIModel("m", api="responses", store=True)
        paused = loopwise.run(agent, "refund O-1", model=model, store=store)
        loopwise.approve(paused.run_id, all_pending=True, by="alice", store=store)
        with pytest.raises(loopwise.ConfigError, match="began on the 'responses' API"):
            loopwise.resume(paused.run_id, step=agent, model=server.model(), store=store)
        done = loopwise.resume(paused.run_id, step=agent, store=store)
    assert done.status is Status.COMPLETED, done.detail
    # Resumed by its recorded name, API and store setting: the call chains to the last turn.
    assert server.requests[-1]["previous_response_id"] == "resp_fake_2"
    assert server.requests[-1]["store"] is True


@pytest.mark.parametrize("api", APIS)
def test_the_safety_identifier_is_the_callers_for_every_call_and_resume(
    api: str, tmp_path: Path
) -> None:
    agent = loopwise.Agent(name="desk", tools=[look_up_order, refund])
    store = str(tmp_path / "runs.db")
    with FakeChatServer(_desk) as server:
        model = server.model(api=api)
        paused = loopwise.run(
            agent, "refund O-1", model=model, store=store, safety_identifier="user-7f3a"
        )
        loopwise.approve(paused.run_id, all_pending=True, by="alice", store=store)
        done = loopwise.resume(paused.run_id, step=agent, model=model, store=store)
        other = loopwise.run(agent, "refund O-1", model=model, store=None)
    assert done.status is Status.COMPLETED, done.detail
    sent = [b.get("safety_identifier") for b in server.requests]
    # Both calls before the pause and the one after the resume; never one unasked.
    assert sent[:3] == ["user-7f3a"] * 3 and set(sent[3:]) == {None}
    assert other.status is Status.AWAITING_APPROVAL
    for wrong in ("", " ", "u" * 65, 7):
        with pytest.raises(loopwise.ConfigError, match="safety_identifier"):
            loopwise.run(agent, "x", model=model, store=None, safety_identifier=wrong)


@pytest.mark.parametrize("api", APIS)
def test_a_flex_call_is_priced_as_flex(api: str) -> None:
    from loopwise import Price, Pricing

    answer = loopwise.Turn(text="ok", input_tokens=1000, output_tokens=100, cached_tokens=600)
    prices = Pricing(extra={"fake-model": Price(input=1.0, output=2.0, cached_input=0.1, flex=0.5)})
    flex = loopwise.OpenAIOptions(service_tier="flex")
    with FakeChatServer([answer, answer]) as server:
        slow = loopwise.run(
            loopwise.Agent(name="a"),
            "hi",
            model=server.model(api=api, options=flex),
            pricing=prices,
        )
        fast = loopwise.run(
            loopwise.Agent(name="a"), "hi", model=server.model(api=api), pricing=prices
        )
    full = (400 * 1.0 + 600 * 0.1 + 100 * 2.0) / 1e6
    assert fast.usage.cost_usd == pytest.approx(full) and fast.usage.cached_tokens == 600
    assert slow.usage.cost_usd == pytest.approx(full / 2)
    assert [b.get("service_tier") for b in server.requests] == ["flex", None]
    turn = next(e for e in slow.events if e.type == "model_call").data["turn"]
    assert turn["service_tier"] == "flex"


def test_an_eval_on_the_flex_tier_is_priced_as_flex(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopwise.cli.main import main
    from loopwise.running.targets import load_target

    spec = "workflows/ticket_triage.py:triage"
    root = ROOT
    cases = (root / "workflows/data/tickets.jsonl").read_text().splitlines()[:2]
    (tmp_path / "cases.jsonl").write_text("\n".join(cases) + "\n")
    offline = load_target(spec).module.offline_model
    script = (offline if isinstance(offline, ScriptedModel) else offline()).script_entry

    def cost(server: FakeChatServer, *tier: str) -> float:
        argv = ["eval", str(root / spec), "--dataset", str(tmp_path / "cases.jsonl")]
        argv += ["--model", "m", "--price-per-mtok", "1,2", "--json", *tier]
        argv += ["--store", str(tmp_path / f"evals{len(tier)}.db")]
        assert main(argv) == 0
        report = json.loads(capsys.readouterr().out)
        (target,) = report["targets"]
        return float(target["metrics"]["cost_usd"]["mean"])

    with FakeChatServer(script) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "fake-key")
        full = cost(server)
        flex = cost(server, "--service-tier", "flex")
    assert [b.get("service_tier") for b in server.requests] == [None, None, "flex", "flex"]
    assert full > 0 and flex == pytest.approx(full / 2)
    assert main(["eval", spec, "--dataset", "x.jsonl", "--service-tier", "cheap"]) == 2
    err = capsys.readouterr().err
    assert "--service-tier" in err and err.count("\n") == 1


def test_a_chain_journaled_before_reasoning_was_sealed_heals_without_it() -> None:
    """A turn journaled with ``store=True`` before loopwise asked for encrypted reasoning
    names its reasoning by id only: a server that forgot the chain forgot that too."""
    old = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        ],
        "reasoning_items": [{"id": "rs_old", "type": "reasoning", "summary": []}],
        "response_id": "resp_old",
    }
    messages = [{"role": "user", "content": "look"}, old]
    messages.append({"role": "tool", "tool_call_id": "c1", "content": "found"})
    with FakeChatServer([reply("done")]) as server:
        model = server.model(api="responses", store=True)

        async def ask() -> loopwise.Turn:
            try:
                return await model.complete(loopwise.ModelRequest(messages=messages))
            finally:
                await model.aclose()

        turn = asyncio.run(ask())
    assert turn.text == "done" and "resp_old" in (turn.resent or "")
    refused, whole = server.requests
    assert refused["previous_response_id"] == "resp_old"
    assert [i.get("type", "message") for i in whole["input"]] == [
        "message",
        "function_call",
        "function_call_output",
    ]


@pytest.mark.parametrize(("api", "store"), SETTINGS)
def test_a_resumed_run_names_renamed_calls_by_the_servers_ids(api: str, store: bool) -> None:
    """The issue's failure: every resume of a stored chain sent the renamed ids again."""
    REFUNDS.clear()

    def desk(request: loopwise.ModelRequest) -> Any:
        done = [m["content"] for m in request.messages if m["role"] == "tool"]
        if not done:
            return call("look_up_order", {"order_id": "O-1"}, id="functions.look_up_order:0")
        if len(done) == 1:  # ids made of the function name and its index in the turn
            return call("refund", {"order_id": "O-1", "amount": 80.0}, id="functions.refund:0")
        return reply("done: " + done[-1])

    agent = loopwise.Agent(name="desk", tools=[look_up_order, refund])
    with FakeChatServer(desk) as server:
        model = server.model(api=api, store=store)
        paused = loopwise.run(agent, "refund O-1", model=model)
        assert paused.status is Status.AWAITING_APPROVAL, paused.detail
        loopwise.approve(paused.run_id, all_pending=True, by="alice")
        done = loopwise.resume(paused.run_id, step=agent, model=model)
    assert done.status is Status.COMPLETED, done.detail
    assert done.output == "done: refunded 80.0 on O-1" and REFUNDS == ["O-1"]
    assert server.call_ids.foreign == []
    keyed = {e.data["call_id"] for e in done.events if e.type == "tool_call"}
    assert keyed == {"call_1_1", "call_2_1"}


def test_openais_own_api_gets_a_per_step_cache_key_unasked() -> None:
    from loopwise.models.options import SentOptions

    request = loopwise.ModelRequest(messages=[{"role": "system", "content": "You file."}])
    sent = SentOptions(loopwise.OpenAIOptions())
    assert sent.of(request, "https://api.openai.com/v1")["prompt_cache_key"].startswith("lw-")
    assert "prompt_cache_key" not in sent.of(request, "http://127.0.0.1:8080/v1")
    none = SentOptions(loopwise.OpenAIOptions(prompt_cache_key=""))
    assert "prompt_cache_key" not in none.of(request, "https://api.openai.com/v1")


def test_a_background_call_is_polled_until_done() -> None:
    background = loopwise.OpenAIOptions(background=True, poll_seconds=0.01)
    agent = loopwise.Agent(name="clerk", tools=[lookup])
    with FakeChatServer(_script(CASES["dots and colons"])) as server:
        server.responses.background_polls = 3
        model = server.model(api="responses", store=True, options=background)
        result = loopwise.run(agent, "look", model=model)
    assert result.status is Status.COMPLETED and result.output == "done"
    assert [b["background"] for b in server.requests] == [True, True]
    assert server.requests[1]["previous_response_id"] == "resp_fake_1"
    assert server.responses.cancelled == []


def test_a_background_call_cut_off_by_the_budget_is_cancelled_on_the_server() -> None:
    background = loopwise.OpenAIOptions(background=True, poll_seconds=0.01)
    with FakeChatServer([reply("never seen")]) as server:
        server.responses.background_polls = 10**9  # the model never finishes
        model = server.model(api="responses", store=True, options=background)
        result = loopwise.run(
            loopwise.Agent(name="a"), "think", model=model, budget=loopwise.Budget(max_seconds=0.2)
        )
    assert result.status is Status.BUDGET_EXCEEDED
    assert server.responses.cancelled == ["resp_fake_1"]


@pytest.mark.parametrize(("api", "store"), [("chat", False), ("responses", False)])
def test_background_mode_needs_a_stored_responses_call(api: str, store: bool) -> None:
    background = loopwise.OpenAIOptions(background=True)
    with pytest.raises(loopwise.ConfigError, match="background mode needs") as error:
        loopwise.OpenAIModel("m", base_url="http://127.0.0.1:9/v1", api=api, store=store,
                             options=background)  # fmt: skip
    assert error.value.name == "background"
