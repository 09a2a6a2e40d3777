"""Certified thresholds (`eval --sweep --max-error`): the procedure computed independently
here (exact rational binomial tails, the walk written out again) must give exactly what the
sweep certifies, and a judge or a dataset that cannot carry a certificate certifies nothing."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise import Cascade, Case, EvalTarget, Judge, Ruling
from loopwise.cli.main import main
from loopwise.evidence.evals.certify import certify
from loopwise.testing import ScriptedModel, SplitModel, scripted_judge

DESK = """
import random

import loopwise
from loopwise import Cascade, Judge, Ruling
from loopwise.testing import scripted_judge

LABELS = ["refund", "bug"]
rng = random.Random(40)
ROWS = []  # (text, expected, the judge's confidence, the label it puts it on)
for i in range(600):
    expected = LABELS[i % 2]
    confidence = round(0.501 + 0.498 * rng.random(), 3)
    if round(confidence * 20, 6).is_integer():  # keep confidences off the grid
        confidence += 0.001
    right = rng.random() >= 1.5 * (1 - confidence) ** 2
    said = expected if right else LABELS[1 - i % 2]
    ROWS.append((f"ticket {i}", expected, confidence, said))
TRUTH = {text: expected for text, expected, _, _ in ROWS}


@loopwise.step
async def answer(ruling: Ruling) -> str:
    return str(ruling.answer)


@loopwise.step
async def careful(text: str) -> str:
    return TRUTH[text]


