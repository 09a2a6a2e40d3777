"""A refund desk: a HYBRID, because the steps are not known in advance (which order, how
much) but a wrong step costs money. A planner with READ-ONLY tools investigates and only
proposes a plan; a deterministic workflow validates it and executes it, and every refund
passes its gate. Try it::

    loopwise check refunds.py:refund_desk
    loopwise run refunds.py:refund_desk --model scripted \\
        --input-text "Order O-3001 arrived broken, I want my money back."
    loopwise run refunds.py:refund_desk --model scripted \\
        --input-text "Order O-3004 never came. Refund me."    # waits for a person
    loopwise pending
    loopwise approve RUN_ID && loopwise resume RUN_ID
    loopwise eval refunds.py:refund_desk --dataset refunds_cases.jsonl --model scripted \\
        --scorer refunds.py:refund_matches
    pytest

The eval runs every case on a scratch ledger (:func:`make_eval_deps`, the sandbox this
module declares: ``loopwise eval`` refuses a target whose tools take effect without one),
answers every gate itself (``deny``; ``--gates approve`` to measure the approved path) and
records its runs in a store of its own (``.loopwise/eval.db``): the cases are
measurements, not requests, so ``loopwise pending`` never lists them and the real ledger
(:func:`make_deps`) is never written.

The actions:

* ``issue_refund`` is irreversible. Its policy denies more than what is left to refund on
  the order, approves up to :data:`AUTO_APPROVE_CENTS` by itself and asks a person above
  that (the run pauses, durably, until ``loopwise approve``; ``loopwise resume`` goes on in
  any later process). The tool checks the limit again when it writes.
* ``add_note`` is a write its policy passes automatically when the order exists.

Effects are rows in a :class:`Ledger`, the run's deps (``ctx.deps``): :func:`make_deps`
opens ``$REFUNDS_DB`` (default ``refunds.db`` here) for the command line, tests and the
eval pass their own. Each is written once per idempotency key (run id + plan step), so a
resumed run never pays twice.
``--model scripted`` plans offline with :data:`offline_model` (a
:class:`~loopwise.testing.ScriptedAgent`): the order named in the complaint, refunded in
full, and a note — or, for a thank-you note or an order refunded already, an empty plan
whose ``reason`` says why nothing needs doing (the run ends ``completed``, nothing runs).
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, TypedDict

from pydantic import Field

from loopwise import (
    REJECTED,
    ActionCatalog,
    Budget,
    Context,
    Escalate,
    Hybrid,
    IdPattern,
    ModelRequest,
    policy,
    policy_then_human,
    tool,
)
from loopwise.testing import ScriptedAgent


class Order(TypedDict):
    """An order as the shop keeps it."""

    customer: str
    total_cents: int
    item: str


class RefundArgs(TypedDict):
    """What the refund policy is given: ``issue_refund``'s arguments, validated."""

    order_id: str
    amount_cents: int
    reason: str


ORDERS: dict[str, Order] = {
    "O-3001": {"customer": "ada@example.com", "total_cents": 1999, "item": "kettle"},
    "O-3002": {"customer": "ben@example.com", "total_cents": 4500, "item": "lamp"},
    "O-3003": {"customer": "chen@example.com", "total_cents": 899, "item": "mug"},
    "O-3004": {"customer": "dana@example.com", "total_cents": 12900, "item": "chair"},
    "O-3005": {"customer": "eli@example.com", "total_cents": 25000, "item": "desk"},
}
AUTO_APPROVE_CENTS = 5000
"""Refunds up to this pass their policy alone; larger ones wait for a person."""

OrderId = Annotated[str, IdPattern(r"O-\d{4}"), Field(description="An order id: O-3001.")]


