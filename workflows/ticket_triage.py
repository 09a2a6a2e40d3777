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
"""

from __future__ import annotations

from _triage_rules import (
    URGENCY_SCALE,
    Assessment,
    Ticket,
    Triage,
    assess,
    queue_for,
    ticket_from_request,
)

import loopwise
from loopwise import ModelRequest, Structured, Workflow
from loopwise.testing import ScriptedModel

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


def _offline_answer(request: ModelRequest) -> dict[str, object]:
    """What the offline model answers: the keyword heuristic on the ticket (pure)."""
    return assess(*ticket_from_request(request))


offline_model = ScriptedModel(_offline_answer, name="scripted")
"""``--model scripted`` uses this: a keyword triager standing in for the model."""
