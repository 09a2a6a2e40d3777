"""Hybrids: plans are validated against the catalog before anything runs; the planner
holds only read tools; plans compile to a workflow whose actions pass their gates."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from pydantic import BeforeValidator

import loopwise
from loopwise import Agent, ApprovalRequest, Denied, Status, ToolError
from loopwise.architectures.hybrid import Hybrid
from loopwise.architectures.plans import ActionCatalog, validate_plan
from loopwise.architectures.stakes import plan_mermaid
from loopwise.testing import ScriptedModel, call, reply
from loopwise.tools.allowlists import Bounds, IdPattern
from loopwise.tools.gates import human, policy
from loopwise.tools.tool import tool
from tests.support import ROOT

EFFECTS: list[tuple[str, dict[str, Any]]] = []


@pytest.fixture(autouse=True)
def _no_effects() -> Iterator[None]:
    EFFECTS.clear()
    yield


@tool(effect="irreversible", gate=human())
def pay(
    order_id: Annotated[str, IdPattern(r"O-\d{4}")], amount: Annotated[float, Bounds(ge=0.01)]
) -> str:
    """Pay money back for an order."""
    EFFECTS.append(("pay", {"order_id": order_id, "amount": amount}))
    return "paid"


@tool(effect="write", gate=policy(lambda args: True))
def note(text: str) -> str:
    """Write a note."""
    EFFECTS.append(("note", {"text": text}))
    return "noted"


def _at_most_100(args: dict[str, Any]) -> str | None:
    return None if args["amount"] <= 100 else f"amount {args['amount']} is above the limit of 100"


def _catalog() -> ActionCatalog:
    catalog = ActionCatalog()
    catalog.add(pay, policy=_at_most_100, estimate=lambda a: a.amount)
    catalog.add(note)
    return catalog


def _step(sid: str, action: str, args: dict[str, Any], deps: list[str] | None = None) -> Any:
    return {"id": sid, "action": action, "args": args, "depends_on": deps or [], "reason": "r"}


def _validate(raw: Any, max_steps: int = 10) -> tuple[Any, list[str]]:
    return asyncio.run(validate_plan(raw, _catalog(), max_steps=max_steps))


def test_a_valid_plan_parses_into_typed_arguments() -> None:
    plan, errors = _validate(
        {
            "steps": [
                _step("s1", "pay", {"order_id": "O-1003", "amount": 20}),
                _step("s2", "note", {"text": "x"}, ["s1"]),
            ]
        }
    )
    assert errors == []
    assert plan.steps[0].args.amount == 20.0
    assert "n_s1 --> n_s2" in plan_mermaid(plan, _catalog())
    assert "irreversible, est. cost 20.00" in plan_mermaid(plan, _catalog())


@pytest.mark.parametrize(
    ("steps", "needle"),
    [
        ([_step("s1", "drop_table", {})], "drop_table"),
        ([_step("s1", "pay", {"order_id": "1003", "amount": 5})], "order_id"),
        ([_step("s1", "pay", {"order_id": "O-1003", "amount": 5, "extra": 1})], "extra"),
        ([_step("s1", "pay", {"order_id": "O-1003", "amount": 500})], "above the limit"),
        ([_step("s1", "note", {"text": "a"}, ["s9"])], "unknown step 's9'"),
        (
            [
                _step("s1", "note", {"text": "a"}, ["s2"]),
                _step("s2", "note", {"text": "b"}, ["s1"]),
            ],
            "cycle",
        ),
        ([_step("s1", "note", {"text": "a"}), _step("s1", "note", {"text": "b"})], "used twice"),
        ([_step(f"s{i}", "note", {"text": "a"}) for i in range(4)], "at most 3"),
        ([], "no steps"),
    ],
)
def test_invalid_plans_name_what_is_wrong(steps: list[Any], needle: str) -> None:
    plan, errors = _validate({"steps": steps}, max_steps=3)
    assert plan is None
    assert any(needle in e for e in errors), errors


def test_the_planner_schema_allows_only_catalog_names_and_their_arguments() -> None:
    schema = json.dumps(_catalog().plan_type().model_json_schema())
    assert '"const": "pay"' in schema and '"const": "note"' in schema
    assert "oneOf" not in schema and "discriminator" not in schema
    assert "^O-\\\\d{4}$" in schema


@tool
def look(order_id: Annotated[str, IdPattern(r"O-\d{4}")]) -> dict[str, Any]:
    """Look an order up (read-only)."""
    return {"order_id": order_id, "total": 80}


def _plan(*steps: Any) -> dict[str, Any]:
    return {"steps": list(steps)}


def _hybrid(**options: Any) -> Hybrid:
    return Hybrid("desk", actions=_catalog(), task="Settle the complaint.", **options)


def _approve_all(request: ApprovalRequest) -> bool:
    return True


def _run(hybrid: Hybrid, model: Any, approvals: Any = _approve_all) -> loopwise.RunResult:
    return loopwise.run(hybrid, "O-1003 broke", model=model, approvals=approvals)


GOOD = _plan(
    _step("s1", "pay", {"order_id": "O-1003", "amount": 20}),
    _step("s2", "note", {"text": "paid"}, ["s1"]),
)


def test_a_plan_naming_an_unknown_action_never_executes() -> None:
    bad = _plan(_step("s1", "drop_table", {}), _step("s2", "note", {"text": "x"}))
    model = ScriptedModel([reply(bad)] * 20)
    result = _run(_hybrid(max_plan_retries=1), model)
    assert result.status is Status.INVALID_OUTPUT
    assert EFFECTS == []
    # The errors went back to the planner, which is asked a bounded number of times.
    assert "drop_table" in json.dumps(model.requests[1].messages)
    assert len(model.requests) <= 2 * 3


def test_a_plan_breaking_an_argument_policy_never_executes() -> None:
    greedy = _plan(_step("s1", "pay", {"order_id": "O-1003", "amount": 500}))
    model = ScriptedModel([reply(greedy)] * 3)
    result = _run(_hybrid(max_plan_retries=2), model)
    assert result.status is Status.INVALID_OUTPUT
    assert "above the limit" in (result.detail or "")
    assert EFFECTS == []
    assert len(model.requests) == 3


def test_policy_errors_go_back_to_the_planner_and_a_fixed_plan_runs() -> None:
    greedy = _plan(_step("s1", "pay", {"order_id": "O-1003", "amount": 500}))
    model = ScriptedModel([reply(greedy), reply(GOOD)])
    result = _run(_hybrid(), model)
    assert result.status is Status.COMPLETED, result.detail
    assert "above the limit of 100" in model.requests[1].messages[-1]["content"]
    assert EFFECTS == [("pay", {"order_id": "O-1003", "amount": 20.0}), ("note", {"text": "paid"})]
    assert result.output.ran("pay") == 1


def test_a_planner_holding_a_write_or_irreversible_tool_is_refused() -> None:
    for held in (note, pay):
        planner = Agent(name="planner", tools=[look, held], output_type=_catalog().plan_type())
        with pytest.raises(ToolError) as caught:
            _hybrid(planner=planner)
        assert caught.value.tool == held.name
    with pytest.raises(ToolError):
        _hybrid(tools=[look, note])


def test_an_ungated_irreversible_action_is_refused() -> None:
    @tool(effect="irreversible")
    def wire(amount: float) -> str:
        """Wire money."""
        return "sent"

    with pytest.raises(ToolError, match="no gate"):
        Hybrid("desk", actions=[wire])


def test_the_planner_can_reach_only_read_tools() -> None:
    # The planner tries to call the actions directly: they are not its tools.
    model = ScriptedModel(
        [
            call("pay", {"order_id": "O-1003", "amount": 20}),
            call("note", {"text": "sneaky"}),
            call("look", {"order_id": "O-1003"}),
            call("final_answer", GOOD),
        ]
    )
    result = _run(_hybrid(tools=[look]), model)
    assert result.status is Status.COMPLETED, result.detail
    offered = {t["function"]["name"] for r in model.requests for t in r.tools or []}
    assert offered == {"look", "final_answer"}
    # Only the validated plan acted: one payment and one note, not the planner's calls.
    assert [name for name, _ in EFFECTS] == ["pay", "note"]
    assert EFFECTS[1] == ("note", {"text": "paid"})


def test_independent_actions_run_concurrently_and_dependencies_in_order() -> None:
    active, peak, order = [0], [0], []
    independent = asyncio.Barrier(2)

    @tool(effect="read")
    async def probe(label: str) -> str:
        """Probe."""
        active[0] += 1
        peak[0] = max(peak[0], active[0])
        if label in {"a", "b"}:
            # Passes only once both are running: run one after the other, they time out.
            await asyncio.wait_for(independent.wait(), 10)
        active[0] -= 1
        order.append(label)
        return label

    plan = _plan(
        _step("a", "probe", {"label": "a"}),
        _step("b", "probe", {"label": "b"}),
        _step("c", "probe", {"label": "c"}, ["a", "b"]),
    )
    hybrid = Hybrid("probe", actions=[probe])
    result = _run(hybrid, ScriptedModel([reply(plan)]))
    assert result.status is Status.COMPLETED, result.detail
    assert peak[0] == 2
    assert order[-1] == "c"


def test_a_denied_action_skips_its_dependants_and_the_run_ends_denied() -> None:
    def deny_payments(request: ApprovalRequest) -> Any:
        return Denied("not today", by="alice") if request.tool == "pay" else True

    result = _run(_hybrid(), ScriptedModel([reply(GOOD)]), approvals=deny_payments)
    assert result.status is Status.DENIED
    assert EFFECTS == []
    statuses = {k: r.status for k, r in result.output.results.items()}
    assert statuses == {"s1": "denied", "s2": "skipped"}


def test_a_denial_can_be_fed_back_for_a_bounded_replan() -> None:
    def deny_payments(request: ApprovalRequest) -> Any:
        return Denied("pay by voucher instead", by="alice") if request.tool == "pay" else True

    second = _plan(_step("s1", "note", {"text": "voucher offered"}))
    model = ScriptedModel([reply(GOOD), reply(second)])
    result = _run(_hybrid(replan_on_denial=1), model, approvals=deny_payments)
    assert result.status is Status.COMPLETED, result.detail
    assert "pay by voucher instead" in model.requests[1].messages[-1]["content"]
    assert EFFECTS == [("note", {"text": "voucher offered"})]
    assert result.output.rounds == 2


def test_whole_plan_approval_shows_the_graph_effects_and_cost() -> None:
    seen: list[ApprovalRequest] = []

    def reviewer(request: ApprovalRequest) -> Any:
        seen.append(request)
        return Denied("too much at once", by="bob") if request.tool == "approve_plan" else True

    result = _run(_hybrid(approve_plan=True), ScriptedModel([reply(GOOD)]), approvals=reviewer)
    assert result.status is Status.DENIED
    assert EFFECTS == []
    graph = seen[0].args["graph"]
    assert "s1: pay<br/>irreversible, est. cost 20.00" in graph and "n_s1 --> n_s2" in graph
    assert seen[0].args["estimated_cost"] == 20.0


def test_a_failing_action_ends_the_run_tool_failed() -> None:
    @tool(effect="read")
    def broken(x: int) -> str:
        """Always fails."""
        raise RuntimeError("disk on fire")

    plan = _plan(_step("a", "broken", {"x": 1}), _step("b", "broken", {"x": 2}, ["a"]))
    result = _run(Hybrid("b", actions=[broken]), ScriptedModel([reply(plan)]))
    assert result.status is Status.TOOL_FAILED
    assert "disk on fire" in (result.detail or "")
    assert result.output.results["b"].status == "skipped"


def test_a_replanned_run_pauses_and_resumes_without_repeating_effects() -> None:
    def reviewer(request: ApprovalRequest) -> Any:
        if request.tool == "pay" and request.args["amount"] == 20:
            return Denied("too much", by="alice")
        return None if request.tool == "pay" else True  # smaller payments wait for a person

    first = _plan(
        _step("s1", "pay", {"order_id": "O-1003", "amount": 20}),
        _step("s2", "note", {"text": "complaint seen"}),
    )
    second = _plan(_step("s1", "pay", {"order_id": "O-1003", "amount": 10}))
    desk = _hybrid(replan_on_denial=1)
    paused = _run(desk, ScriptedModel([reply(first), reply(second)]), approvals=reviewer)
    assert paused.status is Status.AWAITING_APPROVAL
    assert [p["approval_id"] for p in paused.pending] == ["execute_2.s1"]
    assert EFFECTS == [("note", {"text": "complaint seen"})]

    with loopwise.SQLiteStore() as store:
        store.decide(paused.run_id, "execute_2.s1", decision="approved", by="bob")
    # No model call is needed: both plans, the verdicts and the note are journaled.
    resumed = loopwise.resume(paused.run_id, step=desk, model=ScriptedModel([]))
    assert resumed.status is Status.COMPLETED, resumed.detail
    assert EFFECTS == [
        ("note", {"text": "complaint seen"}),
        ("pay", {"order_id": "O-1003", "amount": 10.0}),
    ]


def test_a_resumed_run_still_counts_the_planning_it_skips() -> None:
    """The plan is journaled, so resuming skips the planner; its tokens, calls and steps
    still belong to the run (a budget is per run, across the pause)."""
    desk = _hybrid()
    paused = _run(desk, ScriptedModel([reply(GOOD)]), approvals=None)
    assert paused.status is Status.AWAITING_APPROVAL
    assert paused.usage.model_calls == 1 and paused.usage.total_tokens > 0
    with loopwise.SQLiteStore() as store:
        store.decide(paused.run_id, "execute.s1", decision="approved", by="bob")
    resumed = loopwise.resume(paused.run_id, step=desk, model=ScriptedModel([]))
    assert resumed.status is Status.COMPLETED, resumed.detail
    assert resumed.usage.model_calls == 1
    assert resumed.usage.total_tokens == paused.usage.total_tokens
    assert resumed.steps >= paused.steps
    with loopwise.SQLiteStore() as store:
        assert store.get_run(paused.run_id).usage["total_tokens"] == paused.usage.total_tokens


def test_a_plan_with_a_nan_or_infinite_argument_never_executes() -> None:
    # pydantic's JSON reader accepts NaN, and NaN passes a "deny above 100" policy.
    paid: list[float] = []

    @loopwise.tool(
        effect="irreversible",
        gate=policy(lambda a: Denied("over 100") if a["amount"] > 100 else True),
    )
    def refund(order_id: str, amount: float) -> str:
        paid.append(amount)
        return "refunded"

    def plan(amount: str) -> str:
        step = '{"id": "s1", "action": "refund", "depends_on": [], "reason": "r", "args": '
        return '{"steps": [' + step + '{"order_id": "O-1", "amount": ' + amount + "}}]}"

    model = ScriptedModel([reply(plan("NaN")), reply(plan("-Infinity")), reply(plan("20"))])
    desk = Hybrid("desk", actions=[refund], task="refund")
    result = loopwise.run(desk, "x", model=model)
    assert result.status == "completed" and paid == [20.0]
    feedback = [str(m["content"]) for m in model.last_request.messages if m["role"] == "user"]
    assert model.calls == 3 and any("amount is not a finite number" in t for t in feedback)


def test_the_money_at_stake_says_its_currency_or_that_none_is_declared() -> None:
    from loopwise.architectures.plans import parse_plan
    from loopwise.architectures.stakes import plan_cost, plan_unit, step_unit
    from loopwise.tools.audit import asked_lines

    def plan_of(catalog: ActionCatalog, *orders: str) -> Any:
        steps = [
            {"id": f"s{i}", "action": "pay", "args": {"order_id": o, "amount": 10.0 * i},
             "reason": "owed"}
            for i, o in enumerate(orders, 1)
        ]  # fmt: skip
        plan, errors = parse_plan({"steps": steps}, catalog)
        assert plan is not None, errors
        return plan

    currency = {"O-0001": "EUR", "O-0002": "USD"}
    by_order = ActionCatalog()
    by_order.add(pay, estimate=lambda a: a.amount, unit=lambda a: currency[a.order_id])
    one = plan_of(by_order, "O-0001", "O-0001")
    assert step_unit(one.steps[0], by_order) == "EUR" and plan_unit(one, by_order) == "EUR"
    both = plan_of(by_order, "O-0001", "O-0002")
    assert plan_cost(both, by_order) == 30.0
    assert plan_unit(both, by_order) == "mixed units: EUR, USD"  # the sum says it adds both
    assert step_unit(plan_of(by_order, "O-0009").steps[0], by_order) is None  # unit unknown

    fixed = ActionCatalog()
    fixed.add(pay, estimate=lambda a: a.amount, unit="credits")
    assert plan_unit(plan_of(fixed, "O-0001"), fixed) == "credits"
    bare = ActionCatalog()
    bare.add(pay, estimate=lambda a: a.amount)
    assert plan_unit(plan_of(bare, "O-0001"), bare) is None
    # Shown to a person: the amount with its unit, or that the action declares none
    # (before: "at stake: 250.00 (the action's estimate)", whose currency was anyone's guess).
    assert asked_lines(None, 250.0, None, "EUR") == [
        "    at stake: 250.00 EUR (the action's estimate)"
    ]
    assert asked_lines(None, 250.0, None) == [
        "    at stake: 250.00 (the action's estimate; it declares no currency or unit)"
    ]


def test_a_paused_refund_says_the_orders_currency(capsys: pytest.CaptureFixture[str]) -> None:

    from loopwise.cli.main import main

    desk = ROOT / "workflows" / "refund_desk.py"
    complaint = '"Order O-1003 arrived broken and I want my money back."'
    assert main(["run", f"{desk}:refund_desk", "--model", "scripted", "--input", complaint]) == 1
    capsys.readouterr()
    assert main(["pending", "--json"]) == 0
    refund = next(w for w in json.loads(capsys.readouterr().out) if w["tool"] == "issue_refund")
    assert (refund["at_stake"], refund["at_stake_unit"]) == (189.0, "INR")  # O-1003's currency
    assert main(["pending"]) == 0
    assert "at stake: 189.00 INR (the action's estimate)" in capsys.readouterr().out


PARSED: list[str] = []
"""Each validation of ``close``'s ``order_id``."""