class Ledger:
    """Where refunds and notes are written: the run's deps (``ctx.deps``). A SQLite file
    (``:memory:`` for a scratch one); each effect is a row under its idempotency key."""

    def __init__(self, path: str = "refunds.db") -> None:
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()  # sync tools run in worker threads
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, kind TEXT, "
            "order_id TEXT, amount_cents INTEGER, text TEXT)"
        )

    def close(self) -> None:
        """Close the database (a ``:memory:`` ledger is gone with it)."""
        with self._lock:
            self._db.close()

    def refunded_cents(self, order_id: str) -> int:
        """What was refunded on ``order_id`` so far."""
        with self._lock:
            return self._refunded(order_id)

    def _refunded(self, order_id: str) -> int:
        sql = "SELECT COALESCE(SUM(amount_cents), 0) FROM effects WHERE kind = ? AND order_id = ?"
        return int(self._db.execute(sql, ("refund", order_id)).fetchone()[0])

    def write_once(self, key: str, kind: str, order_id: str, amount: int, text: str) -> None:
        """Record one effect under ``key``, once; a refund's limit is checked again in the
        same transaction, so two approved runs cannot both pay what is left."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if self._db.execute("SELECT 1 FROM effects WHERE key = ?", (key,)).fetchone():
                    self._db.execute("COMMIT")
                    return
                left = ORDERS[order_id]["total_cents"] - self._refunded(order_id)
                if kind == "refund" and amount > left:
                    raise ValueError(f"{amount} cents is more than the {left} left on {order_id}")
                row = (key, kind, order_id, amount, text)
                self._db.execute("INSERT INTO effects VALUES (?, ?, ?, ?, ?)", row)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise


def make_deps() -> Ledger:
    """The ledger of a run the command line starts or resumes (``$REFUNDS_DB``, default
    ``refunds.db`` here): ``loopwise run`` and ``resume`` call it, so a run approved and
    resumed in another process writes to the same books."""
    return Ledger(os.environ.get("REFUNDS_DB", "refunds.db"))


@contextmanager
def make_eval_deps() -> Iterator[Ledger]:
    """A fresh in-memory ledger per run: the eval's sandbox (``loopwise eval`` uses it),
    so measuring the desk pays nobody and every case starts from the same books. The eval
    enters it for one run and leaves it when the run ends, which closes the ledger."""
    ledger = Ledger(":memory:")
    try:
        yield ledger
    finally:
        ledger.close()


def _write(
    kind: str, order_id: str, amount: int, text: str, ctx: Context[Ledger]
) -> dict[str, str | int]:
    key = ctx.idempotency_key or "direct"
    ctx.deps.write_once(key, kind, order_id, amount, text)
    return {"order_id": order_id, "kind": kind, "amount_cents": amount, "key": key}


@tool
def get_order(order_id: OrderId, ctx: Context[Ledger]) -> dict[str, object]:
    """An order: its customer, item, total and what was refunded so far.
    Use it to check the order a complaint names before proposing anything.
    """
    if order_id not in ORDERS:
        raise LookupError(f"no order {order_id}")
    return {
        "id": order_id,
        **ORDERS[order_id],
        "refunded_cents": ctx.deps.refunded_cents(order_id),
    }


def refund_policy(args: RefundArgs, ctx: Context[Ledger]) -> bool | str | Escalate:
    """Deny what is not owed; approve small refunds; a person approves the rest."""
    order = ORDERS.get(args["order_id"])
    if order is None:
        return f"no order {args['order_id']}"
    left = order["total_cents"] - ctx.deps.refunded_cents(args["order_id"])
    if args["amount_cents"] > left:
        return f"only {left} cents are left to refund on {args['order_id']}"
    if args["amount_cents"] <= AUTO_APPROVE_CENTS:
        return True
    return Escalate(f"refunds over {AUTO_APPROVE_CENTS} cents need a person")


@tool(effect="irreversible", gate=policy_then_human(refund_policy))
def issue_refund(
    order_id: OrderId,
    amount_cents: Annotated[int, Field(ge=1, description="Cents to refund.")],
    reason: Annotated[str, Field(max_length=200, description="One line: why.")],
    ctx: Context[Ledger],
) -> dict[str, str | int]:
    """Refund money on an order (at most what is left of its total).
    Use it when the records show the customer is owed money.
    """
    return _write("refund", order_id, amount_cents, reason, ctx)


@tool(effect="write", gate=policy(lambda args: args["order_id"] in ORDERS))
def add_note(
    order_id: OrderId,
    text: Annotated[str, Field(max_length=500, description="The note, for the team.")],
    ctx: Context[Ledger],
) -> dict[str, str | int]:
    """Add an internal note to an order. Use it to record what was decided and why."""
    return _write("note", order_id, 0, text, ctx)


ACTIONS = ActionCatalog()
ACTIONS.add(issue_refund, estimate=lambda args: args.amount_cents / 100, unit="USD")
ACTIONS.add(add_note)

refund_desk = Hybrid(
    "refund_desk",
    actions=ACTIONS,
    task=(
        "You work a shop's refund desk. Read the complaint, look up the order it names, and "
        "propose refunds (never more than what is left of the order's total) and a note "
        "recording the decision. Propose nothing the records do not support."
    ),
    tools=[get_order],
    max_steps=4,
    budget=Budget(max_tokens=30_000),
)


def refund_matches(output: Any, expected: Any) -> bool:
    """The eval's scorer: the plan refunds exactly ``expected["refund_cents"]``."""
    steps = ((output or {}).get("plan") or {}).get("steps") or []
    planned = sum(s["args"]["amount_cents"] for s in steps if s["action"] == "issue_refund")
    return bool(planned == expected["refund_cents"])


# The offline model (`--model scripted`): the planner, declared as a plan of its own.


def _named(request: ModelRequest) -> dict[str, str] | None:
    complaint = request.user_text().split(REJECTED, maxsplit=1)[0]
    found = re.search(r"\bO-\d{4}\b", complaint)
    return {"order_id": found.group()} if found else None


def _plan(request: ModelRequest) -> dict[str, object]:
    why = request.user_text().split(REJECTED, maxsplit=1)[0][:200]
    looked_up = request.last_result("get_order")
    order = looked_up.value if looked_up and not looked_up.is_error else {}
    left = order["total_cents"] - order["refunded_cents"] if order else 0
    thanks = re.search(r"\bthank", why, re.I) and not re.search(r"refund|money", why, re.I)
    if not order or thanks or left <= 0:  # "nothing to do" is a plan too, with its reason
        said = "a thank-you" if thanks else "refunded in full" if order else "no order of ours"
        return {"steps": [], "reason": f"nothing is owed: {said}"}
    refund = {"order_id": order["id"], "amount_cents": left, "reason": why}
    note = {"order_id": order["id"], "text": f"Refunded {left} cents: {why}"}
    refund_step = {"id": "s1", "action": "issue_refund", "args": refund, "depends_on": []}
    note_step = {"id": "s2", "action": "add_note", "args": note, "depends_on": ["s1"]}
    refund_step["reason"], note_step["reason"] = "the customer is owed it", "record it"
    return {"steps": [refund_step, note_step]}


offline_model = ScriptedAgent(("get_order", _named), answer=_plan)
