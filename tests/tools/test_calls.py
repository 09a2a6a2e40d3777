"""The one tool-call executor (``loopwise.tools.calls``), pinned by what a user sees.

Each test drives a run through the public API (``loopwise.run``/``resume``, an agent, a
workflow step that calls tools from code, a store) and checks what a person reads or
what the tools did: approval ids, how often a tool ran, the values code gets back, the
run's status and reason, the results in the log. ``make mutation`` mutates the executor
against them (benchmarks/mutation_survivors.md).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

import loopwise
from loopwise import Edited, Status, gates, open_store
from loopwise.testing import ScriptedModel, call, calls, reply
from loopwise.tools.calls import call_tools


def _pending(run_id: str, store: str) -> list[str]:
    with open_store(store) as st:
        return [p.approval_id for p in st.pending(run_id)]


def _decide_all(run_id: str, store: str, decision: str = "approved") -> list[str]:
    with open_store(store) as st:
        ids = [p.approval_id for p in st.pending(run_id)]
        for approval_id in ids:
            st.decide(run_id, approval_id, decision=decision, by="ana")
    return ids


def _results(result: loopwise.RunResult) -> dict[str, dict[str, Any]]:
    """Each call's ``tool_result`` event data, by call id (the last one, if several)."""
    return {e.data["call_id"]: e.data for e in result.events if e.type == "tool_result"}


def _script(*turns: Any) -> ScriptedModel:
    """A model that answers with ``turns`` in order (one per request), then "done"."""

    def respond(request: loopwise.ModelRequest) -> Any:
        n = sum(1 for m in request.messages if m["role"] == "assistant")
        return turns[n] if n < len(turns) else reply("done")

    return ScriptedModel(respond)


# --- calls made by code in a step (call_tools) -----------------------------------------


def _desk_tools(ran: list[str]) -> tuple[loopwise.Tool, loopwise.Tool]:
    @loopwise.tool(effect="read")
    def lookup(order: str) -> dict[str, Any]:
        """Look an order up."""
        ran.append(f"lookup {order}")
        return {"order": order, "amount": len(order) * 10}

    @loopwise.tool(effect="write", gate=gates.human())
    def refund(order: str, amount: int) -> dict[str, Any]:
        """Refund an order."""
        ran.append(f"refund {order}")
        return {"refunded": order, "amount": amount}

    return lookup, refund


def test_calls_from_code_get_the_documented_approval_ids_and_resume_without_repeating(
    store_at: str,
) -> None:
    ran: list[str] = []
    lookup, refund = _desk_tools(ran)

    @loopwise.step
    async def quote(order: str, ctx: loopwise.Context) -> list[dict[str, Any]]:
        await call_tools(ctx, [(refund, {"order": order, "amount": 1})])
        return await call_tools(ctx, [(lookup, {"order": "O-22"}), (lookup, {"order": "O-3"})])

    @loopwise.step
    async def settle(found: list[dict[str, Any]], ctx: loopwise.Context) -> dict[str, Any]:
        refunds = await call_tools(ctx, [(refund, f) for f in found])
        (last,) = await call_tools(ctx, [(refund, {"order": "O-4444", "amount": 4})])
        return {"found": found, "refunds": [*refunds, last]}

    flow = loopwise.Workflow("desk").then(quote).then(settle)
    result = loopwise.run(flow, "O-1", store=store_at)
    approvals = []
    while result.status == Status.AWAITING_APPROVAL:
        approvals.append(_decide_all(result.run_id, store_at))
        result = loopwise.resume(result.run_id, step=flow, store=store_at)
    # A step's first batch of one call is the step's path and the tool's name; a second
    # batch adds @2, a tool twice in a batch .i (the ids a person types).
    assert approvals == [
        ["desk/quote/refund"],
        ["desk/settle/refund@1.1", "desk/settle/refund@1.2"],
        ["desk/settle/refund@2.1"],
    ]
    assert result.status == Status.COMPLETED
    with open_store(store_at) as st:
        logged = [e.data["call_id"] for e in st.events(result.run_id) if e.type == "tool_call"]
    assert len(logged) == len(set(logged)) == 6  # each call logged once, across the resumes
    # Each resume ran the step again from its top: its calls that ran were replayed with
    # the values they returned then, not made again.
    assert ran == [
        "refund O-1",
        "lookup O-22",
        "lookup O-3",
        "refund O-22",
        "refund O-3",
        "refund O-4444",
    ]
    assert result.output == {
        "found": [{"order": "O-22", "amount": 40}, {"order": "O-3", "amount": 30}],
        "refunds": [
            {"refunded": "O-22", "amount": 40},
            {"refunded": "O-3", "amount": 30},
            {"refunded": "O-4444", "amount": 4},
        ],
    }


