"""The example shop: a real SQLite database and read-only, scoped tools over it.

The database is built on first use from ``agents/data/shop.sql`` into
``agents/data/shop.db`` (not committed), or into ``$LOOPWISE_SHOP_DB`` when set, and its
seed tables are refreshed when the SQL script is newer (recorded effects are kept).
Readers open it read-only.

The tools take allow-listed ids only (``C-1004``, ``O-1017``); there is no raw SQL tool.
A missing row raises ``LookupError``, which the agent loop turns into an error result.
Shared by the order-investigation agent, the triage agent and the refund desk.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from loopwise import Bounds, IdPattern, ModelRequest, tool

__all__ = [
    "CUSTOMER_IN_TEXT",
    "EMAIL_IN_TEXT",
    "ORDER_IN_TEXT",
    "READ_TOOLS",
    "CustomerId",
    "OrderId",
    "connect",
    "db_path",
    "ensure_db",
    "find_customer",
    "get_order",
    "get_payments",
    "get_shipment_events",
    "list_orders",
    "lookup_customer",
    "query",
    "tool_results",
]

SQL_PATH = Path(__file__).resolve().parent / "data" / "shop.sql"
DEFAULT_DB = SQL_PATH.with_name("shop.db")
FAILED_STATUSES = frozenset(
    {"payment_failed", "cancelled", "returned_to_sender", "lost", "refunded"}
)
"""Order statuses that mean the order did not reach the customer as bought."""

_CUSTOMER = r"C-\d{4}"
_ORDER = r"O-\d{4}"
CustomerId = Annotated[str, IdPattern(_CUSTOMER), Field(description="A customer id, like C-1004.")]
OrderId = Annotated[str, IdPattern(_ORDER), Field(description="An order id, like O-1017.")]

# What the offline models look for in a question, a ticket or a complaint.
CUSTOMER_IN_TEXT = re.compile(rf"\b{_CUSTOMER}\b")
ORDER_IN_TEXT = re.compile(rf"\b{_ORDER}\b")
EMAIL_IN_TEXT = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


def db_path() -> Path:
    """Where the shop database lives: ``$LOOPWISE_SHOP_DB`` or ``agents/data/shop.db``."""
    return Path(os.environ.get("LOOPWISE_SHOP_DB") or DEFAULT_DB)


def ensure_db(path: Path | None = None) -> Path:
    """Build the database from the SQL script if it is missing, refresh it if older.

    A missing database is built into a temporary file and moved into place, so concurrent
    first uses (several processes, several runs) never see a half-built database. An
    older one has only its seed tables (those the script creates) dropped and rebuilt, in
    one transaction: the rows other code recorded there (the refund desk's refunds, mails,
    notes and their idempotency keys) are effects that happened, and are never deleted.
    """
    target = path or db_path()
    if target.exists() and target.stat().st_mtime >= SQL_PATH.stat().st_mtime:
        return target
    script = SQL_PATH.read_text(encoding="utf-8")
    if target.exists():
        _refresh_seed(target, script)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".shop-", suffix=".db")
    os.close(fd)
    try:
        with closing(sqlite3.connect(tmp)) as db:
            db.executescript(script)
            db.commit()
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


_SEED_TABLE = re.compile(r"^\s*CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.I | re.M)


def _refresh_seed(target: Path, script: str) -> None:
    """Drop and rebuild the script's tables in one transaction; leave every other table."""
    drops = "".join(f"DROP TABLE IF EXISTS {name};\n" for name in _SEED_TABLE.findall(script))
    with closing(sqlite3.connect(target, timeout=30, isolation_level=None)) as db:
        try:
            db.executescript(f"BEGIN IMMEDIATE;\n{drops}{script}\nCOMMIT;")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise


def connect(path: Path | None = None, *, readonly: bool = True) -> sqlite3.Connection:
    """A connection to the shop database (built first if needed), rows as ``sqlite3.Row``."""
    target = ensure_db(path)
    if readonly:
        db = sqlite3.connect(f"file:{target}?mode=ro", uri=True)
    else:
        db = sqlite3.connect(target)
    db.row_factory = sqlite3.Row
    return db


