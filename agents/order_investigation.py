"""The canonical agent: investigate why a customer's orders failed.

    loopwise run agents/order_investigation.py:investigate \\
        --input '"Why did customer C-1004's last three orders fail?"' --model scripted

Read-only, scoped tools over a real SQLite shop database (see ``shop.py``): the steps are
not known in advance (which orders failed, and how, decides what to look at next), and
every tool is a cheap, reversible read — so an agent, with its guardrails.

``offline_model`` investigates the way a careful person would — customer, then orders,
then the payments and shipments of the failed ones (in one turn, concurrently), then a
summary — as a pure function of the transcript, so ``--model scripted`` gives a sensible
run and a resumed run replays it exactly. In a conversation (``--conversation ID``) a
follow-up that names no one ("and what should we tell her about the first one?") is
answered from the findings already in the transcript, without investigating again.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from shop import (
    CUSTOMER_IN_TEXT,
    EMAIL_IN_TEXT,
    FAILED_STATUSES,
    ORDER_IN_TEXT,
    READ_TOOLS,
    tool_results,
)

from loopwise import Agent, Budget, ModelRequest, Turn
from loopwise.testing import ScriptedModel, calls, reply

INSTRUCTIONS = """\
You investigate order problems for a small online shop.
Use the tools: look up the customer (by id, or find them by email), list their recent
orders, then check the payments and the shipment events of every order that failed.
Base every statement on tool results and cite order ids. Finish with a short summary:
for each failed order, what failed, why, and what the customer can do next.
"""

investigate = Agent(
    name="investigate",
    instructions=INSTRUCTIONS,
    tools=READ_TOOLS,
    max_steps=8,
    budget=Budget(max_tokens=60_000),
)

_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "last": 3}


def _how_many(question: str) -> int:
    match = re.search(r"last (\w+) orders", question.lower())
    if match is None:
        return 3
    word = match.group(1)
    return int(word) if word.isdigit() else _WORDS.get(word, 3)


def _respond(request: ModelRequest) -> Turn:
    """The next step of a sensible investigation, from the transcript alone."""
    asked = [i for i, m in enumerate(request.messages) if m["role"] == "user"]
    question = str(request.messages[asked[-1]]["content"])
    # Call ids count every assistant turn of the transcript, earlier messages' included,
    # so they stay unique across a conversation.
    turn = len([m for m in request.messages if m["role"] == "assistant"]) + 1
    if len(asked) > 1 and not _names_someone(question):
        return reply(_follow_up(question, tool_results(request)))
    # A new question investigates afresh: only this message's results count.
    done = tool_results(dataclasses.replace(request, messages=request.messages[asked[-1] :]))
    by_tool = {name: (args, result) for name, args, result in done}
    customer = by_tool.get("lookup_customer") or by_tool.get("find_customer")
    if customer is None:
        return _first_lookup(question, by_tool, turn)
    customer_id = customer[1]["id"]
    if "list_orders" not in by_tool:
        limit = max(_how_many(question), 3)
        return calls(("list_orders", {"customer_id": customer_id, "limit": limit}, f"t{turn}-0"))
    recent = by_tool["list_orders"][1][: _how_many(question)]
    failed = [o["id"] for o in recent if o["status"] in FAILED_STATUSES]
    fetched = {(name, args.get("order_id")) for name, args, _ in done}
    wanted = [
        (tool, {"order_id": order}, f"t{turn}-{i}")
        for i, (tool, order) in enumerate(
            (t, o) for o in failed for t in ("get_payments", "get_shipment_events")
        )
        if (tool, order) not in fetched
    ]
    if wanted:
        return calls(*wanted)
    return reply(_summary(customer[1], recent, done))


def _names_someone(question: str) -> bool:
    return any(p.search(question) for p in (CUSTOMER_IN_TEXT, EMAIL_IN_TEXT, ORDER_IN_TEXT))


_ORDINALS = {"first": 0, "second": 1, "third": 2, "last": -1}


def _follow_up(question: str, done: list[tuple[str, Any, Any]]) -> str:
    """An answer about an order found earlier in the conversation (the first failed one,
    or the one the question counts to), with what to tell the customer."""
    results = {name: result for name, _, result in done}
    customer = results.get("lookup_customer") or results.get("find_customer")
    checked = {a["order_id"] for n, a, _ in done if n in ("get_payments", "get_shipment_events")}
    failed = [o for o in results.get("list_orders") or [] if o["id"] in checked]
    if customer is None or not failed:
        return (
            "Nothing in this conversation has been investigated yet: give me a customer id "
            "(like C-1004), an email address or an order id."
        )
    words = re.findall(r"[a-z]+", question.lower())
    index = next((_ORDINALS[w] for w in words if w in _ORDINALS), 0)
    order = failed[index if -len(failed) <= index < len(failed) else 0]
    payments = {a["order_id"]: r for n, a, r in done if n == "get_payments"}
    shipping = {a["order_id"]: r for n, a, r in done if n == "get_shipment_events"}
    reason = _reason(order, payments, shipping)
    first_name = str(customer["name"]).split()[0]
    return (
        f"From the investigation above: {order['id']} ({order['status']}) — {reason}\n"
        f'What to tell {first_name}: "Hi {first_name}, about your order {order["id"]}: '
        f'{_TELL.get(order["status"], "we are looking into it and will write again.")}"'
    )


_TELL = {
    "payment_failed": "your bank declined the payment, so the order was not placed. You can "
    "complete it with another card or payment method.",
    "returned_to_sender": "the parcel came back to us as undeliverable. Please confirm your "
    "shipping address and we will send it again.",
    "cancelled": "we had to cancel it. We can put the item on backorder or suggest an alternative.",
    "lost": "the carrier lost the parcel. We will re-ship it or refund you, as you prefer.",
    "refunded": "the payment has been refunded to you.",
}


def _first_lookup(question: str, by_tool: dict[str, Any], turn: int) -> Turn:
    if (found := CUSTOMER_IN_TEXT.search(question)) is not None:
        return calls(("lookup_customer", {"customer_id": found.group()}, f"t{turn}-0"))
    if (email := EMAIL_IN_TEXT.search(question)) is not None:
        return calls(("find_customer", {"email": email.group()}, f"t{turn}-0"))
    order = by_tool.get("get_order")
    if order is not None:
        return calls(("lookup_customer", {"customer_id": order[1]["customer_id"]}, f"t{turn}-0"))
    if (named := ORDER_IN_TEXT.search(question)) is not None:
        return calls(("get_order", {"order_id": named.group()}, f"t{turn}-0"))
    return reply(
        "I need a customer id (like C-1004), an email address or an order id to investigate."
    )


def _summary(
    customer: dict[str, Any], recent: list[dict[str, Any]], done: list[tuple[str, Any, Any]]
) -> str:
    payments = {a["order_id"]: r for n, a, r in done if n == "get_payments"}
    shipping = {a["order_id"]: r for n, a, r in done if n == "get_shipment_events"}
    lines = [f"{customer['name']} ({customer['id']}): {len(recent)} most recent orders."]
    for order in recent:
        if order["status"] not in FAILED_STATUSES:
            lines.append(f"- {order['id']}: {order['status']} (no problem).")
            continue
        lines.append(f"- {order['id']} {order['status']}: {_reason(order, payments, shipping)}")
    failed = sum(o["status"] in FAILED_STATUSES for o in recent)
    lines.append(f"{failed} of {len(recent)} failed.")
    return "\n".join(lines)


_NEXT = {
    "payment_failed": "ask for another card or payment method",
    "returned_to_sender": "confirm the shipping address, then re-send",
    "cancelled": "offer a backorder or an alternative item",
    "lost": "re-ship or refund",
    "refunded": "nothing, the money is back",
}


def _reason(order: dict[str, Any], payments: dict[str, Any], shipping: dict[str, Any]) -> str:
    paid = payments.get(order["id"], [])
    declines = [p["decline_code"] for p in paid if p["status"] == "declined"]
    events = (shipping.get(order["id"]) or {}).get("events") or []
    lost = [e["detail"] for e in events if e["status"] == "lost"]
    exceptions = [e["detail"] for e in events if e["status"] == "exception"]
    if declines:
        why = f"card declined {len(declines)} time(s) ({', '.join(declines)})"
    elif lost or exceptions:
        why = (lost or exceptions)[0]
    else:
        why = str(order["note"] or "no reason recorded").removeprefix("cancelled: ")
    money = {p["status"] for p in paid}
    if "refunded" in money:
        why += " (charged, then refunded)"
    elif "captured" in money:
        why += " (charged, not refunded yet)"
    return f"{why}. Next: {_NEXT.get(order['status'], 'contact the customer')}."


def offline_model() -> ScriptedModel:
    """The model ``--model scripted`` uses for this agent (a pure responder)."""
    return ScriptedModel(_respond)