def _one_refund_step(refund: loopwise.Tool, args: dict[str, Any]) -> loopwise.Workflow:
    @loopwise.step
    async def pay(order: str, ctx: loopwise.Context) -> list[Any]:
        return await call_tools(ctx, [(refund, args)])

    return loopwise.Workflow("desk").then(pay)


def test_a_denied_call_from_code_ends_the_run_denied_naming_the_call(store_at: str) -> None:
    ran: list[str] = []
    _, refund = _desk_tools(ran)
    flow = _one_refund_step(refund, {"order": "O-1", "amount": 5})
    paused = loopwise.run(flow, "go", store=store_at)
    assert _decide_all(paused.run_id, store_at, "denied") == ["desk/pay/refund"]
    result = loopwise.resume(paused.run_id, step=flow, store=store_at)
    assert result.status == Status.DENIED and ran == []
    assert result.detail is not None
    assert result.detail.startswith("desk/pay/refund: denied by ana")


def test_bad_arguments_or_a_failing_tool_end_a_run_of_code_with_their_own_status() -> None:
    @loopwise.tool(effect="read")
    def lookup(order: str) -> str:
        """Look an order up."""
        raise ValueError(f"no order {order}")

    invalid = loopwise.run(_one_refund_step(lookup, {"order": 7}), "go")
    assert invalid.status == Status.ERROR
    assert invalid.detail is not None and invalid.detail.startswith("desk/pay/lookup: ")
    failed = loopwise.run(_one_refund_step(lookup, {"order": "O-9"}), "go")
    assert failed.status == Status.TOOL_FAILED
    assert failed.detail == "desk/pay/lookup: ValueError: no order O-9"


def test_call_tools_names_itself_and_the_fix_when_it_refuses_an_ungated_effect() -> None:
    @loopwise.tool(effect="irreversible")
    def pay(amount: int) -> str:
        """Pay an amount."""
        return "paid"

    flow = _one_refund_step(pay, {"amount": 5})
    with pytest.raises(loopwise.ToolError) as refused:
        loopwise.run(flow, "go", store=None)
    assert str(refused.value) == (
        "call_tools: tool 'pay' is irreversible and has no gate; give it one "
        "(@tool(effect='irreversible', gate=human())) before calling it"
    )


def test_calls_from_code_in_one_once_in_scope_take_an_effect_once_and_get_its_value_again() -> None:
    ran: list[str] = []

    @loopwise.tool(effect="write")
    def refund(order: str, amount: int) -> dict[str, Any]:
        """Refund an order."""
        ran.append(order)
        return {"refunded": order, "amount": amount}

    @loopwise.step
    async def pay(order: str, ctx: loopwise.Context) -> list[Any]:
        args = {"order": order, "amount": 5}
        (first,) = await call_tools(ctx, [(refund, args)], once_in="desk")
        # Another batch, as after a node renamed on resume: the same effect, not again.
        (again,) = await call_tools(ctx, [(refund, args)], once_in="desk")
        return [first, again]

    result = loopwise.run(loopwise.Workflow("desk").then(pay), "O-1")
    assert result.status == Status.COMPLETED and ran == ["O-1"]
    assert result.output == [{"refunded": "O-1", "amount": 5}] * 2
    again = _results(result)["desk/pay/refund@2.1"]
    assert again["status"] == "done" and again["value"] == {"refunded": "O-1", "amount": 5}
    assert again["reason"] == "already took effect in this run (call desk/pay/refund); not repeated"