def query(sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """Run one read-only query; rows as dicts. For helpers in this package, not for models."""
    with closing(connect()) as db:
        return [dict(row) for row in db.execute(sql, params)]


def _one(sql: str, params: tuple[Any, ...], missing: str) -> dict[str, Any]:
    rows = query(sql, params)
    if not rows:
        raise LookupError(missing)
    return rows[0]


@tool
def lookup_customer(customer_id: CustomerId) -> dict[str, Any]:
    """Look up one customer by id: name, email, plan, country, customer since.
    Call it first when the question names a customer id.
    """
    return _one(
        "SELECT * FROM customers WHERE id = ?", (customer_id,), f"no customer {customer_id}"
    )


@tool
def find_customer(
    email: Annotated[
        str,
        Field(description="The customer's email address.", min_length=3, max_length=254),
    ],
) -> dict[str, Any]:
    """Find a customer by exact email address (case-insensitive).
    Call it when the question gives an email instead of a customer id.
    """
    return _one(
        "SELECT * FROM customers WHERE lower(email) = lower(?)",
        (email.strip(),),
        f"no customer with email {email!r}",
    )


@tool
def list_orders(
    customer_id: CustomerId,
    limit: Annotated[
        int, Bounds(ge=1, le=20), Field(description="How many orders, newest first (1-20).")
    ] = 5,
) -> list[dict[str, Any]]:
    """List a customer's most recent orders, newest first: id, date, status, total, note.
    Call it after looking up the customer, to see which orders failed.
    """
    lookup_customer.fn(customer_id)
    return query(
        "SELECT id, placed_at, status, total_cents, currency, items, note FROM orders "
        "WHERE customer_id = ? ORDER BY placed_at DESC LIMIT ?",
        (customer_id, limit),
    )


@tool
def get_order(order_id: OrderId) -> dict[str, Any]:
    """Get one order by id: customer, date, status, total, items, shipping address, note.
    Call it when the question names an order id.
    """
    return _one("SELECT * FROM orders WHERE id = ?", (order_id,), f"no order {order_id}")


@tool
def get_payments(order_id: OrderId) -> list[dict[str, Any]]:
    """List every payment attempt of an order, oldest first, with decline codes.
    Call it for an order whose status is payment_failed, cancelled or refunded.
    """
    get_order.fn(order_id)
    return query(
        "SELECT id, attempted_at, method, card_last4, amount_cents, status, decline_code "
        "FROM payments WHERE order_id = ? ORDER BY attempted_at",
        (order_id,),
    )


@tool
def get_shipment_events(order_id: OrderId) -> dict[str, Any]:
    """Get an order's shipment (carrier, tracking) and its tracking events, oldest first.
    Call it for an order that was lost, returned to sender or is late.
    """
    get_order.fn(order_id)
    shipments = query("SELECT * FROM shipments WHERE order_id = ?", (order_id,))
    if not shipments:
        return {"order_id": order_id, "shipment": None, "events": [], "note": "never shipped"}
    shipment = shipments[0]
    events = query(
        "SELECT at, status, location, detail FROM shipment_events WHERE shipment_id = ? "
        "ORDER BY at",
        (shipment["id"],),
    )
    return {"order_id": order_id, "shipment": shipment, "events": events}


READ_TOOLS = (
    lookup_customer,
    find_customer,
    list_orders,
    get_order,
    get_payments,
    get_shipment_events,
)
"""Every shop tool; all read-only."""


def tool_results(request: ModelRequest) -> list[tuple[str, dict[str, Any], Any]]:
    """The (tool, args, parsed result) of every successful call in a request's transcript.

    For the examples' offline models, which decide their next move from the transcript.
    """
    asked: dict[str, tuple[str, dict[str, Any]]] = {}
    for message in request.messages:
        for call in message.get("tool_calls") or ():
            fn = call["function"]
            asked[call["id"]] = (fn["name"], json.loads(fn["arguments"] or "{}"))
    found = []
    for message in request.messages:
        content = str(message.get("content") or "")
        if message.get("role") != "tool" or content.startswith("ERROR"):
            continue
        if (named := asked.get(message["tool_call_id"])) is not None:
            found.append((*named, json.loads(content)))
    return found
