"""Eval and analyze details through the CLI: history keyed by model, failing cases shown
field by field, prices for self-hosted models, which runs `analyze` counts."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise.cli.main import main
from loopwise.evidence.evals.dataset import Case
from loopwise.evidence.evals.harness import EvalTarget, evaluate
from loopwise.evidence.report import format_text, render_html
from loopwise.testing import FakeChatServer, ScriptedModel, call, reply

STEPS = """
import loopwise
from loopwise import ModelRequest


@loopwise.step
def label(x: dict) -> dict:
    if x["n"] == 3:
        raise RuntimeError("three is not a number I take")
    return {"label": "odd" if x["n"] % 2 else "even", "size": {"digits": len(str(x["n"]))}}


@loopwise.step
async def ask(x: dict, ctx: loopwise.Context) -> dict:
    await ctx.call_model(ModelRequest(messages=[{"role": "user", "content": str(x)}]))
    return {"label": "odd" if x["n"] % 2 else "even"}
"""


@pytest.fixture
def steps(tmp_path: Path) -> str:
    path = tmp_path / "steps.py"
    path.write_text(textwrap.dedent(STEPS))
    return str(path)


@pytest.fixture
def cases(tmp_path: Path) -> str:
    rows = [
        {"id": "one", "input": {"n": 1}, "expected": {"label": "odd"}},
        {"id": "two", "input": {"n": 2}, "expected": {"label": "odd", "size": {"digits": 2}}},
        {"id": "three", "input": {"n": 3}, "expected": {"label": "odd"}},
        {"id": "four", "input": {"n": 4}, "expected": {"label": "even", "colour": "red"}},
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _eval(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["eval", *argv, "--json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_eval_history_is_keyed_by_dataset_target_and_model(
    steps: str, cases: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = f"{steps}:label"
    first = _eval(capsys, target, "--dataset", cases, "--model", "scripted")
    assert first["previous"] == {} and first["models"] == {target: "scripted"}
    # The same target and dataset with no model is another experiment, not a regression.
    modelless = _eval(capsys, target, "--dataset", cases)
    assert modelless["models"] == {target: "none"} and modelless["previous"] == {}
    again = _eval(capsys, target, "--dataset", cases, "--model", "scripted")
    assert again["previous"][target]["eval_id"] == first["eval_id"]
    assert again["previous"][target]["model"] == "scripted"
    assert main(["eval", target, "--dataset", cases]) == 0
    text = capsys.readouterr().out
    assert f"since {modelless['created_at']}" in text


def test_the_report_shows_expected_vs_actual_for_every_failing_case(
    steps: str, cases: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = f"{steps}:label"
    doc = _eval(capsys, target, "--dataset", cases)
    runs = {r["case_id"]: r for r in doc["targets"][0]["runs"]}
    assert runs["one"]["diff"] == [] and runs["one"]["score"] == 1.0
    assert runs["two"]["expected"] == {"label": "odd", "size": {"digits": 2}}
    assert runs["two"]["diff"] == [
        {"field": "label", "expected": "odd", "actual": "even"},
        {"field": "size.digits", "expected": 2, "actual": 1},
    ]
    assert runs["three"]["status"] == "error" and runs["three"]["diff"] == []
    assert runs["four"]["diff"] == [
        {"field": "colour", "expected": "red", "actual": None, "missing": True}
    ]

    page = tmp_path / "report.html"
    assert main(["eval", target, "--dataset", cases, "--report", str(page)]) == 0
    text = capsys.readouterr().out
    assert "failing: 3 of 4 scored run(s) of label" in text
    two = 'label case two: label: expected "odd", got "even"; size.digits: expected 2, got 1'
    assert two in text
    assert 'label case four: colour: expected "red", missing' in text
    assert "label case three: ended error: " in text and "three is not a number" in text
    html = page.read_text()
    assert "Failing cases" in html and "size.digits: expected 2, got 1" in html


def test_every_failing_run_is_listed_with_repeats_and_a_custom_scorer() -> None:
    @loopwise.step
    def half(x: dict[str, Any]) -> dict[str, Any]:
        return {"label": "odd"}

    def never(output: Any, expected: Any) -> float:
        return 0.5

    cases = [Case(id=f"c{i}", input={"n": i}, expected={"label": "odd"}) for i in range(30)]
    report = evaluate([EvalTarget(name="half", step=half)], cases, repeat=2, scorer=never)
    text = format_text(report)
    assert "failing: 60 of 60 scored run(s) of half" in text
    assert "half case c0 (repeat 2): scorer never gave 0.5: got" in text
    assert "… 40 more (every one in --json's runs and --report's page)" in text
    assert render_html(report).count("scorer never gave 0.5") == 60


SCORER = """
def label_only(output, expected):
    return output["label"] == expected["label"]