def test_code_that_retries_a_timed_out_effect_is_told_it_may_have_taken_effect() -> None:
    posted: list[str] = []

    @loopwise.tool(effect="write", timeout=0.05)
    def post(text: str) -> str:
        """Post to a forum."""
        posted.append(text)
        threading.Event().wait(0.5)
        return "posted"

    @loopwise.step
    async def announce(text: str, ctx: loopwise.Context) -> list[Any]:
        try:
            return await call_tools(ctx, [(post, {"text": text})], once_in="desk")
        except loopwise.Halt:
            # Its thread runs on and may still post: in its scope it counts as taken.
            return await call_tools(ctx, [(post, {"text": text})], once_in="desk")

    result = loopwise.run(loopwise.Workflow("desk").then(announce), "hi")
    assert result.status == Status.TOOL_FAILED and posted == ["hi"]
    assert result.detail == (
        "desk/announce/post@2.1: already took effect in this run (call desk/announce/post); "
        "not repeated"
    )


def _siblings_step(refund: loopwise.Tool, other: loopwise.Tool, args: Any) -> loopwise.Workflow:
    @loopwise.step
    async def pay(order: str, ctx: loopwise.Context) -> list[Any]:
        return await call_tools(ctx, [(refund, {"order": "O-1", "amount": 5}), (other, args)])

    return loopwise.Workflow("desk").then(pay)


def test_a_call_from_code_denied_beside_one_waiting_for_a_person_ends_the_run_denied(
    store_at: str,
) -> None:
    ran: list[str] = []
    _, refund = _desk_tools(ran)

    @loopwise.tool(effect="write", gate=gates.policy(lambda args: False))
    def close(ticket: str) -> str:
        """Close a ticket."""
        ran.append("close")
        return "closed"

    flow = _siblings_step(refund, close, {"ticket": "T-1"})
    paused = loopwise.run(flow, "go", store=store_at)
    assert paused.status == Status.AWAITING_APPROVAL and ran == []
    assert _decide_all(paused.run_id, store_at) == ["desk/pay/refund"]
    # Resumed, the step asks again: the approved refund runs, the denial is replayed.
    result = loopwise.resume(paused.run_id, step=flow, store=store_at)
    assert result.status == Status.DENIED and ran == ["refund O-1"]
    assert result.detail is not None and result.detail.startswith(
        "desk/pay/close: denied by policy"
    )


def test_a_call_from_code_that_failed_beside_one_waiting_for_a_person_ends_the_run_failed(
    store_at: str,
) -> None:
    ran: list[str] = []
    _, refund = _desk_tools(ran)

    @loopwise.tool(effect="read")
    def lookup(order: str) -> str:
        """Look an order up."""
        ran.append("lookup")
        raise ValueError(f"no order {order}")

    flow = _siblings_step(refund, lookup, {"order": "O-9"})
    paused = loopwise.run(flow, "go", store=store_at)
    assert paused.status == Status.AWAITING_APPROVAL and ran == ["lookup"]
    _decide_all(paused.run_id, store_at)
    result = loopwise.resume(paused.run_id, step=flow, store=store_at)
    assert result.status == Status.TOOL_FAILED and ran == ["lookup", "refund O-1"]
    assert result.detail == "desk/pay/lookup: ValueError: no order O-9"


# --- nested steps that pause together -----------------------------------------------------


