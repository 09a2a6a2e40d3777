"""The Responses API's side of the model port: a :class:`ModelRequest` as a
``/v1/responses`` body, a ``Response`` (or its event stream) as a :class:`Turn`.

The port's currency stays Chat Completions' (messages, tool schemas, response formats),
so every architecture, the journal and the cassettes are the same for both APIs; this
module translates at the edge, both ways:

* messages become input items: a ``tool`` message a ``function_call_output``, an
  assistant turn its reasoning items (kept on the message as ``reasoning_items``), its
  text and one ``function_call`` per tool call, in that order;
* tool schemas become Responses function tools, ``strict`` said out loud (Responses
  defaults it to true, Chat Completions to false); a response format becomes
  ``text.format``;
* a ``Response``'s output items become the turn: text, refusal, tool calls (parallel
  ones included), reasoning items; an ``incomplete`` response stops like Chat
  Completions' ``length`` or ``content_filter``; usage keeps reasoning and cached tokens.

:class:`~loopwise.models.openai.OpenAIModel` (``api="responses"``) sends what this builds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from loopwise.core.jsontypes import JSONObject, JSONValue, json_object
from loopwise.errors import ModelAPIError
from loopwise.models.port import (
    Message,
    ModelRequest,
    Turn,
    arguments_text,
    server_calls,
    server_ids,
)

if TYPE_CHECKING:
    from openai.types.responses import Response, ResponseOutputItem

__all__ = [
    "ENCRYPTED_REASONING",
    "ResponseEvents",
    "after_last_stored",
    "as_input_items",
    "as_text_format",
    "as_tool_choice",
    "as_tools",
    "chain_refused",
    "response_turn",
    "responses_body",
    "sdk_field",
]


def sdk_field(obj: object, name: str) -> Any:
    """Field ``name`` of an object of the ``openai`` SDK's (an answer it built from a
    server's JSON, an error it raised); ``None`` when it has none (or ``obj`` is ``None``).
    ``Any``: the SDK builds its objects without validating them, so a field holds what the
    server sent, whatever the SDK's types say."""
    # getattr: the SDK builds its objects without validating them, so a field its types
    # declare is missing when a server (a local one, an older one) leaves it out; and
    # only some of its errors carry a status code.
    return getattr(obj, name, None)


ENCRYPTED_REASONING = "reasoning.encrypted_content"
"""What ``include`` asks for so a stateless call (``store=False``) gets its reasoning back."""


def as_input_items(
    messages: list[Message], renamed: dict[str, str] | None = None, *, sealed_only: bool = False
) -> list[JSONObject]:
    """``messages`` (Chat Completions form) as Responses input items, in order.

    Every call and call output goes under the id the server gave the call, never one
    loopwise renamed it to (:attr:`~loopwise.models.port.ToolCall.server_id`); ``renamed``
    is the map of the assistant turn just before ``messages`` when they start after it
    (a chained call sends only the results of the turn the server stored).
    ``sealed_only`` leaves out reasoning items without their encrypted content (a turn
    journaled with ``store=True`` before loopwise asked for it): they name what the
    server stored, and a server that forgot the chain forgot them too.
    """
    items: list[JSONObject] = []
    renamed = renamed or {}
    for message in messages:
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": renamed.get(call_id, call_id) if call_id else call_id,
                    "output": _output(message.get("content")),
                }
            )
        elif role == "assistant":
            items += _assistant_items(message, sealed_only)
            renamed = server_ids(message) if message.get("tool_calls") else renamed
        else:
            items.append({"role": role, "content": _content(message.get("content"), "input")})
    return items


