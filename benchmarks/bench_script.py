"""What the benchmark server answers: a pure function of the request.

* a request with a ``response_format`` (the triage call) gets a ticket as JSON;
* a request with tools gets one tool call per turn until the transcript holds
  ``turns`` tool results (``turns`` is read from the user message, ``turns=N``; 5 by
  default), then a short answer;
* a user message containing ``parallel`` gets three calls of ``wait`` in one turn;
* a Decisions API request (the judge) gets :data:`READING`'s probabilities.

An agent's turns report, as OpenAI does, the prompt tokens read from the prompt cache:
everything up to the last assistant turn (sent before, so cached), about 4 characters a
token.
"""

from __future__ import annotations

import re
from typing import Any

from loopwise import ModelRequest, Turn
from loopwise.testing import call, calls, reply

TICKET = {
    "summary": "Customer was charged twice for one order.",
    "category": "billing",
    "urgency": 3,
}
ANSWER = "Order A-1001 failed because the card was declined."
READING = {"category": {"billing": 0.86, "technical": 0.09, "account": 0.03}}
"""The judge's answer: a probability per category (the rest share what is left)."""


def _user_text(messages: list[dict[str, Any]]) -> str:
    return next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")


def respond(request: ModelRequest) -> Turn:
    """The assistant turn for one request."""
    if request.decision is not None:
        return READING  # type: ignore[return-value]  # the server's decision answer
    if request.response_format is not None:
        return reply(TICKET)
    if not request.tools:
        return reply(ANSWER)
    done = sum(1 for m in request.messages if m.get("role") == "tool")
    text = _user_text(request.messages)
    if "parallel" in text:
        if done:
            return reply("all three finished")
        return calls(*((("wait", {"ms": 200}, f"p{i}")) for i in range(3)))
    match = re.search(r"turns=(\d+)", text)
    if done >= (int(match.group(1)) if match else 5):
        return _cached(reply(ANSWER), request)
    return _cached(call("lookup_order", {"order_id": f"A-{1000 + done}"}, id=f"c{done}"), request)


def _cached(turn: Turn, request: ModelRequest) -> Turn:
    """``turn`` with the usage a caching server reports: the prompt, and of it the part
    sent before (the messages up to the last assistant turn, and the tools)."""
    last = max(
        (i for i, m in enumerate(request.messages) if m.get("role") == "assistant"), default=-1
    )
    if last < 0:
        return turn
    seen = ModelRequest(messages=request.messages[: last + 1], tools=request.tools)
    turn.input_tokens = max(1, request.prompt_chars() // 4)
    turn.cached_tokens = min(turn.input_tokens, seen.prompt_chars() // 4)
    return turn
