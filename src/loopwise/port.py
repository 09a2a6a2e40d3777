"""The model port's contract: the :class:`Model` protocol and the values that cross it.

A model is anything with ``name`` and ``async complete(request) -> Turn``. This module
holds only that contract (no SDK import), so the scripted model, the cassette and the
core can build requests and turns without loading the ``openai`` client;
:mod:`loopwise.model` adapts it to Chat Completions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "Message",
    "Model",
    "ModelRequest",
    "StructuredMode",
    "ToolCall",
    "Turn",
]

Message = dict[str, Any]
"""A Chat Completions message (``{"role": ..., "content": ...}``)."""

StructuredMode = Literal["json_schema", "json_object", "tool", "prompt"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall:
    """One tool call the model asked for, arguments still raw."""

    id: str
    """The call id a ``tool`` message must answer."""
    name: str
    """The tool name as the model wrote it (it may not exist)."""
    arguments: str
    """The raw argument string (it may not be JSON)."""


@dataclass(kw_only=True, slots=True)
class Turn:
    """One assistant turn: text or tool calls, plus why it stopped and what it cost."""

    text: str | None = None
    """The assistant's text, if any."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """Tool calls, in the order the model gave them."""
    refusal: str | None = None
    """The model's refusal message, when it declined."""
    finish_reason: str = "stop"
    """``stop``, ``tool_calls``, ``length``, ``content_filter``..."""
    input_tokens: int = 0
    """Prompt tokens of this call."""
    output_tokens: int = 0
    """Completion tokens of this call."""
    model: str = ""
    """The model name that answered."""

    def to_message(self) -> Message:
        """This turn as the assistant message to append to a transcript."""
        message: Message = {"role": "assistant"}
        # A tool-calling turn usually has no text; leaving `content: None` out is valid
        # Chat Completions and spares the SDK's param transform ~90 us per such message
        # on every later call of the run (measured by benchmarks/run.py).
        if self.text is not None or not self.tool_calls:
            message["content"] = self.text
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in self.tool_calls
            ]
        if self.refusal:
            message["refusal"] = self.refusal
        return message

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what the store journals for replay)."""
        return {
            "text": self.text,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls
            ],
            "refusal": self.refusal,
            "finish_reason": self.finish_reason,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "model": self.model,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Turn:
        """The inverse of :meth:`to_dict`."""
        return cls(
            text=data.get("text"),
            tool_calls=[ToolCall(**c) for c in data.get("tool_calls", [])],
            refusal=data.get("refusal"),
            finish_reason=data.get("finish_reason", "stop"),
            input_tokens=int(data.get("input_tokens", 0)),
            output_tokens=int(data.get("output_tokens", 0)),
            model=data.get("model", ""),
        )


@dataclass(kw_only=True, slots=True)
class ModelRequest:
    """What one model call sends."""

    messages: list[Message]
    """The transcript so far."""
    tools: list[dict[str, Any]] | None = None
    """Tool schemas in Chat Completions form."""
    tool_choice: str | dict[str, Any] | None = None
    """``auto``, ``required``, ``none`` or a forced function."""
    response_format: dict[str, Any] | None = None
    """A ``json_schema`` or ``json_object`` response format."""
    output_schema: dict[str, Any] | None = None
    """The JSON schema the answer must satisfy, whatever the mode (scripted models use it)."""
    temperature: float | None = None
    """Sampling temperature; ``None`` leaves the server's default."""
    max_output_tokens: int | None = None
    """A cap on completion tokens for this call."""

    def prompt_chars(self) -> int:
        """Characters in the messages and tool schemas (for a cheap token estimate)."""
        size = sum(len(str(m.get("content") or "")) for m in self.messages)
        for m in self.messages:
            for call in m.get("tool_calls") or ():
                size += len(call["function"]["arguments"]) + len(call["function"]["name"])
        if self.tools:
            size += len(json.dumps(self.tools))
        return size


@runtime_checkable
class Model(Protocol):
    """The model port: ``name`` and one async call."""

    name: str

    async def complete(self, request: ModelRequest) -> Turn:
        """Send ``request``; return the assistant turn. Raises :class:`ModelAPIError`."""
        ...