desk = Cascade("desk", Judge("kind", LABELS), sure=answer, unsure=careful, threshold=0.5)
offline_model = scripted_judge(
    {
        text: {"kind": {said: confidence, LABELS[1 - LABELS.index(said)]: 1 - confidence}}
        for text, _, confidence, said in ROWS
    }
)
"""


def _exact_cdf(k: int, n: int, p: Fraction) -> Fraction:
    return sum(
        (Fraction(math.comb(n, i)) * p**i * (1 - p) ** (n - i) for i in range(k + 1)),
        Fraction(0),
    )


def _independent(
    rows: list[tuple[float | None, bool]], grid: list[float], alpha: Fraction, delta: Fraction
) -> tuple[float, int, int] | None:
    """The issue's procedure, written again: high → low, skip thresholds accepting fewer
    than the least n with (1-α)^n <= δ, certify while BinomCDF(k; n, α) <= δ, stop at the
    first failure, the lowest certified wins."""
    least = 1
    while (1 - alpha) ** least > delta:
        least += 1
    found = None
    for level in sorted(grid, reverse=True):
        accepted = [wrong for c, wrong in rows if c is not None and c > level]
        n, k = len(accepted), sum(accepted)
        if n < least:
            continue
        if _exact_cdf(k, n, alpha) > delta:
            break
        found = (level, n, k)
    return found


def _desk(tmp_path: Path) -> tuple[str, Path, Any]:
    module = tmp_path / "desk.py"
    module.write_text(DESK)
    namespace: dict[str, Any] = {}
    exec(compile(DESK, str(module), "exec"), namespace)
    data = tmp_path / "desk.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": text.split()[1], "input": text, "expected": expected}) + "\n"
            for text, expected, _, _ in namespace["ROWS"]
        )
    )
    return f"{module}:desk", data, namespace["ROWS"]


def test_a_600_case_judge_certifies_exactly_what_the_procedure_gives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, data, rows = _desk(tmp_path)
    argv = [
        "eval", spec, "--sweep", "--max-error", "0.05", "--model", "scripted", "--dataset",
        str(data), "--store", str(tmp_path / "e.db"), "--json", "--report",
        str(tmp_path / "r.html"),
    ]  # fmt: skip
    assert main(argv) == 0
    (found,) = json.loads(capsys.readouterr().out)["sweeps"]
    grid = [p["threshold"] for p in found["frontier"]]
    judged = [(c, said != expected) for _, expected, c, said in rows]
    level, n, k = _independent(judged, grid, Fraction(1, 20), Fraction(1, 10)) or (0, 0, 0)
    certified = found["certified"]
    assert certified is not None and found["certified_reason"] is None
    assert (certified["threshold"], certified["accepted"], certified["errors"]) == (level, n, k)
    assert certified["alpha"] == 0.05 and certified["delta"] == 0.1
    assert certified["coverage"] == pytest.approx(n / 600)
    # the Clopper–Pearson bound: the exact tail at it is δ (checked in rationals either side)
    bound = certified["error_bound"]
    assert _exact_cdf(k, n, Fraction(bound - 1e-5)) > Fraction(1, 10)
    assert _exact_cdf(k, n, Fraction(bound + 1e-5)) < Fraction(1, 10)
    assert k / n < bound <= 0.05 + 1e-9 or bound > 0.05  # the bound is of k/n, not α itself
    # a certificate that takes a real share of traffic, neither nothing nor everything
    assert 0.3 < certified["coverage"] < 1.0 and 0.0 < level < 0.95
    assert "agreement with the agent" not in found["certified_claim"]
    assert "on traffic like this dataset, judged by its labels" in found["certified_claim"]
    page = (tmp_path / "r.html").read_text()
    assert "class='certified'" in page and "Certified:" in page
    # check reads the certificate beside the calibration, and warns: 0.5 is below it
    assert main(["check", spec, "--store", str(tmp_path / "e.db"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["calibration"]["certified"] == certified
    (warning,) = [f for f in doc["findings"] if f["code"] == "threshold-below-certified"]
    assert f"below the certified {level:g}" in warning["message"]
    assert main(["check", spec, "--store", str(tmp_path / "e.db")]) == 0
    assert f"certified threshold {level:g}" in capsys.readouterr().out


def test_the_text_report_states_the_claim_with_its_scope(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, data, _ = _desk(tmp_path)
    argv = [
        "eval", spec, "--sweep", "threshold=0.6:0.95:0.05", "--max-error", "0.05", "--delta",
        "0.05", "--references", "agent", "--model", "scripted", "--dataset", str(data),
        "--store", str(tmp_path / "e.db"),
    ]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if x.startswith("Certified: ")]
    assert "with probability >= 95% over this dataset's cases" in line
    assert "disagree with the agent at most 5% of the time" in line
    assert "agreement with the agent (the references are the agent's own answers)" in line


def _cases(n: int) -> list[Case]:
    return [Case(id=str(i), input=f"t{i}", expected="bug") for i in range(n)]


@loopwise.step
async def _answer(ruling: Ruling) -> str:  # type: ignore[type-arg]
    return str(ruling.answer)


@loopwise.step
async def _careful(text: str) -> str:
    return "bug"


def _cascade() -> Cascade:
    return Cascade("desk", Judge("kind", ["refund", "bug"]), sure=_answer, unsure=_careful)


def test_a_confidently_wrong_judge_certifies_nothing_and_says_escalate() -> None:
    # 99% sure on every case, wrong on a third of them: no number of cases would certify 5%.
    judge = scripted_judge(
        lambda text: (
            {"kind": {"refund": 0.99, "bug": 0.01}}
            if int(text[1:]) % 3 == 0
            else {"kind": {"bug": 0.99, "refund": 0.01}}
        )
    )
    target = EvalTarget(name="desk", step=_cascade(), model=judge)
    found, _ = loopwise.sweep(target, _cases(120), max_error=0.05, store=None)
    c = found.certification
    assert c is not None and c.certificate is None and c.would_need is None
    assert "escalate every case" in c.claim and "no number of cases would" in c.claim
    doc = found.to_dict()
    assert doc["certified"] is None and "BinomCDF(40; 120, 0.05)" in doc["certified_reason"]


def test_a_one_case_sweep_certifies_nothing_and_recommends_nothing_absurd() -> None:
    judge = scripted_judge({"t0": {"kind": {"refund": 0.9, "bug": 0.1}}})  # wrong, 90% sure
    target = EvalTarget(name="desk", step=_cascade(), model=judge)
    found, _ = loopwise.sweep(target, _cases(1), max_error=0.05, store=None)
    c = found.certification
    assert c is not None and c.certificate is None and c.would_need == 45
    assert "needs at least 45 accepted cases" in (c.reason or "")
    # 0% (the judge's side) is never recommended over 100% (the careful side) on 1 case
    recommended = found.recommended
    assert recommended is None or recommended.accuracy == 1.0
    assert "within noise" not in found.reason


def test_a_sweep_over_no_case_says_so() -> None:
    target = EvalTarget(name="desk", step=_cascade(), model=scripted_judge({}))
    with pytest.raises(loopwise.ConfigError, match="no case to sweep desk"):
        loopwise.sweep(target, [], store=None)


@pytest.mark.parametrize(("flag", "value"), [("--max-error", "0"), ("--delta", "1.5")])
def test_bad_levels_are_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    spec, data, _ = _desk(tmp_path)
    argv = ["eval", spec, "--sweep", "--dataset", str(data), "--model", "scripted"]
    extra = [flag, value] if flag == "--max-error" else ["--max-error", "0.05", flag, value]
    assert main([*argv, *extra, "--store", str(tmp_path / "e.db")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err and "Traceback" not in err
    assert main(["eval", spec, "--max-error", "0.05", "--dataset", str(data)]) == 2
    assert "add --sweep" in capsys.readouterr().err
    assert main([*argv, "--delta", "0.05", "--store", str(tmp_path / "e.db")]) == 2
    assert "--delta goes with --max-error" in capsys.readouterr().err


def test_certify_by_hand_at_the_degenerate_ends() -> None:
    # 45 error-free accepted cases are the fewest that certify 5% at δ = 0.1
    sure = [(0.99, False)] * 45
    c = certify([0.5], sure, alpha=0.05)
    assert c.certificate is not None and c.certificate.accepted == 45
    assert c.certificate.error_bound == pytest.approx(1 - 0.1 ** (1 / 45))
    assert certify([0.5], sure[:44], alpha=0.05).certificate is None  # one fewer: skipped
    # unknown confidences are never accepted; no scored case at all bounds nothing
    assert certify([0.0], [(None, False)] * 100, alpha=0.05).certificate is None
    assert certify([0.5], [], alpha=0.05).reason == (
        "no case is scored, so no error rate can be bounded"
    )
    # all wrong: the first testable threshold fails and the walk stops there
    c = certify([0.9, 0.5], [(0.99, True)] * 60, alpha=0.05)
    assert c.certificate is None and "at threshold 0.9" in (c.reason or "")
    # the walk stops at the first failure even if a lower threshold would pass again
    rows = [(0.95, False)] * 50 + [(0.85, True)] * 10 + [(0.75, False)] * 400
    c = certify([0.9, 0.8, 0.7], rows, alpha=0.05)
    assert c.certificate is not None and c.certificate.threshold == 0.9
    # a cascade that accepts unknown confidences is not certified
    c = certify([0.5], sure, alpha=0.05, accepted_unknown=3)
    assert c.certificate is None and "unknown='unsure'" in (c.reason or "")
    # ... even when this dataset happened to hold no case without a confidence
    c = certify([0.5], [(0.99, False)] * 100, alpha=0.05, accepts_unknown=True)
    assert c.certificate is None and "unknown='unsure'" in (c.reason or "")


def test_a_max_error_below_float_resolution_answers_at_once() -> None:
    # (1 - 1e-17) is 1.0 in floats: the integer check of the log form never ended
    from loopwise.evidence.evals.bounds import cases_to_bound, cases_to_bound_rate

    assert cases_to_bound(1e-17, 0.1) == math.ceil(math.log(0.1) / math.log1p(-1e-17))
    assert cases_to_bound_rate(1e-18, 1e-17, 0.1) is None


def test_split_model_routes_judge_requests_and_the_rest() -> None:
    rest = ScriptedModel()
    judge = scripted_judge({"t0": {"kind": {"bug": 0.97, "refund": 0.03}}})
    model = SplitModel(judge, rest)
    target = EvalTarget(name="desk", step=_cascade().with_threshold(0.5), model=model)
    report = loopwise.evaluate([target], _cases(1), store=None)
    (run,) = report.targets[0].runs
    assert run.score == 1.0 and judge.calls == 1 and rest.calls == 0
    with pytest.raises(ValueError, match="not in \\[0, 1\\]"):
        scripted_judge({"t0": {"kind": {"bug": 1.5}}})


def test_repeats_count_each_case_once_in_the_certificate() -> None:
    judge = scripted_judge({}, default={"kind": {"bug": 0.99, "refund": 0.01}})
    target = EvalTarget(name="desk", step=_cascade(), model=judge)
    once, _ = loopwise.sweep(target, _cases(50), [0.5], store=None, max_error=0.05)
    thrice, _ = loopwise.sweep(target, _cases(50), [0.5], store=None, max_error=0.05, repeat=3)
    assert once.certification is not None and thrice.certification is not None
    first, again = once.certification.certificate, thrice.certification.certificate
    assert first is not None and again is not None
    assert first.accepted == again.accepted == 50  # not 150: repeats are not new evidence
    assert again.error_bound == pytest.approx(1 - 0.1 ** (1 / 50))


def test_the_same_input_listed_many_times_counts_once() -> None:
    # 45 copies of one sure, right case would "certify" 5% if each were a fresh draw.
    judge = scripted_judge({"t0": {"kind": {"bug": 0.99, "refund": 0.01}}})
    target = EvalTarget(name="desk", step=_cascade(), model=judge)
    copies = [Case(id=str(i), input="t0", expected="bug") for i in range(45)]
    found, _ = loopwise.sweep(target, copies, max_error=0.05, store=None)
    c = found.certification
    assert c is not None and c.certificate is None and c.scored == 1
    distinct = [Case(id=str(i), input="t0" if i == 0 else f"t{i}", expected="bug")
                for i in range(45)]  # fmt: skip
    judge_all = scripted_judge(lambda text: {"kind": {"bug": 0.99, "refund": 0.01}})
    found, _ = loopwise.sweep(
        EvalTarget(name="desk", step=_cascade(), model=judge_all), distinct, max_error=0.05,
        store=None,
    )  # fmt: skip
    assert found.certification is not None and found.certification.certificate is not None
