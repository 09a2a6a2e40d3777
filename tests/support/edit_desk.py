"""A small refund desk for the edit tests: the same irreversible refund, gated by a policy
that reads ``ctx.deps``, as an agent's tool, a workflow's tool node and a hybrid's action.

Effects go to a SQLite ledger at ``$EDIT_DESK_DB`` (``make_deps()``), so the command line,
the inbox and a test read the same books across ``approve`` and ``resume``.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass
from typing import Any

import loopwise
from loopwise import Context, Escalate, Hybrid, Workflow, policy, policy_then_human
from loopwise.testing import ScriptedModel, call, calls, reply


@dataclass
class Ledger:
    """The books: a SQLite file; ``limit`` is what a refund may be at most."""

    path: str
    limit: int = 10_000

    def write(self, key: str | None, kind: str, text: str) -> None:
        with sqlite3.connect(self.path) as db:
            db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT, kind TEXT, text TEXT)")
            db.execute("INSERT INTO effects VALUES (?, ?, ?)", (key, kind, text))


def make_deps() -> Ledger:
    return Ledger(os.environ["EDIT_DESK_DB"], int(os.environ.get("EDIT_DESK_LIMIT", "10000")))


def effects(path: str) -> list[tuple[str, str]]:
    """The ``(kind, text)`` rows written so far."""
    if not os.path.exists(path):
        return []
    with sqlite3.connect(path) as db:
        return [(k, t) for k, t in db.execute("SELECT kind, text FROM effects")]


def within_limit(args: dict[str, Any], ctx: Context[Ledger]) -> bool | str | Escalate:
    if args["amount"] > ctx.deps.limit:
        return f"over the limit of {ctx.deps.limit}"
    return Escalate("every refund needs a person")


@loopwise.tool(effect="irreversible", gate=policy_then_human(within_limit))
def refund(order_id: str, amount: int, ctx: Context[Ledger]) -> str:
    """Refund an amount on an order. Use it when the customer is owed money."""
    ctx.deps.write(ctx.idempotency_key, "refund", f"{order_id}:{amount}")
    return f"refunded {amount} on {order_id}"


@loopwise.tool(effect="irreversible", gate=loopwise.gates.human())
def mail(order_id: str, body: str, ctx: Context[Ledger]) -> str:
    """Mail the order's customer. Use it to tell them what was done."""
    ctx.deps.write(ctx.idempotency_key, "mail", body)
    return "mailed"


@loopwise.tool(effect="write", gate=policy(lambda args: True))
def note(order_id: str, text: str, ctx: Context[Ledger]) -> str:
    """Note what was decided on the order. Use it to record a decision."""
    ctx.deps.write(ctx.idempotency_key, "note", text)
    return "noted"


@loopwise.tool
def lookup(order_id: str) -> str:
    """Read an order. Use it before anything else."""
    return f"{order_id}: total 300"


def _agent_turns(request: loopwise.ModelRequest) -> Any:
    done = [m["content"] for m in request.messages if m["role"] == "tool"]
    return reply(done[-1]) if done else call("refund", {"order_id": "O-1", "amount": 300}, id="c1")


refund_agent = loopwise.Agent(name="refund_agent", tools=[refund])


@loopwise.step
def _order(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "amount": 300}


refund_flow = Workflow("refund_flow").then(_order).then(refund)


def _plan_turns(request: loopwise.ModelRequest) -> Any:
    steps = [
        {"id": "s1", "action": "refund", "args": {"order_id": "O-1", "amount": 300},
         "reason": "owed"},
        {"id": "s2", "action": "mail", "args": {"order_id": "O-1", "body": "we refunded 300"},
         "depends_on": ["s1"], "reason": "tell them"},
        {"id": "s3", "action": "note", "args": {"order_id": "O-1", "text": "refunded 300"},
         "depends_on": ["s2"], "reason": "record it"},
        {"id": "s4", "action": "lookup", "args": {"order_id": "O-1"},
         "depends_on": ["s1"], "reason": "read it again"},
    ]  # fmt: skip
    return calls(("final_answer", {"steps": steps}, "plan"))


refund_desk = Hybrid("refund_desk", actions=[refund, mail, note, lookup], tools=[lookup])


def offline_model() -> ScriptedModel:
    def respond(request: loopwise.ModelRequest) -> Any:
        tools = {t["function"]["name"] for t in request.tools or []}
        if "final_answer" in tools:
            return _plan_turns(request)
        return _agent_turns(request)

    return ScriptedModel(respond)


EDIT = {"order_id": "O-1", "amount": 120}
"""What the person edits the refund to."""
EDIT_TEXT = json.dumps(EDIT)
