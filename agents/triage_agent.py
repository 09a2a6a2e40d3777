"""The ticket-triage job done as an agent, to compare with the ``triage`` workflow.

    loopwise run agents/triage_agent.py:triage_agent \\
        --input '{"subject": "Charged twice", "body": "Two charges of $49 on March 3."}'

Same input (``{"subject", "body"}``) and the same output fields as
``workflows/ticket_triage.py:triage`` (summary, category, urgency, queue), so
``loopwise eval`` can run both over one dataset. The agent reads the desk's routing
rules and, when the ticket names them, the customer (by email) or the order (``O-1017``)
before it answers through ``final_answer``. It costs at least two model calls where the
workflow costs one: that difference is what the comparison measures.

``offline_model`` does what a sensible agent would: turn 1 reads the routing rules (and
looks up a named order or customer, concurrently), turn 2 answers with the desk's keyword
triager (``workflows/_triage_rules.py``, shared with the workflow's offline model),
corrected by the category notes the rules gave it: so it gets right the tickets the
keywords misread (a billing page that errors, a paid order that never came) and, applying
a note too widely, gets one wrong that the workflow gets right.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from shop import EMAIL_IN_TEXT, ORDER_IN_TEXT, find_customer, get_order

from loopwise import Agent, Budget, ModelRequest, Turn, tool
from loopwise.testing import ScriptedModel, calls

# The desk's rules live beside the workflow; both architectures use the same ones.
_WORKFLOWS = str(Path(__file__).resolve().parent.parent / "workflows")
if _WORKFLOWS not in sys.path:
    sys.path.append(_WORKFLOWS)

from _triage_rules import (  # noqa: E402
    ESCALATE_AT,
    QUEUES,
    URGENCY_SCALE,
    Ticket,
    Triage,
    assess,
    queue_for,
    ticket_from_request,
)

TriageAnswer = Triage
"""The agent's answer: the same model as the triage workflow's output."""


@tool
def routing_rules() -> dict[str, Any]:
    """The support desk's routing rules: the queue of each category, when to escalate,
    and the urgency scale.
    Call it before choosing a queue.
    """
    return {
        "queues_by_category": dict(QUEUES),
        "escalate": f"urgency {ESCALATE_AT} or more goes to 'escalations', whatever the category",
        "urgency_scale": URGENCY_SCALE.splitlines(),
        "category_notes": CATEGORY_NOTES,
    }


CATEGORY_NOTES: list[dict[str, Any]] = [
    {
        "category": "technical",
        "when": "one of our pages, the app or the API fails or is hard to use (an error "
        "message, a 404, a crash, text that cannot be read), whatever the page is for: a "
        "billing page that errors is technical",
        "signs": ["went wrong", "404", "crash", "hard to read"],
    },
    {
        "category": "shipping",
        "when": "an order that was paid for never arrived: logistics finds it first, "
        "billing refunds only after",
        "signs": ["never arrived", "never came"],
    },
]
"""The desk's notes on tickets that look like one category and belong to another (the
``signs`` are what the offline model matches; a real model reads ``when``)."""


INSTRUCTIONS = """\
You triage customer support tickets (JSON with subject and body).
First read the routing rules. If the ticket names an order id (like O-1017) or the
customer's email, look it up: a failed order or a business-plan customer can change the
urgency. Then answer with final_answer: a one-sentence summary, the category (billing,
technical, account, shipping or other), the urgency 1-5, and the queue the rules give.
"""

triage_agent = Agent(
    name="triage_agent",
    instructions=INSTRUCTIONS,
    tools=(routing_rules, find_customer, get_order),
    output_type=TriageAnswer,
    input_type=Ticket,
    max_steps=6,
    budget=Budget(max_tokens=30_000),
)


def respond(request: ModelRequest) -> Turn:
    """Turn 1: read the rules (and look up what the ticket names); then answer, applying
    the rules' category notes to what the keyword triager says."""
    subject, body = ticket_from_request(request)
    if not any(m.get("role") == "tool" for m in request.messages):
        wanted: list[tuple[str, dict[str, Any], str]] = [("routing_rules", {}, "t1-0")]
        if (order := ORDER_IN_TEXT.search(body)) is not None:
            wanted.append(("get_order", {"order_id": order.group()}, "t1-1"))
        if (email := EMAIL_IN_TEXT.search(body)) is not None:
            wanted.append(("find_customer", {"email": email.group()}, "t1-2"))
        return calls(*wanted)
    answer = assess(subject, body)
    text = f"{subject} {body}".lower()
    for note in _notes_read(request):
        if any(sign in text for sign in note.get("signs", ())):
            answer["category"] = note["category"]
            break
    answer["queue"] = queue_for(answer["category"], answer["urgency"])
    return calls(("final_answer", answer, "t2-0"))


def _notes_read(request: ModelRequest) -> list[dict[str, Any]]:
    """The category notes of the routing rules the agent read (none if it read none)."""
    for result in request.tool_results("routing_rules"):
        read = result.value
        if isinstance(read, dict):
            return list(read.get("category_notes") or [])
    return []


def offline_model() -> ScriptedModel:
    """The model ``--model scripted`` uses for this agent (a pure responder)."""
    return ScriptedModel(respond)


__all__ = [
    "CATEGORY_NOTES",
    "TriageAnswer",
    "offline_model",
    "respond",
    "routing_rules",
    "triage_agent",
]
