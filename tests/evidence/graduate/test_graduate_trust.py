"""A graduation you can trust: what a person decided is never learned away, generated names
cannot collide, only the agent's own runs are mined, and the module is code a team owns
(it imports only loopwise, passes ruff and mypy --strict, runs with no edit)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise.cli.main import main
from loopwise.running.targets import load_target, model_for
from tests.support import ROOT


def _store(spec: str, inputs: list[Any], store: Path, **options: Any) -> list[loopwise.RunResult]:
    target = load_target(spec)
    model = model_for(target, "scripted")
    return [
        loopwise.run(target.step, given, model=model, store=str(store), spec=spec, **options)
        for given in inputs
    ]


REFUNDS = '''
import json
from pathlib import Path
from loopwise import Agent, Approved, Escalate, policy_then_human, tool
from loopwise.testing import ScriptedModel, calls, reply

LEDGER = Path(__file__).with_name("refunds.txt")

def _small(args):
    return Approved(by="policy") if args["cents"] <= 100 else Escalate("over 100 cents")

@tool
def lookup_order(order_id: str) -> dict:
    """Look up an order by id. Call it first."""
    return {"id": order_id, "total": 150 + int(order_id[-1])}

@tool(effect="irreversible", gate=policy_then_human(_small))
def refund(order_id: str, cents: int) -> str:
    """Refund an order."""
    with LEDGER.open("a") as f:
        f.write(f"{order_id} {cents}\\n")
    return f"refunded {cents}"

refunder = Agent(name="refunder", tools=[lookup_order, refund], max_steps=5)

def _respond(request):
    question = next(m["content"] for m in request.messages if m["role"] == "user")
    results = [m for m in request.messages if m["role"] == "tool"]
    if not results:
        return calls(("lookup_order", {"order_id": question.split()[-1]}, "c1"))
    if len(results) == 1:
        order = json.loads(results[0]["content"])
        return calls(("refund", {"order_id": order["id"], "cents": order["total"]}, "c2"))
    return reply(results[-1]["content"])

def offline_model():
    return ScriptedModel(_respond)
'''


def test_an_amount_a_person_edited_is_never_learned_and_a_person_is_asked_again(
    tmp_path: Path,
) -> None:
    (tmp_path / "refunds.py").write_text(REFUNDS)
    spec, store = f"{tmp_path}/refunds.py:refunder", tmp_path / "runs.db"

    def fifty(request: loopwise.ApprovalRequest) -> loopwise.Edited:
        return loopwise.Edited(args={**request.args, "cents": 50}, by="dana")

    ran = _store(spec, [f"refund O-100{i}" for i in range(8)], store, approvals=fifty)
    assert {r.output for r in ran} == {"refunded 50"}  # every run: a person's 50
    ledger = tmp_path / "refunds.txt"
    ledger.unlink()
    found = loopwise.graduate(spec, runs=str(store), holdout=0, dataset=[], model="scripted")
    assert found.calls == {"edited": 8}
    source = Path(found.out or "").read_text()
    assert "'cents': 50" not in source and "refund.cents = 50" not in source
    assert "A person decided refund calls in the mined runs (edited 8)" in source
    assert "cents (edited by a person) is filled by a structured call" in source
    assert "policy_then_human" in source
    # On a new order the workflow asks for the order's total, as the agent did: a person
    # is asked, and nothing is refunded before they answer.
    flow = load_target(found.workflow or "")
    paused = loopwise.run(
        flow.step, "refund O-1009", model=model_for(flow, "scripted"), store=str(store)
    )
    assert paused.status == "awaiting_approval" and not ledger.exists()
    assert [(p["tool"], p["args"]) for p in paused.pending] == [
        ("refund", {"order_id": "O-1009", "cents": 159})
    ]


HOSTILE_NAMES = '''
from pathlib import Path
from loopwise import Agent, gates, tool
from loopwise.testing import ScriptedModel, calls, reply

LEDGER = Path(__file__).with_name("ledger.txt")

def _reader(name):
    @tool(name=name)
    def read(café: str) -> str:
        """Read something."""
        return name + ":" + café
    return read

READS = ["1lookup", "_1lookup", "lambda", "import", "answer", "json", "call_tools", "begin",
         "AGENT", "Any", "loopwise", "pay_out_2"]

@tool(name="pay-out", effect="irreversible", gate=gates.human())
def pay_out_gated(amount: int) -> str:
    """Pay out, irreversibly."""
    with LEDGER.open("a") as f:
        f.write(f"pay-out {amount}\\n")
    return "paid"

@tool(name="pay_out", effect="write")
def pay_out_plain(amount: int) -> str:
    """Record a payout."""
    with LEDGER.open("a") as f:
        f.write(f"pay_out {amount}\\n")
    return "recorded"

hostile = Agent(name="hostile", tools=[*map(_reader, READS), pay_out_plain, pay_out_gated],
                max_steps=6, max_tool_calls=20)

def _respond(request):
    question = next(m["content"] for m in request.messages if m["role"] == "user")
    done = sum(m["role"] == "tool" for m in request.messages)
    amount = int(question.split()[-1])
    if done == 0:
        return calls(*[(n, {"café": question}, f"r{i}") for i, n in enumerate(READS)])
    if done == len(READS):
        return calls(("pay_out", {"amount": amount}, "p1"))
    if done == len(READS) + 1:
        return calls(("pay-out", {"amount": amount}, "p2"))
    return reply("paid " + str(amount))

def offline_model():
    return ScriptedModel(_respond)
'''


@pytest.mark.slow  # mypy in a subprocess
def test_hostile_tool_names_give_one_node_per_tool_each_calling_its_own_tool(
    tmp_path: Path,
) -> None:
    (tmp_path / "hostile_names.py").write_text(HOSTILE_NAMES)
    spec, store = f"{tmp_path}/hostile_names.py:hostile", tmp_path / "runs.db"
    approve = {"approvals": lambda request: loopwise.Approved(by="test")}
    _store(spec, [f"pay {n}" for n in range(8)], store, **approve)
    ledger = tmp_path / "ledger.txt"
    ledger.unlink()
    found = loopwise.graduate(spec, runs=str(store), holdout=0, dataset=[], model="scripted")
    out = Path(found.out or "")
    _lint(out, tmp_path)
    flow = load_target(found.workflow or "")
    nodes = set(flow.step.steps)  # type: ignore[attr-defined]
    assert len([n for n in nodes if n.startswith("call_")]) == 14  # one node per tool
    assert {"call_pay_out", "call_pay_out_2", "call_pay_out_3"} <= nodes
    assert {"call_1lookup", "call__1lookup", "call_lambda", "call_import"} <= nodes
    model = model_for(flow, "scripted")
    paused = loopwise.run(flow.step, "pay 7", model=model, store=str(store))
    # The gated tool's node asked a person; the ungated write ran once, nobody asked.
    assert paused.status == "awaiting_approval", paused.detail
    assert [p["tool"] for p in paused.pending] == ["pay-out"]
    assert ledger.read_text() == "pay_out 7\n"
    with loopwise.open_store(str(store)) as opened:
        loopwise.approvals.decide(
            opened, paused.run_id, paused.pending[0]["approval_id"], decision="approved", by="d"
        )
    done = loopwise.resume(paused.run_id, step=flow.step, store=str(store), model=model)
    assert done.status == "completed" and done.output == "paid 7"
    assert ledger.read_text() == "pay_out 7\npay-out 7\n"


@pytest.mark.parametrize("name", ["pay_out\n", "pay out", " lookup", "look\tup", "a\x00b"])
def test_a_tool_name_with_whitespace_or_a_control_character_is_refused(name: str) -> None:
    def fn(x: str) -> str:
        """Do it."""
        return x

    with pytest.raises(loopwise.ToolError, match="must be 1-64 letters") as refused:
        loopwise.tool(name=name)(fn)
    assert refused.value.tool == name


def _lint(module: Path, *paths: Path) -> None:
    """The generated module passes ruff (defaults) and mypy --strict, as a user runs them."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    assert ruff is not None
    linted = subprocess.run(
        [ruff, "check", "--isolated", "--select", "E4,E7,E9,F,W,B,UP,SIM", str(module)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr
    src = Path(loopwise.__file__).resolve().parents[1]
    env = {**os.environ, "MYPYPATH": os.pathsep.join(str(p) for p in (src, *paths))}
    typed = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
         "--no-incremental", str(module)],
        capture_output=True, text=True, check=False, env=env, cwd=module.parent,
    )  # fmt: skip
    assert typed.returncode == 0, typed.stdout + typed.stderr


