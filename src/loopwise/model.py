"""The model port over Chat Completions: one async call in, one assistant :class:`Turn` out.

The port's contract (:class:`Model`, :class:`ModelRequest`, :class:`Turn`...) lives in
:mod:`loopwise.port` and is re-exported here. :class:`OpenAIModel` speaks to OpenAI and to
every OpenAI-compatible server through ``openai.AsyncOpenAI``; retries with backoff and
timeouts are the SDK's own (``max_retries``, ``timeout``). SDK errors are mapped to
loopwise's in exactly one place, :func:`_map_error`. Anything with ``name`` and
``async complete(request)`` is a model too — :mod:`loopwise.scripted` has the scripted one.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import Any

import openai

from loopwise.errors import ConfigError, ModelAPIError, ModelNotConfigured, ResponseFormatRejected
from loopwise.port import Message, Model, ModelRequest, StructuredMode, ToolCall, Turn
from loopwise.scripted import ScriptedModel

__all__ = [
    "Message",
    "Model",
    "ModelRequest",
    "OpenAIModel",
    "ToolCall",
    "Turn",
    "resolve_model",
]


class OpenAIModel:
    """A Chat Completions model behind ``openai.AsyncOpenAI``.

    ``client`` is injected (build one with your own retries/timeouts) or made from
    ``api_key``/``base_url`` and the ``OPENAI_*`` environment. ``structured_modes``
    remembers, per base URL and model, which structured-output rung the server
    accepted, so a server that rejects ``json_schema`` is asked that way only once.
    """

    def __init__(
        self,
        name: str,
        *,
        client: openai.AsyncOpenAI | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        if not name:
            raise ConfigError("model name is empty", name="model")
        self.name = name
        if client is None:
            key = api_key or os.environ.get("OPENAI_API_KEY")
            url = base_url or os.environ.get("OPENAI_BASE_URL")
            if key is None and url is None:
                raise ConfigError(
                    f"model {name!r} needs OPENAI_API_KEY (or OPENAI_BASE_URL for a local "
                    "server); pass --model scripted to run offline",
                    name="OPENAI_API_KEY",
                )
            self._settings: dict[str, Any] = {
                "api_key": key or "not-needed",
                "base_url": url,
                "timeout": timeout,
                "max_retries": max_retries,
            }
            client = openai.AsyncOpenAI(**self._settings)
        else:
            self._settings = {}
        self._client = client
        self._loop: asyncio.AbstractEventLoop | None = None
        self._endpoint: tuple[str, str] | None = None
        self.structured_modes: dict[tuple[str, str], StructuredMode] = {}

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The SDK client for the running event loop.

        A connection pool belongs to the loop that opened it and ``asyncio.run`` closes
        its loop, so a client this model built itself is rebuilt (same settings) when
        used from a new loop; an injected client is the caller's to manage.
        """
        if self._settings:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return self._client
            if self._loop is None:
                self._loop = loop
            elif self._loop is not loop:
                self._client = openai.AsyncOpenAI(**self._settings)
                self._loop = loop
        return self._client

    @property
    def endpoint(self) -> tuple[str, str]:
        """``(base_url, model)``: the key under which structured modes are remembered."""
        # base_url and name never change for a model, and str() of an httpx URL is not free.
        if self._endpoint is None:
            self._endpoint = (str(self._client.base_url), self.name)
        return self._endpoint

    async def aclose(self) -> None:
        """Close the client's pooled connections; call it in the event loop that used them
        (a connection pool belongs to one loop, and ``asyncio.run`` closes its loop)."""
        await self._client.close()
        if self._settings:
            # Closed for good: the next use (in any loop) gets a fresh pool.
            self._loop = None
            self._client = openai.AsyncOpenAI(**self._settings)

    async def complete(self, request: ModelRequest) -> Turn:
        """One Chat Completions call; SDK errors become :class:`ModelAPIError`."""
        params: dict[str, Any] = {"model": self.name, "messages": request.messages}
        if request.tools:
            params["tools"] = request.tools
        if request.tool_choice is not None:
            params["tool_choice"] = request.tool_choice
        if request.response_format is not None:
            params["response_format"] = request.response_format
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.max_output_tokens is not None:
            params["max_completion_tokens"] = request.max_output_tokens
        try:
            completion = await self.client.chat.completions.create(**params)
        except openai.OpenAIError as e:
            raise _map_error(e, request) from e
        except json.JSONDecodeError as e:  # a 2xx body that is not JSON: the SDK lets it through
            raise ModelAPIError(f"model API returned malformed JSON: {e}") from e
        return _to_turn(completion, self.name)


def _to_turn(completion: Any, fallback_model: str) -> Turn:
    if not completion.choices:
        raise ModelAPIError("the model returned no choices")
    choice = completion.choices[0]
    message = choice.message
    raw = [c for c in (message.tool_calls or []) if getattr(c, "function", None) is not None]
    ids = _unique_ids([c.id for c in raw])
    calls = [
        ToolCall(id=i, name=c.function.name, arguments=c.function.arguments or "")
        for i, c in zip(ids, raw, strict=True)
    ]
    usage = completion.usage
    return Turn(
        text=message.content,
        tool_calls=calls,
        refusal=getattr(message, "refusal", None),
        finish_reason=choice.finish_reason or "stop",
        input_tokens=usage.prompt_tokens if usage else 0,
        output_tokens=usage.completion_tokens if usage else 0,
        model=completion.model or fallback_model,
    )


def _unique_ids(ids: list[str | None]) -> list[str]:
    """Call ids as sent, except a missing or repeated one gets a fresh id.

    Some compatible servers send no ids or the same one for every call of a turn; results
    are bound to calls (and journaled, and gated) by id, so each must be unique. The turn
    is journaled with these ids, so a resumed run sees the same ones.
    """
    seen: set[str] = set()
    unique = []
    for given in ids:
        chosen = given if given and given not in seen else f"call_{uuid.uuid4().hex[:16]}"
        seen.add(chosen)
        unique.append(chosen)
    return unique


def _map_error(error: openai.OpenAIError, request: ModelRequest) -> ModelAPIError:
    """The one place SDK errors become loopwise errors."""
    status = getattr(error, "status_code", None)
    text = str(error)
    if isinstance(error, openai.BadRequestError) and _names_structured_mode(text, request):
        return ResponseFormatRejected(f"server rejected structured output: {text}", status_code=400)
    if isinstance(error, openai.APITimeoutError):
        return ModelAPIError(f"model API timed out after retries: {text}")
    if isinstance(error, openai.APIConnectionError):
        return ModelAPIError(f"model API unreachable after retries: {text}")
    return ModelAPIError(f"model API error: {text}", status_code=status)


def _names_structured_mode(text: str, request: ModelRequest) -> bool:
    lowered = text.lower()
    if request.response_format is not None and (
        "response_format" in lowered or "json_schema" in lowered
    ):
        return True
    return request.tool_choice is not None and "tool_choice" in lowered


def resolve_model(
    name: str | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
) -> Model:
    """The model named by ``name`` or ``LOOPWISE_MODEL``; ``"scripted"`` is the offline one.

    Raises :class:`ModelNotConfigured` when neither names a model: nothing falls back
    silently to a fake.
    """
    chosen = name or os.environ.get("LOOPWISE_MODEL")
    if not chosen:
        raise ModelNotConfigured()
    if chosen == "scripted":
        return ScriptedModel()
    return OpenAIModel(chosen, api_key=api_key, base_url=base_url)
