"""Real OpenAI-compatible servers' quirks, through the real ``openai`` client.

``FakeChatServer(profile=...)`` answers the way one real server does (each profile names
its source); the model port must recognize a rejection by what the body names, whatever
the status, step down without spending SDK retries on it, send messages every server
accepts, and end runs with a short, clear detail.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel

import loopwise
import loopwise.errors
from loopwise import Agent, ConfigError, Judge, Status, Structured, Turn
from loopwise.cli.main import main
from loopwise.testing import PROFILES, FakeChatServer, Fault, call, reply


class Ticket(BaseModel):
    """A triage answer."""

    category: str
    urgency: int


TRIAGE = Structured("triage", Ticket, "Classify the ticket.")
GOOD = {"category": "billing", "urgency": 2}


@loopwise.tool
def lookup(order: str) -> str:
    """Look up an order by its id."""
    return f"order {order}: delivered"


AGENT = Agent(name="investigator", tools=[lookup], max_steps=4)


def _runs(step: Any, model: loopwise.OpenAIModel, times: int = 1) -> list[loopwise.RunResult]:
    """Runs in one event loop, closing the model's connections in it."""

    async def go() -> list[loopwise.RunResult]:
        try:
            return [await loopwise.arun(step, "x", model=model, store=None) for _ in range(times)]
        finally:
            await model.aclose()

    return asyncio.run(go())


def _rungs(server: FakeChatServer) -> list[str]:
    out = []
    for body in server.requests:
        fmt = body.get("response_format")
        if fmt is not None:
            out.append("json_object_schema" if "schema" in fmt else fmt["type"])
        else:
            out.append("tool" if "tool_choice" in body else "prompt")
    return out


def test_every_profile_names_its_source() -> None:
    assert {"llama-cpp-python", "llama-server", "vllm", "ollama", "lm-studio"} <= set(PROFILES)
    assert all(p.source and p.name == name for name, p in PROFILES.items())


def test_a_500_naming_response_format_steps_down_with_no_retry_spent() -> None:
    with FakeChatServer(profile="llama-cpp-python") as server:
        model = server.model(max_retries=2)
        first, second = _runs(TRIAGE, model, times=2)
    assert first.status == second.status == "completed"
    assert isinstance(first.output, Ticket)
    # One rejected request (not retried by the SDK), then the schema-carrying json_object,
    # which the second run starts at.
    assert _rungs(server) == ["json_schema", "json_object_schema", "json_object_schema"]
    assert model.structured_modes == {model.endpoint: "json_object_schema"}
    assert first.usage.model_calls == 1


def test_a_raw_newline_inside_a_constrained_string_is_read_not_re_asked() -> None:
    """llama-cpp-python's JSON grammar lets control characters into strings unescaped
    (make compat: the triage summary had a newline, three attempts, invalid_output)."""
    answer = '{"category": "billing\n\tdesk", "urgency": 2}'
    with FakeChatServer(lambda request: reply(answer), profile="llama-cpp-python") as server:
        (result,) = _runs(TRIAGE, server.model())
    assert result.status == "completed" and result.usage.model_calls == 1
    assert result.output == Ticket(category="billing\n\tdesk", urgency=2)


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ('{"category": "bill\ning", "urgency": 9', "Invalid JSON"),
        ('{"category": "bill\ning", "urgency": "x"}', "urgency"),
        ("[" * 100_000 + "]" * 100_000, "Invalid JSON"),
    ],
)
def test_a_repaired_answer_is_still_validated(answer: str, why: str) -> None:
    with FakeChatServer(lambda request: reply(answer), profile="llama-cpp-python") as server:
        (result,) = _runs(TRIAGE, server.model())
    assert result.status == "invalid_output" and why in (result.detail or "")


def test_a_string_error_body_naming_response_format_is_recognized() -> None:
    with FakeChatServer(profile="lm-studio") as server:
        model = server.model(max_retries=2)
        model.structured_mode = "json_object_schema"
        (result,) = _runs(TRIAGE, model)
    assert result.status == "completed"
    assert _rungs(server) == ["json_object_schema", "json_object", "tool"]


