"""A Responses API request read as the Chat Completions request a script sees.

:func:`to_request` turns a ``POST /v1/responses`` body into the :class:`ModelRequest` the
Chat Completions endpoint would make of the same call: input items as Chat messages (an
assistant text and the function calls right after it are one message), tools, tool choice
and ``text.format`` in Chat form (:func:`chat_form`). So one script answers both APIs
alike.
"""

from __future__ import annotations

from loopwise.core.jsontypes import JSONObject, JSONValue, json_object
from loopwise.models.port import Message, ModelRequest
from loopwise.models.scripted import schema_of
from loopwise.testing._fakehttp import objects

__all__ = ["chat_form", "text_of", "to_request"]


def to_request(payload: JSONObject, items: list[JSONObject]) -> ModelRequest:
    """A Responses body as the :class:`ModelRequest` a script sees (what the Chat
    Completions endpoint would make of the same call)."""
    chat = chat_form(payload)
    choice, fmt = chat.get("tool_choice"), chat.get("response_format")
    temperature, cap = payload.get("temperature"), payload.get("max_output_tokens")
    request = ModelRequest(
        messages=_messages(items),
        tools=objects(chat["tools"]) if "tools" in chat else None,
        tool_choice=choice if isinstance(choice, str | dict) else None,
        response_format=fmt if isinstance(fmt, dict) else None,
        temperature=temperature if isinstance(temperature, int | float) else None,
        max_output_tokens=cap if isinstance(cap, int) else None,
    )
    request.output_schema = schema_of(request)
    return request


def chat_form(payload: JSONObject) -> JSONObject:
    """The tools, tool choice and response format of a Responses body, in Chat form."""
    chat: JSONObject = {}
    if payload.get("tools"):
        chat["tools"] = [_chat_tool(t) for t in objects(payload["tools"])]
    choice = payload.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function":
        chat["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    elif choice is not None:
        chat["tool_choice"] = choice
    fmt = json_object(payload.get("text")).get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        spec: JSONObject = {
            k: fmt[k] for k in ("name", "description", "schema", "strict") if k in fmt
        }
        chat["response_format"] = {"type": "json_schema", "json_schema": spec}
    elif isinstance(fmt, dict) and fmt.get("type") == "json_object":
        chat["response_format"] = {"type": "json_object"}
    return chat


def _chat_tool(tool: JSONObject) -> JSONObject:
    if tool.get("type") != "function":
        return tool
    function: JSONObject = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
    if tool.get("strict"):
        function["strict"] = True
    return {"type": "function", "function": function}


def _messages(items: list[JSONObject]) -> list[Message]:
    """Input items as Chat Completions messages: an assistant text and the function calls
    right after it are one assistant message (a reasoning item starts another turn);
    reasoning items are the server's, not the script's."""
    messages: list[Message] = []
    joins = False  # whether a function call joins the last message
    for item in items:
        kind = item.get("type", "message")
        if kind == "function_call":
            if not joins:
                messages.append({"role": "assistant", "content": ""})
            messages[-1].setdefault("tool_calls", []).append(_chat_call(item))
            joins = True
            continue
        joins = False
        if kind == "function_call_output":
            result = text_of(item.get("output"))
            messages.append(
                {"role": "tool", "tool_call_id": item.get("call_id"), "content": result}
            )
        elif kind == "message":
            said = text_of(item.get("content"))
            messages.append({"role": item.get("role"), "content": said})
            joins = item.get("role") == "assistant"
    return messages


def _chat_call(item: JSONObject) -> JSONObject:
    function = {"name": item.get("name"), "arguments": item.get("arguments", "")}
    return {"id": item.get("call_id"), "type": "function", "function": function}


def text_of(content: JSONValue) -> str:
    if isinstance(content, list):
        return "".join(
            str(p.get("text") or p.get("refusal") or "") for p in content if isinstance(p, dict)
        )
    return "" if content is None else str(content)
