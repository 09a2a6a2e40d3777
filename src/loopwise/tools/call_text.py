"""How a tool call reads: its events in the audit log, its arguments, its result to the model.

:func:`call_event` and :func:`result_event` are the data of its ``tool_call`` and
``tool_result`` events; :func:`readable_args` shows arguments as data when they can be read
safely (else as their shortened text); :func:`render_content` turns a tool's return value
into what the model reads, and :func:`truncate` caps it with a note saying so.
"""

from __future__ import annotations

import json

from loopwise.core.events import jsonable
from loopwise.core.journal import Journal
from loopwise.core.jsontypes import JSONObject, JSONValue
from loopwise.tools.arguments import ToolArgumentsError, load_arguments
from loopwise.tools.call_values import Call, CallStatus

__all__ = [
    "LOG_CHARS",
    "call_event",
    "readable_args",
    "render_content",
    "result_event",
    "shortened",
    "truncate",
]

LOG_CHARS = 2000
"""Logged arguments longer than this (as text) are shortened."""


def readable_args(arguments: object) -> JSONValue:
    """Arguments as data when they can be read safely (JSON, nesting at most
    :data:`~loopwise.tools.arguments.MAX_DEPTH`), else as their text (shortened): what the audit log
    shows."""
    try:
        readable: JSONValue = jsonable(load_arguments(arguments, "log"))
        return readable
    except ToolArgumentsError:
        return shortened(str(arguments))


def shortened(text: str) -> str:
    return text if len(text) <= LOG_CHARS else text[:LOG_CHARS] + "…"


def render_content(value: object) -> str:
    """A tool's return value as the text of its result (what a model reads)."""
    if isinstance(value, str):
        return value
    if value is None:
        return "done (the tool returned nothing)"
    return json.dumps(jsonable(value), default=str)


def truncate(content: str, limit: int | None) -> str:
    if limit is None or len(content) <= limit:
        return content
    return f"{content[:limit]}\n[truncated: showing {limit} of {len(content)} characters]"


def call_event(call: Call, args: JSONValue, effect: str | None) -> JSONObject:
    """The data of a call's ``tool_call`` event (logged before it is judged)."""
    return {
        "tool": call.name,
        "call_id": call.call_id,
        "args": args,
        "effect": effect,
        "key": Journal.call_key(call.key),
    }


def result_event(call: Call, status: CallStatus, content: str, **more: JSONValue) -> JSONObject:
    """The data of a call's ``tool_result`` event: what every result says, then ``more``."""
    return {
        "tool": call.name,
        "call_id": call.call_id,
        "is_error": status != "done",
        "content": content,
        "key": call.key,
        "status": status,
        **more,
    }
