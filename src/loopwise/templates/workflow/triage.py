"""Triage a support ticket: a WORKFLOW, because the steps are known in advance.

One structured-output model call (``classify``: summary, category, urgency 1-5), then
plain routing code (``route``: the queue). Two nodes, one model call, the same path
every time. Try it::

    loopwise check triage.py:triage
    loopwise run triage.py:triage --model scripted --input-text "I was charged twice"
    loopwise eval triage.py:triage --dataset triage_cases.jsonl --model scripted
    pytest

``--model scripted`` runs offline with :data:`offline_model` below: a keyword triager
standing in for the model, so offline runs and evals are sensible (right on the clear
tickets, wrong on the vague ones). With a real model (``--model gpt-4o-mini`` and
``OPENAI_API_KEY``, or any OpenAI-compatible server via ``OPENAI_BASE_URL``) the same
commands measure it instead.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

import loopwise
from loopwise import Structured, Workflow
from loopwise.testing import ScriptedModel

Category = Literal["billing", "technical", "account", "shipping", "other"]

QUEUES: dict[str, str] = {
    "billing": "billing",
    "technical": "tech-support",
    "account": "accounts",
    "shipping": "logistics",
    "other": "general",
}
ESCALATE_AT = 4
"""Urgency from which a ticket goes to ``escalations`` whatever its category."""


class Assessment(BaseModel):
    """The model's reading of a ticket."""

    summary: str = Field(description="One sentence: what the customer needs.")
    category: Category = Field(description="The area the ticket belongs to.")
    urgency: int = Field(ge=1, le=5, description="1 (no time pressure) to 5 (emergency).")


class Triage(Assessment):
    """A triaged ticket: the assessment plus its queue."""

    queue: str = Field(description="The queue the routing rules give.")


classify = Structured(
    "classify",
    output=Assessment,
    instructions=(
        "You triage customer support tickets. Give a one-sentence summary, the category "
        "(billing, technical, account, shipping or other) and the urgency from 1 (no time "
        "pressure) to 5 (an emergency: fraud, an outage, safety); 4 means blocked today."
    ),
)


@loopwise.step
async def route(assessment: Assessment) -> Triage:
    """Pick the queue with plain code: urgent tickets escalate, the rest go by category."""
    urgent = assessment.urgency >= ESCALATE_AT
    queue = "escalations" if urgent else QUEUES[assessment.category]
    return Triage(**assessment.model_dump(), queue=queue)


triage = (
    Workflow("triage", input_type=str, description="Summarise, classify and route a ticket.")
    .then(classify)
    .then(route)
)

# The offline model (`--model scripted`): a keyword triager standing in for the model.

_KEYWORDS: dict[Category, tuple[str, ...]] = {
    "billing": ("charge", "refund", "invoice", "payment", "subscription", "price", "card"),
    "technical": ("error", "crash", "bug", "api", "sync", "slow", "app"),
    "account": ("password", "log in", "login", "2fa", "locked", "account", "email address"),
    "shipping": ("order", "package", "parcel", "deliver", "tracking", "arrive", "damaged"),
    "other": ("feature", "feedback", "partnership", "press", "love", "thank"),
}
_URGENT = ("fraud", "hacked", "outage", "urgent", "right now", "today", "blocked", "asap")


def assess(text: str) -> dict[str, object]:
    """A keyword triager: what the offline model answers (pure, so runs replay)."""
    lowered = text.lower()
    hits = {c: sum(lowered.count(w) for w in words) for c, words in _KEYWORDS.items()}
    best = max(hits, key=lambda c: hits[c])
    urgency = 5 if "fraud" in lowered or "hacked" in lowered else 2
    if urgency < 5 and any(w in lowered for w in _URGENT):
        urgency = 4
    return {
        "summary": text.strip().splitlines()[0][:160] if text.strip() else "(empty ticket)",
        "category": best if hits[best] else "other",
        "urgency": urgency,
    }


offline_model = ScriptedModel(lambda request: assess(request.user_text()))
