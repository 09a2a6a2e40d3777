"""The Chat Completions side of the model port: a :class:`ModelRequest` as a
``/chat/completions`` body, a ``ChatCompletion`` as a :class:`Turn`.

The port's currency is Chat Completions' already (messages, tool schemas, response
formats), so the body is the request nearly as it is: every call named by the server's
own id (:func:`~loopwise.models.port.wire_messages`), the model's options in place.
:class:`~loopwise.models.openai.OpenAIModel` sends what this builds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loopwise.core.jsontypes import JSONMapping
from loopwise.errors import ModelAPIError
from loopwise.models.port import ModelRequest, Turn, arguments_text, server_calls, wire_messages
from loopwise.models.responses import sdk_field

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion

__all__ = ["chat_body", "chat_turn"]


def chat_body(request: ModelRequest, model: str, sent: JSONMapping, limit: str) -> dict[str, Any]:
    """``request`` as the body ``chat.completions.create(**body)`` sends, keys in its order
    (the same bytes on the wire); ``sent`` the model's options (``service_tier``,
    ``prompt_cache_key``, ``safety_identifier``), ``limit`` the parameter an output-token
    limit goes out as (``max_completion_tokens``, or ``max_tokens`` for a server that
    reads only that). ``Any``: these are ``create``'s keyword arguments, which the SDK
    types one by one."""
    params: dict[str, Any] = {"model": model}
    if "service_tier" in sent:
        params["service_tier"] = sent["service_tier"]
    params["messages"] = wire_messages(request.messages)
    if request.top_logprobs is not None:
        params["logprobs"] = True
    if request.max_output_tokens is not None:
        params[limit] = request.max_output_tokens
    if "prompt_cache_key" in sent:
        params["prompt_cache_key"] = sent["prompt_cache_key"]
    if request.response_format is not None:
        params["response_format"] = request.response_format
    if "safety_identifier" in sent:
        params["safety_identifier"] = sent["safety_identifier"]
    if request.temperature is not None:
        params["temperature"] = request.temperature
    if request.tool_choice is not None:
        params["tool_choice"] = request.tool_choice
    elif request.tools:
        # OpenAI's default with tools, said out loud: llama-cpp-python's function-calling
        # handler reads a missing choice as "no tools" and never shows them to the model.
        params["tool_choice"] = "auto"
    if request.tools:
        params["tools"] = request.tools
    if request.top_logprobs is not None:
        params["top_logprobs"] = request.top_logprobs
    return params


def chat_turn(completion: ChatCompletion, fallback_model: str) -> Turn:
    """The turn a ``ChatCompletion`` holds (its first choice); none raises
    :class:`~loopwise.errors.ModelAPIError`."""
    if not completion.choices:
        raise ModelAPIError("the model returned no choices")
    choice = completion.choices[0]
    message = choice.message
    raw = [(c, f) for c in message.tool_calls or [] if (f := sdk_field(c, "function")) is not None]
    calls = server_calls([(c.id, f.name, arguments_text(f.arguments)) for c, f in raw])
    usage = completion.usage
    # The SDK's type says a string; a compatible server may still send null.
    finish: str | None = choice.finish_reason
    return Turn(
        text=message.content,
        tool_calls=calls,
        refusal=sdk_field(message, "refusal"),
        finish_reason=finish or "stop",
        input_tokens=usage.prompt_tokens if usage else 0,
        output_tokens=usage.completion_tokens if usage else 0,
        model=completion.model or fallback_model,
        logprobs=_logprobs(choice),
        cached_tokens=_detail(usage, "prompt_tokens_details", "cached_tokens"),
        reasoning_tokens=_detail(usage, "completion_tokens_details", "reasoning_tokens"),
        service_tier=_tier(completion),
    )


def _tier(answer: object) -> str | None:
    """The service tier the server says it served a call on, when it says."""
    tier = sdk_field(answer, "service_tier")
    return tier if isinstance(tier, str) else None


def _detail(usage: object, group: str, name: str) -> int:
    """A count of the usage's details (cached prompt tokens, reasoning tokens); 0 when the
    server does not say."""
    value = sdk_field(sdk_field(usage, group), name)
    return value if isinstance(value, int) else 0


def _logprobs(choice: object) -> list[dict[str, float]] | None:
    """Per output token, ``{alternative token: logprob}`` (the token itself included),
    or ``None`` when the server sent none."""
    content = sdk_field(sdk_field(choice, "logprobs"), "content")
    if not content:
        return None
    tokens = []
    for item in content:
        alternatives = {top.token: float(top.logprob) for top in item.top_logprobs or ()}
        alternatives.setdefault(item.token, float(item.logprob))
        tokens.append(alternatives)
    return tokens