def test_a_pinned_rung_skips_the_stronger_ones_and_a_forced_tool_works_on_vllm() -> None:
    with FakeChatServer(profile="vllm") as server:
        model = server.model()
        model.structured_mode = "tool"
        (result,) = _runs(TRIAGE, model)
    assert result.status == "completed" and isinstance(result.output, Ticket)
    assert _rungs(server) == ["tool"]
    assert server.requests[0]["tool_choice"]["function"]["name"] == "Ticket"


def test_vllm_without_auto_tool_choice_ends_error_naming_the_server_flag() -> None:
    with FakeChatServer(profile="vllm") as server:
        (result,) = _runs(AGENT, server.model(max_retries=2))
    assert result.status == "error" and result.usage.model_calls == 0
    detail = result.detail or ""
    assert "HTTP 400" in detail and "--enable-auto-tool-choice" in detail and "\n" not in detail
    assert len(server.requests) == 1  # a 400 is not retried


def test_ollama_ignores_tool_choice_and_the_answer_still_validates() -> None:
    with FakeChatServer(profile="ollama") as server:
        model = server.model()
        model.structured_mode = "tool"
        (result,) = _runs(TRIAGE, model)
    assert result.status == "completed"
    assert "tool_choice" in server.requests[0]
    assert server.scripted.last_request is not None
    assert server.scripted.last_request.tool_choice is None  # dropped before answering


def test_an_agent_round_trip_works_on_a_server_that_needs_string_content() -> None:
    script = [call("lookup", {"order": "O-1"}, id="c1"), reply("It was delivered.")]
    with FakeChatServer(script, profile="llama-cpp-python") as server:
        (result,) = _runs(AGENT, server.model())
    assert result.status == "completed" and result.output == "It was delivered."
    sent = server.requests[1]["messages"]
    assistant = next(m for m in sent if m["role"] == "assistant")
    assert assistant["content"] == "" and assistant["tool_calls"][0]["id"] == "c1"


def test_an_agent_offers_its_tools_to_a_server_that_reads_no_choice_as_no_tools() -> None:
    """llama-cpp-python's chatml-function-calling handler drops tools sent without a
    tool_choice (measured by make compat: the agent never saw them); OpenAI's default
    with tools is "auto", so the port says so."""

    def script(request: loopwise.ModelRequest) -> Any:
        if not request.tools:
            return reply("I cannot look anything up.")
        done = any(m["role"] == "tool" for m in request.messages)
        return reply("It was delivered.") if done else call("lookup", {"order": "O-1"})

    with FakeChatServer(script, profile="llama-cpp-python") as server:
        (result,) = _runs(AGENT, server.model())
    assert result.status == "completed" and result.output == "It was delivered."
    assert result.usage.tool_calls == 1
    assert [body.get("tool_choice") for body in server.requests] == ["auto", "auto"]


# llama-cpp-python 0.3.36 (make compat, 2026-12-02): the triage judge's first category
# question, as the server answered it. Gemma 3 270M answered "{" (it echoed the ticket);
# of the labels A-E only "A" was among the 20 alternatives, with 1.4% of the mass.
GEMMA_CATEGORY = {
    "{": -1.42,
    "<": -1.62,
    "You": -3.09,
    "Answer": -3.61,
    "The": -3.76,
    "If": -3.96,
    "I": -4.11,
    "This": -4.11,
    "A": -4.29,
    "What": -4.35,
    "Which": -4.36,
    "1": -4.61,
    "Your": -4.61,
    "User": -4.66,
    "In": -4.85,
    "Use": -5.06,
    "[": -5.17,
    "Provide": -5.24,
    ">": -5.31,
    "Please": -5.33,
}
CATEGORIES = Literal["billing", "technical", "account", "shipping", "other"]


def _answers_on(request: Any) -> Turn:
    """One token when asked for one; without a limit the answer runs on, as the server's."""
    text = "{" if request.max_output_tokens == 1 else '{"subject": "I have a ticket for' * 4
    return Turn(text=text, logprobs=[GEMMA_CATEGORY])


