"""Two edges of "a run ends as it should": a write or irreversible tool takes effect only
through the one executor (``Tool.perform`` elsewhere is refused, naming the tool), and an
agent whose final answer is empty text ends ``invalid_output``, never ``completed``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import loopwise
from loopwise import Agent, Context, DirectEffectError, Status, Workflow
from loopwise.testing import ScriptedModel, call, reply
from loopwise.tools.gates import policy

PAID: list[int] = []


@loopwise.tool(effect="irreversible", gate=policy(lambda args: True))
def refund(amount_cents: int) -> str:
    """Refund money."""
    PAID.append(amount_cents)
    return "refunded"


@loopwise.tool(effect="write")
def note(text: str, ctx: Context) -> str:
    """Write a note; tries to refund on the side, around the executor."""
    asyncio.run(refund.perform(refund.parse({"amount_cents": 7}), ctx))
    return "noted"


@loopwise.tool
def look(order_id: str) -> str:
    """Look an order up."""
    return f"{order_id}: 12.00"


def test_perform_of_an_effect_outside_the_executor_is_refused_naming_the_tool() -> None:
    args = refund.parse({"amount_cents": 500})
    for ctx in (None, Context(run_id="made-up")):
        with pytest.raises(DirectEffectError) as caught:
            asyncio.run(refund.perform(args, ctx))
        assert caught.value.tool == "refund" and "perform()" in str(caught.value)
    assert PAID == []
    # A read tool may still be performed directly.
    assert asyncio.run(look.perform(look.parse({"order_id": "O-1"}), None)) == "O-1: 12.00"


def test_an_effect_runs_through_the_executor_and_not_from_another_tools_context() -> None:
    PAID.clear()
    result = loopwise.run(Workflow("pay").then(refund), {"amount_cents": 500}, store=None)
    assert result.status is Status.COMPLETED and PAID == [500]
    # A tool handed its own call's context cannot spend it on another tool's effect.
    noted = loopwise.run(Workflow("note").then(note), {"text": "hi"}, store=None)
    assert noted.status is Status.TOOL_FAILED
    assert "DirectEffectError: tool 'refund' is irreversible" in (noted.detail or "")
    assert PAID == [500]


@pytest.mark.parametrize("empty", ["", "   \n\t "])
def test_an_empty_final_answer_ends_invalid_output(empty: str) -> None:
    model = ScriptedModel([call("look", {"order_id": "O-1"})] + [reply(empty)] * 3)
    agent = Agent(name="helper", tools=[look], failure_cap=3)
    result = loopwise.run(agent, "What does O-1 cost?", model=model, store=None)
    assert result.status is Status.INVALID_OUTPUT, result
    assert "empty" in (result.detail or "")
    assert "Your answer was empty" in model.requests[2].messages[-1]["content"]


def test_an_empty_answer_then_a_real_one_completes() -> None:
    model = ScriptedModel([reply(""), reply("It costs 12.00.")])
    result = loopwise.run(Agent(name="helper", tools=[look]), "Cost?", model=model, store=None)
    assert result.status is Status.COMPLETED and result.output == "It costs 12.00."


RENAMED = '''
import os
from pathlib import Path

from loopwise import Workflow, gates, step, tool

LEDGER = Path(__file__).with_name("ledger.txt")


@tool(effect="write")
def note(text: str) -> str:
    """Write a note."""
    with LEDGER.open("a") as f:
        f.write(f"note {text}\\n")
    return "noted"


@tool(effect="irreversible", gate=gates.human())
def pay(text: str) -> str:
    """Pay out (a person decides)."""
    with LEDGER.open("a") as f:
        f.write(f"pay {text}\\n")
    return "paid"


def _same(args: dict[str, str]) -> dict[str, str]:
    return args


def _both(parts: dict[str, str]) -> int:
    return len(parts)


NODE = os.environ.get("NODE", "note_it")
flow = Workflow("flow", input_type=dict)
flow.add("start", step(_same, name="start"))
flow.add(NODE, note, after=["start"])
flow.add("pay_it", pay, after=["start"])
flow.add("both", step(_both, name="both"), after=[NODE, "pay_it"], join=dict)
'''


def test_a_node_renamed_while_its_run_waits_never_repeats_its_effect(
    tmp_path: Path,
) -> None:
    # DESIGN §7: within one run an (action, arguments) pair that took effect never takes
    # effect again — a node's new name (code edited while the run was paused) included.
    import loopwise
    from loopwise.cli.main import main

    (tmp_path / "wf.py").write_text(RENAMED)
    store = str(tmp_path / "runs.db")
    target = f"{tmp_path / 'wf.py'}:flow"
    assert main(["run", target, "--input", '{"text": "same"}', "--store", store]) == 1
    [paused] = loopwise.open_store(store).list_runs()
    assert main(["approve", paused.run_id, "--store", store, "--by", "me"]) == 0
    # A new process loads the edited module (this one keeps the module it loaded).
    env = {**os.environ, "NODE": "renamed"}
    done = subprocess.run(
        [sys.executable, "-m", "loopwise.cli.main", "resume", paused.run_id, "--store", store],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ledger.txt").read_text().splitlines() == ["note same", "pay same"]


ENDED = '''
from pathlib import Path

from loopwise import Workflow, gates, step, tool

LEDGER = Path(__file__).with_name("ledger.txt")


@tool(effect="irreversible", gate=gates.human())
def pay(text: str) -> str:
    """Pay out (a person decides)."""
    with LEDGER.open("a") as f:
        f.write(f"pay {text}\\n")
    return "paid"


def _same(args: dict[str, str]) -> dict[str, str]:
    return args


async def _fail(args: dict[str, str]) -> str:
    raise RuntimeError("the other branch broke")


def _both(parts: dict[str, str]) -> int:
    return len(parts)


flow = Workflow("flow", input_type=dict)
flow.add("start", step(_same, name="start"))
flow.add("pay_it", pay, after=["start"])
flow.add("fail", step(_fail, name="fail"), after=["start"])
flow.add("both", step(_both, name="both"), after=["pay_it", "fail"], join=dict)
'''


def test_an_approval_of_a_run_that_ended_otherwise_is_closed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Review round 2: a branch failed (run `error`) while the other waited for a person;
    # its approval stayed pending, and approve + resume paid after the run had ended.
    from loopwise.cli.main import main

    (tmp_path / "wf.py").write_text(ENDED)
    store = str(tmp_path / "runs.db")
    target = f"{tmp_path / 'wf.py'}:flow"
    assert main(["run", target, "--input", '{"text": "x"}', "--store", store]) == 1
    [ended] = loopwise.open_store(store).list_runs()
    assert ended.status == "error"
    capsys.readouterr()
    assert main(["pending", "--store", store, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    with loopwise.open_store(store) as st, pytest.raises(loopwise.DecisionError) as refused:
        st.decide(ended.run_id, "flow/pay_it", decision="approved", by="me")
    assert refused.value.code == "run-ended"
    main(["resume", ended.run_id, "--store", store])
    assert not (tmp_path / "ledger.txt").exists()  # nothing paid for a run that ended
