"""Investigate why a customer's orders failed: an AGENT, because the steps are not known
in advance (which orders failed, and how, decides what to look at next) and every tool
is a cheap, read-only lookup. Try it::

    loopwise check orders_agent.py:investigate
    loopwise run orders_agent.py:investigate --model scripted \\
        --input-text "Why did customer C-1002's orders fail?"
    loopwise eval orders_agent.py:investigate --dataset orders_cases.jsonl --model scripted
    pytest

The tools are read-only and scoped by allow-lists (ids must look like ``C-1001`` and
``O-2001``); they read the shop from the run's deps (``ctx.deps``, made by
:func:`make_deps`); the agent has a step limit and a token budget, and answers with a
validated :class:`Findings`. ``--model scripted`` runs offline with :data:`offline_model`, a
:class:`~loopwise.testing.ScriptedAgent`: it investigates the way a careful person would
(customer, orders, then the payments of the failed ones, concurrently) as a pure function
of the transcript, so offline runs and evals are sensible and a resumed run replays exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, TypedDict

from pydantic import BaseModel, Field

from loopwise import Agent, Budget, Context, IdPattern, ModelRequest, tool
from loopwise.testing import ScriptedAgent

# Sample data; make_deps() below is where a real project opens its database instead.
CUSTOMERS: dict[str, dict[str, str]] = {
    "C-1001": {"name": "Ada Moreau", "email": "ada@example.com"},
    "C-1002": {"name": "Ben Okafor", "email": "ben@example.com"},
    "C-1003": {"name": "Chen Li", "email": "chen@example.com"},
    "C-1004": {"name": "Dana Whitfield", "email": "dana@example.com"},
    "C-1005": {"name": "Eli Stone", "email": "eli@example.com"},
}
ORDERS: dict[str, dict[str, str]] = {
    "O-2001": {"customer": "C-1001", "status": "delivered"},
    "O-2002": {"customer": "C-1001", "status": "delivered"},
    "O-2003": {"customer": "C-1002", "status": "payment_failed"},
    "O-2004": {"customer": "C-1002", "status": "delivered"},
    "O-2005": {"customer": "C-1003", "status": "payment_failed"},
    "O-2006": {"customer": "C-1003", "status": "lost"},
    "O-2007": {"customer": "C-1004", "status": "cancelled"},
    "O-2008": {"customer": "C-1004", "status": "payment_failed"},
    "O-2009": {"customer": "C-1004", "status": "lost"},
    "O-2010": {"customer": "C-1005", "status": "shipped"},
}


class Payment(TypedDict):
    """One payment attempt of an order."""

    status: str
    reason: str | None


PAYMENTS: dict[str, list[Payment]] = {
    "O-2003": [{"status": "declined", "reason": "insufficient_funds"}],
    "O-2005": [{"status": "declined", "reason": "expired_card"}],
    "O-2006": [{"status": "captured", "reason": None}],
    "O-2007": [{"status": "refunded", "reason": "item out of stock"}],
    "O-2008": [{"status": "declined", "reason": "do_not_honor"}],
    "O-2009": [{"status": "captured", "reason": None}],
}
FAILED = frozenset({"payment_failed", "cancelled", "lost"})

CustomerId = Annotated[str, IdPattern(r"C-\d{4}"), Field(description="A customer id: C-1001.")]
OrderId = Annotated[str, IdPattern(r"O-\d{4}"), Field(description="An order id: O-2001.")]


@dataclass(frozen=True)
class Shop:
    """What the tools read: the run's deps (``ctx.deps``), never a module global, so a
    test or an eval can hand each run its own shop."""

    customers: dict[str, dict[str, str]]
    orders: dict[str, dict[str, str]]
    payments: dict[str, list[Payment]]


def make_deps() -> Shop:
    """The shop of a run the command line starts or resumes (``loopwise run``, ``eval``,
    ``resume`` call it; Python callers pass ``deps=``). Open your database or client here."""
    return Shop(customers=CUSTOMERS, orders=ORDERS, payments=PAYMENTS)


@tool
def lookup_customer(customer_id: CustomerId, ctx: Context[Shop]) -> dict[str, str]:
    """Look up a customer by id: name and email.
    Use it first, to check the customer exists.
    """
    if customer_id not in ctx.deps.customers:
        raise LookupError(f"no customer {customer_id}")
    return {"id": customer_id, **ctx.deps.customers[customer_id]}


@tool
def list_orders(customer_id: CustomerId, ctx: Context[Shop]) -> list[dict[str, str]]:
    """List a customer's orders with their status (delivered, shipped, payment_failed,
    cancelled, lost). Use it to find which orders failed.
    """
    orders = ctx.deps.orders.items()
    return [{"id": oid, "status": o["status"]} for oid, o in orders if o["customer"] == customer_id]


@tool
def get_payments(order_id: OrderId, ctx: Context[Shop]) -> list[Payment]:
    """The payment attempts of one order (status and decline or refund reason).
    Use it on a failed order to find out why it failed.
    """
    if order_id not in ctx.deps.orders:
        raise LookupError(f"no order {order_id}")
    return ctx.deps.payments.get(order_id, [])


class Findings(BaseModel):
    """What the investigation found."""

    failed_orders: list[str] = Field(description="The ids of the customer's failed orders.")
    summary: str = Field(description="For each failed order: what failed and why.")


investigate = Agent(
    name="investigate",
    instructions=(
        "You investigate order problems for a small shop. Look up the customer, list their "
        "orders, check the payments of every failed order, then answer with final_answer: "
        "the failed order ids and a short summary citing them. Use only tool results."
    ),
    tools=[lookup_customer, list_orders, get_payments],
    output_type=Findings,
    max_steps=6,
    budget=Budget(max_tokens=30_000),
)


# The offline model (`--model scripted`): a careful investigation, declared as a plan.


def _who(request: ModelRequest) -> dict[str, str] | None:
    return {"customer_id": m.group()} if (m := re.search(r"C-\d{4}", request.user_text())) else None


def _failed(request: ModelRequest) -> list[dict[str, str]]:
    orders = request.last_result("list_orders")
    return [o for o in (orders.value if orders else []) if o["status"] in FAILED]


def _findings(request: ModelRequest) -> Findings:
    who, failed = _who(request), _failed(request)
    if who is None or not request.called("list_orders"):
        problem = f"there is no customer {who['customer_id']}" if who else "which customer?"
        return Findings(failed_orders=[], summary=problem)
    why = []
    for o in failed:
        paid = request.last_result("get_payments", order_id=o["id"])
        reasons = [f"{p['status']} ({p['reason']})" for p in (paid.value if paid else [])]
        why.append(f"{o['id']} {o['status']}: {', '.join(reasons) or 'no payment'}")
    summary = "; ".join(why) or "no failed orders"
    return Findings(failed_orders=[o["id"] for o in failed], summary=summary)


offline_model = ScriptedAgent(
    ("lookup_customer", _who),
    ("list_orders", _who),
    ("get_payments", lambda r: [{"order_id": o["id"]} for o in _failed(r)]),  # at once
    answer=_findings,
)
