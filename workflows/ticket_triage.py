"""Summarise, classify and route a support ticket: the canonical workflow (DESIGN §12).

The steps are known in advance, so this is a workflow, not an agent: ONE structured-output
model call (``classify``: summary, category, urgency 1–5) and plain routing code
(``route``: the queue). Two nodes, one model call, the same path every time::

    loopwise run workflows/ticket_triage.py:triage \\
        --input '{"subject": "Charged twice", "body": "Two charges of $49 on March 3."}'

Queues (the rule lives in ``_triage_rules.queue_for``, shared with the triage agent):

=============  ==============  ==============================================
category       queue           note
=============  ==============  ==============================================
billing        billing
technical      tech-support
account        accounts
shipping       logistics
other          general
(any)          escalations     urgency 4 or 5: blocked now, fraud, outages...
=============  ==============  ==============================================

Offline (``--model scripted``) the model is :data:`offline_model`, which answers with a
keyword heuristic (``_triage_rules.assess``): sensible, right on most tickets of
``data/tickets.jsonl`` and wrong on the ambiguous ones.

``cascade`` is the same job as a cascade: a judge (``read``: category and urgency, with
probabilities) answers the tickets it is sure of, routed by the same rule; the triage agent
(``agents/triage_agent.py``) takes the rest. Offline the judge's probabilities follow the
keyword evidence (a softmax of the hits), so ambiguous tickets are unsure and some wrong
readings are confident. ``triage`` and the agent are the two ends of its frontier::

    loopwise eval workflows/ticket_triage.py:cascade --dataset workflows/data/tickets.jsonl \
        --model scripted --sweep
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from _triage_rules import (
    URGENCY_SCALE,
    Assessment,
    Category,
    Ticket,
    Triage,
    assess,
    queue_for,
    reading_probabilities,
    summarize,
    ticket_from_request,
)
from pydantic import BaseModel, Field

import loopwise
from loopwise import Cascade, Judge, ModelRequest, Ruling, Structured, Workflow
from loopwise.testing import ScriptedModel

# The cascade hands what it is unsure of to the triage agent, which lives in agents/.
_AGENTS = str(Path(__file__).resolve().parent.parent / "agents")
if _AGENTS not in sys.path:
    sys.path.append(_AGENTS)

from triage_agent import respond as _agent_respond  # noqa: E402
from triage_agent import triage_agent as _triage_agent  # noqa: E402

INSTRUCTIONS = f"""\
You triage customer support tickets. Read the ticket (JSON with subject and body) and give:
- summary: one sentence saying what the customer needs;
- category: billing (charges, refunds, invoices, plans), technical (bugs, errors, the app,
  the API, integrations), account (logging in, passwords, 2FA, profile, team members,
  account deletion), shipping (orders in transit, delivery, damaged or wrong items,
  returns), or other (feedback, feature requests, partnerships, press, anything else);
- urgency from 1 to 5:
{URGENCY_SCALE}
Judge by what the customer needs, not by single words."""

classify = Structured("classify", output=Assessment, instructions=INSTRUCTIONS)


@loopwise.step
async def route(assessment: Assessment) -> Triage:
    """Pick the queue with plain code: escalate urgent tickets, else by category.

    ``async`` only so this instant, pure code runs on the event loop instead of a worker
    thread (a sync step would be fine: it would only take a thread hop).
    """
    queue = queue_for(assessment.category, assessment.urgency)
    return Triage(**assessment.model_dump(), queue=queue)


triage = (
    Workflow(
        "triage",
        input_type=Ticket,
        description="Summarise, classify and route a support ticket (one model call).",
    )
    .then(classify)
    .then(route)
)


class Reading(BaseModel):
    """What the cascade's judge answers about a ticket."""

    category: Category = Field(
        description="Which area does the ticket belong to? billing (charges, refunds, "
        "invoices, plans), technical (bugs, errors, the app, the API), account (logging "
        "in, passwords, 2FA, profile, team members), shipping (orders in transit, "
        "delivery, damaged or wrong items, returns) or other?"
    )
    urgency: int = Field(ge=1, le=5, description=f"How urgent is it?\n{URGENCY_SCALE}")


read = Judge(
    "read",
    Reading,
    instructions="You triage customer support tickets (JSON with subject and body). "
    "Judge by what the customer needs, not by single words.",
)


@loopwise.step
async def answer(ruling: Ruling[Reading]) -> Triage:
    """The sure side: the judge's reading, routed by the desk's rules (no model call; the
    summary is the ticket's subject and first sentence)."""
    ticket = Ticket.model_validate(ruling.input)
    reading = ruling.answer
    return Triage(
        summary=summarize(ticket.subject, ticket.body),
        category=reading.category,
        urgency=reading.urgency,
        queue=queue_for(reading.category, reading.urgency),
    )


cascade = Cascade(
    "cascade",
    read,
    sure=answer,
    unsure=_triage_agent,
    threshold=0.85,
    description="Triage a ticket by a judge when it is sure, by the triage agent otherwise.",
)
"""The triage cascade: the judge answers the tickets it is sure of (one call), the triage
agent takes the rest. ``loopwise eval workflows/ticket_triage.py:cascade --sweep`` shows
what each threshold buys between the two pure architectures (``triage`` and the agent)."""


def _offline_answer(request: ModelRequest) -> Any:
    """What the offline model answers: the keyword heuristic on the ticket (pure) — with
    probabilities for the judge, and as the triage agent for the cascade's unsure side."""
    subject, body = ticket_from_request(request)
    if request.decision is not None:
        return reading_probabilities(subject, body)
    if request.labels is not None:  # the log-probability backend: one question per call
        spread = reading_probabilities(subject, body)
        digits = all(label.isdigit() for label in request.labels.values())
        return spread["urgency" if digits else "category"]
    if request.tools and any(t["function"]["name"] == "routing_rules" for t in request.tools):
        return _agent_respond(request)
    return assess(subject, body)


default_target = "triage"
"""``loopwise run workflows/ticket_triage.py`` (the module alone) means the workflow."""

offline_model = ScriptedModel(_offline_answer, name="scripted")
"""``--model scripted`` uses this: a keyword triager standing in for the model (and for
the agent of the cascade's unsure side)."""