def _assistant_items(message: Message, sealed_only: bool = False) -> list[JSONObject]:
    """One assistant turn: its reasoning first (it preceded the output), then its text,
    then its calls, as the Responses API gave them."""
    text = message.get("content") or message.get("refusal")
    calls = message.get("tool_calls") or ()
    # A reasoning item goes back only before the output it came with: one with nothing
    # after it (a turn cut off mid-reasoning) is refused by the server.
    reasoning = message.get("reasoning_items") if text or calls else None
    items: list[JSONObject] = [
        r for r in reasoning or () if not sealed_only or r.get("encrypted_content")
    ]
    if text:
        items.append({"role": "assistant", "content": _content(text, "output")})
    for call in calls:
        function = call.get("function") or {}
        items.append(
            {
                "type": "function_call",
                "call_id": call.get("server_id") or call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments") or "",
            }
        )
    return items


def responses_body(
    request: ModelRequest,
    model: str,
    store: bool,
    tools: list[JSONObject] | None,
    sent: JSONObject,
    *,
    chained: bool = True,
) -> tuple[dict[str, Any], str | None]:
    """``request`` as the body ``client.responses.create(**body)`` sends (keys in its
    order: the same bytes on the wire), ``tools`` already in Responses form, ``sent`` the
    model's options (``service_tier``, ``prompt_cache_key``, ``safety_identifier``); and why it
    sends the whole transcript where it could have chained (``None`` when it chains, or
    stores nothing).

    With ``store`` it chains to the last turn the server stored and sends only what came
    after it; ``chained=False`` (or no stored turn) sends the whole transcript.
    """
    messages, previous, renamed, whole = _chain(request.messages, store and chained)
    params: dict[str, Any] = {"model": model}
    for name in ("service_tier", "background"):
        if name in sent:
            params[name] = sent[name]
    # Asked for with store=True too: loopwise then holds every turn's reasoning, so a
    # chain the server forgot can be sent whole.
    params["include"] = [ENCRYPTED_REASONING]
    # Sent whole where the server refused the chain: what it stored is gone.
    params["input"] = as_input_items(messages, renamed, sealed_only=store and not chained)
    if request.max_output_tokens is not None:
        params["max_output_tokens"] = request.max_output_tokens
    if previous is not None:
        params["previous_response_id"] = previous
    for name in ("prompt_cache_key", "safety_identifier"):
        if name in sent:
            params[name] = sent[name]
    params["store"] = store
    if request.temperature is not None:
        params["temperature"] = request.temperature
    if request.response_format is not None:
        params["text"] = {"format": as_text_format(request.response_format)}
    if request.tool_choice is not None:
        params["tool_choice"] = as_tool_choice(request.tool_choice)
    elif tools:
        params["tool_choice"] = "auto"  # as on Chat Completions (tools shown for sure)
    if tools:
        params["tools"] = tools
    return params, whole


def _chain(
    messages: list[Message], chained: bool
) -> tuple[list[Message], str | None, dict[str, str] | None, str | None]:
    """What a call sends: the messages, the stored turn it chains to and that turn's
    renamed calls, and why it sends all messages where it could have chained."""
    if not chained:
        return messages, None, None, None
    after, previous, renamed = after_last_stored(messages)
    whole = None
    if previous is None and any(m.get("role") == "assistant" for m in messages):
        whole = "no earlier turn is stored on the server (store was off)"
    return after, previous, renamed, whole


def after_last_stored(
    messages: list[Message],
) -> tuple[list[Message], str | None, dict[str, str] | None]:
    """The messages after the last turn the server stored, that turn's response id and
    its renamed calls (all of them, ``None`` and ``None`` when no turn was stored: the
    chain starts here)."""
    for i in range(len(messages) - 1, -1, -1):
        response_id = messages[i].get("response_id")
        if messages[i].get("role") == "assistant" and response_id:
            return messages[i + 1 :], str(response_id), server_ids(messages[i])
    return messages, None, None


def chain_refused(error: ModelAPIError) -> bool:
    """Whether the server refused the stored response a call chained to: a 404 (OpenAI's
    answer to an unknown, expired or deleted ``previous_response_id``), or an error whose
    code or parameter names it (a 400 from servers that answer so)."""
    try:
        detail = json.loads(error.body or "").get("error") or {}
    except (ValueError, AttributeError):
        detail = {}
    if not isinstance(detail, dict):
        detail = {}
    if error.status_code == 404 and detail.get("code") != "model_not_found":
        return True
    return (
        detail.get("code") == "previous_response_not_found"
        or detail.get("param") == "previous_response_id"
    )