def test_two_nested_agents_that_wait_in_one_turn_pause_the_run_once_with_both_requests(
    store_at: str,
) -> None:
    ran: list[str] = []
    _, refund = _desk_tools(ran)
    helpers = [
        loopwise.as_tool(loopwise.Agent(name=n, tools=[refund]), name=f"ask_{n}", description=n)
        for n in ("east", "west")
    ]
    outer = loopwise.Agent(name="desk", tools=helpers)

    def respond(request: loopwise.ModelRequest) -> Any:
        user = next(str(m["content"]) for m in request.messages if m["role"] == "user")
        done = [str(m["content"]) for m in request.messages if m["role"] == "tool"]
        if user != "go":
            return reply(done[-1]) if done else call("refund", {"order": user, "amount": 1})
        if done:
            return reply(" | ".join(done))
        return calls(("ask_east", {"input": "O-E"}, "e1"), ("ask_west", {"input": "O-W"}, "w1"))

    model = ScriptedModel(respond)
    paused = loopwise.run(outer, "go", model=model, store=store_at)
    assert paused.status == Status.AWAITING_APPROVAL
    ids = [p["approval_id"] for p in paused.pending]
    assert ids == _pending(paused.run_id, store_at) and len(ids) == 2
    assert paused.detail == f"2 call(s) await approval: refund ({ids[0]}), refund ({ids[1]})"
    _decide_all(paused.run_id, store_at)
    result = loopwise.resume(paused.run_id, step=outer, model=model, store=store_at)
    assert result.status == Status.COMPLETED and sorted(ran) == ["refund O-E", "refund O-W"]


# --- effects taken once -------------------------------------------------------------------


def _pay_tools(paid: list[int], gate: Any) -> list[loopwise.Tool]:
    @loopwise.tool(effect="write", gate=gate)
    def pay(amount: int) -> str:
        """Pay an amount."""
        paid.append(amount)
        return f"paid {amount}"

    return [pay]


def test_an_effect_asked_for_again_is_answered_as_done_once_not_as_an_error() -> None:
    paid: list[int] = []
    # One failed turn would end the run: the repeated call is not a failure.
    tools = _pay_tools(paid, gates.policy(lambda a: True))
    agent = loopwise.Agent(name="desk", tools=tools, failure_cap=1)
    model = _script(call("pay", {"amount": 40}, id="p1"), call("pay", {"amount": 40}, id="p2"))
    result = loopwise.run(agent, "go", model=model)
    assert result.status == Status.COMPLETED and paid == [40]
    read = [m["content"] for m in model.requests[-1].messages if m["role"] == "tool"]
    assert read[-1].startswith("paid 40\n[already took effect in this run (call p1)")
    again = _results(result)["p2"]
    assert again["status"] == "done" and again["is_error"] is False
    assert again["reason"] == "already took effect in this run (call p1); not repeated"
    assert again["content"] == (
        "paid 40\n[already took effect in this run (call p1); not repeated: "
        "an effect is taken once]"
    )
    assert again["untrusted"] is False


def test_a_person_who_edits_a_call_into_one_already_made_does_not_pay_twice() -> None:
    paid: list[int] = []
    agent = loopwise.Agent(name="desk", tools=_pay_tools(paid, gates.human()))
    model = _script(call("pay", {"amount": 40}, id="p1"), call("pay", {"amount": 50}, id="p2"))

    def decide(request: Any) -> Any:
        return (
            loopwise.Approved(by="ana")
            if request.args["amount"] == 40
            else Edited({"amount": 40}, by="ana")
        )

    result = loopwise.run(agent, "go", model=model, approvals=decide, store=None)
    assert result.status == Status.COMPLETED and paid == [40]
    again = _results(result)["p2"]
    assert again["status"] == "done"
    assert again["content"].startswith("paid 40\n[already took effect in this run (call p1)")


def test_an_edit_the_schema_refuses_is_recorded_as_denied() -> None:
    paid: list[int] = []
    agent = loopwise.Agent(name="desk", tools=_pay_tools(paid, gates.human()))
    model = _script(call("pay", {"amount": 40}, id="p1"))
    result = loopwise.run(
        agent,
        "go",
        model=model,
        approvals=lambda r: Edited({"amount": "lots"}, by="ana"),
        store=None,
    )
    assert result.status == Status.COMPLETED and paid == []
    refused = _results(result)["p1"]
    assert refused["status"] == "denied" and refused["is_error"] is True
    assert refused["content"].startswith("ERROR: the edited arguments were rejected: ")


