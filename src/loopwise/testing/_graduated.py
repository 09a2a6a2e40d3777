"""An offline model for a graduated workflow: :func:`graduated_model`.

A workflow that ``loopwise graduate`` wrote shows each of its structured calls the run so
far as JSON (:class:`loopwise.Graduated`): ``{"task", "input", "calls": [[{"tool",
"args", "result"}, ...], ...]}``, with ``tool`` (and ``many``) for an ``arguments`` task
and ``branches`` (label → the tools the branch calls first) for a ``route`` task. This
model rebuilds the agent's transcript from it — the question, then each turn's tool calls
and results — asks the agent's own scripted model what it would do next, and answers the
workflow's question with that: the arguments the agent passed, the branch whose tools the
agent called, the answer the agent wrote. So ``--model scripted`` runs the graduated
workflow as the agent would have run, offline.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from loopwise.architectures.agent import FINAL_ANSWER
from loopwise.errors import ConfigError
from loopwise.models.port import Message, Model, ModelRequest, Turn
from loopwise.models.scripted import Fault, ScriptedModel, ScriptEntry, as_turn, reply
from loopwise.tools.call_text import render_content

__all__ = ["graduated_model", "is_graduated_call"]


def graduated_model(agent_model: ScriptedModel | Callable[[], ScriptedModel]) -> Model:
    """A scripted model answering a graduated workflow's calls as ``agent_model`` (the
    agent module's ``offline_model``, or the function that makes it) would have.

    Raises :class:`~loopwise.errors.ConfigError` when the agent's model is not a
    :class:`~loopwise.testing.ScriptedModel` (only an in-process script can be asked).
    """
    made = agent_model() if not isinstance(agent_model, ScriptedModel) else agent_model
    if not isinstance(made, ScriptedModel):
        raise ConfigError(
            f"graduated_model needs the agent's ScriptedModel, not {type(made).__name__}"
        )
    return ScriptedModel(lambda request: _answer(made, request))


def _answer(agent: ScriptedModel, request: ModelRequest) -> ScriptEntry:
    asked = _shown(request)
    if asked is None:
        return reply("{}")  # not a graduated workflow's call: nothing to answer with
    entry = agent.script_entry(
        ModelRequest(messages=_transcript(request, asked), deps=request.deps)
    )
    if isinstance(entry, Fault):
        return entry  # the workflow's call fails as the agent's would (ScriptedModel raises it)
    turn = as_turn(entry)
    task = asked.get("task")
    if task == "arguments":
        return reply(_arguments(turn, str(asked.get("tool")), bool(asked.get("many"))))
    if task == "route":
        return reply({"branch": _branch(turn, asked.get("branches") or {})})
    return reply(_final(turn, request.output_schema or {}))


def is_graduated_call(request: ModelRequest) -> bool:
    """Whether ``request`` is one of a graduated workflow's structured calls."""
    return _shown(request) is not None


def _shown(request: ModelRequest) -> dict[str, Any] | None:
    users = [m for m in request.messages if m.get("role") == "user"]
    try:
        doc = json.loads(str(users[0].get("content"))) if users else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and "task" in doc and "calls" in doc else None


def _transcript(request: ModelRequest, asked: dict[str, Any]) -> list[Message]:
    """The agent's transcript at this point: the question, then each turn's calls."""
    system = next((m for m in request.messages if m.get("role") == "system"), None)
    question = asked.get("input")
    messages: list[Message] = [
        {"role": "system", "content": str(system.get("content")) if system else ""},
        {
            "role": "user",
            "content": question if isinstance(question, str) else json.dumps(question),
        },
    ]
    for i, turn in enumerate(asked.get("calls") or (), 1):
        ids = [f"g{i}-{j}" for j in range(len(turn))]
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": c["tool"], "arguments": json.dumps(c["args"])},
                    }
                    for call_id, c in zip(ids, turn, strict=True)
                ],
            }
        )
        messages += [
            {"role": "tool", "tool_call_id": call_id, "content": render_content(c["result"])}
            for call_id, c in zip(ids, turn, strict=True)
        ]
    return messages


def _arguments(turn: Turn, tool: str, many: bool) -> Any:
    found = [json.loads(c.arguments or "{}") for c in turn.tool_calls if c.name == tool]
    if many:
        return {"calls": found}
    return found[0] if found else {}


def _branch(turn: Turn, branches: dict[str, list[str]]) -> str:
    called = {c.name for c in turn.tool_calls}
    for label, tools in branches.items():
        if set(tools) == called:
            return label
    best = max(branches, key=lambda k: len(called & set(branches[k])), default="")
    return best


def _final(turn: Turn, schema: dict[str, Any]) -> Any:
    for call in turn.tool_calls:  # an agent with a structured answer calls final_answer
        if call.name == FINAL_ANSWER:
            return json.loads(call.arguments or "{}")
    if turn.text is None:
        return {}  # the agent would call more tools here, not answer: nothing valid to say
    if set(schema.get("properties") or {}) == {"answer"}:
        return {"answer": turn.text}
    return turn.text