def _counted(order_id: str) -> str:
    PARSED.append(order_id)
    return order_id


@tool(effect="write", gate=policy(lambda args: True))
def close(order_id: Annotated[str, BeforeValidator(_counted)]) -> str:
    """Close an order."""
    EFFECTS.append(("close", {"order_id": order_id, "parses": len(PARSED)}))
    return "closed"


def test_a_plan_steps_arguments_are_parsed_once_before_the_executor() -> None:
    """validate_plan's parse is kept on the step: authorisation, the repeat check and
    rechecks read it; the executor parses the call's arguments itself (its one path)."""
    PARSED.clear()
    desk = Hybrid("desk", actions=[close], task="close")
    plan = _plan(_step("s1", "close", {"order_id": "O-1"}))
    result = loopwise.run(desk, "x", model=ScriptedModel([reply(plan)]))
    assert result.status is Status.COMPLETED, result.detail
    # The planner's answer (the plan's schema), validate_plan, then the executor's own.
    assert EFFECTS == [("close", {"order_id": "O-1", "parses": 3})]
    assert len(PARSED) == 3


@tool(effect="write", gate=human())
def hold(order_id: Annotated[str, BeforeValidator(_counted)]) -> str:
    """Hold an order."""
    EFFECTS.append(("hold", {"order_id": order_id, "parses": len(PARSED)}))
    return "held"