def test_a_policy_is_asked_once_per_call() -> None:
    # A budget policy: it spends what it approves, so asking it twice would refuse a call
    # it approved (or let one through twice).
    budget = {"left": 100}

    def within_budget(args: Any) -> bool:
        if args["amount"] > budget["left"]:
            return False
        budget["left"] -= args["amount"]
        return True

    @loopwise.tool(effect="read", gate=gates.policy(within_budget))
    def quote(amount: int) -> str:
        """Quote an amount."""
        return f"quoted {amount}"

    paid: list[int] = []
    tools = [*_pay_tools(paid, gates.policy(within_budget)), quote]
    agent = loopwise.Agent(name="desk", tools=tools)
    model = _script(call("pay", {"amount": 60}, id="p1"), call("quote", {"amount": 30}, id="q1"))
    result = loopwise.run(agent, "go", model=model)
    assert result.status == Status.COMPLETED and paid == [60] and budget == {"left": 10}
    assert _results(result)["q1"]["content"] == "quoted 30"


# --- calls over the per-turn cap ----------------------------------------------------------


def test_calls_over_the_cap_are_logged_once_as_sent_and_do_not_taint_the_run(
    store_at: str,
) -> None:
    paid: list[int] = []
    pay = _pay_tools(paid, gates.policy(lambda a: True))[0]

    @loopwise.tool(effect="write", gate=gates.human())
    def close(ticket: str) -> str:
        """Close a ticket."""
        return f"closed {ticket}"

    agent = loopwise.Agent(name="desk", tools=[pay, close], max_tool_calls=1)
    long = {"amount": 2, "note": "n" * (2000 - len('{"amount": 2, "note": ""}'))}
    longer = {**long, "note": long["note"] + "n"}
    flood = calls(
        ("close", {"ticket": "T-1"}, "c1"),
        ("pay", {"amount": 1}, "x1"),
        ("pay", long, "x2"),
        ("pay", longer, "x3"),
    )
    model = _script(flood, call("pay", {"amount": 40}, id="p1"))
    paused = loopwise.run(agent, "go", model=model, store=store_at)
    assert paused.status == Status.AWAITING_APPROVAL and paid == []
    _decide_all(paused.run_id, store_at)
    result = loopwise.resume(paused.run_id, step=agent, model=model, store=store_at)
    # The refused calls did not taint the run: the payment after them needs no person.
    assert result.status == Status.COMPLETED and paid == [40]
    with open_store(store_at) as st:
        events = st.events(result.run_id)
    over = ("x1", "x2", "x3")
    sent = [e.data for e in events if e.type == "tool_call" and e.data["call_id"] in over]
    # Logged as sent, up to 2,000 characters (x2 is exactly that long); x3's are cut there.
    assert [s["args"] for s in sent] == [
        '{"amount": 1}',
        json.dumps(long),
        json.dumps(longer)[:2000] + "…",
    ]
    assert len(sent[1]["args"]) == 2000
    refused = [e.data for e in events if e.type == "tool_result" and e.data["call_id"] in over]
    assert [(r["status"], r["is_error"], r["untrusted"]) for r in refused] == [
        ("excess", True, False)
    ] * 3
    assert refused[0]["content"] == (
        "ERROR: too many tool calls in one turn: at most 1 run per turn, so this call to "
        "'pay' did not run; make fewer calls per turn"
    )


# --- a hybrid's actions: the action's own policy --------------------------------------------


