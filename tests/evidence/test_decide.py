"""Deciding on evidence through the CLI and the public API: decide, check, eval, analyze."""

from __future__ import annotations

import ast
import asyncio
import io
import json
import os
import re
import textwrap
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel

import loopwise
from loopwise import Budget, ModelRequest, Workflow, analyze, check, decide
from loopwise.cli.main import main
from loopwise.core.shape import Kind, Limits, Shape
from loopwise.evidence.check import Finding
from loopwise.evidence.evals.dataset import Case, field_match, load_dataset
from loopwise.evidence.evals.harness import EvalTarget, evaluate
from loopwise.evidence.graduate.analyze import tool_path
from loopwise.testing import ScriptedModel
from loopwise.tools.tool import tool
from tests.support import ROOT

TRIAGE = f"{ROOT}/workflows/ticket_triage.py:triage"
TRIAGE_AGENT = f"{ROOT}/agents/triage_agent.py:triage_agent"
INVESTIGATE = f"{ROOT}/agents/order_investigation.py:investigate"
REFUND_DESK = f"{ROOT}/workflows/refund_desk.py:refund_desk"


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, Any]:
    code = main(argv)
    out = capsys.readouterr().out
    return code, json.loads(out)


# --- decide ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("known", "cost", "architecture"),
    [("yes", "cheap", "workflow"), ("no", "cheap", "agent"), ("no", "expensive", "hybrid")],
)
def test_decide_the_two_questions(
    capsys: pytest.CaptureFixture[str], known: str, cost: str, architecture: str
) -> None:
    code, doc = _json(
        capsys, ["decide", "--steps-known", known, "--wrong-step-cost", cost, "--json"]
    )
    assert code == 0
    assert doc["architecture"] == architecture
    assert doc["reasons"] and doc["start_from"].endswith(".py:" + doc["start_from"].split(":")[1])


def test_decide_the_other_answers_and_the_extra_questions() -> None:
    assert decide("yes", "expensive").architecture == "workflow"
    assert any("gate" in r for r in decide("yes", "expensive").reasons)
    assert decide("partly", "cheap").architecture == "workflow"
    assert decide("partly", "expensive").architecture == "hybrid"
    busy = decide("no", "cheap", volume=50_000, latency_seconds=2)
    assert busy.architecture == "agent"
    assert any("50000 runs/day" in c for c in busy.cautions)
    assert any("2s latency" in c for c in busy.cautions)
    with pytest.raises(loopwise.ConfigError, match="steps_known"):
        decide("maybe", "cheap")


def test_decide_without_a_terminal_names_the_missing_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["decide", "--steps-known", "no", "--json"]) == 2
    captured = capsys.readouterr()
    assert "--wrong-step-cost" in captured.err and captured.out == ""
    assert main(["decide", "--steps-known", "maybe", "--wrong-step-cost", "cheap"]) == 2


