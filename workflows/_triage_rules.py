"""The support desk's rules, shared by the triage workflow and the triage agent.

* :func:`queue_for` is the routing rule (plain code, no model): each category has a
  queue, and anything of urgency :data:`ESCALATE_AT` or more goes to ``escalations``.
  Both architectures route with it, so an eval compares their judgement, not their rules.
* :func:`assess` is a keyword heuristic that classifies a ticket the way the model is
  asked to (summary, category, urgency). It is what the examples' offline scripted models
  answer with, so ``--model scripted`` runs are sensible: right on most tickets, wrong on
  the ambiguous ones, like a cheap first-line triager — not a lookup of the dataset.
* :func:`ticket_from_request` recovers ``(subject, body)`` from a model request whose
  first user message is the ticket (as JSON, or as plain text).
* :class:`Ticket` (the input) and :class:`Triage` (the output: summary, category,
  urgency, queue) are the contract both architectures share, so ``loopwise eval`` compares
  like with like; :class:`Assessment` is the model's part of it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal

from pydantic import BaseModel, Field

Category = Literal["billing", "technical", "account", "shipping", "other"]
Queue = Literal["billing", "tech-support", "accounts", "logistics", "general", "escalations"]

CATEGORIES: tuple[Category, ...] = ("billing", "technical", "account", "shipping", "other")

QUEUES: dict[str, Queue] = {
    "billing": "billing",
    "technical": "tech-support",
    "account": "accounts",
    "shipping": "logistics",
    "other": "general",
}
"""The queue of each category when the ticket is not escalated."""

ESCALATE_AT = 4
"""Urgency from which a ticket skips its category's queue and goes to ``escalations``."""

URGENCY_SCALE = """\
1 = feedback, praise or a question with no time pressure
2 = a question or a minor problem; a few days is fine
3 = a real problem that stops the customer doing something; fix within a day or two
4 = the customer is blocked or losing money right now; needs action today
5 = an emergency: a security breach or fraud, an outage for many users, health or safety"""


class Ticket(BaseModel):
    """A support ticket as it arrives."""

    subject: str = Field(description="The ticket's subject line.")
    body: str = Field(description="What the customer wrote.")


class Assessment(BaseModel):
    """The model's reading of a ticket."""

    summary: str = Field(description="One sentence: what the customer needs.")
    category: Category = Field(description="The area the ticket belongs to.")
    urgency: int = Field(ge=1, le=5, description="1 (no time pressure) to 5 (emergency).")


class Triage(Assessment):
    """A triaged ticket: the assessment plus the queue the desk's rules give."""

    queue: Queue = Field(description="The queue, by the desk's routing rules.")


def queue_for(category: str, urgency: int) -> Queue:
    """The queue for a ticket: ``escalations`` from :data:`ESCALATE_AT`, else by category."""
    if urgency >= ESCALATE_AT:
        return "escalations"
    return QUEUES.get(category, "general")


def _words(spec: str) -> tuple[str, ...]:
    return tuple(spec.split("|"))


# Substrings, matched case-insensitively; a trailing space keeps "app " off "apply".
_KEYWORDS: dict[Category, tuple[str, ...]] = {
    "billing": _words(
        "charge|charged|refund|invoice|billing|payment|paid|price|subscription|discount|vat|"
        "prorat|plan|declined|receipt|fee|credit card|money back|renewed|card"
    ),
    "technical": _words(
        "crash|error|bug|api|500|404|export|sync|slow|webhook|integration|token|sso|install|"
        "update|load|app |not working|timeout|settings|configure|closes"
    ),
    "account": _words(
        "log in|login|sign in|password|2fa|two-factor|locked|hacked|profile|username|invite|"
        "admin|my account|delete my|merge|email address|gdpr|account"
    ),
    "shipping": _words(
        "order #|order |package|parcel|deliver|shipping|ship|tracking|courier|arrive|damaged|"
        "return label|address|shipment|depot|received a"
    ),
    "other": _words(
        "partnership|press|hiring|feedback|love|thank|feature request|suggest|reporter|"
        "accessibility|dark mode|reseller"
    ),
}