def _refund_desk(
    paid: list[int], limit: dict[str, int], denier: str | None = None
) -> loopwise.Hybrid:
    """A desk whose payments a person approves and whose catalog holds them to ``limit``
    (its denials made by ``denier`` when given, else by the policy)."""
    from loopwise.architectures.plans import ActionCatalog

    @loopwise.tool(effect="write", gate=gates.human())
    def pay(order: str, amount: int) -> str:
        """Pay money back for an order."""
        paid.append(amount)
        limit["left"] -= amount
        return f"paid {amount}"

    def within_limit(args: dict[str, Any]) -> str | loopwise.Denied | None:
        if args["amount"] <= limit["left"]:
            return None
        reason = f"amount {args['amount']} is above the limit of {limit['left']}"
        return reason if denier is None else loopwise.Denied(reason, by=denier)

    catalog = ActionCatalog()
    catalog.add(pay, policy=within_limit)
    return loopwise.Hybrid("desk", actions=catalog, task="Settle the complaint.")


def _plan_of(*amounts: int) -> ScriptedModel:
    steps = [
        {
            "id": f"s{i}",
            "action": "pay",
            "args": {"order": f"O-{i}", "amount": a},
            "depends_on": [f"s{i - 1}"] if i > 1 else [],
            "reason": "r",
        }
        for i, a in enumerate(amounts, 1)
    ]
    return ScriptedModel([reply(json.dumps({"steps": steps}))])


def test_an_edit_over_the_actions_own_policy_never_runs() -> None:
    paid: list[int] = []
    desk = _refund_desk(paid, {"left": 100})
    result = loopwise.run(
        desk,
        "O-1 broke",
        model=_plan_of(20),
        approvals=lambda r: Edited({"order": "O-1", "amount": 500}, by="ana"),
        store=None,
    )
    assert paid == []
    (step,) = result.output.results.values()
    assert step.status == "denied"
    assert step.reason == (
        "denied by policy: amount 500 is above the limit of 100 (judging the arguments ana edited)"
    )
    logged = _results(result)["execute.s1"]
    assert logged["status"] == "denied" and logged["content"] == (
        "ERROR: the edited arguments were rejected by the policy: amount 500 is above the "
        "limit of 100"
    )


def test_an_edit_a_policy_refuses_in_its_own_name_is_denied_by_that_name() -> None:
    paid: list[int] = []
    desk = _refund_desk(paid, {"left": 100}, denier="refund limits")
    result = loopwise.run(
        desk,
        "O-1 broke",
        model=_plan_of(20),
        approvals=lambda r: Edited({"order": "O-1", "amount": 500}, by="ana"),
        store=None,
    )
    assert paid == []
    (step,) = result.output.results.values()
    assert step.status == "denied"
    assert step.reason == (
        "denied by refund limits: amount 500 is above the limit of 100 "
        "(judging the arguments ana edited)"
    )


def test_a_step_asked_again_with_its_own_edit_reads_the_edit_strictly() -> None:
    # s2 depends on s1, which a person edited: s2 is asked again, as they edited it. What
    # they typed is what runs: "50" is no integer, so it does not run as 50.
    paid: list[int] = []

    def decide(request: Any) -> Any:
        if request.approval_id.endswith(".recheck"):
            return loopwise.Approved(by="ana")
        if request.args["order"] == "O-1":
            return Edited({"order": "O-1", "amount": 25}, by="ana")
        return Edited({"order": "O-2", "amount": "50"}, by="ana")

    desk = _refund_desk(paid, {"left": 1000})
    result = loopwise.run(desk, "O-1 broke", model=_plan_of(20, 30), approvals=decide)
    assert paid == [25]
    s2 = result.output.results["s2"]
    assert s2.status == "denied" and s2.reason == (
        "invalid arguments for 'pay': amount: Input should be a valid integer (got '50')"
    )


def test_an_approved_step_is_judged_again_by_its_policy_just_before_it_runs() -> None:
    # Both payments were approved before the first ran; the first one used up the limit.
    paid: list[int] = []
    desk = _refund_desk(paid, {"left": 100})
    result = loopwise.run(desk, "O-1 broke", model=_plan_of(60, 60), approvals=lambda r: True)
    assert paid == [60]
    steps = result.output.results
    assert [steps["s1"].status, steps["s2"].status] == ["done", "denied"]
    assert steps["s2"].reason == (
        "denied by policy: amount 60 is above the limit of 40 (judged again just before it ran)"
    )
    logged = _results(result)["execute.s2"]
    assert logged["status"] == "denied" and logged["content"].startswith(
        "ERROR: the call to 'pay' was denied by policy: amount 60 is above the limit of 40"
    )


