"""The model port's own costs: the prompt-size estimate and what the scripted model keeps."""

from __future__ import annotations

from typing import Any

import pytest

import loopwise
import loopwise.models.port
from loopwise import Agent, Budget, ModelRequest
from loopwise.testing import ScriptedModel, call, reply


def _transcript(n: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You look things up."}]
    for i in range(n):
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": f"c{i}", "type": "function",
                     "function": {"name": "look", "arguments": f'{{"n": {i}}}'}}
                ],
            }
        )  # fmt: skip
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"item {i}"})
    return messages


def _from_scratch(messages: list[dict[str, Any]]) -> int:
    return loopwise.models.port._PromptSizes().messages(messages)


def test_the_prompt_size_measures_only_the_new_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    measured: list[int] = []
    real = loopwise.models.port.message_chars

    def counting(message: dict[str, Any]) -> int:
        measured.append(1)
        return real(message)

    monkeypatch.setattr(loopwise.models.port, "message_chars", counting)
    messages = _transcript(1000)
    first = ModelRequest(messages=list(messages)).prompt_chars()
    assert len(measured) == len(messages)
    measured.clear()
    messages.append({"role": "user", "content": "and now?"})
    second = ModelRequest(messages=list(messages)).prompt_chars()
    assert len(measured) == 1 and second == first + len("and now?")


def test_a_compacted_transcript_is_measured_again() -> None:
    messages = _transcript(50)
    ModelRequest(messages=list(messages)).prompt_chars()
    compacted = [*messages[:3], {**messages[3], "content": "x" * 500}, *messages[4:]]
    assert ModelRequest(messages=compacted).prompt_chars() == _from_scratch(compacted)
    shorter = messages[:10]
    assert ModelRequest(messages=shorter).prompt_chars() == _from_scratch(shorter)


def test_the_scripted_model_keeps_a_bounded_record() -> None:
    @loopwise.tool
    def look(n: int) -> str:
        """Look at item n."""
        return f"item {n}"

    script = [call("look", {"n": i}) for i in range(149)] + [reply("done")]
    model = ScriptedModel(script, keep=20)
    agent = Agent(name="looker", tools=[look], max_steps=200)
    result = loopwise.run(agent, "go", model=model, store=None, budget=Budget(max_tokens=10**9))
    assert result.status == "completed" and result.usage.model_calls == 150
    assert model.calls == 150 and len(model.requests) == 20
    assert model.last_request is model.requests[-1]
    assert model.last_request.messages[-1]["role"] == "tool"


def test_an_example_offline_model_does_not_grow_across_runs() -> None:
    from loopwise.running.targets import load_target, model_for

    target = load_target("workflows/ticket_triage.py:triage")
    model = model_for(target, "scripted")
    ticket = {"subject": "Charged twice", "body": "Two charges for one invoice."}
    for _ in range(120):
        assert loopwise.run(target.step, ticket, model=model, store=None).status == "completed"
    assert isinstance(model, ScriptedModel)
    assert model.calls >= 120 and len(model.requests) <= 100