def test_a_plan_recalled_on_resume_is_parsed_where_it_is_first_used() -> None:
    PARSED.clear()
    desk = Hybrid("desk", actions=[hold], task="hold")
    plan = _plan(_step("s1", "hold", {"order_id": "O-1"}))
    paused = loopwise.run(desk, "x", model=ScriptedModel([reply(plan)]))
    assert paused.status is Status.AWAITING_APPROVAL
    assert len(PARSED) == 2  # the planner's answer, validate_plan
    with loopwise.SQLiteStore() as store:
        store.decide(paused.run_id, "execute.s1", decision="approved", by="bob")
    resumed = loopwise.resume(paused.run_id, step=desk, model=ScriptedModel([]))
    assert resumed.status is Status.COMPLETED, resumed.detail
    # The journaled plan (its schema), its authorisation's first use, the executor's own.
    assert EFFECTS == [("hold", {"order_id": "O-1", "parses": 5})]


def test_a_step_given_new_arguments_parses_them() -> None:
    plan, errors = _validate(_plan(_step("s1", "note", {"text": "a"})))
    assert errors == []
    first = plan.steps[0]
    assert first.parsed_args(note) is first.parsed_args(note)
    moved = first.model_copy(update={"args": {"text": "b"}})
    assert moved.parsed_args(note).text == "b"
    with pytest.raises(loopwise.ToolArgumentsError):
        first.model_copy(update={"args": {"text": 5}}).parsed_args(note)
