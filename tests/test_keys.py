"""Keys that no id can spell twice, and ids that cannot break a run (STYLE habit 21).

A journal key, an approval id and an idempotency key are built from ids a model, its
server or a user chose. Each test is a pair of calls (or runs) whose ids would spell the
same key if the parts were joined as text, on SQLite and PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import loopwise
from loopwise import Status, gates, open_store
from loopwise.testing import ScriptedModel, call, calls, reply


def _tool_results(request: loopwise.ModelRequest) -> list[str]:
    return [str(m["content"]) for m in request.messages if m["role"] == "tool"]


def _first_user(request: loopwise.ModelRequest) -> str:
    return next(str(m["content"]) for m in request.messages if m["role"] == "user")


def _ledger_tool(done: list[tuple[str | None, str]], *, gate: Any = None) -> loopwise.Tool:
    """A refund tool that, like a real payment API, does nothing twice under one key."""

    @loopwise.tool(effect="write", gate=gate)
    def refund(order: str, ctx: Any) -> str:
        """Refund an order."""
        key = ctx.idempotency_key
        if any(k == key for k, _ in done):
            return "already done under this key"
        done.append((key, order))
        return f"refunded {order}"

    return refund


def _approve_all(run_id: str, store: str) -> list[str]:
    with open_store(store) as st:
        ids = [p.approval_id for p in st.pending(run_id)]
        for approval_id in ids:
            st.decide(run_id, approval_id, decision="approved", by="alice")
    return ids


def test_two_calls_whose_ids_extend_each_other_both_take_effect(store_at: str) -> None:
    done: list[tuple[str | None, str]] = []
    seen: list[list[str]] = []

    def respond(request: loopwise.ModelRequest) -> Any:
        results = _tool_results(request)
        if results:
            seen.append(results)
            return reply("ok")
        return calls(("refund", {"order": "A"}, "a"), ("refund", {"order": "B"}, "a:call"))

    agent = loopwise.Agent(name="desk", tools=[_ledger_tool(done)])
    result = loopwise.run(agent, "go", model=ScriptedModel(respond), store=store_at)
    assert result.status == Status.COMPLETED
    assert sorted(order for _, order in done) == ["A", "B"]
    assert seen == [["refunded A", "refunded B"]]


def test_an_outer_call_named_like_a_nested_bound_id_is_its_own_call(store_at: str) -> None:
    done: list[tuple[str | None, str]] = []
    refund = _ledger_tool(done, gate=gates.human())
    inner = loopwise.Agent(name="inner", tools=[refund])
    outer = loopwise.Agent(
        name="outer", tools=[refund, loopwise.as_tool(inner, name="helper", description="Helps.")]
    )

    def respond(request: loopwise.ModelRequest) -> Any:
        results = _tool_results(request)
        if _first_user(request) != "go":
            return reply(results[-1]) if results else call("refund", {"order": "N"}, id="c1")
        script = [
            ("helper", {"input": "refund N"}, "h1"),
            # The nested call's bound id, chosen by the outer model for its own refund.
            ("refund", {"order": "O"}, "outer/helper/inner/c1"),
        ]
        if len(results) < len(script):
            name, args, call_id = script[len(results)]
            return call(name, args, id=call_id)
        return reply("; ".join(results))

    model = ScriptedModel(respond)
    run_id = loopwise.run(outer, "go", model=model, store=store_at).run_id
    assert _approve_all(run_id, store_at) == ["outer/helper/inner/c1"]
    paused = loopwise.resume(run_id, step=outer, model=model, store=store_at)
    # The outer refund was not answered by the nested call's approval: it asks for its own.
    assert paused.status == Status.AWAITING_APPROVAL
    (own,) = _approve_all(run_id, store_at)
    assert own != "outer/helper/inner/c1"
    result = loopwise.resume(run_id, step=outer, model=model, store=store_at)
    assert result.status == Status.COMPLETED
    assert [order for _, order in done] == ["N", "O"]
    assert len({key for key, _ in done}) == 2
