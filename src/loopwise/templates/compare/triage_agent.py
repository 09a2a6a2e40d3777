"""Triage a support ticket as an AGENT: the same job as ``triage_workflow.py``, decided by
a model in a loop with tools, so ``loopwise eval`` can show what the loop costs and buys.

The agent reads the desk's routing rules and, when the ticket names an order (``O-1017``),
looks it up, then answers with a validated :class:`~tickets.Triage`. Its tools are
read-only lookups in the run's deps (``ctx.deps``, made by :func:`make_deps`), so an eval
touches nothing real. It costs at least two model calls where the workflow costs one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field
from tickets import ESCALATE_AT, QUEUES, URGENCY_SCALE, Triage, assess, queue_for

from loopwise import Agent, Budget, Context, IdPattern, ModelRequest, tool
from loopwise.testing import ScriptedAgent

OrderId = Annotated[str, IdPattern(r"O-\d{4}"), Field(description="An order id: O-1017.")]


@dataclass(frozen=True)
class Desk:
    """What the tools read: the run's deps. A real project opens its order system here."""

    orders: dict[str, dict[str, str]]


def make_deps() -> Desk:
    """The desk of a run the command line starts or resumes (``run``, ``eval``, ``resume``)."""
    return Desk(
        orders={
            "O-1017": {"status": "delivered", "plan": "business"},
            "O-1022": {"status": "in_transit", "plan": "personal"},
            "O-1031": {"status": "payment_failed", "plan": "personal"},
        }
    )


@tool
def routing_rules() -> dict[str, object]:
    """The desk's routing rules: each category's queue, when to escalate, the urgency scale.
    Call it before choosing a queue.
    """
    escalate = f"urgency {ESCALATE_AT} or more goes to 'escalations', whatever the category"
    return {"queues": QUEUES, "escalate": escalate, "urgency_scale": URGENCY_SCALE}


@tool
def lookup_order(order_id: OrderId, ctx: Context[Desk]) -> dict[str, str]:
    """An order's status and the customer's plan. Use it when the ticket names an order."""
    if order_id not in ctx.deps.orders:
        raise LookupError(f"no order {order_id}")
    return {"id": order_id, **ctx.deps.orders[order_id]}


triage_agent = Agent(
    name="triage_agent",
    instructions=(
        "You triage customer support tickets (the first line is the subject). Read the "
        "routing rules; if the ticket names an order, look it up. Then answer with "
        "final_answer: a one-sentence summary, the category, the urgency and the queue the "
        "rules give."
    ),
    tools=[routing_rules, lookup_order],
    output_type=Triage,
    max_steps=4,
    budget=Budget(max_tokens=20_000),
)

# The offline model (`--model scripted`): read the rules (and the order named), then answer.


def _order(request: ModelRequest) -> dict[str, str] | None:
    named = re.search(r"\bO-\d{4}\b", request.user_text())
    return {"order_id": named.group()} if named else None


def _triage(request: ModelRequest) -> dict[str, object]:
    found = assess(request.user_text())
    return {**found, "queue": queue_for(str(found["category"]), int(str(found["urgency"])))}


offline_model = ScriptedAgent(
    [("routing_rules", {}), ("lookup_order", _order)],  # one turn, the calls at once
    answer=_triage,
    stop_on_error=False,  # an order it cannot find changes nothing
)
