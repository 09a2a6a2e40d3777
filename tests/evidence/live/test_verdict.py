"""``loopwise check TARGET --json`` reads the live cases a Shadow kept (issue 41): counts,
exact bounds and a verdict — ok, uncertain (too few cases), drift (a warning naming the
numbers, the window and the command that re-runs the decision)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise.cli.main import main
from loopwise.store.open import open_store
from loopwise.testing import ScriptedModel, call, reply

FLOW = textwrap.dedent(
    """
    import contextlib

    import pydantic

    import loopwise

    LEDGER = []  # the real deps' ledger: nothing of a shadow may land here
    SANDBOXES = []


    class Label(pydantic.BaseModel):
        category: str


    @loopwise.step
    def classify(text: str) -> dict[str, str]:
        return {"category": "billing" if "bill" in text else "other"}


    @loopwise.tool(effect="write")
    def note(text: str, ctx: loopwise.Context) -> str:
        \"\"\"Note the ticket in the ledger.

        text: what to note
        \"\"\"
        ctx.deps.append(text)
        return "noted"


    agent = loopwise.Agent(name="agent", tools=[note], output_type=Label, max_steps=4)
    live = loopwise.Shadow("live", classify, agent, share=1.0)
    default_target = "live"


    def make_deps():
        return LEDGER


    @contextlib.contextmanager
    def make_eval_deps():
        SANDBOXES.append([])
        yield SANDBOXES[-1]
    """
)


def _model(disagree: set[str]) -> ScriptedModel:
    def respond(request: loopwise.ModelRequest) -> Any:
        text = request.user_text()
        if not request.tool_results():
            return call("note", {"text": text})
        rule = "billing" if "bill" in text else "other"
        return reply({"category": "shipping" if text in disagree else rule})

    return ScriptedModel(respond)


@pytest.fixture
def flow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    (tmp_path / "flow.py").write_text(FLOW)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LOOPWISE_STORE", str(tmp_path / "runs.db"))
    from loopwise.running.targets import load_target

    return load_target("flow.py:live").module


def _traffic(flow: Any, n: int, disagree: int) -> list[loopwise.RunResult]:
    tickets = [f"ticket {i}: {'my bill' if i % 2 else 'a parcel'}" for i in range(n)]
    model = _model(set(tickets[:disagree]))
    spec = str(Path("flow.py").resolve()) + ":live"
    return [
        loopwise.run(flow.live, text, model=model, spec=spec, deps=flow.make_deps())
        for text in tickets
    ]


def _check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["check", "flow.py:live", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_sixty_agreeing_cases_are_ok_and_the_real_ledger_is_untouched(
    flow: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    results = _traffic(flow, 60, disagree=0)
    assert {r.status for r in results} == {"completed"}
    assert flow.LEDGER == [] and len(flow.SANDBOXES) == 60
    code, doc = _check(capsys, "--max-error", "0.05")
    live = doc["live"]
    assert code == 0
    assert (live["cases"], live["disagreements"], live["rate"]) == (60, 0, 0.0)
    assert live["verdict"] == "ok" and live["bound_from"] == "--max-error"
    assert live["upper_bound"] == pytest.approx(1 - 0.1 ** (1 / 60))
    assert live["since"] is not None
    assert not [f for f in doc["findings"] if f["code"] == "live-drift"]


def test_half_disagreeing_is_drift_a_warning_that_names_numbers_and_the_rerun(
    flow: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _traffic(flow, 60, disagree=30)
    code, doc = _check(capsys, "--max-error", "0.05", "--live-window", "24h")
    live = doc["live"]
    assert code == 0  # a warning: check does not fail on it
    assert (live["cases"], live["disagreements"], live["verdict"]) == (60, 30, "drift")
    assert live["lower_bound"] > 0.05
    (drift,) = [f for f in doc["findings"] if f["code"] == "live-drift"]
    assert drift["level"] == "warning"
    assert "30 of 60" in drift["message"] and f"since {live['since']}" in drift["message"]
    assert "5.0%" in drift["message"] and "--max-error" in drift["message"]
    assert drift["fix"].endswith(
        "loopwise eval flow.py:classify --from-store flow.py:live --model <your model>"
    )


def test_three_cases_are_uncertain_and_say_how_many_would_decide(
    flow: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _traffic(flow, 3, disagree=0)
    _, doc = _check(capsys, "--max-error", "0.05")
    assert (doc["live"]["cases"], doc["live"]["verdict"]) == (3, "uncertain")
    assert doc["live"]["needed"] == 45


def test_without_a_bound_the_verdict_is_uncertain_and_the_text_says_live(
    flow: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _traffic(flow, 5, disagree=1)
    _, doc = _check(capsys)
    assert (doc["live"]["cases"], doc["live"]["verdict"], doc["live"]["bound"]) == (
        5,
        "uncertain",
        None,
    )
    assert main(["check", "flow.py:live"]) == 0
    assert "live     uncertain: 1 of 5 disagree" in capsys.readouterr().out


def test_the_primarys_certificate_is_the_bound(
    flow: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _traffic(flow, 60, disagree=30)
    with open_store(tmp_path / "eval.db") as history:
        certified = {"threshold": 0.8, "alpha": 0.1, "delta": 0.1, "error_bound": 0.08}
        history.save_eval(
            "ev1",
            dataset="d.jsonl",
            created_at="2026-01-01T00:00:00+00:00",
            summaries={
                str(Path("flow.py").resolve()) + ":classify": {
                    "calibration": {"ece": 0.01, "n": 60, "certified": certified}
                }
            },
        )
    _, doc = _check(capsys, "--max-error", "0.5")  # the certificate wins over --max-error
    assert doc["live"]["bound"] == 0.1 and "flow.py:classify" in doc["live"]["bound_from"]
    assert doc["live"]["verdict"] == "drift"


def test_a_window_after_every_case_holds_none_and_a_bad_window_is_a_usage_error(
    flow: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _traffic(flow, 2, disagree=0)
    _, doc = _check(capsys, "--live-window", "2999-01-01")
    assert (doc["live"]["cases"], doc["live"]["rate"]) == (0, None)
    assert main(["check", "flow.py:live", "--live-window", "yesterday"]) == 2
    err = capsys.readouterr().err
    assert "--live-window 'yesterday'" in err and "Traceback" not in err
    assert main(["check", "flow.py:live", "--max-error", "2"]) == 2
    assert "--max-error: '2' is not a rate between 0 and 1" in capsys.readouterr().err


def test_a_target_without_live_cases_has_live_null(
    flow: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _check(capsys)[1]["live"] is None


def test_a_shadow_that_would_always_be_refused_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    without = FLOW.split("@contextlib.contextmanager")[0]  # no make_eval_deps
    (tmp_path / "flow.py").write_text(without)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LOOPWISE_STORE", str(tmp_path / "runs.db"))
    code, doc = _check(capsys)
    (found,) = [f for f in doc["findings"] if f["code"] == "shadow-refused"]
    assert code == 0 and found["level"] == "warning"
    assert "note" in found["message"] and "make_eval_deps" in found["fix"]


def test_a_shadow_with_its_sandbox_gets_no_refusal_warning(
    flow: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not [f for f in _check(capsys)[1]["findings"] if f["code"] == "shadow-refused"]


def test_runs_recorded_under_another_spelling_of_the_target_count(
    flow: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _traffic(flow, 2, disagree=0)
    loopwise.run(flow.live, "my bill", model=_model(set()), spec="flow.py", deps=[])
    assert _check(capsys)[1]["live"]["cases"] == 3  # flow.py:live and flow.py alone
    assert main(["check", "flow.py", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["live"]["cases"] == 3


def test_a_newer_sweep_that_certified_nothing_keeps_the_older_certificates_bound(
    flow: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The guide's walk: certify, see drift, re-sweep on live cases and certify nothing
    # ("escalate every case"). The requirement the decision met still judges live traffic:
    # the drift warning must not vanish because the re-run confirmed it.
    _traffic(flow, 60, disagree=30)
    spec = str(Path("flow.py").resolve()) + ":classify"
    certified = {"threshold": 0.8, "alpha": 0.1, "delta": 0.1, "error_bound": 0.08}
    with open_store(tmp_path / "eval.db") as history:
        for eval_id, at, cert in (
            ("ev1", "2026-01-01T00:00:00+00:00", certified),
            ("ev2", "2026-01-02T00:00:00+00:00", None),
        ):
            calibration = {"ece": 0.2, "n": 60, "certified": cert}
            history.save_eval(
                eval_id,
                dataset="d.jsonl",
                created_at=at,
                summaries={spec: {"calibration": calibration}},
            )
    _, doc = _check(capsys)
    live = doc["live"]
    assert (live["bound"], live["verdict"]) == (0.1, "drift")
    assert "(eval ev1; the newer sweep, eval ev2, certified none)" in live["bound_from"]
    assert [f["code"] for f in doc["findings"] if f["code"] == "live-drift"] == ["live-drift"]


@pytest.mark.parametrize("window", ["99999999999d", "999999999d", "99999999999999w"])
def test_a_window_back_past_the_year_one_is_a_usage_error(
    flow: Any, capsys: pytest.CaptureFixture[str], window: str
) -> None:
    _traffic(flow, 1, disagree=0)
    assert main(["check", "flow.py:live", "--live-window", window]) == 2
    err = capsys.readouterr().err
    assert f"--live-window {window!r}" in err and "Traceback" not in err