def test_decide_asks_in_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Terminal("no\nsometimes\nexpensive\n20000\n\n"))
    assert main(["decide", "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["architecture"] == "hybrid"
    assert "answer cheap or expensive" in captured.err
    assert doc["answers"] == {
        "steps_known": "no",
        "wrong_step_cost": "expensive",
        "volume_per_day": 20000,
    }


# --- check ----------------------------------------------------------------------------


@pytest.mark.parametrize("target", [TRIAGE, TRIAGE_AGENT, INVESTIGATE, REFUND_DESK])
def test_check_passes_every_canonical_example(
    capsys: pytest.CaptureFixture[str], target: str
) -> None:
    code, doc = _json(capsys, ["check", target, "--json"])
    assert code == 0, doc
    assert doc["ok"] is True and doc["target"] == target
    assert all(f["level"] == "warning" for f in doc["findings"])


def _write(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


RISKY = """
    from loopwise.core.shape import Kind, Limits, Shape
    from loopwise.tools.tool import tool


    @tool(effect="irreversible")
    def delete_account(customer_id: str) -> str:
        \"\"\"Delete a customer's account for good. Use it when the customer asks to leave.\"\"\"
        return "deleted"


    class Risky:
        \"\"\"A hand-rolled agent-like step that describes itself, so check reads its tools.\"\"\"

        name = "risky"
        tools = [delete_account]
        max_steps = 5

        async def run(self, input, ctx):
            return None

        def describe(self):
            tools = tuple(t.describe() for t in self.tools)
            limits = Limits(max_steps=self.max_steps)
            return Shape(kind=Kind.AGENT, name=self.name, tools=tools, limits=limits)


    risky = Risky()
"""


def test_check_fails_an_ungated_irreversible_tool(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _write(tmp_path, "risky.py", RISKY)
    code, doc = _json(capsys, ["check", f"{path}:risky", "--json"])
    assert code == 1 and doc["ok"] is False
    errors = [f for f in doc["findings"] if f["level"] == "error"]
    assert [f["code"] for f in errors] == ["ungated-irreversible"]
    assert errors[0]["where"] == "risky/tools/delete_account"
    assert "gate" in errors[0]["fix"]
    assert main(["check", f"{path}:risky"]) == 1
    assert "FAILED" in capsys.readouterr().out


def test_check_reports_an_agent_that_refuses_to_be_built(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _write(
        tmp_path,
        "refused.py",
        RISKY.replace(
            "risky = Risky()",
            "from loopwise import Agent\n    agent = Agent(name='a', tools=[delete_account])",
        ),
    )
    code, doc = _json(capsys, ["check", f"{path}:agent", "--json"])
    assert code == 1
    (finding,) = doc["findings"]
    assert finding["code"] == "ungated-irreversible" and "delete_account" in finding["message"]
    assert main(["check", f"{tmp_path}/missing.py:x"]) == 2


class _SelfDescribed:
    """A hand-rolled tool-using step: it describes itself from its class attributes."""

    name: str
    tools: tuple[Any, ...]
    max_steps: int | None
    budget: Budget | None

    def describe(self) -> Shape:
        limits = Limits(max_steps=self.max_steps, budget=self.budget)
        tools = tuple(t.describe() for t in self.tools)
        return Shape(kind=Kind.AGENT, name=self.name, tools=tools, limits=limits)


def test_check_reviews_tools_limits_and_graphs() -> None:
    @tool
    def get_order(order_id: str) -> dict[str, Any]:
        """Get an order."""
        return {}

    @tool
    def get_orders(customer_id: str) -> list[Any]:
        """Get the orders of a customer. Use it when the customer names no order."""
        return []

    @tool(untrusted_output=True)
    def read_mail(mailbox: str) -> str:
        """Read the newest mail of a mailbox. Use it when the customer says they wrote."""
        return ""

    @tool(effect="write")
    def add_note(text: str) -> str:
        """Add a note to the customer's file. Use it after every finding."""
        return ""

    class Loose(_SelfDescribed):
        name = "loose"
        tools = (get_order, get_orders, read_mail, add_note)
        max_steps = None
        budget = Budget()

    codes = {(f.code, f.level) for f in check(Loose())}
    assert ("no-step-limit", "error") in codes
    assert ("no-budget", "warning") in codes
    assert ("tool-description-short", "warning") in codes
    assert ("param-no-description", "warning") in codes
    assert ("near-duplicate-tools", "warning") in codes
    assert ("untrusted-beside-write", "warning") in codes

    class Crowded(_SelfDescribed):
        name = "crowded"
        tools = (get_order,) * 13
        max_steps = 5
        budget = Budget(max_tokens=1000)

    crowded = check(Crowded())
    assert "too-many-tools" in {f.code for f in crowded}
    assert "no-budget" not in {f.code for f in crowded}


class Ticket(BaseModel):
    category: Literal["billing", "technical", "other"]


def test_check_finds_graph_errors_and_recurses_into_nodes() -> None:
    @loopwise.step
    def classify(x: dict[str, Any]) -> Ticket:
        return Ticket(category="billing")

    @loopwise.step
    def billing(t: Ticket) -> str:
        return "b"

    class Unlimited(_SelfDescribed):
        name = "technical"
        tools = ()
        max_steps = 0
        budget = None

        async def run(self, input: Any, ctx: Any) -> Any:
            return None

    wf = Workflow("support", input_type=dict)
    wf.add("classify", classify)
    wf.add_route(
        "by_category", "category", {"billing": "billing", "technical": "technical"},
        after=["classify"],
    )  # fmt: skip
    wf.add("billing", billing)
    wf.add("technical", Unlimited())  # type: ignore[arg-type]
    findings = check(wf)
    assert all(isinstance(f, Finding) for f in findings)
    where = {f.code: f.where for f in findings}
    assert where["non-exhaustive-route"] == "support/by_category"
    assert where["no-step-limit"] == "support/nodes/technical"
    assert findings[0].level == "error"


# --- eval -----------------------------------------------------------------------------


def _cases(n: int) -> list[Case]:
    return [
        Case(id=str(i), input={"n": i}, expected={"label": "odd" if i % 2 else "even"})
        for i in range(n)
    ]


@loopwise.step
async def one_call(x: dict[str, Any], ctx: loopwise.Context) -> dict[str, Any]:
    await ctx.call_model(ModelRequest(messages=[{"role": "user", "content": str(x)}]))
    return {"label": "odd" if x["n"] % 2 else "even"}


@loopwise.step
async def three_calls(x: dict[str, Any], ctx: loopwise.Context) -> dict[str, Any]:
    for _ in range(3):
        await ctx.call_model(ModelRequest(messages=[{"role": "user", "content": str(x) * 4}]))
    return {"label": "odd" if x["n"] % 2 else "even", "extra": True}


def test_eval_distributions_and_a_recommendation_that_cites_numbers() -> None:
    model = ScriptedModel(lambda request: "ok")
    report = evaluate(
        [
            EvalTarget(name="agentish", step=three_calls, model=model),
            EvalTarget(name="flow", step=one_call, model=model),
        ],
        _cases(6),
        repeat=2,
        concurrency=3,
    )
    doc = report.to_dict()
    agentish, flow = doc["targets"]
    assert agentish["n"] == flow["n"] == 12
    assert agentish["correct_rate"] == flow["correct_rate"] == 1.0
    assert agentish["status_counts"] == {"completed": 12}
    assert set(flow["metrics"]) == {
        "steps", "model_calls", "tool_calls", "tokens", "cost_usd", "latency_s",
    }  # fmt: skip
    assert set(flow["metrics"]["tokens"]) >= {"p50", "p95", "max", "mean"}
    assert flow["metrics"]["model_calls"]["p95"] == 1
    assert agentish["metrics"]["model_calls"]["p95"] == 3
    assert doc["recommendation"]["choice"] == "flow"
    text = doc["recommendation"]["text"]
    assert "not enough evidence to tell them apart" in text and "1 model call vs 3" in text
    assert "100% vs 100%" in text


def test_eval_prefers_accuracy_over_cost() -> None:
    @loopwise.step
    def sloppy(x: dict[str, Any]) -> dict[str, Any]:
        return {"label": "even"}

    @loopwise.step
    def careful(x: dict[str, Any]) -> dict[str, Any]:
        return {"label": "odd" if x["n"] % 2 else "even"}

    report = evaluate(
        [EvalTarget(name="sloppy", step=sloppy), EvalTarget(name="careful", step=careful)],
        _cases(20),
    )
    assert report.recommendation.choice == "careful"
    assert "more accurate (100% vs 50% correct)" in report.recommendation.text
    differ = report.disagreements()
    assert len(differ) == 10 and differ[0]["scores"] == {"sloppy": 0.0, "careful": 1.0}
    from loopwise.evidence.report import format_text, render_html

    assert "cases the targets score differently: 10" in format_text(report)
    assert "10 case(s); score per target" in render_html(report)


def test_eval_runs_concurrently_under_the_limit() -> None:
    running, peak = [0], [0]

    @loopwise.step
    async def slow(x: dict[str, Any]) -> dict[str, Any]:
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        for _ in range(5):
            await asyncio.sleep(0)
        running[0] -= 1
        return {"label": "x"}

    evaluate([EvalTarget(name="slow", step=slow)], _cases(12), concurrency=3)
    assert peak[0] == 3


def test_field_match_and_datasets(tmp_path: Path) -> None:
    assert field_match({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"c": 2}})
    assert not field_match({"a": 1}, {"a": 2})
    assert not field_match("text", {"a": 1})
    assert field_match(Ticket(category="billing"), {"category": "billing"})
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input": 1}\n{oops\n')
    with pytest.raises(loopwise.ConfigError, match="line 2"):
        load_dataset(bad)


@pytest.fixture
def tickets(tmp_path: Path) -> Path:
    """Six labeled tickets: the done-when command on a dataset small enough to be fast."""
    lines = (ROOT / "workflows/data/tickets.jsonl").read_text().splitlines()[:6]
    path = tmp_path / "tickets.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_eval_cli_compares_the_triage_workflow_and_agent(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tickets: Path
) -> None:
    report = tmp_path / "report.html"
    argv = [
        "eval", "--model", "scripted", TRIAGE, TRIAGE_AGENT, "--dataset", str(tickets),
        "--report", str(report), "--json",
    ]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert "runs, " not in captured.err  # no progress bar off a terminal
    assert [t["target"] for t in doc["targets"]] == [TRIAGE, TRIAGE_AGENT]
    assert [t["architecture"] for t in doc["targets"]] == ["workflow", "agent"]
    for target in doc["targets"]:
        assert target["n"] == 6 and len(target["runs"]) == 6
        for metric in ("cost_usd", "steps", "model_calls", "tokens", "latency_s"):
            assert target["metrics"][metric]["p95"] is not None
    rec = doc["recommendation"]
    assert rec["choice"] in {TRIAGE, TRIAGE_AGENT} and re.search(r"\d+% vs \d+%", rec["text"])
    page = report.read_text()
    assert page.startswith("<!doctype html>") and page.count("<svg") >= 8
    assert "p95" in page and "Recommendation" in page and "routing_rules" in page
    assert "<script" not in page and not re.search(r"(src|href)=['\"]?https?:", page)

    # The runs are in the eval's own store, and the next eval compares with this one.
    eval_db = str(Path(os.environ["LOOPWISE_STORE"]).with_name("eval.db"))
    assert main(["runs", "list", "--json", "--store", eval_db]) == 0
    assert len(json.loads(capsys.readouterr().out)["runs"]) == 12
    code, again = _json(capsys, argv)
    assert code == 0 and set(again["previous"]) == {TRIAGE, TRIAGE_AGENT}


def test_eval_cli_custom_scorer_and_model_free_targets(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    module = _write(
        tmp_path,
        "steps.py",
        """
        import loopwise


        @loopwise.step
        def echo(x: dict) -> dict:
            return {"label": x["label"]}


        def first_letter(output, expected):
            return output["label"][0] == expected["label"][0]
        """,
    )
    data = tmp_path / "cases.jsonl"
    data.write_text(
        '{"input": {"label": "apple"}, "expected": {"label": "avocado"}}\n'
        '{"input": {"label": "pear"}, "expected": {"label": "banana"}}\n'
    )
    scorer = f"{module}:first_letter"
    code, doc = _json(
        capsys, ["eval", f"{module}:echo", "--dataset", str(data), "--scorer", scorer, "--json"]
    )
    assert code == 0 and doc["targets"][0]["correct_rate"] == 0.5
    assert doc["recommendation"]["choice"] == f"{module}:echo"
    assert main(["eval", f"{module}:echo", "--dataset", str(tmp_path / "none.jsonl")]) == 2


# --- analyze --------------------------------------------------------------------------


def test_analyze_lists_the_paths_of_stored_investigation_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    questions = ["Why did the last orders of C-1001 fail?", "What happened to C-1004's orders?"]
    for question in [*questions, questions[0]]:
        assert main(
            ["run", INVESTIGATE, "--model", "scripted", "--input", json.dumps(question)]
        ) in {0, 1}
    capsys.readouterr()
    code, doc = _json(capsys, ["analyze", INVESTIGATE, "--json"])
    assert code == 0
    assert doc["runs"] == 3 and doc["verdict"] == "not_enough_runs"
    assert sum(p["runs"] for p in doc["paths"]) == 3
    assert all(p["path"].startswith("lookup_customer") for p in doc["paths"])
    assert main(["analyze", "investigate"]) == 0
    assert "3 agent runs of investigate" in capsys.readouterr().out


def _run(run_id: str, *turns: list[str]) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    for turn in turns:
        events.append({"type": "model_call", "data": {}})
        events.extend({"type": "tool_call", "data": {"tool": name}} for name in turn)
    events.append({"type": "model_call", "data": {}})
    return {"run_id": run_id, "status": "completed", "events": events}


def test_analyze_collapses_paths_and_writes_a_skeleton_when_they_converge() -> None:
    path, repeated = tool_path(
        _run("r", ["a"], ["c", "b"], ["d"], ["d"], ["final_answer"])["events"]
    )
    assert path == (("a",), ("b", "c"), ("d",)) and repeated == (False, False, True)
    runs = [_run(f"r{i}", ["a"], ["b", "c"], *([["d"]] * (1 + i % 3))) for i in range(9)]
    runs.append(_run("odd", ["x"]))
    result = analyze(runs, target="agents/shop_agent.py:shop")
    assert result.verdict == "steps_known" and result.runs == 10
    assert result.paths[0].text == "a → {b, c} → d+" and result.paths[0].runs == 9
    assert result.skeleton is not None and "step_3_d" in result.skeleton
    assert "load_target('agents/shop_agent.py:shop').step.tool_map" in result.skeleton
    compile(ast.parse(result.skeleton), "skeleton.py", "exec")

    scattered = [_run(f"s{i}", [f"t{i}"], ["u"]) for i in range(8)]
    spread = analyze(scattered)
    assert spread.verdict == "steps_unknown" and spread.skeleton is None
    assert analyze([]).verdict == "no_runs"


AGENT = """
    from loopwise import Agent, tool


    @tool
    def lookup(customer_id: str) -> dict:
        \"\"\"Look up a customer. Use it first.\"\"\"
        return {"id": customer_id}


    @tool
    def orders(customer_id: str) -> list:
        \"\"\"List a customer's orders. Use it after lookup.\"\"\"
        return []


    @tool
    def payments(order_id: str) -> list:
        \"\"\"List an order's payments. Use it when an order failed.\"\"\"
        return []


    shop = Agent(name="shop", tools=[lookup, orders, payments], max_steps=5)
"""


def test_the_skeleton_of_parting_paths_is_a_workflow_over_the_agents_tools(
    tmp_path: Path,
) -> None:
    spec = f"{_write(tmp_path, 'shop_agent.py', AGENT)}:shop"
    stop = [_run(f"a{i}", ["lookup"], ["orders"]) for i in range(4)]
    go_on = [_run(f"b{i}", ["lookup"], ["orders"], ["payments"]) for i in range(3)]
    for run in go_on:
        run["events"][-2]["data"]["args"] = {"order_id": "O-1001"}
    result = analyze([*stop, *go_on], target=spec)
    assert result.verdict == "steps_known" and [p.runs for p in result.paths] == [4, 3]
    skeleton = result.skeleton or ""
    assert "if False:  # TODO: when? (43% of runs go on like this)" in skeleton
    assert '# the agent passed e.g. {"order_id": "O-1001"}' in skeleton
    namespace: dict[str, Any] = {}
    exec(compile(skeleton, "skeleton.py", "exec"), namespace)
    workflow = namespace["shop_workflow"]
    assert isinstance(workflow, Workflow) and workflow.validation_errors() == []
    assert workflow.nodes == ["step_1_lookup", "step_2_orders", "step_3_branch"]


def test_report_shapes_draw_workflows_agents_and_hybrids() -> None:
    from loopwise.evidence.report import describe_graph, draw_graph
    from loopwise.running.targets import load_target

    desk = describe_graph(load_target(REFUND_DESK).step)
    kinds = {n["id"]: (n["kind"], n["detail"]) for n in desk["nodes"]}
    assert kinds["issue_refund"] == ("irreversible", "gated")
    triage = describe_graph(load_target(TRIAGE).step)
    assert triage["kind"] == "workflow" and triage["edges"]
    agent = describe_graph(load_target(INVESTIGATE).step)
    assert agent["kind"] == "agent" and {"lookup_customer", "list_orders"} <= {
        n["id"] for n in agent["nodes"]
    }
    for shape in (desk, triage, agent):
        svg = draw_graph(shape)
        assert svg.startswith("<svg") and svg.count("<rect") == len(shape["nodes"])
        assert shape["mermaid"].strip()


class _Kinded(BaseModel):
    kind: Literal["billing_dispute", "technical_outage", "account_access", "shipping", "other"]


def test_report_route_labels_do_not_run_into_each_other_or_the_nodes() -> None:
    import xml.etree.ElementTree as ET

    from loopwise.evidence.report import describe_graph, draw_graph

    def leaf(name: str) -> Any:
        async def f(r: _Kinded) -> str:
            return name

        f.__name__ = name
        return loopwise.step(f)

    @loopwise.step
    async def read(text: str) -> _Kinded:
        return _Kinded(kind="other")

    values = ["billing_dispute", "technical_outage", "account_access", "shipping"]
    desk = (
        Workflow("desk")
        .then(read)
        .route("kind", {v: leaf(f"handle_{v}") for v in values}, default=leaf("fallback"))
    )
    root = ET.fromstring(draw_graph(describe_graph(desk)))
    ns = "{http://www.w3.org/2000/svg}"
    boxes = []  # each label's box at an upper estimate of 11px glyphs, centred on x
    for t in root.iter(f"{ns}text"):
        if t.get("class") == "edge-label":
            text = "".join(t.itertext()).replace(t.findtext(f"{ns}title") or "", "", 1)
            w, x, y = len(text) * 6.2, float(t.get("x", 0)), float(t.get("y", 0))
            boxes.append((x - w / 2, y - 10, x + w / 2, y + 2, text))
    assert sorted(b[4] for b in boxes) == sorted([*values, "default"])
    nodes = [(float(r.get("x", 0)), float(r.get("y", 0))) for r in root.iter(f"{ns}rect")]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:  # before, the labels sat at the edges' midpoints, touching
            assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]), (a, b)
        for nx, ny in nodes:  # nor hidden behind a node ("default" was, under a sibling)
            assert not (a[0] < nx + 150 and nx < a[2] and a[1] < ny + 40 and ny < a[3]), a


def test_eval_limits_make_the_within_budget_rate_a_question(
    capsys: pytest.CaptureFixture[str], tickets: Path
) -> None:
    argv = [
        "eval", "--model", "scripted", TRIAGE_AGENT, "--dataset", str(tickets),
        "--max-steps", "1", "--json",
    ]  # fmt: skip
    code, doc = _json(capsys, argv)
    (agent,) = doc["targets"]
    assert code == 0 and agent["within_budget_rate"] == 0.0
    assert agent["status_counts"] == {"step_limit": 6} and agent["correct_rate"] == 0.0


def test_eval_file_mistakes_exit_2_in_one_line_before_any_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tickets: Path
) -> None:
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe not text\n")
    mistakes = [
        (["--dataset", str(binary)], "cannot read it as UTF-8"),
        (["--dataset", str(tickets), "--report", str(tmp_path)], "not a file path"),
        (["--dataset", str(tickets), "--report", f"{tickets}/r.html"], "not a file path"),
    ]
    for extra, needle in mistakes:
        assert main(["eval", TRIAGE, "--model", "scripted", *extra, "--json"]) == 2
        out, err = capsys.readouterr()
        assert out == "" and needle in err and err.count("\n") == 1, err
    assert main(["runs", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == []
    assert main(["run", TRIAGE, "--model", "scripted", "--input", f"@{binary}"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_scorer_and_store_and_decide_mistakes_exit_2_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tickets: Path
) -> None:
    broken = tmp_path / "broken_scorer.py"
    broken.write_text("def score(output, expected:\n")
    argv = ["eval", TRIAGE, "--model", "scripted", "--dataset", str(tickets)]
    cases = [
        ([*argv, "--scorer", f"{broken}:score"], "SyntaxError while loading"),
        (["analyze", "--store", str(tmp_path)], "cannot open run store"),
        (["decide", "--steps-known", "yes", "--wrong-step-cost", "cheap", "--volume", "-5"], "-5"),
        (["decide", "--steps-known", "yes", "--wrong-step-cost", "cheap", "--latency", "-1"], "-1"),
    ]
    for args, needle in cases:
        assert main(args) == 2, args
        out, err = capsys.readouterr()
        assert out == "" and needle in err and err.count("\n") == 1, err


TWIN = '''
import loopwise
from loopwise.testing import ScriptedAgent


@loopwise.tool
def {tool}(order_id: str) -> str:
    """Look an order up."""
    return "ok"


investigate = loopwise.Agent(name="investigate", instructions="Look.", tools=[{tool}])
offline_model = ScriptedAgent(("{tool}", {{"order_id": "O-1"}}), answer="done")
'''


def test_analyze_a_target_reads_only_that_agents_own_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A same-named agent in another module, an eval's runs and more newer runs of other
    # targets than --limit must not change what `analyze TARGET` reads.
    import asyncio

    from loopwise.running.targets import load_target

    store = tmp_path / "runs.db"
    (tmp_path / "a.py").write_text(TWIN.format(tool="lookup_a"))
    (tmp_path / "b.py").write_text(TWIN.format(tool="lookup_b"))
    mine, twin = (
        load_target(f"{tmp_path / 'a.py'}:investigate"),
        load_target(f"{tmp_path / 'b.py'}:investigate"),
    )
    for _ in range(3):
        loopwise.run(mine.step, "O-1?", model=mine.module.offline_model, store=store,
                     spec=mine.spec)  # fmt: skip
    for _ in range(5):
        loopwise.run(twin.step, "O-1?", model=twin.module.offline_model, store=store,
                     spec=twin.spec)  # fmt: skip
    asyncio.run(
        loopwise.arun(mine.step, "O-1?", model=mine.module.offline_model, store=store,
                      spec=mine.spec, eval_id="e1")
    )  # fmt: skip
    argv = ["analyze", mine.spec, "--store", str(store), "--json", "--limit", "3"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["runs"] == 3
    assert [p["path"] for p in doc["paths"]] == ["lookup_a"]