"""


def test_a_custom_scorers_failing_runs_show_its_verdict_not_a_field_diff(
    steps: str, cases: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "scoring.py").write_text(SCORER)
    target, scorer = f"{steps}:label", f"{tmp_path / 'scoring.py'}:label_only"
    doc = _eval(capsys, target, "--dataset", cases, "--scorer", scorer)
    runs = {r["case_id"]: r for r in doc["targets"][0]["runs"]}
    # The scorer looks at the label only: case four's missing colour is no failure.
    assert [runs[c]["score"] for c in ("one", "two", "three", "four")] == [1.0, 0.0, 0.0, 1.0]
    assert runs["two"]["diff"] == [] and runs["two"]["scorer"] == "label_only"
    page = tmp_path / "report.html"
    argv = ["eval", target, "--dataset", cases, "--scorer", scorer, "--report", str(page)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "failing: 2 of 4 scored run(s) of label" in text
    two = (
        'label case two: scorer label_only gave 0: got {"label": "even", "size": {"digits": 1}}'
        ', expected {"label": "odd", "size": {"digits": 2}}'
    )
    assert two in text
    assert "size.digits" not in text and "case four" not in text
    html = page.read_text()
    assert "scorer label_only gave 0" in html and "size.digits: expected" not in html


def test_the_sync_evaluate_releases_each_targets_model_once() -> None:
    # As loopwise.run does: a pool belongs to the loop that opened it, and the next sync
    # call may come from another thread.
    closed: list[str] = []

    class Closing(ScriptedModel):
        async def aclose(self) -> None:
            closed.append(self.name)

    @loopwise.step
    def label(x: dict[str, Any]) -> dict[str, Any]:
        return {"label": "odd"}

    shared = Closing([reply("unused")])
    targets = [
        EvalTarget(name="a", step=label, model=shared),
        EvalTarget(name="b", step=label, model=shared),
    ]
    report = evaluate(targets, [Case(id="c", input={}, expected={"label": "odd"})])
    assert [t.correct_rate for t in report.targets] == [1.0, 1.0]
    assert closed == [shared.name]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeChatServer]:
    with FakeChatServer(lambda request: "fine") as running:
        monkeypatch.setenv("OPENAI_BASE_URL", running.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "local")
        yield running


def test_price_per_mtok_prices_a_self_hosted_model(
    steps: str, cases: str, server: FakeChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    target = f"{steps}:ask"
    unpriced = _eval(capsys, target, "--dataset", cases, "--model", "my-llama")
    assert unpriced["targets"][0]["metrics"]["cost_usd"]["unknown"] == 4
    priced = _eval(
        capsys, target, "--dataset", cases, "--model", "my-llama", "--price-per-mtok", "2,8"
    )
    run = priced["targets"][0]["runs"][0]
    assert run["cost_usd"] == pytest.approx(
        (run["input_tokens"] * 2 + run["output_tokens"] * 8) / 1e6
    )
    assert run["cost_usd"] > 0 and priced["targets"][0]["metrics"]["cost_usd"]["unknown"] == 0


@pytest.mark.parametrize("bad", ["2", "a,b", "1,-1", "1,2,3", "nan,1"])
def test_a_bad_price_is_a_usage_error(
    steps: str, cases: str, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["eval", f"{steps}:label", "--dataset", cases, "--price-per-mtok", bad])
    err = capsys.readouterr().err
    assert code == 2 and "--price-per-mtok" in err and "Traceback" not in err


def test_pricing_prices_unknown_models_in_python() -> None:
    price = loopwise.Price(input=1.0, output=2.0)
    assert loopwise.Pricing().cost("my-llama", 1_000_000, 0) is None
    assert loopwise.Pricing(default=price).cost("my-llama", 1_000_000, 1_000_000) == 3.0
    assert loopwise.Pricing(extra={"my-llama": price}).cost("my-llama-q4", 0, 500_000) == 1.0
    assert loopwise.Pricing(default=price).cost("gpt-4o-mini", 1_000_000, 0) == 0.15


# --- analyze --------------------------------------------------------------------------

AGENT = """
import loopwise
from loopwise import Agent, tool


