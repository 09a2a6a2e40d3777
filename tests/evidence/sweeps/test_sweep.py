"""Choosing a cascade's threshold on evidence: `loopwise eval --sweep`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise import AskPerson, Cascade, EvalTarget, Judge, Ruling, evaluate, load_dataset
from loopwise.cli.main import main
from loopwise.evidence.sweeps.frontier import format_sweep
from loopwise.evidence.sweeps.sweep import DEFAULT_GRID, grid_of, sweep
from loopwise.running.targets import load_target, model_for
from loopwise.testing import FakeChatServer, ScriptedModel
from tests.support import ROOT

TRIAGE = f"{ROOT}/workflows/ticket_triage.py:triage"
AGENT = f"{ROOT}/agents/triage_agent.py:triage_agent"
CASCADE = f"{ROOT}/workflows/ticket_triage.py:cascade"
TICKETS = ROOT / "workflows/data/tickets.jsonl"


def _target(spec: str, model: Any = None) -> EvalTarget:
    loaded = load_target(spec)
    return EvalTarget(name=spec, step=loaded.step, model=model or model_for(loaded, "scripted"))


def _scores(runs: Any) -> dict[str, float | None]:
    return {r.case_id: r.score for r in runs}


def test_the_sweeps_endpoints_are_the_pure_workflow_and_the_pure_agent() -> None:
    cases = load_dataset(TICKETS)
    assert len(cases) == 49
    found, declared = sweep(_target(CASCADE), cases, DEFAULT_GRID, store=None)
    pure = evaluate([_target(TRIAGE), _target(AGENT)], cases, store=None)
    workflow, agent = pure.targets
    first, last = found.points[0], found.points[-1]
    assert (first.threshold, first.share_escalated) == (0.0, 0.0)
    assert (last.threshold, last.share_escalated) == (1.0, 1.0)
    assert first.accuracy == workflow.correct_rate and last.accuracy == agent.correct_rate
    assert _scores(first.runs) == _scores(workflow.runs)  # case by case
    assert _scores(last.runs) == _scores(agent.runs)
    assert agent.correct_rate != workflow.correct_rate  # the frontier is not flat
    # Every escalated case pays the judge's call on top of the agent's.
    assert last.model_calls == agent.metrics["model_calls"].stat("mean") + 1
    assert len(declared) == 49 and {r.target for r in declared} == {CASCADE}
    # Some wrong answers are confident ones: no threshold is right on every case.
    assert max(p.accuracy or 0 for p in found.points) < 1.0
    assert found.recommended is not None and found.best is not None
    assert found.recommended.cost is not None and found.best.cost is not None
    assert found.recommended.cost <= found.best.cost
    assert found.versus_best is None or found.versus_best.low <= 0
    assert found.calibration.n == 49 and found.calibration.ece is not None


def test_a_50_threshold_sweep_calls_no_more_than_one_workflow_and_one_agent_run_per_case() -> None:
    answer = load_target(CASCADE).module._offline_answer
    cases = load_dataset(TICKETS)
    grid = grid_of(0.02, 1.0, 0.02)
    assert len(grid) == 50
    with FakeChatServer(answer) as server:
        found, _ = sweep(_target(CASCADE, server.model("gpt-4o-mini")), cases, grid, store=None)
        swept = len(server.requests)
    with FakeChatServer(answer) as server:
        model = server.model("gpt-4o-mini")
        evaluate([_target(TRIAGE, model), _target(AGENT, model)], cases, store=None)
        separate = len(server.requests)
    assert len(found.points) == 50 and all(p.cases == 49 for p in found.points)
    assert 0 < swept <= separate
    assert found.cost_basis == "USD"  # the fake server's model is priced


def test_eval_sweep_json_gives_the_frontier_and_the_recommended_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.html"
    argv = [
        "eval", TRIAGE, AGENT, CASCADE, "--sweep", "--model", "scripted", "--dataset",
        str(TICKETS), "--store", str(tmp_path / "eval.db"), "--report", str(report), "--json",
    ]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    (found,) = doc["sweeps"]
    assert found["target"] == CASCADE and found["threshold"] == "threshold"
    assert len(found["frontier"]) == 21
    point = found["frontier"][10]
    assert set(point) >= {
        "threshold", "accuracy", "accuracy_low", "accuracy_high", "share_escalated", "cost",
        "tokens", "latency",
    }  # fmt: skip
    assert point["accuracy_low"] <= point["accuracy"] <= point["accuracy_high"]
    assert found["recommended_threshold"] in [p["threshold"] for p in found["frontier"]]
    assert found["cost_basis"] == "gpt-4o-mini prices"
    assert "the most accurate on 49 cases" in found["reason"]
    assert "no cheaper threshold is shown within 5 points" in found["reason"]
    # No prices: tokens choose, as in a plain eval; the reference price is shown for scale.
    assert found["reason"].endswith(
        "(the model has no prices: chosen for fewer tokens; the frontier shows cost at "
        "gpt-4o-mini prices)"
    )
    assert " tokens per case" in found["reason"] and "$" not in found["reason"]
    assert found["calibration"]["n"] == 49
    by_target = {t["target"]: t for t in doc["targets"]}
    assert by_target[CASCADE]["n"] == 49  # the cascade at its declared threshold, no extra runs
    page = report.read_text()
    assert "accuracy against cost" in page and "Calibration of the judge" in page
    assert "reliability" in page


def test_eval_sweep_text_shows_the_table_the_choice_and_the_calibration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "eval", CASCADE, "--sweep", "threshold=0.5:0.8:0.1", "--model", "scripted",
        "--dataset", str(TICKETS), "--store", str(tmp_path / "eval.db"),
    ]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Thresholds of" in out and "Recommended threshold:" in out
    assert "Calibration of the judge: ECE" in out
    rows = [line.split()[0] for line in out.splitlines() if line.startswith("       0.")]
    assert rows == ["0.50", "0.60", "0.70", "0.80"]


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("threshold=0:2:0.1", "[0, 1]"),
        ("threshold=0.9:0.1:0.1", "LO <= HI"),
        ("threshold=0:1:0", "STEP must be positive"),
        ("threshold=0:1:0.00001", "at most 1001"),
        ("threshold", "NAME=LO:HI:STEP"),
        ("threshold=a:b:c", "NAME=LO:HI:STEP"),
        ("nope=0:1:0.1", "no target declares a threshold of that name"),
    ],
)
def test_a_bad_sweep_is_one_line_exit_2_before_any_run(
    spec: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["eval", CASCADE, "--sweep", spec, "--model", "scripted", "--dataset", str(TICKETS)]
    assert main([*argv, "--store", str(tmp_path / "e.db")]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1
    assert not (tmp_path / "e.db").exists()


def test_sweeping_a_target_without_a_threshold_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["eval", TRIAGE, "--sweep", "--model", "scripted", "--dataset", str(TICKETS)]
    assert main([*argv, "--store", str(tmp_path / "e.db")]) == 2
    assert "none of the targets declares a threshold" in capsys.readouterr().err


NESTED = """
import loopwise
from loopwise import Cascade, Judge, Ruling, Workflow


