"""The support desk that both architectures of this project work for.

``triage_workflow.py`` (a workflow) and ``triage_agent.py`` (an agent) do one job, triage a
support ticket, with one contract: the ticket comes in as text, :class:`Triage` comes out
(summary, category, urgency 1-5, queue), and the queue comes from :func:`queue_for`, the
desk's routing rule (plain code). So ``loopwise eval`` over ``tickets.jsonl`` compares their
judgement and their cost, not their rules.

:func:`assess` is a keyword triager: what both offline models answer with, so that
``--model scripted`` runs and evals are sensible (right on most tickets, wrong on the
ambiguous ones) with no key and no network. With a real model it is not used.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

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

URGENCY_SCALE = (
    "1 = feedback or a question with no time pressure; 2 = a minor problem, days are fine; "
    "3 = a real problem, fix within a day or two; 4 = blocked or losing money right now; "
    "5 = an emergency: fraud, a security breach, an outage for many, health or safety"
)


class Assessment(BaseModel):
    """A reading of a ticket."""

    summary: str = Field(description="One sentence: what the customer needs.")
    category: Category = Field(description="The area the ticket belongs to.")
    urgency: int = Field(ge=1, le=5, description="1 (no time pressure) to 5 (emergency).")


class Triage(Assessment):
    """A triaged ticket: the assessment plus the queue the desk's rule gives."""

    queue: str = Field(description="The queue, by the desk's routing rule.")


def queue_for(category: str, urgency: int) -> str:
    """The desk's routing rule: urgent tickets escalate, the rest go by category."""
    return "escalations" if urgency >= ESCALATE_AT else QUEUES.get(category, "general")


# The keyword triager (the offline models' judgement): substrings, subject hits count double.
_KEYWORDS: dict[Category, tuple[str, ...]] = {
    "billing": ("charge", "refund", "invoice", "billing", "payment", "paid", "price",
                "subscription", "discount", "vat", "prorat", "plan", "declined", "receipt",
                "fee", "credit card", "money back", "renewed", "card"),
    "technical": ("crash", "error", "bug", "api", "500", "404", "export", "sync", "slow",
                  "webhook", "integration", "token", "sso", "install", "update", "load",
                  "app ", "not working", "timeout", "settings", "configure", "closes"),
    "account": ("log in", "login", "sign in", "password", "2fa", "two-factor", "locked",
                "hacked", "profile", "username", "invite", "admin", "my account",
                "delete my", "merge", "email address", "gdpr", "account"),
    "shipping": ("order #", "order ", "package", "parcel", "deliver", "shipping", "ship",
                 "tracking", "courier", "arrive", "damaged", "return label", "address",
                 "shipment", "depot", "received a"),
    "other": ("partnership", "press", "hiring", "feedback", "love", "thank",
              "feature request", "suggest", "reporter", "accessibility", "dark mode",
              "reseller"),
}  # fmt: skip
_URGENCY: list[tuple[int, tuple[str, ...]]] = [
    (5, ("fraud", "hacked", "did not make", "outage", "production", "down for", "critical",
         "security", "breach", "insulin", "medication", "emergency", "everyone", "nobody")),
    (4, ("urgent", "asap", "right now", "today", "tomorrow", "blocked", "locked out",
         "losing", "escalate", "in two hours", "deadline")),
    (1, ("no rush", "just wanted", "would you consider", "love", "thank", "hiring",
         "feature request", "when you can", "is it possible", "do you ")),
    (3, ("not ", "n't", "never", "error", "wrong", "broken", "failed", "fails", "stuck",
         "crash", "locked", "damaged", "declined")),
]  # fmt: skip


def assess(ticket: str) -> dict[str, object]:
    """``{"summary", "category", "urgency"}`` for a ticket (its first line is the subject)."""
    subject, _, body = ticket.strip().partition("\n")
    low_subject, text = subject.lower(), ticket.lower()
    for calm in ("not urgent", "no urgency", "not blocking"):
        text = text.replace(calm, "no rush")
    hits = {c: sum(low_subject.count(k) + text.count(k) for k in ks) for c, ks in _KEYWORDS.items()}
    best = max(hits, key=lambda c: hits[c])
    urgency = next((u for u, words in _URGENCY if any(w in text for w in words)), 2)
    first = re.split(r"(?<=[.!?])\s", body.strip(), maxsplit=1)[0]
    summary = f"{subject}: {first}" if first else subject or "(empty ticket)"
    return {
        "summary": summary[:160],
        "category": best if hits[best] else "other",
        "urgency": urgency,
    }
