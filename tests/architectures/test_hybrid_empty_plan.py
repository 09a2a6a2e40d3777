""" "Nothing to do" is a plan: an empty plan that says why ends the hybrid ``completed``
with no action run; ``analyze`` counts runs that called no tool as a path of their own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise import ApprovalRequest, Denied, Hybrid, Status
from loopwise.cli.main import main
from loopwise.testing import ScriptedModel, reply
from loopwise.tools.gates import human

ASKED: list[str] = []
PAID: list[int] = []


@loopwise.tool(effect="irreversible", gate=human())
def pay(amount_cents: int) -> str:
    """Pay money back."""
    PAID.append(amount_cents)
    return "paid"


def _desk(**options: Any) -> Hybrid:
    return Hybrid("desk", actions=[pay], task="Settle the complaint.", **options)


def _asked(request: ApprovalRequest) -> Any:
    ASKED.append(request.tool)
    return Denied("not today", by="alice")


@pytest.fixture(autouse=True)
def _clean() -> None:
    ASKED.clear()
    PAID.clear()


def test_an_empty_plan_with_a_reason_completes_and_runs_nothing() -> None:
    model = ScriptedModel([reply({"steps": [], "reason": "the order is refunded already"})])
    result = loopwise.run(_desk(), "O-1 again?", model=model, approvals=_asked, store=None)
    assert result.status is Status.COMPLETED, result.detail
    assert result.output.plan.reason == "the order is refunded already"
    assert result.output.results == {} and PAID == [] and ASKED == []
    assert len(model.requests) == 1  # one plan, not six re-asks
    # The planner is told that an empty plan needs its reason.
    assert "propose no steps and say why" in model.requests[0].messages[0]["content"]


def test_an_empty_plan_without_a_reason_goes_back_to_the_planner() -> None:
    model = ScriptedModel([reply({"steps": []}), reply({"steps": [], "reason": "a thank-you"})])
    result = loopwise.run(_desk(), "Thanks!", model=model, store=None)
    assert result.status is Status.COMPLETED, result.detail
    assert "gives no reason" in model.requests[1].messages[-1]["content"]
    always_silent = ScriptedModel([reply({"steps": [], "reason": "  "})] * 3)
    result = loopwise.run(_desk(), "Thanks!", model=always_silent, store=None)
    assert result.status is Status.INVALID_OUTPUT and "gives no reason" in (result.detail or "")


def test_an_empty_plan_after_a_denial_ends_denied_and_says_why() -> None:
    first = {"steps": [{"id": "s1", "action": "pay", "args": {"amount_cents": 500},
                        "depends_on": [], "reason": "owed"}]}  # fmt: skip
    model = ScriptedModel([reply(first), reply({"steps": [], "reason": "only a person pays"})])
    result = loopwise.run(
        _desk(replan_on_denial=1), "refund O-1", model=model, approvals=_asked, store=None
    )
    assert result.status is Status.DENIED and PAID == []
    assert "was denied" in (result.detail or "")
    assert "proposed nothing more: only a person pays" in (result.detail or "")


def test_the_hybrid_starter_plans_nothing_for_a_thank_you_and_its_eval_case_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init", "hybrid", "."]) == 0
    capsys.readouterr()
    assert main(["eval", "refunds.py:refund_desk", "--dataset", "refunds_cases.jsonl",
                 "--model", "scripted", "--scorer", "refunds.py:refund_matches",
                 "--json"]) in (0, 1)  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    (thanks,) = [r for r in report["targets"][0]["runs"] if r["case_id"] == "10"]
    assert thanks["status"] == "completed" and thanks["score"] == 1.0, thanks


def _run(run_id: str, *tools: str) -> dict[str, Any]:
    events: list[dict[str, Any]] = [{"type": "model_call", "data": {}}]
    for t in tools:
        events += [{"type": "tool_call", "data": {"tool": t}}, {"type": "model_call", "data": {}}]
    return {"run_id": run_id, "status": "completed", "events": events}


def test_analyze_counts_runs_without_tool_calls_as_their_own_path() -> None:
    runs = [_run(f"r{i}", "lookup", "refund") for i in range(8)] + [_run("thanks")]
    result = loopwise.analyze(runs)
    assert result.runs == 9
    by_text = {p.text: p for p in result.paths}
    assert by_text["(no tool calls)"].runs == 1 and by_text["(no tool calls)"].run_ids == ["thanks"]
    assert by_text["lookup → refund"].share == pytest.approx(8 / 9)
    assert "of 9 runs" in result.message
