"""The canonical hybrid: a refund desk that proposes, then executes behind gates.

    loopwise run workflows/refund_desk.py:refund_desk --model scripted \\
        --input '"Order O-1003 arrived broken and I want my money back."'

The steps are not known in advance (which order, how much, whom to mail depend on the
complaint and the shop's records), but a wrong step costs money or a customer's trust.
So a planner agent investigates with the shop's READ-ONLY tools (the same ones, over the
same database, as ``agents/order_investigation.py``) and only *proposes*:

* ``issue_refund`` — irreversible; its policy denies more than the order's total minus
  what was already refunded (and, judging a plan, minus the plan's other refunds of
  that order), then a person approves; the tool checks the same limit again and writes
  the refund in one database transaction, so runs approved side by side cannot pay an
  order twice;
* ``email_customer`` — irreversible; its policy denies any recipient but the order's
  customer, then a person approves;
* ``add_note`` — a write to the order's internal notes; its policy passes it
  automatically when the order exists.

The effects are real rows in the shop database (``refunds``, ``emails``, ``notes``),
written once per idempotency key (run id + plan step), so a resumed run never pays twice.

``offline_model`` is a pure function of the transcript: it looks up the order named in
the complaint and its customer, then proposes a full refund of that order, a mail to
that customer and a note — a sensible plan for ``--model scripted``.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from loopwise import (
    REJECTED,
    ActionCatalog,
    Bounds,
    Budget,
    Context,
    Denied,
    Escalate,
    Hybrid,
    ModelRequest,
    PlanContext,
    Turn,
    policy,
    policy_then_human,
    tool,
)
from loopwise.testing import ScriptedModel, calls

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "agents"))
import shop  # the shared shop lives beside the agents

OrderId = shop.OrderId

_DESK_TABLES = """
CREATE TABLE IF NOT EXISTS refunds (
    idempotency_key TEXT PRIMARY KEY,
    order_id        TEXT NOT NULL,
    amount_cents    INTEGER NOT NULL,
    reason          TEXT NOT NULL,
    created_at      TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS emails (
    idempotency_key TEXT PRIMARY KEY,
    order_id        TEXT NOT NULL,
    recipient       TEXT NOT NULL,
    subject         TEXT NOT NULL,
    body            TEXT NOT NULL,
    created_at      TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS notes (
    idempotency_key TEXT PRIMARY KEY,
    order_id        TEXT NOT NULL,
    text            TEXT NOT NULL,
    created_at      TEXT NOT NULL
);
"""


@dataclass(frozen=True)
class Books:
    """Where the desk writes its effects (the run's deps): a shop database file. Without
    deps, the shop's own (``$LOOPWISE_SHOP_DB``)."""

    path: Path


@contextmanager
def make_eval_deps() -> Iterator[Books]:
    """The eval's sandbox (``loopwise eval`` uses it): a fresh copy of the shop database
    per run, so measuring the desk refunds, mails and notes nobody. The eval enters it for
    one run and leaves it when the run ends, which removes the copy."""
    with tempfile.TemporaryDirectory(prefix="refund-desk-eval-") as scratch:
        copy = Path(scratch) / "shop.db"
        shutil.copyfile(shop.ensure_db(), copy)
        yield Books(copy)


def _books(ctx: Context | None) -> Path | None:
    """The books of the run: its deps, else (a run given none) the shop's own. Deps of any
    other kind are refused: writing to the real shop instead would be the wrong books."""
    if ctx is None or not ctx.has_deps:
        return None
    if not isinstance(ctx.deps, Books):
        raise TypeError(
            f"the refund desk writes to {__name__}.Books deps (make_eval_deps()); this run's "
            f"deps are a {type(ctx.deps).__module__}.{type(ctx.deps).__qualname__}, so it "
            "writes nothing"
        )
    return ctx.deps.path


def _writable(path: Path | None = None) -> sqlite3.Connection:
    db = shop.connect(path, readonly=False)
    db.executescript(_DESK_TABLES)
    db.isolation_level = None  # transactions are explicit: see _insert_once
    return db


def _insert_once(
    table: str,
    row: dict[str, Any],
    ctx: Context | None,
    *,
    guard: Callable[[sqlite3.Connection], None] | None = None,
) -> dict[str, Any]:
    """Insert ``row`` unless its idempotency key is there already; return the stored row.

    ``guard`` checks an invariant against the database before a new row is written, in
    the same ``BEGIN IMMEDIATE`` transaction (which takes the write lock before the first
    read): no other write lands between its check and the insert.
    """
    key = (ctx.idempotency_key if ctx is not None else None) or f"manual:{uuid.uuid4().hex}"
    row = {"idempotency_key": key, **row, "created_at": datetime.now(UTC).isoformat()}
    names = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    find = f"SELECT * FROM {table} WHERE idempotency_key = ?"
    with closing(_writable(_books(ctx))) as db:
        db.execute("BEGIN IMMEDIATE")
        try:
            stored = db.execute(find, (key,)).fetchone()
            if stored is None:
                if guard is not None:
                    guard(db)
                db.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", tuple(row.values()))
                stored = db.execute(find, (key,)).fetchone()
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    return dict(stored)


def _refunded_cents(
    order_id: str, db: sqlite3.Connection | None = None, books: Path | None = None
) -> int:
    """What was refunded on ``order_id`` so far: read in ``db``'s transaction when given,
    else in ``books`` (the run's, see :func:`_books`; ``None``: the shop's own)."""
    if db is None:
        with closing(_writable(books)) as own:
            return _refunded_cents(order_id, own)
    row = db.execute(
        "SELECT COALESCE(SUM(amount_cents), 0) FROM refunds WHERE order_id = ?", (order_id,)
    ).fetchone()
    return int(row[0])


def _too_much(order: Any, amount_cents: int, refunded: int, planned: int = 0) -> str | None:
    """Why refunding ``amount_cents`` (beside ``planned`` in the same plan) is too much."""
    total = int(order["total_cents"])
    left = total - refunded
    if amount_cents + planned <= left:
        return None
    beside = f" plus {planned} in the plan's other refunds of it" if planned else ""
    return (
        f"refund of {amount_cents} cents{beside} exceeds what is left to refund on "
        f"{order['id']} ({left} of {total} {order['currency']} cents)"
    )


def refund_within_total(
    args: dict[str, Any], plan: PlanContext | None = None, *, ctx: Context
) -> Denied | Escalate:
    """Deny a refund above the order's total minus what was already refunded in the
    run's books (its deps: an eval's sandbox is judged on the sandbox's refunds).

    When a plan is validated (``plan`` given), the plan's other refunds of the same order
    count too: one plan cannot refund an order twice by splitting it over steps.
    """
    try:
        order = shop.get_order.fn(args["order_id"])
    except LookupError as e:
        return Denied(str(e))
    planned = sum(
        int(other.args_dict()["amount_cents"])
        for other in (plan.others("issue_refund") if plan is not None else ())
        if other.args_dict()["order_id"] == order["id"]
    )
    refunded = _refunded_cents(order["id"], books=_books(ctx))
    why = _too_much(order, args["amount_cents"], refunded, planned)
    if why is not None:
        return Denied(why)
    return Escalate("a person approves every refund")


def recipient_is_customer(args: dict[str, Any]) -> Denied | Escalate:
    """Deny a mail to anyone but the order's customer."""
    try:
        order = shop.get_order.fn(args["order_id"])
        customer = shop.lookup_customer.fn(order["customer_id"])
    except LookupError as e:
        return Denied(str(e))
    if str(args["to"]).strip().lower() != str(customer["email"]).lower():
        return Denied(f"{args['to']!r} is not the customer of {order['id']}")
    return Escalate("a person approves every customer mail")


def order_exists(args: dict[str, Any]) -> bool | str:
    """Pass a note automatically when its order exists."""
    try:
        shop.get_order.fn(args["order_id"])
    except LookupError as e:
        return str(e)
    return True


@tool(effect="irreversible", gate=policy_then_human(refund_within_total))
def issue_refund(
    order_id: OrderId,
    amount_cents: Annotated[
        int, Bounds(ge=1), Field(description="Amount to refund, in the order's currency cents.")
    ],
    reason: Annotated[str, Field(description="One line: why.", max_length=200)],
    ctx: Context,
) -> dict[str, Any]:
    """Refund money to the customer of an order (at most what is left of its total).
    Use it when the records show the customer is owed money for this order.
    """

    # The policy judged the ledger when the gate was asked; two approved runs resumed at
    # once both passed it. The limit holds here, checked and written in one transaction.
    def within_total(db: sqlite3.Connection) -> None:
        order = db.execute("SELECT * FROM orders WHERE id = ?", (order_id,)).fetchone()
        if order is None:
            raise LookupError(f"no order {order_id}")
        why = _too_much(order, amount_cents, _refunded_cents(order_id, db))
        if why is not None:
            raise ValueError(why)

    row = {"order_id": order_id, "amount_cents": amount_cents, "reason": reason}
    return _insert_once("refunds", row, ctx, guard=within_total)


@tool(effect="irreversible", gate=policy_then_human(recipient_is_customer))
def email_customer(
    order_id: OrderId,
    to: Annotated[str, Field(description="The order's customer's email address.")],
    subject: Annotated[str, Field(description="The subject line.", max_length=120)],
    body: Annotated[str, Field(description="The plain-text message.", max_length=2000)],
    ctx: Context,
) -> dict[str, Any]:
    """Send one email about an order to that order's customer (no one else).
    Use it when the customer should hear what was done about their complaint.
    """
    row = {"order_id": order_id, "recipient": to, "subject": subject, "body": body}
    return _insert_once("emails", row, ctx)


@tool(effect="write", gate=policy(order_exists))
def add_note(
    order_id: OrderId,
    text: Annotated[str, Field(description="The note, for the support team.", max_length=500)],
    ctx: Context,
) -> dict[str, Any]:
    """Add an internal note to an order (the team reads it; the customer does not).
    Use it when a decision about the order should be on record for the team.
    """
    return _insert_once("notes", {"order_id": order_id, "text": text}, ctx)


ACTIONS = ActionCatalog()
ACTIONS.add(
    issue_refund,
    estimate=lambda args: args.amount_cents / 100,
    unit=lambda args: shop.get_order.fn(args.order_id)["currency"],  # the order's own
)
ACTIONS.add(email_customer)
ACTIONS.add(add_note)

TASK = """\
You work the refund desk of a small online shop. Read the customer's complaint,
investigate the order and the customer with the tools, and propose what to do:
refunds (never more than the order's total), a mail to the order's customer, and a
note recording the decision. Propose nothing the records do not support."""

refund_desk = Hybrid(
    "refund_desk",
    actions=ACTIONS,
    task=TASK,
    tools=shop.READ_TOOLS,
    max_steps=6,
    budget=Budget(max_tokens=80_000),
)


def _plan(order: dict[str, Any], customer: dict[str, Any], complaint: str) -> dict[str, Any]:
    oid, total = order["id"], int(order["total_cents"])
    money = f"{total / 100:.2f} {order['currency']}"
    return {
        "steps": [
            {
                "id": "s1",
                "action": "issue_refund",
                "args": {"order_id": oid, "amount_cents": total, "reason": complaint[:200]},
                "depends_on": [],
                "reason": f"the customer asks for their money back; {oid} totals {money}",
            },
            {
                "id": "s2",
                "action": "email_customer",
                "args": {
                    "order_id": oid,
                    "to": customer["email"],
                    "subject": f"Your refund for order {oid}",
                    "body": f"Dear {customer['name']},\n\nwe are sorry about order {oid}. "
                    f"We have refunded {money} to your original payment method.",
                },
                "depends_on": ["s1"],
                "reason": "tell the order's customer about the refund",
            },
            {
                "id": "s3",
                "action": "add_note",
                "args": {
                    "order_id": oid,
                    "text": f"Refunded {money} after complaint: {complaint[:200]}",
                },
                "depends_on": ["s1"],
                "reason": "record the decision on the order",
            },
        ]
    }


def _respond(request: ModelRequest) -> Turn:
    """The planner's next move, from the transcript alone (pure, so resumes replay)."""
    complaint = next(m["content"] for m in request.messages if m["role"] == "user")
    complaint = str(complaint).split(REJECTED)[0]
    found = {name: result for name, _, result in shop.tool_results(request)}
    named = shop.ORDER_IN_TEXT.search(complaint)
    if named is None:
        nothing = {"steps": [], "reason": "the complaint names no order to look into"}
        return calls(("final_answer", nothing, "final"))
    if "get_order" not in found:
        return calls(("get_order", {"order_id": named.group()}, "lookup-order"))
    order = found["get_order"]
    if "lookup_customer" not in found:
        return calls(("lookup_customer", {"customer_id": order["customer_id"]}, "lookup-customer"))
    return calls(("final_answer", _plan(order, found["lookup_customer"], complaint), "final"))


def offline_model() -> ScriptedModel:
    """The model ``--model scripted`` uses for the refund desk (a pure responder)."""
    return ScriptedModel(_respond)