@tool
def lookup(order_id: str) -> str:
    \"\"\"Look an order up. Call it first for any order question.\"\"\"
    return "order " + order_id


@tool
def refund_status(order_id: str) -> str:
    \"\"\"Say whether an order was refunded. Call it after lookup.\"\"\"
    return "not refunded"


clerk = Agent(name="clerk", instructions="Answer.", tools=[lookup, refund_status], max_steps=4)
"""


def _agent_runs(tmp_path: Path) -> str:
    path = tmp_path / "clerk.py"
    path.write_text(textwrap.dedent(AGENT))
    spec = f"{path}:clerk"
    module: Any = {}
    exec(compile(path.read_text(), str(path), "exec"), module)
    clerk = module["clerk"]
    good = [call("lookup", {"order_id": "O-1"}), call("refund_status", {"order_id": "O-1"})]
    for _ in range(3):  # completed, on the model "scripted"
        loopwise.run(clerk, "?", model=ScriptedModel([*good, reply("done")]), spec=spec)
    for _ in range(2):  # ended stuck, after inventing a tool
        script = [call("lookup", {"order_id": "O-1"}), *[call("invented", {})] * 3]
        loopwise.run(clerk, "?", model=ScriptedModel(script, name="other"), spec=spec)
    return spec


def test_analyze_counts_completed_runs_unless_told_and_filters_by_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _agent_runs(tmp_path)
    assert main(["analyze", spec, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["runs"] == 3 and doc["statuses"] == ["completed"]
    assert [p["path"] for p in doc["paths"]] == ["lookup → refund_status"]

    assert main(["analyze", spec, "--status", "all", "--json"]) == 0
    every = json.loads(capsys.readouterr().out)
    assert every["runs"] == 5 and every["statuses"] is None
    stuck_paths = [p for p in every["paths"] if "stuck" in p["statuses"]]
    assert stuck_paths and all("invented" not in p["path"] for p in stuck_paths)

    assert main(["analyze", spec, "--status", "stuck,completed", "--model", "other", "--json"]) == 0
    other = json.loads(capsys.readouterr().out)
    assert other["runs"] == 2 and other["model"] == "other"
    assert main(["analyze", spec, "--status", "finished"]) == 2
    assert "--status" in capsys.readouterr().err
    assert main(["analyze", spec]) == 0
    assert "3 agent runs of" in capsys.readouterr().out


EVAL_SETTINGS = """
import loopwise

agent = loopwise.Agent(name="a")
cases = [loopwise.Case(id="1", input="x", expected="y")]
target = loopwise.EvalTarget(name="a", step=agent)
settings: loopwise.EvalOptions = {"repeat": 3, "concurrency": 4, "store": None}
report = loopwise.evaluate([target], cases, **settings)
swept, runs = loopwise.sweep(target, cases, max_error=0.1, **settings)
"""


@pytest.mark.slow  # mypy in a subprocess
def test_eval_settings_kept_in_a_dict_are_named_by_the_public_face(tmp_path: Path) -> None:
    # evaluate/sweep take **Unpack[EvalOptions] (issue 46; **Any before): a dict of
    # settings splatted in must be typed as EvalOptions, which the face did not export.

    from tests.support import strict_mypy_errors

    errors = strict_mypy_errors(EVAL_SETTINGS, tmp_path / "eval_settings.py")
    assert not errors, "\n".join(errors)