def test_a_label_listed_alone_is_not_sure_and_a_dropped_limit_goes_as_max_tokens() -> None:
    judge = Judge("category", CATEGORIES)
    with FakeChatServer(_answers_on, profile="llama-cpp-python", decisions=False) as server:
        model = server.model()
        first = loopwise.run(judge, "x", model=model)
        second = loopwise.run(judge, "x", model=model)
    assert first.status is second.status is Status.COMPLETED, first.detail
    ruling = first.output
    assert ruling.answer == "billing" and ruling.backend == "logprobs"
    # Counted as 0, the unlisted labels would make "billing" sure (1.0). Each counts as
    # likely as the least listed token; and with 97% of the probability on tokens that
    # are no label at all, the confidence is unknown (counted unsure), with the reason.
    billing = ruling.probabilities["category"]["billing"]
    assert billing == pytest.approx(0.0137 / (0.0137 + 4 * 0.00483), abs=0.01)
    assert ruling.confidence is None
    assert "on labels it did not declare" in (ruling.unknown_reason or "")
    assert [r.get("max_completion_tokens") for r in server.requests] == [1, None]
    assert [r.get("max_tokens") for r in server.requests] == [None, 1]
    assert [e.data["output_tokens"] for e in second.events if e.type == "model_call"] == [1]


@pytest.mark.parametrize("content", ["missing", None, [{"type": "text", "text": "hi"}]])
def test_the_llama_cpp_python_profile_rejects_what_its_templates_reject(content: Any) -> None:
    assistant: dict[str, Any] = {"role": "assistant", "tool_calls": []}
    if content != "missing":
        assistant["content"] = content
    request = loopwise.ModelRequest(messages=[{"role": "user", "content": "x"}, assistant])
    with FakeChatServer(profile="llama-cpp-python") as server:
        model = server.model()

        async def go() -> BaseException | None:
            try:
                await model.complete(request)
            except loopwise.ModelAPIError as e:
                return e
            finally:
                await model.aclose()
            return None

        error = asyncio.run(go())
    assert isinstance(error, loopwise.ModelAPIError) and error.status_code == 500
    assert "'dict object' has no attribute 'content'" in str(error)
    assert "Traceback" not in str(error) and "Traceback" in (error.body or "")


def test_an_unrecognizable_rejection_is_an_error_not_a_step_down() -> None:
    """llama-cpp-python refuses tool_choice "required" with an empty 500: nothing named,
    so it is not taken for a rejection (pin a rung for such servers)."""
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {}}}
    request = loopwise.ModelRequest(
        messages=[{"role": "user", "content": "x"}], tools=[tool], tool_choice="required"
    )
    with FakeChatServer(profile="llama-cpp-python") as server:
        model = server.model(max_retries=1)

        async def go() -> BaseException | None:
            try:
                await model.complete(request)
            except loopwise.ModelAPIError as e:
                return e
            finally:
                await model.aclose()
            return None

        error = asyncio.run(go())
    assert isinstance(error, loopwise.ModelAPIError)
    assert not isinstance(error, loopwise.errors.ResponseFormatRejected)
    assert error.status_code == 500 and len(server.requests) == 2  # the SDK retried a 500


def test_tool_arguments_sent_as_an_object_reach_the_tool() -> None:
    script = [call("lookup", {"order": "O-7"}), reply("done")]
    with FakeChatServer(script, profile="llama-server") as server:
        (result,) = _runs(AGENT, server.model())
    assert result.status == "completed"
    (tool_result,) = [e for e in result.events if e.type == "tool_result"]
    assert "order O-7: delivered" in json.dumps(tool_result.data)


def test_an_error_detail_is_one_short_line_and_the_event_keeps_the_body() -> None:
    body = {
        "error": {
            "message": 'boom happened\nTraceback (most recent call last):\n  File "/srv/x.py"',
            "type": "internal_server_error",
        }
    }
    with FakeChatServer([Fault(status=500, body=body)]) as server:
        (result,) = _runs(TRIAGE, server.model())
    assert result.status == "error"
    assert result.detail == "model API error: HTTP 500 internal_server_error: boom happened"
    assert "Traceback" in result.events[-1].data["error_body"]


def test_a_server_that_dies_mid_run_ends_with_server_unreachable() -> None:
    script = [call("lookup", {"order": "O-1"}), Fault(crash=True)]
    with FakeChatServer(script) as server:
        (result,) = _runs(AGENT, server.model(max_retries=2))
    assert server.dead and result.status == "error"
    assert "server unreachable" in (result.detail or "")
    # the error names where it looked, so a wrong OPENAI_BASE_URL is seen at once
    assert f"at {server.base_url.rstrip('/')}/chat/completions" in (result.detail or "")
    assert result.usage.model_calls == 1 and len(server.requests) == 2