_PART_TYPES = {
    ("text", "input"): "input_text",
    ("text", "output"): "output_text",
}


def _content(content: JSONValue, side: str) -> JSONValue:
    """A message's content: a string as is; Chat Completions parts as Responses parts."""
    if not isinstance(content, list):
        return "" if content is None else content
    return [_part(part, side) for part in content]


def _part(part: JSONValue, side: str) -> JSONValue:
    if not isinstance(part, dict):
        return part
    kind = part.get("type")
    if kind == "text":
        return {"type": _PART_TYPES[("text", side)], "text": part.get("text", "")}
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        return {"type": "input_image", "image_url": url, "detail": "auto"}
    return part  # already a Responses part (input_text, input_file...)


def _output(content: JSONValue) -> JSONValue:
    """A tool result as ``function_call_output.output``: text, or Responses parts."""
    if isinstance(content, list):
        return [_part(part, "input") for part in content]
    return "" if content is None else str(content)


def as_tools(tools: list[dict[str, Any]]) -> list[JSONObject]:
    """Chat Completions tool schemas as Responses function tools (other tools as given)."""
    converted: list[JSONObject] = []
    for tool in tools:
        function = tool.get("function")
        if tool.get("type") != "function" or not isinstance(function, dict):
            converted.append(tool)
            continue
        item: JSONObject = {"type": "function", "name": function.get("name")}
        if "description" in function:
            item["description"] = function["description"]
        item["parameters"] = function.get("parameters") or {"type": "object", "properties": {}}
        # Responses makes a function strict unless told otherwise; a Chat Completions
        # schema is strict only when it says so (and loose schemas fail strict mode).
        item["strict"] = bool(function.get("strict", False))
        converted.append(item)
    return converted


def as_tool_choice(choice: str | JSONObject) -> str | JSONObject:
    """``auto``/``required``/``none`` as they are; a forced function in Responses form."""
    function = choice.get("function") if isinstance(choice, dict) else None
    if isinstance(function, dict):
        return {"type": "function", "name": function.get("name")}
    return choice


def as_text_format(fmt: JSONObject) -> JSONObject:
    """A ``response_format`` as ``text.format``.

    ``json_schema`` carries its name, schema and strictness flat; a ``json_object`` (with
    or without the schema some servers read there) is JSON mode, the schema being in the
    prompt on that rung already.
    """
    if fmt.get("type") == "json_schema":
        spec = json_object(fmt.get("json_schema"))
        out: JSONObject = {"type": "json_schema", "name": spec.get("name", "answer")}
        if "description" in spec:
            out["description"] = spec["description"]
        out["schema"] = spec.get("schema", {})
        if "strict" in spec:
            out["strict"] = spec["strict"]
        return out
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    return dict(fmt)


_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}
"""An incomplete response's reason as the finish reason Chat Completions gives."""


def response_turn(response: Response, fallback_model: str) -> Turn:
    """The turn a ``Response`` holds; a failed response or one without output raises
    :class:`~loopwise.errors.ModelAPIError`."""
    status = sdk_field(response, "status") or "completed"
    if status == "failed" or sdk_field(response, "error") is not None:
        error = sdk_field(response, "error")
        raise ModelAPIError(f"the model's response failed: {_error_text(error)}")
    texts, refusals, raw, reasoning = _read_output(response.output or [])
    calls = server_calls([(c.call_id, c.name, arguments_text(c.arguments)) for c in raw])
    if status == "incomplete":
        details = sdk_field(response, "incomplete_details")
        reason = sdk_field(details, "reason") or "max_output_tokens"
        finish = _INCOMPLETE.get(reason, reason)
    elif not (texts or refusals or calls):
        raise ModelAPIError("the model returned no output")
    else:
        finish = "tool_calls" if calls else "stop"
    usage = response.usage
    return Turn(
        text="".join(texts) if texts else None,
        tool_calls=calls,
        refusal="".join(refusals) if refusals else None,
        finish_reason=finish,
        input_tokens=usage.input_tokens if usage else 0,
        output_tokens=usage.output_tokens if usage else 0,
        model=response.model or fallback_model,
        reasoning=reasoning,
        response_id=response.id or None,
        stored=_stored(response),
        reasoning_tokens=_detail(usage, "output_tokens_details", "reasoning_tokens"),
        cached_tokens=_detail(usage, "input_tokens_details", "cached_tokens"),
        service_tier=_tier(response),
    )