BOT = '''
from loopwise import Agent, tool
from loopwise.testing import ScriptedModel, calls, reply

@tool
def {tool}(name: str) -> str:
    """Look a name up."""
    return "seen " + name

bot = Agent(name="bot", tools=[{tool}], max_steps=4)

def _respond(request):
    question = next(m["content"] for m in request.messages if m["role"] == "user")
    if not any(m["role"] == "tool" for m in request.messages):
        return calls(("{tool}", {{"name": question.split()[-1]}}, "c1"))
    return reply("done " + question.split()[-1])

def offline_model():
    return ScriptedModel(_respond)
'''


def test_only_this_agents_own_runs_are_mined_and_runs_n_counts_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for folder, tool in (("a", "ask_a"), ("b", "ask_b")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "agent.py").write_text(BOT.format(tool=tool))
    store = tmp_path / "runs.db"
    _store("a/agent.py:bot", [f"who is a{i}" for i in range(10)], store)
    _store("./a/agent.py:bot", [f"who is z{i}" for i in range(2)], store)  # the same target
    _store("b/agent.py:bot", [f"who is b{i}" for i in range(30)], store)  # same name, newer
    (tmp_path / "cases.jsonl").write_text(
        "".join(json.dumps({"input": f"who is e{i}", "expected": "x"}) + "\n" for i in range(5))
    )
    assert main(["eval", "a/agent.py:bot", "--dataset", "cases.jsonl", "--model", "scripted",
                 "--store", str(store), "--json"]) in (0, 1)  # fmt: skip
    capsys.readouterr()
    argv = ["graduate", "a/agent.py:bot", "--store", str(store), "--model", "scripted", "--json"]
    main([*argv, "--runs", "8", "--holdout", "0", "--dataset", "cases.jsonl"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["mined"] == 8 and doc["verdict"] == "steps_known"  # this target's newest 8
    source = Path(doc["out"]).read_text()
    assert "ask_a" in source and "ask_b" not in source
    main([*argv, "--force", "--holdout", "0", "--dataset", "cases.jsonl"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["mined"] == 12  # a's 12, not b's 30, not the eval's 5


MIXED = '''
from loopwise import Agent, Approved, Denied, policy, tool
from loopwise.testing import ScriptedModel, calls, reply

@tool
def lookup(name: str) -> dict:
    """Look a name up."""
    if name.startswith("bad"):
        raise LookupError("no such name " + name)
    return {"name": name}

@tool(effect="write", gate=policy(lambda a: Denied("not nines") if a["name"].endswith("9")
                                  else Approved(by="policy")))
def note(name: str) -> str:
    """Note it down."""
    return "noted " + name

mixed = Agent(name="mixed", tools=[lookup, note], max_steps=5)

def _respond(request):
    question = next(m["content"] for m in request.messages if m["role"] == "user")
    done = [m for m in request.messages if m["role"] == "tool"]
    name = question.split()[-1]
    if question.startswith("hi"):
        return reply("hello")
    if not done:
        return calls(("lookup", {"name": name}, "c1"))
    if len(done) == 1 and not done[0]["content"].startswith("ERROR"):
        return calls(("note", {"name": name}, "c2"))
    return reply("done " + name)

def offline_model():
    return ScriptedModel(_respond)
'''


def test_denied_failed_and_toolless_runs_are_counted_and_handled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mixed.py").write_text(MIXED)
    spec, store = f"{tmp_path}/mixed.py:mixed", tmp_path / "runs.db"
    inputs = [f"note n{i}" for i in range(20)] + ["note n29", "note x39"]  # n9 ... 4 denied
    inputs += [f"hi there {i}" for i in range(5)] + ["note bad1", "note bad2"]  # two failed
    assert {r.status for r in _store(spec, inputs, store)} == {"completed"}
    argv = ["graduate", spec, "--store", str(store), "--model", "scripted", "--holdout", "0"]
    (tmp_path / "sandbox.py").write_text("def notes():\n    return {}\n")
    argv += ["--deps", f"{tmp_path}/sandbox.py:notes"]  # `note` writes: the eval's deps
    code = main([*argv, "--dataset", str(_cases(tmp_path, ["hi there", "note n3"]))])
    out, err = capsys.readouterr()
    assert code in (0, 1, 3) and "Traceback" not in out + err, out + err
    assert "4 with a call denied, 2 with a call that failed" in out
    assert "2 mined run(s) took other paths" in out  # the two failed lookups
    assert "(no tool calls)" in out
    assert "4 run(s) on these paths not learned from (a denied or failed call)" in out
    flow = load_target(f"{tmp_path}/mixed_workflow.py:mixed_workflow")
    model = model_for(flow, "scripted")
    toolless = loopwise.run(flow.step, "hi again", model=model)
    assert toolless.status == "completed" and toolless.output == "hello"
    assert toolless.usage.tool_calls == 0
    noted = loopwise.run(flow.step, "note n4", model=model)
    assert noted.status == "completed" and noted.output == "done n4"


def _cases(folder: Path, inputs: list[str]) -> Path:
    path = folder / "cases.jsonl"
    path.write_text("".join(json.dumps({"input": i}) + "\n" for i in inputs))
    return path


@pytest.mark.slow  # mypy in a subprocess
def test_the_starter_graduates_into_a_module_that_runs_and_type_checks_unedited(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopwise.evidence.scaffold import init_project

    init_project("agent", tmp_path)
    monkeypatch.chdir(tmp_path)
    questions = [f"Why did customer C-100{1 + i % 5}'s orders fail? ({i})" for i in range(20)]
    target = _graduated_starter("orders_agent.py:investigate", questions, capsys)
    ran = ["run", target, "--model", "scripted", "--store", "graduate.db", "--json"]
    assert main([*ran, "--input-text", "Why did customer C-1003's orders fail?"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "completed" and doc["output"]["failed_orders"] == ["O-2005", "O-2006"]
    cases = ["eval", target, "--dataset", "orders_cases.jsonl", "--model", "scripted", "--json"]
    # An eval of it too, with the agent's deps (no --deps): the cases its runs showed
    # complete; an order named without its customer, or an unknown customer, no run showed.
    assert main(cases) in (0, 1)
    evaluated = json.loads(capsys.readouterr().out)["targets"][0]
    assert evaluated["status_counts"]["completed"] >= 8, evaluated["status_counts"]
    source = (tmp_path / "orders_agent_workflow.py").read_text()
    assert "from orders_agent import make_deps" in source  # `run` found the agent's deps
    imported = [
        line for line in source.splitlines() if line.lstrip().startswith(("import", "from"))
    ]
    assert all(
        line.split()[1].split(".")[0] in ("__future__", "typing", "loopwise", "orders_agent")
        for line in imported
    ), imported
    _lint(tmp_path / "orders_agent_workflow.py", tmp_path)


@pytest.mark.slow  # mypy in a subprocess
def test_the_compare_starters_agent_graduates_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopwise.evidence.scaffold import init_project

    init_project("compare", tmp_path)
    monkeypatch.chdir(tmp_path)
    # The generated module imports the agent by its module name; in one pytest process the
    # checkout's agents/triage_agent.py may already hold that name (a fresh CLI has none).
    # setitem then delitem: when the test ends, sys.modules holds again exactly what it did
    # (the graduated module's own triage_agent must not stay for later tests).
    monkeypatch.setitem(sys.modules, "triage_agent", types.ModuleType("triage_agent"))
    monkeypatch.delitem(sys.modules, "triage_agent")
    monkeypatch.syspath_prepend(str(tmp_path))
    tickets = [json.loads(line)["input"] for line in Path("tickets.jsonl").read_text().splitlines()]
    target = _graduated_starter("triage_agent.py:triage_agent", tickets[:20], capsys)
    ticket = json.dumps("Charged twice\n\nPlease refund the duplicate of order O-12345.")
    assert main(["run", target, "--model", "scripted", "--json", "--input", ticket]) == 0
    assert json.loads(capsys.readouterr().out)["output"]["queue"] == "billing"
    _lint(tmp_path / "triage_agent_workflow.py", tmp_path)


def _graduated_starter(spec: str, inputs: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the starter's agent on ``inputs``, graduate it, check it: its workflow's target."""
    for given in inputs:
        assert main(["run", spec, "--model", "scripted", "--store", "graduate.db",
                     "--input", json.dumps(given)]) == 0  # fmt: skip
    main(["graduate", spec, "--store", "graduate.db", "--model", "scripted"])
    assert "wrote " in capsys.readouterr().out
    module, _, name = spec.partition(":")
    target = f"{module.removesuffix('.py')}_workflow.py:{name}_workflow"
    assert main(["check", target]) == 0
    capsys.readouterr()
    return target


@pytest.mark.slow  # mypy in a subprocess
def test_the_canonical_agents_graduated_module_type_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "agents"))
    spec = f"{ROOT}/agents/order_investigation.py:investigate"
    store = tmp_path / "runs.db"
    questions = [f"Why did the last orders of C-{1001 + i % 12} fail?" for i in range(24)]
    _store(spec, questions, store)
    out = tmp_path / "investigate_workflow.py"
    found = loopwise.graduate(spec, runs=str(store), out=out, holdout=0, dataset=[])
    assert found.out == str(out) and "from order_investigation import investigate" in (
        out.read_text()
    )
    _lint(out, ROOT / "agents")


MODES = '''
from loopwise import Agent, tool
from loopwise.testing import ScriptedModel, calls, reply

@tool
def choose(mode: str, factor: float) -> str:
    """Choose a mode."""
    return "mode " + mode

picker = Agent(name="picker", tools=[choose], max_steps=4)

def _respond(request):
    words = next(m["content"] for m in request.messages if m["role"] == "user").split()
    done = [m for m in request.messages if m["role"] == "tool"]
    if not done:
        return calls(("choose", {"mode": words[1], "factor": float(words[2])}, "c1"))
    return reply(done[-1]["content"])

def offline_model():
    return ScriptedModel(_respond)
'''


def test_a_second_graduation_in_one_process_evaluates_the_new_module(tmp_path: Path) -> None:
    (tmp_path / "modes.py").write_text(MODES)
    spec, out = f"{tmp_path}/modes.py:picker", tmp_path / "flow.py"
    first, second = tmp_path / "first.db", tmp_path / "second.db"
    _store(spec, [f"use fast 1 n{i}" for i in range(6)], first)
    _store(spec, [f"use slow 1 n{i}" for i in range(6)], second)
    one = loopwise.graduate(spec, runs=str(first), out=out, holdout=0, dataset=[])
    flow = load_target(one.workflow or "")
    assert loopwise.run(flow.step, "x", model=model_for(flow, "scripted")).output == "mode fast"
    two = loopwise.graduate(spec, runs=str(second), out=out, holdout=0, dataset=[], force=True)
    flow = load_target(two.workflow or "")
    assert loopwise.run(flow.step, "x", model=model_for(flow, "scripted")).output == "mode slow"


def test_a_learned_nan_is_refused_naming_it_and_leaves_no_file(tmp_path: Path) -> None:
    (tmp_path / "modes.py").write_text(MODES)
    spec, store, out = f"{tmp_path}/modes.py:picker", tmp_path / "runs.db", tmp_path / "flow.py"
    _store(spec, [f"use fast 1 n{i}" for i in range(6)], store)
    runs = _runs(store)  # a NaN argument never runs (not JSON): runs given as data can hold one
    for run in runs:
        for event in run["events"]:
            if event["type"] == "tool_call":
                event["data"]["args"]["factor"] = float("nan")
    with pytest.raises(loopwise.ConfigError, match=r"choose\.factor is nan, not a finite number"):
        loopwise.graduate(spec, runs=runs, out=out, holdout=0, dataset=[])
    assert not out.exists()
    out.write_text("# mine\n")
    with pytest.raises(loopwise.ConfigError):
        loopwise.graduate(spec, runs=runs, out=out, holdout=0, dataset=[], force=True)
    assert out.read_text() == "# mine\n"  # a failed generation leaves the old file whole


def test_runs_whose_every_call_failed_keep_the_agent_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "modes.py").write_text(MODES)
    spec, store = f"{tmp_path}/modes.py:picker", tmp_path / "runs.db"
    _store(spec, [f"use fast nan n{i}" for i in range(6)], store)  # NaN: every call refused
    found = loopwise.graduate(spec, runs=str(store), holdout=0, dataset=[])
    assert found.out is None and found.calls == {"failed": 6}
    assert "denied or failed call" in found.reason


def _runs(store: Path) -> list[dict[str, Any]]:
    with loopwise.open_store(str(store)) as opened:
        return [
            {"run_id": r.run_id, "status": r.status, "input": r.input, "output": r.output,
             "events": [e.to_dict() for e in opened.events(r.run_id)]}
            for r in reversed(opened.list_runs(limit=100))
        ]  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("tool", "chooser", "call the tool 'chooser', which the agent no longer has"),
        ("arg", "mo\x00de", "with an argument 'mo\\x00de', which it does not take"),
    ],
)
def test_renamed_tools_and_unloadable_argument_names_are_refused_in_one_line(
    tmp_path: Path, field: str, value: str, said: str
) -> None:
    (tmp_path / "modes.py").write_text(MODES)
    spec, store, out = f"{tmp_path}/modes.py:picker", tmp_path / "runs.db", tmp_path / "flow.py"
    _store(spec, [f"use fast 1 n{i}" for i in range(6)], store)
    runs = _runs(store)
    for run in runs:
        for event in run["events"]:
            data = event["data"]
            if field == "tool" and data.get("tool") == "choose":
                data["tool"] = value
            if field == "arg" and event["type"] == "tool_call":
                data["args"] = {value if k == "mode" else k: v for k, v in data["args"].items()}
    with pytest.raises(loopwise.ConfigError) as refused:
        loopwise.graduate(spec, runs=runs, out=out, holdout=0, dataset=[])
    assert said in str(refused.value) and "\n" not in str(refused.value)
    assert not out.exists()


def test_a_workflow_whose_agent_lost_a_tool_says_so_when_it_loads() -> None:
    agent = loopwise.Agent(name="a", tools=[], max_steps=2)
    with pytest.raises(loopwise.ConfigError, match="calls its tool 'refund', which the agent no"):
        loopwise.Graduated(agent, tools=["refund"])


def test_an_agent_file_python_cannot_import_by_name_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "my-agent.py").write_text(MODES)
    spec, store = f"{tmp_path}/my-agent.py:picker", tmp_path / "runs.db"
    _store(spec, [f"use fast 1 n{i}" for i in range(6)], store)
    code = main(["graduate", spec, "--store", str(store), "--holdout", "0"])
    err = capsys.readouterr().err
    assert code == 2 and "'my-agent' is not one Python can import" in err
    assert len(err.strip().splitlines()) == 1 and not list(tmp_path.glob("*_workflow.py"))


def test_a_spec_without_a_name_graduates_the_modules_agent(tmp_path: Path) -> None:
    (tmp_path / "modes.py").write_text(MODES)
    store = tmp_path / "runs.db"
    _store(f"{tmp_path}/modes.py:picker", [f"use fast 1 n{i}" for i in range(6)], store)
    found = loopwise.graduate(f"{tmp_path}/modes.py", runs=str(store), holdout=0, dataset=[])
    assert (
        found.mined == 6
        and "from modes import picker as _agent" in Path(found.out or "").read_text()
    )
    flow = load_target(found.workflow or "")
    assert loopwise.run(flow.step, "x", model=model_for(flow, "scripted")).output == "mode fast"


def test_graduated_keeps_the_agents_limit_on_calls_in_one_turn() -> None:
    @loopwise.tool
    def look(n: int) -> int:
        """Look."""
        return n

    agent = loopwise.Agent(name="looker", tools=[look], max_steps=3, max_tool_calls=2)
    kit = loopwise.Graduated(agent, tools=["look"])
    assert kit.tool("look") is agent.tool_map["look"]  # the agent's very tool object

    @loopwise.step
    async def many(question: Any, ctx: loopwise.Context) -> dict[str, Any]:
        state = kit.start(question)
        state = await kit.call(ctx, state, "look", [{"n": 1}, {"n": 2}])
        assert kit.result(state, "look") == 2 and json.loads(kit.ask(state, "answer"))["calls"]
        return await kit.call(ctx, state, "look", [{"n": i} for i in range(3)])

    ended = loopwise.run(many, "q")
    assert ended.status == "error" and "more than the agent's max_tool_calls (2)" in str(
        ended.detail
    )
    with pytest.raises(LookupError, match="no result of 'other' yet"):
        kit.result(kit.start("q"), "other")


def test_an_evaluation_without_a_sandbox_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mixed.py").write_text(MIXED)
    spec, store = f"{tmp_path}/mixed.py:mixed", tmp_path / "runs.db"
    _store(spec, [f"note n{i}" for i in range(8)], store)
    cases = _cases(tmp_path, ["note n3"])
    code = main(["graduate", spec, "--store", str(store), "--model", "scripted",
                 "--dataset", str(cases)])  # fmt: skip
    assert code == 2 and "no sandbox" in capsys.readouterr().err
    assert not (tmp_path / "mixed_workflow.py").exists()  # so a second try needs no --force


GATED_NOTES = """
import contextlib
import os
import re
import tempfile
from dataclasses import dataclass
from typing import Any

from loopwise import Agent, Context, ModelRequest, gates, tool
from loopwise.testing import ScriptedAgent

REAL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "real_ledger.txt")


@dataclass
class Ledger:
    path: str

    def write(self, line: str) -> None:
        with open(self.path, "a") as f:
            f.write(line + "\\n")


def make_deps() -> Ledger:
    return Ledger(REAL)


@contextlib.contextmanager
def make_eval_deps():
    with tempfile.TemporaryDirectory() as d:
        yield Ledger(os.path.join(d, "sandbox.txt"))


@tool
def lookup(customer_id: str) -> dict[str, Any]:
    '''Look up a customer. Use it first.'''
    return {"id": customer_id, "owed": 1000}


@tool(effect="irreversible", gate=gates.human())
def refund(customer_id: str, cents: int, ctx: Context[Ledger]) -> str:
    '''Refund a customer. Use it when they are owed money.'''
    ctx.deps.write(f"refund {customer_id} {cents}")
    return "refunded"


agent = Agent(name="agent", instructions="Help.", tools=[lookup, refund], max_steps=6)


def _who(r: ModelRequest) -> dict[str, str] | None:
    m = re.search(r"C-\\d{4}", r.user_text())
    return {"customer_id": m.group()} if m else None


offline_model = ScriptedAgent(
    ("lookup", _who),
    ("refund", lambda r: {**(_who(r) or {}), "cents": r.last_result("lookup").value["owed"]}),
    answer=lambda r: "done",
)
"""


def test_graduate_says_when_the_eval_gate_rule_stopped_the_workflow_and_approve_compares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Review defect: an agent whose calls a person approved always read "keep the agent:
    # the workflow does worse" — its workflow's runs were stopped by the eval's deny rule.
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "notes_agent.py").write_text(GATED_NOTES)
    monkeypatch.setitem(sys.modules, "notes_agent", types.ModuleType("notes_agent"))
    monkeypatch.delitem(sys.modules, "notes_agent")
    from loopwise.running.targets import load_target

    agent = load_target("notes_agent.py:agent")
    for i in range(40):
        result = loopwise.run(
            agent.step, f"Ticket {i}: help C-100{i % 5 + 1}", model=agent.module.offline_model,
            deps=agent.module.make_deps(), store="g.db", spec=agent.spec,
            approvals=lambda request: True,
        )  # fmt: skip
        assert result.status == "completed", result.detail
    before = (tmp_path / "real_ledger.txt").read_text()
    argv = ["graduate", "notes_agent.py:agent", "--store", "g.db", "--model", "scripted"]
    main([*argv, "--json"])
    denied = json.loads(capsys.readouterr().out)
    assert "stopped at a gate by the eval's rule, --gates deny" in denied["reason"]
    main([*argv, "--gates", "approve", "--force", "--json"])
    approved = json.loads(capsys.readouterr().out)
    assert "stopped at a gate" not in approved["reason"]
    assert approved["recommendation"] != "keep"  # compared as they would run: not "worse"
    assert (tmp_path / "real_ledger.txt").read_text() == before  # the sandbox took them
