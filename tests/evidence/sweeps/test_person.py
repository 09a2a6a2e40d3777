"""The person in a sweep: a cascade whose unsure side asks a person is swept with an
explicit model of the person (right with probability P, at a cost per case), and refused
without one — never by the eval's gate rule, which would make the person score 0 or repeat
the judge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import loopwise
from loopwise import AskPerson, Cascade, Case, EvalTarget, Judge, Ruling
from loopwise.cli.main import main
from loopwise.testing import scripted_judge
from tests.support import ROOT

DESK = """
import loopwise
from loopwise import AskPerson, Cascade, Judge, Ruling
from loopwise.testing import scripted_judge


@loopwise.step
async def answer(ruling: Ruling) -> str:
    return str(ruling.answer)


desk = Cascade("desk", Judge("kind", ["refund", "bug"]), sure=answer, unsure=AskPerson(),
               threshold=0.7)
# sure and right on even tickets (0.95), unsure and wrong on odd ones (0.6 on refund)
offline_model = scripted_judge(
    lambda text: {"kind": {"bug": 0.95, "refund": 0.05}}
    if int(text.split()[-1]) % 2 == 0
    else {"kind": {"refund": 0.6, "bug": 0.4}}
)
"""


def _files(tmp_path: Path) -> tuple[str, Path]:
    module = tmp_path / "desk.py"
    module.write_text(DESK)
    data = tmp_path / "cases.jsonl"
    data.write_text(
        "".join(json.dumps({"input": f"t {i}", "expected": "bug"}) + "\n" for i in range(20))
    )
    return f"{module}:desk", data


def test_a_person_cascade_is_refused_without_a_model_of_the_person(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, data = _files(tmp_path)
    argv = [
        "eval",
        spec,
        "--sweep",
        "--model",
        "scripted",
        "--dataset",
        str(data),
        "--store",
        str(tmp_path / "e.db"),
    ]
    assert main([*argv, "--gates", "approve"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "asks a person, whom a sweep cannot ask: model them with --person-accuracy P" in err
    assert not (tmp_path / "e.db").exists()  # refused before any run
    assert main([*argv, "--person-accuracy", "1.5"]) == 2
    assert "--person-accuracy 1.5: a probability between 0 and 1" in capsys.readouterr().err
    assert main(["eval", spec, "--person-accuracy", "1", "--dataset", str(data)]) == 2
    assert "add --sweep" in capsys.readouterr().err


def test_the_person_is_modelled_and_their_cost_is_on_the_frontier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, data = _files(tmp_path)
    argv = [
        "eval", spec, "--sweep", "threshold=0:1:0.5", "--model", "scripted", "--dataset",
        str(data), "--store", str(tmp_path / "e.db"), "--person-accuracy", "0.9",
        "--person-cost", "0.5", "--json",
    ]  # fmt: skip
    assert main(argv) == 0
    (found,) = json.loads(capsys.readouterr().out)["sweeps"]
    assert found["person"] == {"accuracy": 0.9, "cost_usd": 0.5}
    zero, half, one = found["frontier"]
    # threshold 0: the judge answers everything, right on the 10 even tickets
    assert (zero["accuracy"], zero["share_escalated"]) == (0.5, 0.0)
    # 0.5: the 10 odd tickets (confidence 0.6 > 0.5) still sure and wrong → as at 0
    assert half["accuracy"] == 0.5
    # 1: every case to the person, right 90% of the time, each costing $0.50 on top
    assert (one["accuracy"], one["share_escalated"]) == (0.9, 1.0)
    assert one["cost"] == pytest.approx(zero["cost"] + 0.5, abs=1e-3)
    text_argv = [a for a in argv if a != "--json"]
    assert main(text_argv) == 0
    out = capsys.readouterr().out
    assert "the person modelled right 90% of the time at $0.500 per case they decide" in out


@loopwise.step
async def _answer(ruling: Ruling) -> str:  # type: ignore[type-arg]
    return str(ruling.answer)


@loopwise.step
async def _careful(text: str) -> str:
    return "bug"


def test_in_python_and_a_person_model_for_a_cascade_that_asks_none() -> None:
    judge = scripted_judge({}, default={"kind": {"bug": 0.6, "refund": 0.4}})
    cases = [Case(id=str(i), input=f"t {i}", expected="bug") for i in range(4)]
    person = Cascade("desk", Judge("kind", ["refund", "bug"]), sure=_answer, unsure=AskPerson())
    target = EvalTarget(name="desk", step=person, model=judge)
    with pytest.raises(loopwise.ConfigError, match="asks a person"):
        loopwise.sweep(target, cases, store=None)
    found, _ = loopwise.sweep(target, cases, [0.0, 1.0], store=None, person_accuracy=1.0)
    assert [p.accuracy for p in found.points] == [1.0, 1.0]  # an oracle person
    plain = Cascade("desk", Judge("kind", ["refund", "bug"]), sure=_answer, unsure=_careful)
    target = EvalTarget(name="desk", step=plain, model=judge)
    with pytest.raises(loopwise.ConfigError, match="not a person"):
        loopwise.sweep(target, cases, store=None, person_accuracy=0.9)


def test_the_history_keys_evals_by_gate_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = ROOT
    flow = f"{root}/workflows/ticket_triage.py:triage"
    data = tmp_path / "few.jsonl"
    lines = (root / "workflows/data/tickets.jsonl").read_text().splitlines()[:5]
    data.write_text("\n".join(lines) + "\n")
    argv = ["eval", flow, "--model", "scripted", "--dataset", str(data), "--store"]
    argv += [str(tmp_path / "e.db"), "--json"]
    docs = []
    for rule in ("deny", "approve", "deny", "approve"):
        assert main([*argv, "--gates", rule]) == 0
        docs.append(json.loads(capsys.readouterr().out))
    assert docs[0]["previous"] == {} and docs[1]["previous"] == {}  # approve: nothing like it
    assert docs[0]["gates"] == {flow: "deny"}
    # the second deny eval compares with the first deny eval, not with the approve one
    (before,) = docs[2]["previous"].values()
    assert before["gates"] == "deny" and before["eval_id"] == docs[0]["eval_id"]
    (before,) = docs[3]["previous"].values()
    assert before["gates"] == "approve" and before["eval_id"] == docs[1]["eval_id"]


def test_a_hybrid_stopped_by_the_deny_rule_is_scored_on_the_plan_it_proposed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init", "hybrid", "."]) == 0
    capsys.readouterr()
    argv = ["eval", "refunds.py:refund_desk", "--dataset", "refunds_cases.jsonl", "--model"]
    argv += ["scripted", "--scorer", "refunds.py:refund_matches", "--store", "e.db"]
    assert main([*argv, "--json"]) == 0
    (desk,) = json.loads(capsys.readouterr().out)["targets"]
    denied = [r for r in desk["runs"] if r["status"] == "denied"]
    assert denied and desk["scored_on_proposed_plan"] == len(denied)
    # a right plan the eval would not let run counts as right, and the run says why
    assert all(r["scored_on"] == "proposed_plan" and r["score"] == 1.0 for r in denied)
    assert main(argv) == 0
    assert f"scored on the plan proposed: {len(denied)} run(s) of refund_desk" in (
        capsys.readouterr().out
    )
