"""The paired comparison of two targets run on the same cases, against hand-computed numbers,
and `eval`'s recommendation using it."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

import loopwise
from loopwise import ModelRequest
from loopwise.core.events import Status
from loopwise.evidence.evals.bounds import newcombe_paired
from loopwise.evidence.evals.dataset import Case
from loopwise.evidence.evals.harness import EvalTarget, evaluate
from loopwise.evidence.evals.paired import paired_difference, t_quantile
from loopwise.evidence.evals.stats import CaseRun
from loopwise.testing import ScriptedModel


def _run(case: str, score: float | None, repeat: int = 0, **kw: Any) -> CaseRun:
    fields: dict[str, Any] = {
        "target": "t",
        "case_id": case,
        "repeat": repeat,
        "run_id": f"{case}-{repeat}",
        "status": Status.COMPLETED,
        "score": score,
        "steps": 1,
        "model_calls": 1,
        "tool_calls": 0,
        "tokens": 10,
        "cost_usd": None,
        "latency_s": 0.0,
    }
    fields.update(kw)
    return CaseRun(**fields)


def test_t_quantiles_match_the_table() -> None:
    table = {1: 12.706, 2: 4.303, 4: 2.776, 9: 2.262, 19: 2.093, 30: 2.042}
    for df, value in table.items():
        assert t_quantile(0.95, df) == pytest.approx(value, abs=1e-3)
    assert t_quantile(0.99, 10) == pytest.approx(3.169, abs=1e-3)


def test_paired_interval_by_hand_and_narrower_than_the_unpaired_one() -> None:
    # Scores of 0 or ½: not right/wrong, so Student's t on the per-case differences.
    # a fails cases 0-1, b fails cases 0-3: the cases hard for a are hard for b too.
    a = [_run(str(i), 0.0 if i < 2 else 0.5) for i in range(8)]
    b = [_run(str(i), 0.0 if i < 4 else 0.5) for i in range(8)]
    d = paired_difference(a, b)
    # differences: 0 0 ½ ½ 0 0 0 0 → mean 0.125, sd = sqrt((2·0.140625 + 6·0.015625)/7)
    sd = math.sqrt((2 * 0.140625 + 6 * 0.015625) / 7)
    half = 2.3646 * sd / math.sqrt(8)  # t(0.975, 7) = 2.3646
    assert d.cases == 8 and d.mean == pytest.approx(0.125) and d.method == "t"
    assert (d.a_mean, d.b_mean) == (pytest.approx(0.375), pytest.approx(0.25))
    assert d.low == pytest.approx(0.125 - half, abs=1e-4)
    assert d.high == pytest.approx(0.125 + half, abs=1e-4)
    assert d.half_width == pytest.approx(0.1935, abs=1e-3)
    # as two independent samples of 8 (0/½ scores: half the 0/1 spread)
    unpaired = 1.96 * math.sqrt(0.75 * 0.25 / 8 + 0.5 * 0.5 / 8) / 2
    assert d.half_width < unpaired


def test_right_or_wrong_cases_get_newcombes_score_interval_never_a_point() -> None:
    a = [_run(str(i), 0.0 if i < 2 else 1.0) for i in range(8)]
    b = [_run(str(i), 0.0 if i < 4 else 1.0) for i in range(8)]
    d = paired_difference(a, b)
    # both right 4, only a 2, only b 0, neither 2
    assert d.method == "newcombe" and d.mean == pytest.approx(0.25)
    assert (d.low, d.high) == newcombe_paired(4, 2, 0, 2)
    # 3 cases both got right: not "+0 to +0" (a zero-variance t-interval) but ±56 points
    same = [_run(str(i), 1.0) for i in range(3)]
    d = paired_difference(same, same)
    assert d.mean == 0 and d.low == pytest.approx(-0.5615, abs=1e-4) and d.high > 0.56
    # Non-binary differences that do not vary: no interval, not a degenerate one
    halves = [_run(str(i), 0.5) for i in range(3)]
    d = paired_difference(same, halves)
    assert d.method == "none" and math.isinf(d.half_width)


def test_repeats_are_one_cluster_per_case() -> None:
    a = [_run("x", 1.0, 0), _run("x", 1.0, 1), _run("y", 0.0, 0), _run("y", 1.0, 1)]
    a += [_run("z", 1.0, 0), _run("z", 1.0, 1)]
    b = [_run("x", 1.0, 0), _run("x", 0.0, 1), _run("y", 0.0, 0), _run("y", 0.0, 1)]
    b += [_run("z", 1.0, 0), _run("z", 1.0, 1), _run("only-b", 1.0)]
    d = paired_difference(a, b)
    # case means a: 1, .5, 1; b: .5, 0, 1 → differences .5 .5 0 over 3 cases (df 2)
    assert d.cases == 3 and d.unpaired == 1
    sd = math.sqrt(((1 / 6) ** 2 * 2 + (1 / 3) ** 2) / 2)
    assert d.mean == pytest.approx(1 / 3)
    assert d.half_width == pytest.approx(4.3027 * sd / math.sqrt(3), abs=1e-4)
    assert d.to_dict()["cases"] == 3


def test_any_metric_and_the_edges() -> None:
    a = [_run("1", None, cost_usd=0.2), _run("2", None, cost_usd=0.4)]
    b = [_run("1", None, cost_usd=0.1), _run("2", None, cost_usd=0.1)]
    d = paired_difference(a, b, value=lambda r: r.cost_usd)
    assert d.mean == pytest.approx(0.2) and d.cases == 2
    one = paired_difference(a[:1], b[:1], value=lambda r: r.cost_usd)
    assert one.cases == 1 and math.isinf(one.half_width)
    assert one.to_dict()["low"] is None and one.method == "none"
    right = paired_difference(a[:1], b[:1])  # one completed case each: a score interval
    assert right.method == "newcombe" and -1 < right.low < 0 < right.high < 1
    with pytest.raises(ValueError, match="no case in common"):
        paired_difference(a[:1], b[1:])


@loopwise.step
async def careful(x: dict[str, Any], ctx: loopwise.Context) -> dict[str, Any]:
    """Right on 14 of 20 cases, three model calls each."""
    for _ in range(3):
        await ctx.call_model(ModelRequest(messages=[{"role": "user", "content": str(x)}]))
    return {"ok": x["n"] >= 6}


@loopwise.step
async def cheap(x: dict[str, Any], ctx: loopwise.Context) -> dict[str, Any]:
    """Right on 10 of 20 (wrong wherever `careful` is, and on four more), one call each."""
    await ctx.call_model(ModelRequest(messages=[{"role": "user", "content": str(x)}]))
    return {"ok": x["n"] >= 10}


def test_eval_recommendation_pairs_targets_that_ran_the_same_cases() -> None:
    # 70% vs 50% correct over 20 cases. As independent samples the difference is within
    # noise (1.96·sqrt(.7·.3/20 + .5·.5/20) = 0.30), so the cheaper target would win; paired,
    # the 4 discordant cases give Newcombe's interval of -0 to +37, and the accurate one wins.
    cases = [Case(id=str(i), input={"n": i}, expected={"ok": True}) for i in range(20)]
    model = ScriptedModel(lambda request: "ok")
    report = evaluate(
        [
            EvalTarget(name="cheap", step=cheap, model=model),
            EvalTarget(name="careful", step=careful, model=model),
        ],
        cases,
    )
    rec = report.recommendation
    assert rec.choice == "careful", rec.text
    assert "more accurate (70% vs 50% correct)" in rec.text
    assert "paired difference +20 points (95% CI 0 to +37, 20 cases)" in rec.text


def _two(a_right: int, b_right: int, n: int, *, same_cases: bool = True) -> list[Any]:
    from loopwise.evidence.evals.stats import summarize

    a = [_run(str(i), 1.0 if i < a_right else 0.0, target="a") for i in range(n)]
    offset = 0 if same_cases else n
    b = [_run(str(i + offset), 1.0 if i < b_right else 0.0, target="b") for i in range(n)]
    return [summarize("a", "workflow", a), summarize("b", "agent", b)]


def test_a_small_sample_tie_says_how_many_cases_would_decide_it() -> None:
    from loopwise.evidence.evals.recommend import cases_to_decide, recommend

    # The case: 75% vs 88% on 8 cases is not "equal within noise": too few to tell.
    a, b = _two(6, 7, 8)
    rec = recommend([a, b])
    assert "not enough evidence to tell them apart (75% vs 88% correct)" in rec.text, rec.text
    found = re.search(r"on 8 cases; about (\d+) cases would tell a 13-point difference", rec.text)
    assert found, rec.text
    needed = int(found.group(1))
    # At that many cases, with the spread seen (one discordant case in 8), the paired
    # interval no longer covers the difference; one case fewer, it still does.
    sd = math.sqrt(0.125)  # per-case differences: one −1 and seven 0s, sd over n − 1
    assert t_quantile(0.95, needed - 1) * sd / math.sqrt(needed) < 0.125
    assert t_quantile(0.95, needed - 2) * sd / math.sqrt(needed - 1) >= 0.125
    assert 30 < needed < 40
    # As independent samples (different cases), the two-proportion spread is used.
    unpaired = cases_to_decide(*_two(6, 7, 8, same_cases=False))
    assert unpaired is not None and "on 8 cases; about" in unpaired
    # Within the 5-point floor: shown within it only when the interval is; else how many
    # cases would show it (equal rates on few cases are not evidence of equality either).
    close = cases_to_decide(*_two(97, 100, 100))
    assert close is not None and close.startswith("a 3-point difference on 100 cases, not shown")
    assert cases_to_decide(*_two(99, 100, 400)) == (
        "a 0-point difference, shown within 5% on 400 cases"
    )
    same = cases_to_decide(*_two(6, 6, 8))
    assert same is not None and "on 8 cases, not shown within 5%" in same
    assert "cases would show whether it is" in same
