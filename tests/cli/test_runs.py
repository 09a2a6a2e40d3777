"""Results people can read: `runs list` columns, one output shape per status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise.cli.main import main
from loopwise.core.events import jsonable
from loopwise.running.targets import load_target
from loopwise.testing import ScriptedModel, reply
from loopwise.tools.tool import tool
from tests.support import ROOT


def test_runs_list_has_a_header_and_columns_that_hold_with_long_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clerk = loopwise.Agent(name="clerk", instructions="Answer.", max_steps=2)
    long_model = "meta-llama/Llama-3.1-70B-Instruct-Turbo-quantized-q4_k_m-gguf-v2"
    for name in ("scripted", long_model, "m"):
        loopwise.run(clerk, "Hi?", model=ScriptedModel([reply("Hello.")], name=name))
    assert main(["runs", "list"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["RUN", "STATUS", "TARGET", "MODEL", "TOKENS", "CREATED", "(UTC)"]
    assert len(rows) == 3
    created = header.index("CREATED")
    tokens_end = header.index("TOKENS") + len("TOKENS")
    for row in rows:
        assert row[header.index("STATUS") :].startswith("completed")
        assert row[header.index("TARGET") :].startswith("clerk")
        assert row[created : created + 4].isdigit()  # the year, in its column
        assert row[tokens_end - 1].isdigit()  # right-aligned under its header
    assert any("…" in row for row in rows)  # a 64-character model name is cut, not shifting


def test_graph_draws_agents_as_a_loop_and_hybrids_with_what_the_planner_reads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["graph", f"{ROOT}/agents/order_investigation.py:investigate"]) == 0
    agent = capsys.readouterr().out
    assert agent.startswith("%% agent investigate\nflowchart TD\n")
    assert "investigate --> get_payments" in agent
    assert 'get_payments -->|"result"| investigate' in agent
    assert 'investigate_answer{"answer"}' in agent
    assert 'investigate -->|"no more calls"| investigate_answer' in agent
    assert main(["graph", f"{ROOT}/workflows/refund_desk.py:refund_desk"]) == 0
    desk = capsys.readouterr().out
    assert 'plan -->|"reads"| planner_list_orders' in desk
    assert 'validate -->|"valid"| issue_refund' in desk


@pytest.mark.parametrize("verb", [["graph", "T"], ["check", "T"], ["decide"], ["init"]])
def test_every_verb_takes_store(
    verb: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = f"{ROOT}/workflows/ticket_triage.py:triage"
    argv = [target if a == "T" else a for a in verb]
    if verb == ["decide"]:
        argv += ["--steps-known", "yes", "--wrong-step-cost", "cheap"]
    if verb == ["init"]:
        argv += ["workflow", str(tmp_path / "project")]
    assert main([*argv, "--store", str(tmp_path / "runs.db")]) == 0
    capsys.readouterr()
    assert (
        main(
            [*argv, "--store", "mysql://db/x", "--force"]
            if verb == ["init"]
            else [*argv, "--store", "mysql://db/x"]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mysql" in err


SHAPES = '''
import loopwise
from loopwise import Agent, Hybrid, gates, tool
from loopwise.testing import ScriptedModel, call, reply


@tool
def look(q: str) -> str:
    """Look something up. Call it for every question."""
    return "seen " + q


@tool(effect="irreversible", gate=gates.human())
def pay(amount: int) -> str:
    """Pay an amount. Call it when payment is due."""
    return f"paid {amount}"


answers = Agent(name="answers", instructions="ANSWERS", tools=[look], max_steps=3)
loops = Agent(name="loops", instructions="LOOPS", tools=[look], max_steps=2)
pays = Agent(name="pays", instructions="PAYS", tools=[pay], max_steps=3)
desk = Hybrid("desk", actions=[pay], task="PLAN-ME")
PLAN = {"steps": [{"id": "s1", "action": "pay", "args": {"amount": 5}, "depends_on": [],
                   "reason": "owed"}]}


def _respond(request):
    system = str(request.messages[0]["content"])
    looked = sum(m["role"] == "tool" for m in request.messages)
    if "PLAN-ME" in system:
        return reply(PLAN)
    if "PAYS" in system:
        return call("pay", {"amount": 5})
    if "LOOPS" in system:
        return call("look", {"q": str(looked)})
    return reply("done") if looked else call("look", {"q": "x"})


def offline_model():
    return ScriptedModel(_respond)
'''


@pytest.mark.parametrize(
    ("target", "status", "shape"),
    [
        ("answers", "completed", str),
        ("loops", "step_limit", dict),
        ("pays", "awaiting_approval", dict),
        ("desk", "awaiting_approval", loopwise.HybridOutput),
    ],
)
def test_one_output_shape_per_status_the_same_in_python_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, status: str, shape: type
) -> None:
    module = tmp_path / "shapes.py"
    module.write_text(SHAPES)
    code = main(["run", f"{module}:{target}", "--input", '"?"', "--model", "scripted", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert (code, doc["status"]) == (0 if status == "completed" else 1, status)

    loaded = load_target(f"{module}:{target}")
    result = loopwise.run(loaded.step, "?", model=loaded.module.offline_model(), store=None)
    assert result.status == status and isinstance(result.output, shape)
    assert doc["output"] == result.to_dict()["output"] == jsonable(result.output)
    if shape is dict:
        assert set(result.output) == {"answer", "last_text", "tool_results"}
        assert result.output["answer"] is None
    if shape is loopwise.HybridOutput:
        assert result.output.results == {} and doc["output"]["results"] == {}
        assert set(doc["output"]) == {"plan", "proposed", "results", "rounds"}


def test_hybrid_results_come_back_in_plan_order_and_the_detail_is_for_people() -> None:
    from loopwise import Hybrid, gates

    done: list[str] = []

    @tool(effect="write", gate=gates.policy(lambda args: True))
    def note(text: str) -> str:
        """Add a note. Call it to record a step."""
        done.append(text)
        return "noted " + text

    @tool(effect="irreversible", gate=gates.human())
    def wire(amount: int) -> str:
        """Wire money. Call it when a payment is due."""
        return "wired"

    def step(i: str, action: str, args: dict[str, Any], after: list[str]) -> dict[str, Any]:
        return {"id": i, "action": action, "args": args, "depends_on": after, "reason": "r"}

    # s2 waits for s3 and s4 for s5: the actions finish s1, s3, s5, s2, s4.
    plan = {
        "steps": [
            step("s1", "note", {"text": "a"}, []),
            step("s2", "note", {"text": "b"}, ["s3"]),
            step("s3", "note", {"text": "c"}, []),
            step("s4", "note", {"text": "d"}, ["s5"]),
            step("s5", "note", {"text": "e"}, []),
        ]
    }
    desk = Hybrid("desk", actions=[note, wire], task="Record.")
    result = loopwise.run(desk, "?", model=ScriptedModel([reply(plan)]), store=None)
    assert result.status == "completed"
    assert list(result.output.results) == ["s1", "s2", "s3", "s4", "s5"]
    assert list(result.to_dict()["output"]["results"]) == ["s1", "s2", "s3", "s4", "s5"]

    mixed = {
        "steps": [step("s1", "wire", {"amount": 5}, []), step("s2", "note", {"text": "x"}, [])]
    }
    denied = loopwise.run(
        desk,
        "?",
        model=ScriptedModel([reply(mixed)]),
        store=None,
        approvals=lambda request: gates.Denied("not today"),
    )
    assert denied.status == "denied"
    assert "do not repeat" not in str(denied.detail)
    assert "step s1 (wire) was denied" in str(denied.detail)
    assert "done: s2 (note)" in str(denied.detail)
