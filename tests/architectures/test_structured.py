"""The structured-output step through the public API: validation retries, refusals, the ladder."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

import pydantic
import pytest

import loopwise
from loopwise import ConfigError, ModelRequest, Status, Structured
from loopwise.testing import FakeChatServer, ScriptedModel, call, refuse, reply
from tests.support import ROOT


class Ticket(pydantic.BaseModel):
    """A triaged support ticket."""

    summary: str
    category: Literal["billing", "technical", "other"]
    urgency: int = pydantic.Field(ge=1, le=5)


GOOD = {"summary": "card charged twice", "category": "billing", "urgency": 4}
triage = Structured("triage", Ticket, "Summarise the ticket, pick a category, rate urgency 1-5.")


def test_offline_scripted_model_gives_a_validated_instance() -> None:
    result = loopwise.run(triage, "I was charged twice", model=ScriptedModel())
    assert result.status == "completed"
    assert isinstance(result.output, Ticket)
    assert result.usage.model_calls == 1
    assert triage.output_type is Ticket and triage.input_type is Any


def test_first_request_carries_instructions_input_and_strict_schema() -> None:
    model = ScriptedModel([reply(GOOD)])
    result = loopwise.run(triage, "I was charged twice", model=model)
    assert result.output == Ticket(**GOOD)
    request = model.requests[0]
    assert request.messages == [
        {"role": "system", "content": triage.instructions},
        {"role": "user", "content": "I was charged twice"},
    ]
    assert request.response_format is not None
    assert request.response_format["type"] == "json_schema"
    assert request.response_format["json_schema"]["strict"] is True
    assert request.output_schema == request.response_format["json_schema"]["schema"]
    assert request.output_schema["additionalProperties"] is False


def test_broken_json_is_re_asked_with_the_error() -> None:
    model = ScriptedModel([reply('{"summary": "card charged'), reply(GOOD)])
    result = loopwise.run(triage, "I was charged twice", model=model)
    assert result.status == "completed" and result.output == Ticket(**GOOD)
    assert result.usage.model_calls == 2
    second = model.requests[1].messages
    assert second[2] == {"role": "assistant", "content": '{"summary": "card charged'}
    assert second[3]["role"] == "user" and "Invalid JSON" in second[3]["content"]


def test_schema_violation_feedback_names_the_field() -> None:
    model = ScriptedModel([reply({**GOOD, "urgency": 9}), reply(GOOD)])
    result = loopwise.run(triage, "x", model=model)
    assert result.status == "completed"
    assert "urgency:" in model.requests[1].messages[-1]["content"]


def test_never_valid_ends_invalid_output_after_the_retries() -> None:
    strict = Structured("strict", Ticket, "Answer.", max_retries=1)
    model = ScriptedModel([reply("no"), reply({"summary": 1})])
    result = loopwise.run(strict, "x", model=model)
    assert result.status == Status.INVALID_OUTPUT
    assert result.usage.model_calls == 2
    assert result.detail is not None and "after 2 attempts" in result.detail
    assert result.output is None


def test_refusal_ends_the_run_refused() -> None:
    result = loopwise.run(triage, "x", model=ScriptedModel([refuse("not allowed")]))
    assert result.status == Status.REFUSED
    assert result.detail is not None and "not allowed" in result.detail


def test_content_filter_stop_is_a_refusal() -> None:
    turn = loopwise.Turn(text="", finish_reason="content_filter")
    result = loopwise.run(triage, "x", model=ScriptedModel([turn]))
    assert result.status == Status.REFUSED


def test_code_fenced_answer_is_accepted() -> None:
    fenced = "```json\n" + json.dumps(GOOD) + "\n```"
    result = loopwise.run(triage, "x", model=ScriptedModel([reply(fenced)]))
    assert result.status == "completed"


def test_input_rendering_and_custom_prompt() -> None:
    model = ScriptedModel()
    loopwise.run(triage, {"subject": "Refund", "body": "twice"}, model=model)
    assert json.loads(model.requests[0].messages[1]["content"]) == {
        "subject": "Refund",
        "body": "twice",
    }
    loopwise.run(triage, Ticket(**GOOD), model=model)
    assert json.loads(model.requests[1].messages[1]["content"]) == GOOD
    custom = Structured("c", Ticket, "Answer.", prompt=lambda t: f"Subject: {t['subject']}")
    loopwise.run(custom, {"subject": "Refund"}, model=model)
    assert model.requests[2].messages[1]["content"] == "Subject: Refund"


def test_declaration_mistakes_raise() -> None:
    with pytest.raises(ConfigError, match="pydantic model class"):
        Structured("bad", dict, "x")  # type: ignore[type-var]
    with pytest.raises(ConfigError, match="max_retries"):
        Structured("bad", Ticket, "x", max_retries=-1)


def test_structured_step_inside_a_function_step_shares_the_run() -> None:
    @loopwise.step
    async def route(text: str, ctx: loopwise.Context) -> str:
        ticket = await ctx.run_step(triage, text)
        return "payments" if ticket.category == "billing" else "support"

    result = loopwise.run(route, "x", model=ScriptedModel([reply(GOOD)]))
    assert result.output == "payments" and result.usage.model_calls == 1
    assert [e.step for e in result.events if e.type == "model_call"] == ["route/triage"]


def _modes(server: FakeChatServer) -> list[str]:
    """The rung each request to the server used."""
    out = []
    for body in server.requests:
        if "response_format" in body:
            fmt = body["response_format"]
            out.append("json_object_schema" if "schema" in fmt else fmt["type"])
        elif "tool_choice" in body:
            out.append("tool")
        else:
            out.append("prompt")
    return out


def _answer(request: ModelRequest) -> Any:
    """A server script that answers any rung: a tool call when forced, else JSON text."""
    if request.tool_choice is not None:
        return call("Ticket", GOOD)
    return reply(GOOD)


async def _twice(step: Structured[Ticket], model: loopwise.OpenAIModel) -> list[loopwise.RunResult]:
    # One event loop: the SDK client's connection pool belongs to the loop that opened it.
    try:
        return [await loopwise.arun(step, "x", model=model) for _ in range(2)]
    finally:
        await model.aclose()


async def _once(step: Structured[Ticket], model: loopwise.OpenAIModel) -> loopwise.RunResult:
    try:
        return await loopwise.arun(step, "x", model=model)
    finally:
        await model.aclose()


def test_server_rejecting_json_schema_steps_down_and_remembers() -> None:
    with FakeChatServer(_answer, reject={"json_schema"}) as server:
        model = server.model()
        first, second = asyncio.run(_twice(triage, model))
    assert first.status == second.status == "completed"
    assert first.output == Ticket(**GOOD)
    # The rejected call is not a model call; the second run goes straight to the
    # json_object rung that carries the schema (constrained decoding where honoured).
    assert first.usage.model_calls == second.usage.model_calls == 1
    assert _modes(server) == ["json_schema", "json_object_schema", "json_object_schema"]
    assert model.structured_modes == {model.endpoint: "json_object_schema"}
    fmt = server.requests[1]["response_format"]
    assert fmt == {"type": "json_object", "schema": triage.schema}
    assert "JSON schema" in server.requests[1]["messages"][0]["content"]


def test_server_rejecting_the_schema_form_steps_down_to_plain_json_object() -> None:
    with FakeChatServer(_answer, reject={"json_schema", "json_object_schema"}) as server:
        model = server.model()
        first, second = asyncio.run(_twice(triage, model))
    assert first.output == second.output == Ticket(**GOOD)
    assert _modes(server) == ["json_schema", "json_object_schema", "json_object", "json_object"]
    assert model.structured_modes == {model.endpoint: "json_object"}


def test_ladder_reaches_the_forced_tool_and_then_the_prompt() -> None:
    no_json = {"json_schema", "json_object_schema", "json_object"}
    with FakeChatServer(_answer, reject=no_json) as server:
        model = server.model()
        results = asyncio.run(_twice(triage, model))
    assert [r.status for r in results] == ["completed", "completed"]
    assert _modes(server) == ["json_schema", "json_object_schema", "json_object", "tool", "tool"]
    assert server.requests[3]["tool_choice"] == {"type": "function", "function": {"name": "Ticket"}}

    everything = {*no_json, "tool_choice"}
    with FakeChatServer(_answer, reject=everything) as server:
        model = server.model()
        results = asyncio.run(_twice(triage, model))
    assert [r.output for r in results] == [Ticket(**GOOD)] * 2
    assert _modes(server) == [
        "json_schema", "json_object_schema", "json_object", "tool", "prompt", "prompt"
    ]  # fmt: skip
    assert model.structured_modes[model.endpoint] == "prompt"


def test_memory_is_per_endpoint() -> None:
    with (
        FakeChatServer(_answer, reject={"json_schema"}) as picky,
        FakeChatServer(_answer) as easy,
    ):
        picky_model, easy_model = picky.model(), easy.model()
        asyncio.run(_twice(triage, picky_model))
        asyncio.run(_twice(triage, easy_model))
    assert _modes(easy) == ["json_schema", "json_schema"]
    assert picky_model.structured_modes != easy_model.structured_modes


def test_tool_rung_validation_error_answers_the_call_id() -> None:
    def script(request: ModelRequest) -> Any:
        if request.tool_choice is None:
            return reply(GOOD)
        bad = not any(m["role"] == "tool" for m in request.messages)
        return call("Ticket", {**GOOD, "urgency": 7} if bad else GOOD, id="call_a")

    with FakeChatServer(
        script, reject={"json_schema", "json_object_schema", "json_object"}
    ) as server:
        result = asyncio.run(_once(triage, server.model()))
    assert result.status == "completed" and result.usage.model_calls == 2
    retry = server.requests[-1]["messages"]
    assert retry[-1]["role"] == "tool" and retry[-1]["tool_call_id"] == "call_a"
    assert "urgency" in retry[-1]["content"]


def test_readme_structured_output_example_runs() -> None:
    import re

    readme = (ROOT / "docs/guides/structured-output.md").read_text()
    section = readme.split("# Structured output", 1)[1]
    block = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    exec(compile(block, "README.md#structured-output", "exec"), {"__name__": "readme"})


def test_one_openai_model_serves_several_sync_runs() -> None:
    """Each sync run has its own event loop; the model's connection pool follows it."""

    @loopwise.step
    async def ask(x: str, ctx: loopwise.Context) -> str:
        turn = await ctx.call_model(ModelRequest(messages=[{"role": "user", "content": x}]))
        return str(turn.text)

    with FakeChatServer(["one", "two", "three"]) as server:
        model = loopwise.OpenAIModel("fake", base_url=server.base_url, api_key="k")
        outputs = [loopwise.run(ask, "hi", model=model, store=None).output for _ in range(3)]
    assert outputs == ["one", "two", "three"]