def test_a_fake_server_model_survives_two_sync_runs() -> None:
    with FakeChatServer() as server:
        model = server.model()
        first = loopwise.run(TRIAGE, "x", model=model, store=None)
        second = loopwise.run(TRIAGE, "y", model=model, store=None)
    assert first.status == second.status == "completed"


def test_an_unknown_structured_mode_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"structured_mode: unknown .*'xml'"):
        loopwise.OpenAIModel("m", base_url="http://127.0.0.1:9/v1", structured_mode="xml")
    monkeypatch.setenv("LOOPWISE_STRUCTURED_MODE", "xml")
    with pytest.raises(ConfigError, match="LOOPWISE_STRUCTURED_MODE"):
        loopwise.OpenAIModel("m", base_url="http://127.0.0.1:9/v1")


def test_the_environment_pins_a_rung(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPWISE_STRUCTURED_MODE", "json_object")
    with FakeChatServer(lambda request: reply(GOOD)) as server:
        (result,) = _runs(TRIAGE, server.model())
    assert result.status == "completed" and _rungs(server) == ["json_object"]


def _cli_env(monkeypatch: pytest.MonkeyPatch, server: FakeChatServer, tmp: Path) -> str:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "fake-key")
    module = tmp / "triage_step.py"
    module.write_text(
        "from pydantic import BaseModel\nfrom loopwise import Structured\n\n\n"
        "class Ticket(BaseModel):\n    category: str\n    urgency: int\n\n\n"
        'triage = Structured("triage", Ticket, "Classify the ticket.")\n'
    )
    return f"{module}:triage"


def test_the_cli_pins_a_rung_with_structured_mode(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with FakeChatServer() as server:
        target = _cli_env(monkeypatch, server, tmp_path)
        argv = ["run", target, "--model", "fake-model", "--input", '"x"', "--json"]
        assert main([*argv, "--structured-mode", "tool"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "completed"
    assert _rungs(server) == ["tool"]
    assert main([*argv, "--structured-mode", "xml"]) == 2
    err = capsys.readouterr().err
    assert "--structured-mode" in err and err.count("\n") == 1


def test_resume_pins_a_rung_with_structured_mode(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = str(tmp_path / "runs.db")
    with FakeChatServer() as server:
        target = _cli_env(monkeypatch, server, tmp_path)
        # The first attempt finds no server (the run ends `error`, resumable)...
        monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
        argv = ["run", target, "--model", "fake-model", "--input", '"x"', "--store", store]
        assert main([*argv, "--json"]) == 1
        run_id = json.loads(capsys.readouterr().out)["run_id"]
        # ...and its resume, on the server that is there, starts at the pinned rung.
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        resumed = ["resume", run_id, "--store", store, "--json", "--structured-mode", "tool"]
        assert main(resumed) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "completed"
    assert _rungs(server) == ["tool"]


def test_eval_with_every_run_failed_exits_0_and_writes_its_report(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    dataset = tmp_path / "two.jsonl"
    dataset.write_text(
        "".join(json.dumps({"input": f"t{i}", "expected": GOOD}) + "\n" for i in range(2))
    )
    failing = tmp_path / "failing.py"
    failing.write_text(
        "import loopwise\n\n\n@loopwise.step\nasync def early(x: str) -> str:\n"
        '    raise RuntimeError("down before any call")\n\n\n'
        "@loopwise.step\nasync def late(x: str, ctx: loopwise.Context) -> str:\n"
        '    await ctx.call_model(loopwise.ModelRequest(messages=[{"role": "user", '
        '"content": "hi " * 40}]))\n    raise RuntimeError("down after a call")\n'
    )
    report = tmp_path / "report.html"
    store = str(tmp_path / "s.db")
    argv = ["eval", "--model", "scripted", f"{failing}:early", f"{failing}:late",
            "--dataset", str(dataset), "--report", str(report), "--store", store]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert report.is_file()
    assert "every run failed (error ×2)" in out and "no recommendation" in out