# --- what the model reads and the log records ---------------------------------------------


def test_a_timed_out_untrusted_read_taints_the_run_and_its_error_is_capped() -> None:
    @loopwise.tool(untrusted_output=True, timeout=0.05)
    def fetch(url: str) -> str:
        """Fetch a web page."""
        threading.Event().wait(0.5)
        return "page"

    @loopwise.tool
    def boom(n: int) -> str:
        """Fail loudly."""
        raise ValueError("x" * 50)

    paid: list[int] = []
    tools = [fetch, boom, *_pay_tools(paid, gates.policy(lambda a: True))]
    agent = loopwise.Agent(name="desk", tools=tools, max_tool_output_chars=30)
    model = _script(
        call("fetch", {"url": "https://example.com"}, id="f1"),
        call("boom", {"n": 1}, id="b1"),
        call("pay", {"amount": 5}, id="p1"),
    )
    result = loopwise.run(agent, "go", model=model)
    said = _results(result)
    assert said["f1"]["status"] == "failed" and said["f1"]["untrusted"] is True
    assert said["f1"]["reason"] == "tool 'fetch' timed out after 0.05s"
    # Error texts are capped like results: the model reads at most 30 characters of them.
    assert said["b1"]["content"] == (
        "ERROR: tool 'boom' raised Valu\n[truncated: showing 30 of 88 characters]"
    )
    # The payment after the untrusted read waits for a person, whatever its policy says.
    assert result.status == Status.AWAITING_APPROVAL and paid == []
    assert result.pending[0]["tainted_by"] == "fetch (f1)"


def test_a_timed_out_untrusted_write_taints_the_run_as_a_read_does() -> None:
    # Its error text (and whatever it may still do) came from an untrusted source: the
    # payment after it waits for a person, though its policy would let it through.
    @loopwise.tool(effect="write", untrusted_output=True, timeout=0.05, gate=gates.policy(bool))
    def post(text: str) -> str:
        """Post to a forum and return the replies."""
        threading.Event().wait(0.5)
        return "replies"

    paid: list[int] = []
    agent = loopwise.Agent(
        name="desk", tools=[post, *_pay_tools(paid, gates.policy(lambda a: True))]
    )
    model = _script(call("post", {"text": "hi"}, id="w1"), call("pay", {"amount": 5}, id="p1"))
    result = loopwise.run(agent, "go", model=model)
    said = _results(result)
    assert said["w1"]["status"] == "failed" and said["w1"]["untrusted"] is True
    assert said["w1"]["took_effect"] is not None  # it may still post: counted as taken
    assert result.status == Status.AWAITING_APPROVAL and paid == []
    assert result.pending[0]["tainted_by"] == "post (w1)"


def test_an_untrusted_effect_answered_again_is_flagged_untrusted_again() -> None:
    # The answer to a repeated effect shows the model the earlier result again: what an
    # untrusted tool said, whether the model asked twice or a person edited a call into it.
    posted: list[str] = []

    @loopwise.tool(effect="write", untrusted_output=True, gate=gates.human())
    def post(text: str) -> str:
        """Post to a forum and return the replies."""
        posted.append(text)
        return f"replies to {text}"

    def decide(request: Any) -> Any:
        if request.args["text"] == "hello":
            return Edited({"text": "hi"}, by="ana")
        return loopwise.Approved(by="ana")

    agent = loopwise.Agent(name="desk", tools=[post])
    model = _script(
        call("post", {"text": "hi"}, id="w1"),
        call("post", {"text": "hello"}, id="w2"),
        call("post", {"text": "hi"}, id="w3"),
    )
    result = loopwise.run(agent, "go", model=model, approvals=decide, store=None)
    assert result.status == Status.COMPLETED and posted == ["hi"]
    said = _results(result)
    for again in (said["w2"], said["w3"]):
        assert again["content"].startswith("replies to hi\n[already took effect")
        assert again["untrusted"] is True
        assert "value" not in again  # an agent keeps no values, repeated or not


