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
triager (``workflows/_triage_rules.py``, shared with the workflow's offline model).
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
    }


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


def _respond(request: ModelRequest) -> Turn:
    """Turn 1: read the rules (and look up what the ticket names); then answer."""
    subject, body = ticket_from_request(request)
    if not any(m.get("role") == "tool" for m in request.messages):
        wanted: list[tuple[str, dict[str, Any], str]] = [("routing_rules", {}, "t1-0")]
        if (order := ORDER_IN_TEXT.search(body)) is not None:
            wanted.append(("get_order", {"order_id": order.group()}, "t1-1"))
        if (email := EMAIL_IN_TEXT.search(body)) is not None:
            wanted.append(("find_customer", {"email": email.group()}, "t1-2"))
        return calls(*wanted)
    answer = assess(subject, body)
    answer["queue"] = queue_for(answer["category"], answer["urgency"])
    return calls(("final_answer", answer, "t2-0"))


def offline_model() -> ScriptedModel:
    """The model ``--model scripted`` uses for this agent (a pure responder)."""
    return ScriptedModel(_respond)


__all__ = ["TriageAnswer", "offline_model", "routing_rules", "triage_agent"]
