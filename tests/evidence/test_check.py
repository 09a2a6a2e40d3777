"""`loopwise check` warns when a cascade's judge was last measured badly calibrated (issue 29)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopwise.cli.main import main
from loopwise.evidence.charts import FrontierDot, frontier_svg
from tests.support import ROOT

TRIAGE = f"{ROOT}/workflows/ticket_triage.py:triage"
CASCADE = f"{ROOT}/workflows/ticket_triage.py:cascade"
TICKETS = ROOT / "workflows/data/tickets.jsonl"

# A judge that always says "refund" at 0.99: right on half the cases, so badly calibrated.
OVERCONFIDENT = """
import loopwise
from loopwise import Cascade, Judge, Ruling, Workflow
from loopwise.testing import ScriptedModel


@loopwise.step
async def answer(ruling: Ruling) -> str:
    return str(ruling.answer)


@loopwise.step
async def careful(text: str) -> str:
    return "bug" if int(text.rsplit(maxsplit=1)[-1]) % 2 else "refund"


@loopwise.step
async def clean(text: str) -> str:
    return text.strip()


desk = Cascade(
    "desk", Judge("kind", ["refund", "bug"]), sure=answer, unsure=careful, threshold=0.5
)
flow = Workflow("flow", input_type=str).then(clean).then(desk)
offline_model = ScriptedModel(lambda r: {"kind": {"refund": 0.99, "bug": 0.01}}, name="scripted")
"""


def _check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["check", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def _calibration_findings(doc: dict[str, Any]) -> list[dict[str, str]]:
    return [f for f in doc["findings"] if f["code"].startswith("calibration-")]


def _sweep(store: Path, target: str, dataset: Path, *extra: str) -> list[str]:
    return [
        "eval", target, "--sweep", "--model", "scripted", "--dataset", str(dataset),
        "--store", str(store), *extra,
    ]  # fmt: skip


@pytest.fixture
def desk(tmp_path: Path) -> tuple[Path, Path]:
    module = tmp_path / "desk.py"
    module.write_text(OVERCONFIDENT)
    cases = tmp_path / "cases.jsonl"
    rows = [
        {"id": str(i), "input": f"ticket {i}", "expected": "bug" if i % 2 else "refund"}
        for i in range(30)
    ]
    cases.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return module, cases


def test_a_cascade_never_swept_gets_an_info_naming_the_sweep_to_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "eval.db"
    code, doc = _check(capsys, CASCADE, "--store", str(store))
    assert code == 0 and doc["ok"] is True and doc["calibration"] is None
    (found,) = _calibration_findings(doc)
    assert (found["level"], found["code"], found["where"]) == (
        "info",
        "calibration-not-measured",
        "cascade",
    )
    assert found["fix"] == f"loopwise eval {CASCADE} --dataset D --sweep"
    assert not store.exists()  # check reads the eval store, never creates it
    assert main(["check", CASCADE, "--store", str(store)]) == 0
    assert "info     calibration-not-measured  cascade" in capsys.readouterr().out


def test_after_a_sweep_check_reads_the_stored_calibration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "eval.db"
    assert main(_sweep(store, CASCADE, TICKETS, "--json")) == 0
    (swept,) = json.loads(capsys.readouterr().out)["sweeps"]
    assert swept["calibration_warning"] is None  # the canonical judge is calibrated enough
    code, doc = _check(capsys, CASCADE, "--store", str(store))
    assert code == 0 and _calibration_findings(doc) == []
    cal = doc["calibration"]
    assert cal["ece"] == swept["calibration"]["ece"] and cal["n"] == 49
    assert (cal["verdict"], cal["target"], cal["dataset"]) == ("ok", CASCADE, str(TICKETS))
    assert cal["eval_id"] and cal["at"]


def test_a_badly_calibrated_judge_is_warned_of_by_eval_and_by_check(
    desk: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module, cases = desk
    store = tmp_path / "eval.db"
    target = f"{module}:desk"
    assert main(_sweep(tmp_path / "text.db", target, cases)) == 0
    assert "warning: calibration error is large: ECE" in capsys.readouterr().out
    assert main(_sweep(store, target, cases, "--json")) == 0
    captured = capsys.readouterr()
    (swept,) = json.loads(captured.out)["sweeps"]
    assert swept["calibration_warning"].startswith("calibration error is large")
    assert f"loopwise eval: warning: {target}: calibration error is large" in captured.err
    eval_id = json.loads(captured.out)["eval_id"]
    code, doc = _check(capsys, target, "--store", str(store))
    assert code == 0 and doc["ok"] is True  # a warning does not fail the check
    (found,) = _calibration_findings(doc)
    assert (found["level"], found["code"], found["where"]) == (
        "warning",
        "calibration-large",
        "desk",
    )
    assert found["message"].startswith("calibration error is large: ECE 0.490 > 0.1 on 30 cases")
    assert f"eval {eval_id} on {cases}" in found["message"]
    assert doc["calibration"]["verdict"] == "large" and doc["calibration"]["eval_id"] == eval_id
    assert main(["check", target, "--store", str(store)]) == 0
    assert "1 warning(s)" in capsys.readouterr().out


def test_check_finds_the_sweep_however_the_target_was_spelled(
    desk: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module, cases = desk
    store = tmp_path / "eval.db"
    monkeypatch.chdir(tmp_path)
    assert main(_sweep(store, "./desk.py:desk", Path("cases.jsonl"))) == 0
    capsys.readouterr()
    for spelled in (f"{module}:desk", "desk.py:desk", f"{tmp_path}/./desk.py:desk"):
        code, doc = _check(capsys, spelled, "--store", str(store))
        (found,) = _calibration_findings(doc)
        assert code == 0 and found["code"] == "calibration-large", (spelled, found)
        assert doc["calibration"]["target"] == spelled  # named as the user named it
    # The next eval of the same target and dataset, spelled otherwise, compares with it.
    main(_sweep(store, f"{module}:desk", cases, "--json"))
    doc = json.loads(capsys.readouterr().out)
    assert f"{module}:desk" in doc["previous"], doc["previous"]


def test_a_cascade_inside_a_workflow_is_read_under_its_own_target(
    desk: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module, cases = desk
    store = tmp_path / "eval.db"
    _, doc = _check(capsys, f"{module}:flow", "--store", str(store))
    (found,) = _calibration_findings(doc)
    assert found["code"] == "calibration-not-measured" and found["where"] == "flow/desk"
    assert found["fix"] == f"loopwise eval {module}:desk --dataset D --sweep"
    assert main(_sweep(store, f"{module}:desk", cases)) == 0
    capsys.readouterr()
    _, doc = _check(capsys, f"{module}:flow", "--store", str(store))
    (found,) = _calibration_findings(doc)
    assert found["code"] == "calibration-large" and found["where"] == "flow/desk"


def test_every_cascade_a_workflow_holds_is_listed_under_calibrations(
    desk: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module, cases = desk
    with module.open("a") as f:
        f.write(
            "\nsecond = Cascade('second', Judge('kind', ['refund', 'bug']), sure=answer,"
            " unsure=careful, threshold=0.5)\n"
            "both = Workflow('both', input_type=str).then(clean).then(desk).then(second)\n"
        )
    store = tmp_path / "eval.db"
    for name in ("desk", "second"):
        assert main(_sweep(store, f"{module}:{name}", cases)) == 0
    capsys.readouterr()
    _, doc = _check(capsys, f"{module}:both", "--store", str(store))
    assert [c["target"] for c in doc["calibrations"]] == [f"{module}:desk", f"{module}:second"]
    assert doc["calibration"] == doc["calibrations"][0]  # the first, as before
    assert [f["where"] for f in _calibration_findings(doc)] == ["both/desk", "both/second"]


def test_a_target_without_a_cascade_gets_no_calibration_finding(
    desk: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "eval.db"
    assert main(_sweep(store, CASCADE, TICKETS)) == 0
    capsys.readouterr()
    code, doc = _check(capsys, TRIAGE, "--store", str(store))
    assert code == 0 and _calibration_findings(doc) == [] and doc["calibration"] is None
    assert set(doc) == {"target", "ok", "findings", "calibration", "calibrations", "live"}
    assert doc["calibrations"] == [] and doc["live"] is None


def test_the_default_eval_store_is_the_one_eval_writes(
    desk: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    module, cases = desk
    monkeypatch.setenv("LOOPWISE_EVAL_STORE", str(tmp_path / "mine.db"))
    assert main(["eval", f"{module}:desk", "--sweep", "--model", "scripted", "--dataset",
                 str(cases)]) == 0  # fmt: skip
    capsys.readouterr()
    _, doc = _check(capsys, f"{module}:desk")
    assert [f["code"] for f in _calibration_findings(doc)] == ["calibration-large"]


def _dot(label: str, kind: Any, cost: float) -> FrontierDot:
    return FrontierDot(label=label, kind=kind, cost=cost, accuracy=0.8, low=0.7, high=0.9)


def test_the_frontier_legend_lists_only_the_marks_drawn_and_names_its_unit_once(
    desk: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    svg = frontier_svg([_dot("0.50", "threshold", 0.001), _dot("0.90", "threshold", 0.002)])
    assert "threshold (bar: its interval)" in svg
    assert "workflow" not in svg and "agent" not in svg and "chosen" not in svg
    both = frontier_svg([_dot("0.50", "threshold", 0.001), _dot("w", "workflow", 0.0)], "w")
    assert "■</tspan> workflow" in both and "agent" not in both and "chosen" in both
    module, cases = desk
    page = tmp_path / "report.html"
    argv = _sweep(tmp_path / "e.db", f"{module}:desk", cases, "--report", str(page))
    assert main(argv) == 0
    html = page.read_text()
    assert "cost per case (USD at gpt-4o-mini prices)</text>" in html
    assert "(USD)</text>" not in html


def test_a_module_named_like_a_folder_beside_it_stays_a_module_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopwise.evidence.evals.history import history_key

    (tmp_path / "deskpkg").mkdir()
    (tmp_path / "flow.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert history_key("deskpkg:desk") == "deskpkg:desk"  # a package, wherever one stands
    assert history_key("deskpkg") == "deskpkg"
    assert history_key("./flow.py:desk") == f"{(tmp_path / 'flow.py').resolve()}:desk"
    assert history_key("nowhere.py:desk") == "nowhere.py:desk"
    assert history_key("bad\x00name:desk") == "bad\x00name:desk"