def test_a_result_exactly_at_the_cap_is_not_marked_truncated() -> None:
    @loopwise.tool
    def word(n: int) -> str:
        """Say a word."""
        return "x" * n

    agent = loopwise.Agent(name="desk", tools=[word], max_tool_output_chars=30)
    result = loopwise.run(agent, "go", model=_script(call("word", {"n": 30}, id="w1")))
    assert _results(result)["w1"]["content"] == "x" * 30


def test_invalid_and_doubled_calls_are_logged_as_invalid_and_denials_say_which_tool() -> None:
    paid: list[int] = []

    @loopwise.tool(effect="write", gate=gates.policy(lambda a: "not on Sundays"))
    def close(ticket: str) -> str:
        """Close a ticket."""
        return "closed"

    agent = loopwise.Agent(name="desk", tools=[*_pay_tools(paid, None), close])
    turn = calls(
        ("pay", {"amount": "lots"}, "bad"),
        ("pay", {"amount": 5}, "p1"),
        ("pay", {"amount": 5}, "p2"),
        ("close", {"ticket": "T-1"}, "c1"),
    )
    result = loopwise.run(agent, "go", model=_script(turn))
    assert paid == [5]
    said = _results(result)
    assert [said[c]["status"] for c in ("bad", "p1", "p2", "c1")] == [
        "invalid",
        "done",
        "invalid",
        "denied",
    ]
    assert said["c1"]["content"] == (
        "ERROR: the call to 'close' was denied by policy: not on Sundays. It did not run; "
        "do not retry it with the same arguments."
    )
    assert said["c1"]["reason"] == "denied by policy: not on Sundays"


@pytest.mark.parametrize("counters", ["x", [1], {"a/lookup:model": 1.5}, {"a/lookup:model": -1}])
def test_a_replayed_result_with_damaged_counters_stops_the_resume(
    tmp_path: Any, counters: object
) -> None:
    # A result's counters say what a step used as a tool keyed inside it: read as none, a
    # later run of that step would take this one's keys and replay its recorded results.
    import sqlite3

    paid: list[str] = []

    @loopwise.tool
    def lookup(order_id: str) -> str:
        """Look an order up."""
        return "40"

    @loopwise.tool(effect="irreversible", gate=gates.human())
    def refund(order_id: str) -> str:
        """Refund an order."""
        paid.append(order_id)
        return "refunded"

    agent = loopwise.Agent(name="a", tools=[lookup, refund], max_steps=6)
    db = str(tmp_path / "runs.db")
    script = [call("lookup", {"order_id": "O-1"}), call("refund", {"order_id": "O-1"})]
    paused = loopwise.run(agent, "go", model=ScriptedModel([*script, reply("done")]), store=db)
    assert paused.status == Status.AWAITING_APPROVAL
    con = sqlite3.connect(db)
    with con:
        seq, key, data = con.execute(
            "SELECT seq, key, data FROM events WHERE run_id = ? AND type = 'tool_result'",
            (paused.run_id,),
        ).fetchone()
        damaged = {**json.loads(data), "counters": counters}
        con.execute(
            "UPDATE events SET data = ? WHERE run_id = ? AND seq = ?",
            (json.dumps(damaged), paused.run_id, seq),
        )
    con.close()
    loopwise.approve(paused.run_id, store=db, by="ann")
    with pytest.raises(loopwise.ConfigError) as refused:
        loopwise.resume(paused.run_id, step=agent, model=ScriptedModel([reply("x")]), store=db)
    assert refused.value.name == paused.run_id and key in str(refused.value)
    assert paid == []
