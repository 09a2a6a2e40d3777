"""The order-investigation agent over the real SQLite shop, and the issue's CLI contract.

Misbehaving models come from small target modules written to ``tmp_path``: each imports
the real agent and defines its own ``offline_model``, which ``--model scripted`` uses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise import Effect, Status
from loopwise.cli.main import main
from loopwise.running.targets import load_target, model_for
from tests.support import ROOT

AGENT = ROOT / "agents" / "order_investigation.py"
QUESTION = json.dumps("Why did customer C-1004's last three orders fail?")


def _misbehaving(tmp_path: Path, script: str) -> str:
    """A target: the real agent, with ``script`` as its offline model."""
    module = tmp_path / "misbehaving.py"
    module.write_text(
        "from loopwise.running.targets import load_target\n"
        "from loopwise.testing import ScriptedModel, call, calls, reply\n"
        f"investigate = load_target({str(AGENT) + ':investigate'!r}).step\n"
        "def _distinct(request):\n"
        "    # A different call every turn: never stuck, never done.\n"
        "    n = len(request.messages) % 20 + 1\n"
        "    return call('list_orders', {'customer_id': 'C-1004', 'limit': n})\n"
        f"offline_model = ScriptedModel({script})\n"
    )
    return f"{module}:investigate"


def _run(capsys: pytest.CaptureFixture[str], spec: str, *extra: str) -> tuple[int, Any]:
    code = main(["run", spec, "--input", QUESTION, "--model", "scripted", "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def _requests(spec: str) -> int:
    return len(load_target(spec).module.offline_model.requests)


def test_offline_investigation_finds_the_three_failures() -> None:
    target = load_target(f"{AGENT}:investigate")
    result = loopwise.run(target.step, json.loads(QUESTION), model=model_for(target, "scripted"))
    assert result.status == Status.COMPLETED and Path(os.environ["LOOPWISE_SHOP_DB"]).exists()
    answer = result.output
    assert "O-1017" in answer and "insufficient_funds" in answer
    assert "O-1023" in answer and "Address not found" in answer
    assert "O-1031" in answer and "out of stock" in answer
    # customer → orders → payments and shipments of the three failed orders (one turn).
    tools = [e.data["tool"] for e in result.events if e.type == "tool_call"]
    assert tools[:2] == ["lookup_customer", "list_orders"] and len(tools) == 8
    assert result.usage.model_calls == 4


def test_a_follow_up_in_the_conversation_answers_from_the_earlier_findings() -> None:
    target = load_target(f"{AGENT}:investigate")
    model = model_for(target, "scripted")
    ask = {"model": model, "conversation": "dana"}
    first = loopwise.run(target.step, json.loads(QUESTION), **ask)
    follow = loopwise.run(target.step, "And what should we tell her about the first one?", **ask)
    assert first.status == follow.status == Status.COMPLETED
    assert follow.usage.tool_calls == 0  # nothing investigated again
    assert "O-1031" in follow.output and "What to tell Dana" in follow.output
    last = loopwise.run(target.step, "And about the last one?", **ask)
    assert "O-1017" in last.output and "declined" in last.output
    # A new customer in the same conversation is investigated afresh.
    other = loopwise.run(target.step, "Why did C-1001's last order fail?", **ask)
    assert other.usage.tool_calls > 0 and "C-1001" in other.output


def test_shop_tools_are_read_only_scoped_and_allow_listed() -> None:
    target = load_target(f"{AGENT}:investigate")
    tools = target.step.tool_map
    assert set(tools) == {
        "lookup_customer",
        "find_customer",
        "list_orders",
        "get_order",
        "get_payments",
        "get_shipment_events",
    }
    assert all(t.effect is Effect.READ and t.description for t in tools.values())
    lookup = tools["lookup_customer"]
    with pytest.raises(loopwise.ToolArgumentsError, match="id pattern"):
        lookup.parse('{"customer_id": "C-1004 OR 1=1"}')
    with pytest.raises(loopwise.ToolArgumentsError, match="maximum 20"):
        tools["list_orders"].parse({"customer_id": "C-1004", "limit": 500})


def test_cli_completes_after_invented_names_broken_json_and_invalid_args(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _misbehaving(
        tmp_path,
        "[call('run_sql', {'query': 'SELECT * FROM payments'}),"
        " call('lookup_customer', '{\"customer_id\": \"C-1004\"'),"
        " call('list_orders', {'customer_id': 'dana'}),"
        " call('lookup_customer', {'customer_id': 'C-1004'}),"
        " reply('Dana Whitfield: three failed orders.')]",
    )
    code, out = _run(capsys, spec)
    assert (code, out["status"]) == (0, "completed")
    assert out["output"] == "Dana Whitfield: three failed orders."
    assert out["usage"]["model_calls"] == 5 and out["usage"]["tool_calls"] == 4
    requests = load_target(spec).module.offline_model.requests
    errors = [m["content"] for m in requests[-1].messages if m["role"] == "tool"][:3]
    assert "no tool named 'run_sql'; the tools are: find_customer, get_order" in errors[0]
    assert "'lookup_customer' are not valid JSON" in errors[1]
    assert "customer_id: 'dana' does not match the id pattern ^C-\\d{4}$" in errors[2]


@pytest.mark.parametrize(
    ("script", "detail"),
    [
        ("[call('lookup_customer', {'customer_id': 'C-1004'})] * 3", "3 times in a row"),
        (
            "[call('lookup_customer', {'customer_id': 'C-1004'}),"
            " call('list_orders', {'customer_id': 'C-1004'})] * 2",
            "ping-ponged",
        ),
    ],
    ids=["repeat", "ping-pong"],
)
def test_cli_stuck(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], script: str, detail: str
) -> None:
    code, out = _run(capsys, _misbehaving(tmp_path, script))
    assert (code, out["status"]) == (1, "stuck") and detail in out["detail"]


def test_cli_step_limit_under_max_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _misbehaving(tmp_path, "_distinct")
    code, out = _run(capsys, spec, "--max-steps", "5")
    assert (code, out["status"]) == (1, "step_limit")
    assert out["usage"]["model_calls"] <= 6 and _requests(spec) <= 6
    assert len(out["output"]["tool_results"]) == 5, "everything gathered so far"


def test_cli_budget_exceeded_with_no_further_model_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _misbehaving(tmp_path, "_distinct")
    code, out = _run(capsys, spec, "--max-tokens", "3000")
    assert (code, out["status"]) == (1, "budget_exceeded")
    assert "max_tokens 3000" in out["detail"]
    # Every call made is counted, and none was made after usage crossed the budget.
    assert out["usage"]["model_calls"] == _requests(spec) < 10


def test_cli_other_statuses_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = {
        "[call('get_order', {'order_id': 'O-9%03d' % i}) for i in range(3)]": "tool_failed",
        "[__import__('loopwise.testing').testing.refuse('No.')]": "refused",
    }
    for i, (script, status) in enumerate(cases.items()):
        folder = tmp_path / str(i)
        folder.mkdir()
        code, out = _run(capsys, _misbehaving(folder, script))
        assert (code, out["status"]) == (1, status)


def _command(spec: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOOPWISE_SHOP_DB": str(tmp_path / "shop.db")}
    argv = ["run", spec, "--input", QUESTION, "--model", "scripted", "--json"]
    return subprocess.run(
        [str(Path(sys.executable).parent / "loopwise"), *argv],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


@pytest.mark.slow
def test_the_real_command(tmp_path: Path) -> None:
    done = _command(f"{AGENT}:investigate", tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["status"] == "completed" and "O-1031" in out["output"] and out["run_id"]
    stuck = _misbehaving(tmp_path, "[call('get_order', {'order_id': 'O-1017'})] * 3")
    again = _command(stuck, tmp_path)
    assert again.returncode == 1 and json.loads(again.stdout)["status"] == "stuck"
