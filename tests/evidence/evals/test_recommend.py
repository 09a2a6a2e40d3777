"""The recommendation weighs cost only when there is a cost to weigh."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise import ModelRequest
from loopwise.cli.main import main
from loopwise.evidence.evals.dataset import Case
from loopwise.evidence.evals.harness import EvalTarget, evaluate
from loopwise.testing import ScriptedModel
from tests.support import ROOT

TRIAGE = f"{ROOT}/workflows/ticket_triage.py:triage"
TRIAGE_AGENT = f"{ROOT}/agents/triage_agent.py:triage_agent"


def _cases(n: int) -> list[Case]:
    return [Case(id=str(i), input={"n": i}, expected={"label": i % 2}) for i in range(n)]


@loopwise.step
async def terse(x: dict[str, Any], ctx: loopwise.Context) -> dict[str, Any]:
    await ctx.call_model(ModelRequest(messages=[{"role": "user", "content": str(x)}]))
    return {"label": x["n"] % 2}


@loopwise.step
async def wordy(x: dict[str, Any], ctx: loopwise.Context) -> dict[str, Any]:
    await ctx.call_model(ModelRequest(messages=[{"role": "user", "content": str(x) * 40}]))
    return {"label": x["n"] % 2}


def test_the_scripted_models_zero_cost_is_not_compared_tokens_decide(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = (ROOT / "workflows/data/tickets.jsonl").read_text().splitlines()[:6]
    data = tmp_path / "tickets.jsonl"
    data.write_text("\n".join(lines) + "\n")
    argv = ["eval", TRIAGE, TRIAGE_AGENT, "--model", "scripted", "--dataset", str(data)]
    assert main([*argv, "--store", str(tmp_path / "e.db"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {t["metrics"]["cost_usd"]["max"] for t in doc["targets"]} == {0}
    rec = doc["recommendation"]
    (reason,) = rec["reasons"]
    assert "cost not compared: $0 with this model (at gpt-4o-mini prices " in reason, reason
    assert "of the cost (" not in reason  # no "cheaper" on $0 against $0
    assert rec["text"].endswith(
        "; among those not shown less accurate, chosen for fewer tokens (cost not compared) "
        "→ the workflow, triage."
    ), rec["text"]


def test_an_unknown_cost_is_not_dearer_than_zero_tokens_decide() -> None:
    # The wordy target's model is free; the terse one's has no price (cost unknown). An
    # unknown cost is no evidence of a higher one: the tokens decide, and the text says so.
    report = evaluate(
        [
            EvalTarget(name="wordy", step=wordy, model=ScriptedModel(lambda r: "ok")),
            EvalTarget(
                name="terse", step=terse, model=ScriptedModel(lambda r: "ok", name="house-llm")
            ),
        ],
        _cases(6),
    )
    wordy_, terse_ = report.targets
    assert wordy_.metrics["cost_usd"].stat("mean") == 0 and terse_.metrics["cost_usd"].unknown
    rec = report.recommendation
    assert rec.choice == "terse", rec.text
    assert "cost not compared: unknown, a model without a price" in rec.text
    assert "chosen for fewer tokens (cost not compared)" in rec.text


def test_known_prices_still_decide_on_cost() -> None:
    pricing = loopwise.Pricing(extra={"scripted": loopwise.Price(input=1.0, output=1.0)})
    model = ScriptedModel(lambda r: "ok")
    report = evaluate(
        [
            EvalTarget(name="wordy", step=wordy, model=model),
            EvalTarget(name="terse", step=terse, model=model),
        ],
        _cases(6),
        pricing=pricing,
    )
    rec = report.recommendation
    assert rec.choice == "terse" and "cost not compared" not in rec.text, rec.text
    assert "of the cost ($" in rec.text and "chosen for the lower cost →" in rec.text