_URGENT_5 = _words(
    "fraud|hacked|did not make|outage|production|down for|critical|security|breach|insulin|"
    "medication|emergency|everyone|nobody"
)
_URGENT_4 = _words(
    "urgent|asap|right now|today|tomorrow|blocked|locked out|losing|escalate|in two hours|deadline"
)
_CALM = _words(
    "no rush|just wanted|would you consider|love|thank|hiring|feature request|when you can|"
    "is it possible|do you "
)
_PROBLEM = _words(
    "not |n't|never|error|wrong|broken|failed|fails|stuck|crash|locked|damaged|declined"
)


def category_scores(subject: str, body: str) -> dict[Category, int]:
    """Keyword hits per category (subject hits count double)."""
    subject, body = subject.lower(), body.lower()
    return {
        category: sum(2 * subject.count(k) + body.count(k) for k in words)
        for category, words in _KEYWORDS.items()
    }


def category_of(subject: str, body: str) -> Category:
    """The category with the most keyword hits (subject hits count double); else ``other``."""
    scores = category_scores(subject, body)
    best = max(CATEGORIES, key=lambda c: scores[c])
    return best if scores[best] > 0 else "other"


def reading_probabilities(subject: str, body: str) -> dict[str, dict[str, float]]:
    """What an offline judge answers: the heuristic's category and urgency, each with a
    probability that grows with how clear the evidence is (a softmax of the keyword hits;
    an urgency rule that fired on an emergency word is surer than the default). Its
    likeliest labels are :func:`assess`'s, so an answer taken as sure is the heuristic's;
    ambiguous tickets get middling confidence, and some wrong ones a confident one."""
    scores = category_scores(subject, body)
    if not any(scores.values()):
        scores["other"] = 1
    weights = {c: math.exp(scores[c] / 0.5) for c in CATEGORIES}
    total = sum(weights.values())
    urgency = urgency_of(subject, body)
    sure = _URGENCY_SURE[urgency]
    near = {u: 1.0 / (1 + abs(u - urgency)) for u in range(1, 6) if u != urgency}
    spread = {str(u): (1 - sure) * w / sum(near.values()) for u, w in near.items()}
    return {
        "category": {c: w / total for c, w in weights.items()},
        "urgency": {str(urgency): sure, **spread},
    }


_URGENCY_SURE = {5: 0.97, 4: 0.95, 3: 0.93, 2: 0.88, 1: 0.97}
"""How sure the urgency rule is of each level it gives (2 is the fallback: least sure)."""


def urgency_of(subject: str, body: str) -> int:
    """1–5 from urgency words: emergencies, deadlines, calm phrasing, problem words."""
    text = f"{subject} {body}".lower()
    for calm in ("not urgent", "no urgency", "not blocking"):
        text = text.replace(calm, "no rush")
    if any(w in text for w in _URGENT_5):
        return 5
    if any(w in text for w in _URGENT_4):
        return 4
    if any(w in text for w in _CALM):
        return 1
    return 3 if any(w in text for w in _PROBLEM) else 2


def summarize(subject: str, body: str, limit: int = 160) -> str:
    """One line: the subject and the body's first sentence, cut at ``limit`` characters."""
    first = re.split(r"(?<=[.!?])\s", body.strip(), maxsplit=1)[0]
    text = f"{subject.strip()}: {first}" if subject.strip() else first
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def assess(subject: str, body: str) -> dict[str, Any]:
    """``{"summary", "category", "urgency"}`` for a ticket, by keywords (see module doc)."""
    return {
        "summary": summarize(subject, body),
        "category": category_of(subject, body),
        "urgency": urgency_of(subject, body),
    }


def ticket_from_request(request: Any) -> tuple[str, str]:
    """``(subject, body)`` from the first user message of a model request.

    A JSON object with ``subject``/``body`` (how structured steps and agents send a
    ticket) is read as such; any other text is the body.
    """
    for message in request.messages:
        if message.get("role") == "user":
            return _ticket_from_text(str(message.get("content") or ""))
    return "", ""


def _ticket_from_text(text: str) -> tuple[str, str]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return "", text
    if isinstance(data, dict):
        return str(data.get("subject", "")), str(data.get("body", ""))
    return "", str(data)
