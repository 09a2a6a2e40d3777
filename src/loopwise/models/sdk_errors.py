"""Where ``openai`` SDK errors become loopwise errors: the one mapping, and what it reads.

:func:`map_error` turns an SDK error into a :class:`~loopwise.errors.ModelAPIError` (a
:class:`~loopwise.errors.ContextLengthExceeded` when the request was too long for the model,
a :class:`~loopwise.errors.ResponseFormatRejected` when the server refused a structured-output
feature the request carried), with the URL but never a key, and the server's whole body kept.
:func:`sdk_retries` says which failures the SDK has already retried.
"""

from __future__ import annotations

import json

import openai

from loopwise.core.jsontypes import json_object
from loopwise.errors import ContextLengthExceeded, ModelAPIError, ResponseFormatRejected
from loopwise.models.port import ModelRequest
from loopwise.models.responses import sdk_field

__all__ = ["asks_structured", "map_error", "sdk_retries"]


def asks_structured(request: ModelRequest) -> bool:
    """Whether the request carries a feature a server may reject (see :func:`_rejects`)."""
    choice = request.tool_choice
    return request.response_format is not None or isinstance(choice, dict) or choice == "required"


def sdk_retries(error: BaseException | None) -> bool:
    """Whether the SDK retries this failure (its rule: connection errors, 408/409/429/5xx)."""
    if isinstance(error, openai.APIConnectionError):
        return True
    status = sdk_field(error, "status_code")
    return isinstance(status, int) and (status in (408, 409, 429) or status >= 500)


_NOT_ABOUT_FEATURES = frozenset({401, 402, 403, 407, 408, 409, 429})
"""Statuses that say nothing about the request's features (auth, payment, rate, conflict)."""


def _at(error: openai.OpenAIError) -> str:
    """`` at URL`` of the request that failed (scheme, host, port and path: never a key,
    a user or a query), or ``""`` when the error has none."""
    url = sdk_field(sdk_field(error, "request"), "url")
    if url is None or not url.host:
        return ""
    port = f":{url.port}" if url.port else ""
    return f" at {url.scheme}://{url.host}{port}{url.path}"


def map_error(error: openai.OpenAIError, request: ModelRequest) -> ModelAPIError:
    """The one place SDK errors become loopwise errors."""
    if isinstance(error, openai.APITimeoutError):
        return ModelAPIError(f"model API timed out after retries{_at(error)}: {error}")
    if isinstance(error, openai.APIConnectionError):
        return ModelAPIError(
            f"server unreachable: no answer from the model API{_at(error)} after retries ({error})"
        )
    if not isinstance(error, openai.APIStatusError):
        return ModelAPIError(f"model API error: {error}")
    status = error.status_code
    kind, first_line = _summary(error)
    body = error.response.text
    short = (
        f"HTTP {status}" + (f" {kind}" if kind else "") + (f": {first_line}" if first_line else "")
    )
    if status in (400, 413) and _overflows(body):
        return _too_long(short, status, body, request)
    if status not in _NOT_ABOUT_FEATURES and _rejects(body, request):
        return ResponseFormatRejected(
            f"server rejected structured output: {short}", status_code=status, body=body
        )
    return ModelAPIError(f"model API error: {short}", status_code=status, body=body)


_OVERFLOW = ("context_length_exceeded", "maximum context length", "exceed_context_size_error")
"""How servers say a request is longer than the model's context: OpenAI's error code,
vLLM's and OpenAI's message, llama.cpp's error type."""


def _overflows(body: str) -> bool:
    lowered = body.lower()
    return any(marker in lowered for marker in _OVERFLOW)


def _too_long(short: str, status: int, body: str, request: ModelRequest) -> ContextLengthExceeded:
    """The context-length refusal, saying what was sent (and what the server counted,
    when it says: llama.cpp's ``n_prompt_tokens`` and ``n_ctx``)."""
    sent = request.prompt_chars() // 4
    counted = ""
    try:
        error = json.loads(body).get("error") or {}
        if isinstance(error, dict) and "n_prompt_tokens" in error and "n_ctx" in error:
            counted = (
                f"; the server counted {int(error['n_prompt_tokens']):,} tokens, its "
                f"context holds {int(error['n_ctx']):,}"
            )
    except (ValueError, TypeError, AttributeError):
        pass
    return ContextLengthExceeded(
        f"the model's context was exceeded: the request sent about {sent:,} tokens "
        f"(loopwise's estimate, ~4 characters a token){counted}; send less (fewer or "
        f"shorter tools, a context policy) or use a model with a larger context ({short})",
        sent_tokens=sent,
        status_code=status,
        body=body,
    )


def _summary(error: openai.APIStatusError) -> tuple[str, str]:
    """The error type and the first line of its message, from whatever shape the body has."""
    body: object = error.body
    kind = ""
    if isinstance(body, dict):
        kind = str(body.get("type") or body.get("code") or "")
        message = body.get("message") or body.get("detail") or body.get("error") or body
    else:
        message = body if body is not None else error.response.text
    text = message if isinstance(message, str) else json.dumps(message, default=str)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return kind, first if len(first) <= 200 else first[:199] + "…"


def _rejects(body: str, request: ModelRequest) -> bool:
    """Whether an error body names a structured-output feature this request carries.

    Servers say it in many shapes and statuses (a 400 naming ``response_format``, a 500
    with a pydantic error about ``response_format.type``, a 422 about ``tool_choice``),
    so the body is read for the parameter's name, never the status.
    """
    lowered = body.lower()
    if request.response_format is not None and (
        "response_format" in lowered or "json_schema" in lowered or "text.format" in lowered
    ):
        return True
    if asks_structured(request) and "tool_choice" in lowered:
        return True
    return "strict" in lowered and _asks_strict(request)


def _asks_strict(request: ModelRequest) -> bool:
    fmt = request.response_format or {}
    if json_object(fmt.get("json_schema")).get("strict"):
        return True
    return any(t.get("function", {}).get("strict") for t in request.tools or ())