def _read_output(
    output: list[ResponseOutputItem],
) -> tuple[list[str], list[str], list[Any], list[JSONObject]]:
    """Text parts, refusals, function calls and reasoning items, each in output order.

    Told apart by their ``type`` as the server sent it (the SDK builds an item of a type
    it does not know as a message): the calls are ``Any`` for that reason."""
    texts: list[str] = []
    refusals: list[str] = []
    raw: list[Any] = []
    reasoning: list[JSONObject] = []
    for item in output:
        kind = sdk_field(item, "type")
        if kind == "message":
            for part in sdk_field(item, "content") or []:
                if part.type == "output_text":
                    texts.append(part.text)
                elif part.type == "refusal":
                    refusals.append(part.refusal)
        elif kind == "function_call":
            raw.append(item)
        elif kind == "reasoning":
            # As the server sent it: it must come back byte for byte (its encrypted
            # content is the model's reasoning when nothing is stored server-side).
            reasoning.append(json_object(item.to_dict()))
    return texts, refusals, raw, reasoning


def _tier(response: object) -> str | None:
    """The service tier the server says it served the response on, when it says."""
    tier = sdk_field(response, "service_tier")
    return tier if isinstance(tier, str) else None


def _stored(response: object) -> bool | None:
    """Whether the server says it keeps the response (``None`` when it does not say)."""
    store = sdk_field(response, "store")
    return store if isinstance(store, bool) else None


def _detail(usage: object, group: str, name: str) -> int:
    details = sdk_field(usage, group) if usage is not None else None
    value = sdk_field(details, name) if details is not None else None
    return value if isinstance(value, int) else 0


def _error_text(error: object) -> str:
    if error is None:
        return "no reason given"
    code, message = sdk_field(error, "code"), sdk_field(error, "message")
    return f"{code}: {message}" if code else str(message or error)


class ResponseEvents:
    """Folds a ``stream=True`` call's events into the ``Response`` a plain call returns.

    Text deltas go to ``on_text`` as they arrive. The final response comes from the
    ``response.completed`` (or ``.incomplete``/``.failed``) event; its output is rebuilt
    from the ``response.output_item.done`` events when they came, as those carry each
    item complete (a reasoning item's encrypted content included).
    """

    _FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})

    def __init__(self, on_text: Callable[[str], None]) -> None:
        self.on_text = on_text
        self.final: Response | None = None
        self.items: dict[int, ResponseOutputItem] = {}

    def handle(self, event: Any) -> None:
        """Take one event."""
        kind = sdk_field(event, "type")
        if kind == "response.output_text.delta":
            if event.delta:
                self.on_text(event.delta)
        elif kind == "response.output_item.done":
            self.items[int(event.output_index)] = event.item
        elif kind in self._FINAL:
            self.final = event.response
        elif kind == "error":
            raise ModelAPIError(f"the model's stream reported an error: {_error_text(event)}")

    def response(self) -> Response:
        """The response the stream amounted to; a cut-off stream raises ModelAPIError."""
        if self.final is None:
            raise ModelAPIError("the model's stream ended before its answer did (no response)")
        if self.items:
            self.final.output = [self.items[i] for i in sorted(self.items)]
        return self.final
