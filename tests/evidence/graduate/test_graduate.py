"""`loopwise graduate`: from an agent's stored runs to a generated, gated workflow, evaluated
against the agent with a paired comparison."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise.cli.main import main
from loopwise.running.targets import load_target, model_for
from tests.support import ROOT

INVESTIGATE = f"{ROOT}/agents/order_investigation.py:investigate"
WORDS = [
    "Why did the last orders of {c} fail?",
    "What went wrong with {c}'s recent orders?",
    "Customer {c}: check the last three orders",
]


def _store_runs(spec: str, inputs: list[Any], store: Path) -> None:
    target = load_target(spec)
    model = model_for(target, "scripted")
    for given in inputs:
        result = loopwise.run(target.step, given, model=model, store=str(store), spec=spec)
        assert result.status == "completed", result.detail


def _questions(n: int) -> list[str]:
    pairs = [(f"C-{1001 + i % 12}", WORDS[(i // 12) % 3]) for i in range(n)]
    random.Random(7).shuffle(pairs)
    return [w.format(c=c) for c, w in pairs]


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, Any]:
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def test_graduate_the_order_investigation_agent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, out = tmp_path / "runs.db", tmp_path / "flow" / "investigate_workflow.py"
    # Written away from the agent, the module imports it by name: its folder on the path.
    monkeypatch.syspath_prepend(str(ROOT / "agents"))
    _store_runs(INVESTIGATE, _questions(36), store)
    argv = ["graduate", INVESTIGATE, "--store", str(store), "--out", str(out)]
    code, doc = _json(
        capsys, [*argv, "--model", "scripted", "--json", "--report", str(tmp_path / "g.html")]
    )
    # ~9 held-out inputs agree with the agent: too few to bound disagreement under 5%
    assert code == 3, doc["reason"]
    assert doc["verdict"] == "steps_known" and doc["mined"] + doc["held_out"] == 36
    assert doc["held_out"] >= 5 and "references are the agent's own stored answers" in doc["cases"]
    agent, flow = doc["targets"]["agent"], doc["targets"]["workflow"]
    assert flow["completed_rate"] == 1.0 and flow["correct_rate"] == 1.0
    assert flow["model_calls_mean"] < agent["model_calls_mean"]
    paired = doc["paired"]
    assert paired["cases"] == doc["held_out"] and paired["low"] is not None
    assert doc["recommendation"] == "not_enough_evidence"
    assert "about 45 agreeing cases would bound it under 5%" in doc["reason"]
    assert doc["outside_mined_paths"] == 0.0 and doc["check"] == []
    assert doc["outside_written_paths"] == 0 and doc["calls"] == {}
    source = out.read_text()
    # a binding learned from data flow, and a branch condition learned from results
    assert "list_orders.customer_id = lookup_customer['id']" in source
    assert "'customer_id': AGENT.result(state, 'lookup_customer')['id']" in source
    assert "when any item of list_orders has status among" in source
    assert "lookup_customer.customer_id" in source.split("Filled by a structured call")[1]
    assert "html" in (tmp_path / "g.html").read_text()[:200].lower()
    assert "investigate_workflow" in (tmp_path / "g.html").read_text()
    # The module imports, passes check and runs offline on a held-out kind of input.
    spec = doc["workflow"]
    assert main(["check", spec]) == 0
    capsys.readouterr()
    code, ran = _json(
        capsys, ["run", spec, "--model", "scripted", "--json", "--store", str(store),
                 "--input", json.dumps("Why did the last orders of C-1004 fail?")],
    )  # fmt: skip
    assert code == 0 and ran["status"] == "completed"
    assert "O-1017 payment_failed" in ran["output"] and ran["usage"]["model_calls"] == 2
    # It refuses to overwrite what it wrote.
    assert main([*argv, "--model", "scripted"]) == 2
    assert "pass --force" in capsys.readouterr().err


SCATTERED = '''
import hashlib
from loopwise import Agent, tool
from loopwise.testing import ScriptedModel, calls, reply

def _make(name):
    @tool(name=name)
    def fn(x: str) -> str:
        """Look something up. Call it when the question needs it."""
        return name + ":" + x
    return fn

TOOLS = [_make(n) for n in ("alpha", "beta", "gamma", "delta", "epsilon")]
scattered = Agent(name="scattered", tools=TOOLS, max_steps=6)

def _respond(request):
    question = next(m["content"] for m in request.messages if m["role"] == "user")
    done = sum(m["role"] == "tool" for m in request.messages)
    seed = int(hashlib.sha256(question.encode()).hexdigest(), 16)
    order = [TOOLS[(seed >> (4 * i)) % 5].name for i in range(3)]
    if done >= 3:
        return reply("done")
    return calls((order[done], {"x": f"{question} {done}"}, f"c{done}"))

def offline_model():
    return ScriptedModel(_respond)
'''


def test_an_agent_whose_steps_scatter_is_not_graduated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "scattered.py").write_text(SCATTERED)
    spec = f"{tmp_path}/scattered.py:scattered"
    store = tmp_path / "runs.db"
    _store_runs(spec, [f"question number {i}" for i in range(30)], store)
    code = main(["graduate", spec, "--store", str(store), "--model", "scripted"])
    out = capsys.readouterr().out
    assert code == 1
    assert "steps are not known" in out and "distinct paths" in out and "of 22 runs" in out
    assert not (tmp_path / "scattered_workflow.py").exists()


GATED = '''
from pathlib import Path
from loopwise import Agent, tool
from loopwise import gates
from loopwise.testing import ScriptedModel, calls, reply

LEDGER = Path(__file__).with_name("refunds.txt")

@tool
def lookup_order(order_id: str) -> dict:
    """Look up an order by id. Call it first."""
    return {"id": order_id, "total": 10 + int(order_id[-1])}

@tool(effect="irreversible", gate=gates.human())
def refund(order_id: str, amount: int) -> str:
    """Refund an order. Call it after looking the order up."""
    with LEDGER.open("a") as f:
        f.write(f"{order_id} {amount}\\n")
    return "refunded"

refunder = Agent(name="refunder", tools=[lookup_order, refund], max_steps=5)

def _respond(request):
    question = next(m["content"] for m in request.messages if m["role"] == "user")
    results = [m for m in request.messages if m["role"] == "tool"]
    if not results:
        return calls(("lookup_order", {"order_id": question.split()[-1]}, "c1"))
    if len(results) == 1:
        import json
        order = json.loads(results[0]["content"])
        return calls(("refund", {"order_id": order["id"], "amount": order["total"]}, "c2"))
    return reply("refunded " + question.split()[-1])

def offline_model():
    return ScriptedModel(_respond)
'''


def test_a_human_gated_tool_pauses_the_graduated_workflow_and_runs_once(tmp_path: Path) -> None:
    (tmp_path / "refunder.py").write_text(GATED)
    spec = f"{tmp_path}/refunder.py:refunder"
    store = str(tmp_path / "runs.db")
    target = load_target(spec)
    for i in range(8):
        result = loopwise.run(
            target.step,
            f"refund order O-100{i}",
            model=model_for(target, "scripted"),
            store=store,
            spec=spec,
            approvals=lambda request: loopwise.Approved(by="test"),
        )
        assert result.status == "completed"
    ledger = tmp_path / "refunds.txt"
    ledger.unlink()
    found = loopwise.graduate(spec, runs=store, holdout=0, dataset=[], model="scripted")
    assert found.out == str(tmp_path / "refunder_workflow.py")  # beside the agent
    source = Path(found.out).read_text()
    assert "refund.amount = lookup_order['total']" in source  # learned, not asked
    flow = load_target(found.workflow or "")
    assert not [f for f in loopwise.check(flow.step) if f.level == "error"]
    model = model_for(flow, "scripted")
    paused = loopwise.run(flow.step, "refund order O-1007", model=model, store=store)
    assert paused.status == "awaiting_approval" and not ledger.exists()
    assert [p["tool"] for p in paused.pending] == ["refund"]
    assert paused.pending[0]["args"] == {"order_id": "O-1007", "amount": 17}
    with loopwise.open_store(store) as opened:
        loopwise.approvals.decide(
            opened, paused.run_id, paused.pending[0]["approval_id"], decision="approved", by="dana"
        )
    done = loopwise.resume(paused.run_id, step=flow.step, store=store, model=model)
    assert done.status == "completed" and done.output == "refunded O-1007"
    assert ledger.read_text() == "O-1007 17\n"  # once


ROUTED = '''
from loopwise import Agent, tool
from loopwise.testing import ScriptedModel, calls, reply

@tool
def lookup(name: str) -> dict:
    """Look a name up. Call it first."""
    return {"name": name, "kind": "person"}

@tool
def escalate(name: str) -> str:
    """Escalate. Call it when the question is urgent."""
    return "escalated " + name

@tool
def file_away(name: str) -> str:
    """File the question away. Call it when it is not urgent."""
    return "filed " + name

router = Agent(name="router", tools=[lookup, escalate, file_away], max_steps=5)

def _respond(request):
    question = next(m["content"] for m in request.messages if m["role"] == "user")
    done = [m for m in request.messages if m["role"] == "tool"]
    name = question.split()[-1]
    if not done:
        return calls(("lookup", {"name": name}, "c1"))
    if len(done) == 1:
        tool = "escalate" if "urgent" in question else "file_away"
        return calls((tool, {"name": name}, "c2"))
    return reply(done[-1]["content"])

def offline_model():
    return ScriptedModel(_respond)
'''


def test_when_no_rule_separates_the_paths_a_routing_call_decides(tmp_path: Path) -> None:
    (tmp_path / "router.py").write_text(ROUTED)
    spec = f"{tmp_path}/router.py:router"
    store = tmp_path / "runs.db"
    names = [f"n{i}" for i in range(24)]
    _store_runs(
        spec,
        [f"{'urgent' if i % 2 else 'calm'} question about {n}" for i, n in enumerate(names)],
        store,
    )
    found = loopwise.graduate(spec, runs=str(store), model="scripted")
    source = Path(found.out or "").read_text()
    assert "no rule separates them" in source and "AGENT.router(" in source
    assert (
        "Literal['escalate', 'file_away']" in source or "Literal['file_away', 'escalate']" in source
    )
    # fill lookup's argument, route, answer: the agent's own three calls, so no saving
    assert not found.graduate and found.report is not None
    _, flow_runs = found.report.targets
    assert flow_runs.metrics["model_calls"].stat("mean") == 3
    assert found.paired is not None and found.paired.mean == 0
    flow = load_target(found.workflow or "")
    result = loopwise.run(
        flow.step, "urgent question about zed", model=model_for(flow, "scripted"), store=None
    )
    assert result.status == "completed" and result.output == "escalated zed"


def test_decide_and_analyze_point_at_graduate(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["decide", "--steps-known", "no", "--wrong-step-cost", "cheap"]) == 0
    assert "loopwise graduate agents/order_investigation.py:investigate" in capsys.readouterr().out
    runs = [
        {"run_id": str(i), "status": "completed", "events": [
            {"type": "model_call", "data": {}},
            {"type": "tool_call", "data": {"tool": "a", "call_id": "1", "args": {}}},
        ]}
        for i in range(6)
    ]  # fmt: skip
    assert "`loopwise graduate` writes these paths" in loopwise.analyze(runs).message


@pytest.mark.slow
def test_the_guides_walk_runs_as_printed_after_init_agent(tmp_path: Path) -> None:
    import os
    import re
    import subprocess
    import sys

    guide = (ROOT / "docs" / "guides" / "deciding.md").read_text()
    (block,) = [b for b in re.findall(r"```sh\n(.*?)```", guide, re.S) if "loopwise graduate" in b]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPWISE_", "OPENAI_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    done = subprocess.run(  # an empty folder, the starter, then the guide's block as printed
        ["bash", "-e", "-c", "loopwise init agent > /dev/null\n" + block],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "graduate: 0 disagreements in " in done.stdout
    assert "ok (0 error(s)" in done.stdout and "run " in done.stdout
    assert '"O-2008"' in done.stdout and "do_not_honor" in done.stdout
    assert (tmp_path / "graduate.html").exists()


HOSTILE = '''
from loopwise import Agent, tool
from loopwise.testing import ScriptedModel, calls, reply

EVIL = 'x"""\\nopen(__file__ + ".pwned", "w").close()\\n"""'

@tool
def lookup(name: str) -> dict:
    """Look a name up. Call it first."""
    return {"name": name, "kind": EVIL if name.startswith("u") else "calm"}

@tool
def escalate(name: str) -> str:
    """Escalate. Call it when the kind says so."""
    return "escalated " + name

@tool
def file_away(name: str) -> str:
    """File the question away. Call it otherwise."""
    return "filed " + name

hostile = Agent(name="hostile", tools=[lookup, escalate, file_away], max_steps=5)

def _respond(request):
    import json
    question = next(m["content"] for m in request.messages if m["role"] == "user")
    done = [m for m in request.messages if m["role"] == "tool"]
    name = question.split()[-1]
    if not done:
        return calls(("lookup", {"name": name}, "c1"))
    if len(done) == 1:
        kind = json.loads(done[0]["content"])["kind"]
        return calls(("escalate" if kind != "calm" else "file_away", {"name": name}, "c2"))
    return reply(done[-1]["content"])

def offline_model():
    return ScriptedModel(_respond)
'''


def test_values_from_tool_results_cannot_become_code_in_the_module(tmp_path: Path) -> None:
    (tmp_path / "hostile.py").write_text(HOSTILE)
    spec = f"{tmp_path}/hostile.py:hostile"
    store = tmp_path / "runs.db"
    _store_runs(spec, [f"question about {'u' if i % 3 == 0 else 'c'}{i}" for i in range(24)], store)
    found = loopwise.graduate(spec, runs=str(store), model="scripted")
    source = Path(found.out or "").read_text()
    assert "when lookup['kind'] is one of" in source  # the rule was learned on that value
    flow = load_target(found.workflow or "")  # imports: the docstring held
    assert not list(tmp_path.glob("*.pwned"))
    result = loopwise.run(flow.step, "question about u99", model=model_for(flow, "scripted"))
    assert result.status == "completed" and result.output == "escalated u99"


TAINTED = '''
from loopwise import Agent, tool
from loopwise.testing import ScriptedModel, calls, reply

@tool(untrusted_output=True)
def fetch(url: str) -> str:
    """Fetch a page. Call it first."""
    return "page text of " + url

@tool(effect="write")
def note(text: str) -> str:
    """Write a note. Call it after fetching."""
    return "noted"

reader = Agent(name="reader", tools=[fetch, note], max_steps=5)

def _respond(request):
    question = next(m["content"] for m in request.messages if m["role"] == "user")
    done = [m for m in request.messages if m["role"] == "tool"]
    if not done:
        return calls(("fetch", {"url": question.split()[-1]}, "c1"))
    if len(done) == 1:
        return calls(("note", {"text": done[0]["content"]}, "c2"))
    return reply("done")

def offline_model():
    return ScriptedModel(_respond)
'''


def test_a_write_after_untrusted_output_still_waits_for_a_person(tmp_path: Path) -> None:
    (tmp_path / "reader.py").write_text(TAINTED)
    spec = f"{tmp_path}/reader.py:reader"
    store = str(tmp_path / "runs.db")
    target = load_target(spec)
    for i in range(8):
        result = loopwise.run(
            target.step, f"read https://example.com/{i}", model=model_for(target, "scripted"),
            store=store, spec=spec, approvals=lambda request: loopwise.Approved(by="test"),
        )  # fmt: skip
        assert result.status == "completed"
    found = loopwise.graduate(spec, runs=store, holdout=0, dataset=[], model="scripted")
    assert "note.text = fetch" in Path(found.out or "").read_text()  # bound, no model call
    flow = load_target(found.workflow or "")
    paused = loopwise.run(
        flow.step, "read https://example.com/x", model=model_for(flow, "scripted"), store=store
    )
    assert paused.status == "awaiting_approval"
    assert paused.pending[0]["tool"] == "note" and paused.pending[0]["tainted_by"]
