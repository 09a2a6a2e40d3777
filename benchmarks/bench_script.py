"""What the benchmark server answers: a pure function of the request body.

* a request with a ``response_format`` (the triage call) gets a ticket as JSON;
* a request with tools gets one tool call per turn until the transcript holds
  ``turns`` tool results (``turns`` is read from the user message, ``turns=N``; 5 by
  default), then a short answer;
* a user message containing ``parallel`` gets three calls of ``wait`` in one turn.
"""

from __future__ import annotations

import json
import re
from typing import Any

TICKET = {
    "summary": "Customer was charged twice for one order.",
    "category": "billing",
    "urgency": 3,
}
ANSWER = "Order A-1001 failed because the card was declined."


def _user_text(messages: list[dict[str, Any]]) -> str:
    return next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")


def respond(body: dict[str, Any]) -> dict[str, Any]:
    """The assistant message (``content`` and/or ``tool_calls``) for one request."""
    messages = body.get("messages", [])
    if body.get("response_format") is not None:
        return {"content": json.dumps(TICKET)}
    if not body.get("tools"):
        return {"content": ANSWER}
    done = sum(1 for m in messages if m.get("role") == "tool")
    text = _user_text(messages)
    if "parallel" in text:
        if done:
            return {"content": "all three finished"}
        return {
            "content": None,
            "tool_calls": [_call(f"p{i}", "wait", {"ms": 200}) for i in range(3)],
        }
    match = re.search(r"turns=(\d+)", text)
    turns = int(match.group(1)) if match else 5
    if done >= turns:
        return {"content": ANSWER}
    return {
        "content": None,
        "tool_calls": [_call(f"c{done}", "lookup_order", {"order_id": f"A-{1000 + done}"})],
    }


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }
