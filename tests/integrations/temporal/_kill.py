"""A one-node workflow whose refund kills its own process once, just after it wrote the
refund and before its result is recorded (test_workflow.py beside it: a worker dies inside
an effect). The refund is written once per idempotency key to ``$KILL_DESK_DB``; the
first process to write it leaves ``$KILL_DESK_DB.killed`` and SIGKILLs itself."""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path

from loopwise import Context, Workflow, policy, tool


@tool(effect="irreversible", gate=policy(lambda args: args["amount_cents"] <= 10_000))
def refund(order_id: str, amount_cents: int, ctx: Context) -> str:
    """Refund ``amount_cents`` of ``order_id`` (once per idempotency key)."""
    books = os.environ["KILL_DESK_DB"]
    with sqlite3.connect(books) as db:
        db.execute("CREATE TABLE IF NOT EXISTS refunds (key TEXT PRIMARY KEY, amount INTEGER)")
        db.execute(
            "INSERT OR IGNORE INTO refunds VALUES (?, ?)", (ctx.idempotency_key, amount_cents)
        )
    marker = Path(f"{books}.killed")
    if not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return f"refunded {amount_cents} of {order_id}"


pay = Workflow("pay").then(refund)