@loopwise.step
async def answer(ruling: Ruling) -> str:
    return str(ruling.answer)


@loopwise.step
async def careful(text: str) -> str:
    return "bug"


@loopwise.step
async def clean(text: str) -> str:
    return text.strip()


desk = Cascade("desk", Judge("kind", ["refund", "bug"]), sure=answer, unsure=careful)
flow = Workflow("flow", input_type=str).then(clean).then(Workflow("inner").then(desk))
"""


def test_sweeping_a_workflow_that_holds_a_cascade_names_the_cascade_to_give(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = tmp_path / "desk.py"
    module.write_text(NESTED)
    data = tmp_path / "cases.jsonl"
    data.write_text('{"input": "an error", "expected": "bug"}\n')
    argv = ["eval", "--sweep", "--model", "scripted", "--dataset", str(data)]
    store = ["--store", str(tmp_path / "e.db")]
    assert main([*argv, f"{module}:flow", *store]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"{module}:flow is not a loopwise.Cascade but holds one (node flow/inner/desk)" in err
    assert f"--sweep needs the cascade itself as a TARGET: {module}:desk" in err
    assert not (tmp_path / "e.db").exists()
    # Beside the cascade itself, the workflow runs as it is, and a note says how to sweep it.
    assert main([*argv, f"{module}:flow", f"{module}:desk", *store, "--json"]) == 0
    captured = capsys.readouterr()
    assert [s["target"] for s in json.loads(captured.out)["sweeps"]] == [f"{module}:desk"]
    assert "holds the cascade at node flow/inner/desk, run at its declared" in captured.err


LABELS = ["refund", "bug"]


@loopwise.step
async def _sure(ruling: Ruling) -> str:  # type: ignore[type-arg]
    return str(ruling.answer)


def _cases(n: int) -> list[loopwise.Case]:
    return [
        loopwise.Case(id=str(i), input=f"ticket {i}", expected="bug" if i % 2 else "refund")
        for i in range(n)
    ]


def test_a_confidently_wrong_judge_gets_a_calibration_warning() -> None:
    # Always "refund" at 0.99: right on half the cases.
    model = ScriptedModel(lambda r: {"kind": {"refund": 0.99, "bug": 0.01}})
    flow = Cascade("desk", Judge("kind", LABELS), sure=_sure, unsure=AskPerson(), threshold=0.5)
    target = EvalTarget(name="desk", step=flow, model=model, gates="approve")
    found, _ = sweep(target, _cases(30), DEFAULT_GRID, store=None, person_accuracy=0.5)
    assert found.warning is not None and "calibration error is large" in found.warning
    assert "warning: calibration error is large" in format_sweep(found)
    # A person modelled right half the time changes nothing: flat at 50%.
    assert {p.accuracy for p in found.points} == {0.5}
    assert found.points[-1].share_escalated == 1.0
    assert found.recommended is found.points[0]  # the cheapest: nothing escalated


@loopwise.step
async def _careful(text: str) -> str:
    return "bug" if int(text.rsplit(maxsplit=1)[-1]) % 2 else "refund"


def test_repeats_are_swept_per_run_and_unknown_confidences_count_as_the_cascade_says() -> None:
    judge = Judge("kind", LABELS, backends=["structured"])
    model = ScriptedModel(lambda r: {"answer": "refund"})
    flow = Cascade("desk", judge, sure=_sure, unsure=_careful, threshold=0.5)
    target = EvalTarget(name="desk", step=flow, model=model)
    found, runs = sweep(target, _cases(6), [0.0, 0.5, 1.0], store=None, repeat=2)
    assert [p.cases for p in found.points] == [12, 12, 12] and len(runs) == 12
    # Unknown counts unsure: every threshold escalates every run, and the careful step is right.
    assert {(p.share_escalated, p.accuracy) for p in found.points} == {(1.0, 1.0)}
    assert found.calibration.unknown == 12 and found.calibration.n == 0
    assert found.warning is not None and "calibration unknown" in found.warning
    trusting = EvalTarget(name="desk", step=flow.with_threshold(0.5, unknown="sure"), model=model)
    sure, _ = sweep(trusting, _cases(6), [0.0, 1.0], store=None)
    assert {(p.share_escalated, p.accuracy) for p in sure.points} == {(0.0, 0.5)}
