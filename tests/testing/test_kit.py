"""The testing kit: what a user's offline tests are written with.

A request's tool results read without parsing the transcript, a scripted agent declared as
a plan, ``loopwise.approve``/``deny`` with the CLI's checks, and the pytest fixtures the
plugin gives every project that installs loopwise.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import loopwise
from loopwise import Agent, ModelRequest
from loopwise.cli.main import main
from loopwise.errors import ModelAPIError
from loopwise.testing import (
    FakeChatServer,
    Fault,
    ScriptedAgent,
    ScriptedModel,
    call,
    calls,
    graduated_model,
    reply,
)


@loopwise.tool
def lookup(order_id: str) -> dict[str, Any]:
    """Look up an order by id: its status. Use it before answering about an order."""
    if order_id == "O-404":
        raise LookupError(f"no order {order_id}")
    return {"id": order_id, "status": "lost" if order_id == "O-2" else "delivered"}


@loopwise.tool
def note(text: str) -> str:
    """Write a note for the team. Use it to record what was found."""
    return f"noted: {text}"


class Found(BaseModel):
    lost: list[str]


def _agent(**options: Any) -> Agent:
    return Agent(name="orders", instructions="Find lost orders.", tools=[lookup, note], **options)


def test_a_request_reads_its_tool_results_by_name_and_arguments() -> None:
    model = ScriptedModel(
        [
            calls(("lookup", {"order_id": "O-1"}), ("lookup", {"order_id": "O-2"})),
            call("lookup", {"order_id": "O-404"}),
            call("note", "{not json"),
            reply("done"),
        ]
    )
    result = loopwise.run(_agent(), "Which of O-1, O-2 is lost?", model=model, store=None)
    assert result.status == "completed"
    last = model.last_request
    assert last is not None and last.user_text() == "Which of O-1, O-2 is lost?"
    results = last.tool_results()
    assert [(r.name, r.args.get("order_id"), r.is_error) for r in results] == [
        ("lookup", "O-1", False),
        ("lookup", "O-2", False),
        ("lookup", "O-404", True),
        ("note", None, True),  # arguments that are not JSON: {} and an error result
    ]
    assert results[1].value == {"id": "O-2", "status": "lost"}
    assert "no order O-404" in results[2].content and results[2].value == results[2].content
    found = last.last_result("lookup", order_id="O-2")
    assert found is not None and found.value["status"] == "lost"
    assert last.last_result("lookup") == results[2]  # the latest call of the tool
    assert last.last_result("lookup", order_id="O-9") is None
    assert last.last_result("refund") is None
    assert last.called("note") and last.called("lookup", order_id="O-404")
    assert not last.called("lookup", order_id="O-9") and not last.called("refund")
    assert ModelRequest(messages=[]).user_text() == ""


def _lost(request: ModelRequest) -> dict[str, list[str]]:
    found = [r.value["id"] for r in request.tool_results("lookup") if not r.is_error]
    return {"lost": [i for i in found if request.last_result("lookup", order_id=i)]}


def test_a_scripted_agent_calls_its_plan_in_order_then_answers_through_final_answer() -> None:
    def ids(request: ModelRequest) -> list[dict[str, str]]:
        return [{"order_id": w.strip(",?")} for w in request.user_text().split() if "O-" in w]

    def lost(request: ModelRequest) -> Found:
        looked = request.tool_results("lookup")
        return Found(lost=[r.value["id"] for r in looked if r.value["status"] == "lost"])

    model = ScriptedAgent(
        ("lookup", ids),  # one turn, a call per order: they run at once
        ("note", lambda r: None),  # skipped: no arguments
        [("note", {"text": "checked"}), ("lookup", {"order_id": "O-3"})],  # one turn, two tools
        answer=lost,
    )
    result = loopwise.run(
        _agent(output_type=Found), "Which of O-1, O-2 is lost?", model=model, store=None
    )
    assert result.status == "completed" and result.output == Found(lost=["O-2"])
    offered = {t["function"]["name"] for t in model.requests[0].tools or []}
    assert offered == {"lookup", "note", "final_answer"}
    turns = [m for m in model.last_request.messages if m.get("tool_calls")]  # type: ignore[union-attr]
    assert [[c["function"]["name"] for c in t["tool_calls"]] for t in turns] == [
        ["lookup", "lookup"],
        ["note", "lookup"],
    ]  # then the answer, through final_answer (the output above)
    assert result.usage.model_calls == 3 and result.usage.tool_calls == 4


def test_a_scripted_agent_answers_in_text_without_a_typed_output_and_stops_on_an_error() -> None:
    model = ScriptedAgent(
        ("lookup", {"order_id": "O-404"}),
        ("note", {"text": "never written"}),
        answer=lambda r: "failed: " + r.tool_results()[-1].content,
    )
    result = loopwise.run(_agent(), "O-404?", model=model, store=None)
    assert result.status == "completed"
    assert result.output == "failed: ERROR: tool 'lookup' raised LookupError: no order O-404"
    assert not model.last_request or not model.last_request.called("note")
    going_on = ScriptedAgent(
        ("lookup", {"order_id": "O-404"}),
        ("note", {"text": "written anyway"}),
        answer={"n": 2},
        stop_on_error=False,
    )
    result = loopwise.run(_agent(), "O-404?", model=going_on, store=None)
    assert result.output == '{"n": 2}' and result.usage.tool_calls == 2


def test_a_scripted_agent_is_pure_so_a_paused_run_resumes_in_a_new_model(tmp_path: Path) -> None:
    @loopwise.tool(effect="irreversible", gate=loopwise.gates.human())
    def refund(order_id: str) -> str:
        """Refund a lost order. Use it only for an order whose status is lost."""
        return f"refunded {order_id}"

    def plan() -> ScriptedAgent:
        return ScriptedAgent(
            ("lookup", {"order_id": "O-2"}),
            ("refund", lambda r: {"order_id": "O-2"} if r.called("lookup") else None),
            answer=lambda r: r.tool_results()[-1].content,
        )

    agent = Agent(name="refunder", instructions="Refund lost orders.", tools=[lookup, refund])
    store = tmp_path / "runs.db"
    paused = loopwise.run(agent, "Refund O-2 if lost.", model=plan(), store=store)
    assert paused.status == "awaiting_approval"
    (decided,) = loopwise.approve(paused.run_id, store=store, by="test")
    assert decided.status == "approved" and decided.decided_by == "test"
    done = loopwise.resume(paused.run_id, step=agent, model=plan(), store=store)
    assert (done.status, done.output) == ("completed", "refunded O-2")


def _two_gates(store: Path) -> loopwise.RunResult:
    @loopwise.tool(effect="irreversible", gate=loopwise.gates.human())
    def refund(order_id: str) -> str:
        """Refund one order. Use it only for an order whose status is lost."""
        return f"refunded {order_id}"

    agent = Agent(name="refunder", instructions="Refund.", tools=[refund])
    model = ScriptedModel(
        [calls(("refund", {"order_id": "O-1"}), ("refund", {"order_id": "O-2"})), reply("ok")]
    )
    return loopwise.run(agent, "Refund O-1 and O-2.", model=model, store=store)


def test_approve_and_deny_refuse_what_the_cli_refuses(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    paused = _two_gates(store)
    first, second = (a["approval_id"] for a in paused.pending)
    with pytest.raises(loopwise.ConfigError, match="2 pending approvals"):
        loopwise.approve(paused.run_id, store=store)
    with pytest.raises(loopwise.ConfigError, match="no approval 'nope'"):
        loopwise.approve(paused.run_id, approval="nope", store=store)
    with pytest.raises(loopwise.ConfigError, match="no-such-run"):
        loopwise.approve("no-such-run", store=store)
    with pytest.raises(loopwise.DecisionError, match="needs a reason"):
        loopwise.deny(paused.run_id, approval=first, reason=" ", store=store)
    with pytest.raises(loopwise.DecisionError) as stale:
        loopwise.approve(paused.run_id, approval=first, seen_hash="0" * 12, store=store)
    assert stale.value.code == "stale"
    with pytest.raises(loopwise.ConfigError, match="for one approval"):
        loopwise.approve(paused.run_id, all_pending=True, args={"order_id": "O-3"}, store=store)
    (denied,) = loopwise.deny(paused.run_id, approval=first, reason="not lost", store=store)
    assert (denied.status, denied.decision_reason) == ("denied", "not lost")
    (approved,) = loopwise.approve(paused.run_id, store=store)  # the only one left
    assert approved.approval_id == second and approved.decided_by
    with pytest.raises(loopwise.ConfigError, match=r"no pending approval .*was denied"):
        loopwise.approve(paused.run_id, store=store)


def test_approve_all_pending_and_the_default_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPWISE_STORE", str(tmp_path / "default.db"))
    paused = _two_gates(tmp_path / "default.db")
    decided = loopwise.approve(paused.run_id, all_pending=True, by="script")
    assert [a.status for a in decided] == ["approved", "approved"]
    with loopwise.open_store(tmp_path / "default.db") as runs:
        assert runs.pending(paused.run_id) == []


def test_the_pytest_plugin_gives_a_store_and_a_fake_server(tmp_path: Path) -> None:
    (tmp_path / "test_mine.py").write_text(
        textwrap.dedent(
            """
            import os

            import loopwise
            from loopwise.testing import reply


            def test_store(loopwise_store):
                assert os.environ["LOOPWISE_STORE"] == str(loopwise_store)
                result = loopwise.run(loopwise.step(lambda x: x + 1, name="inc"), 1)
                with loopwise.open_store(loopwise_store) as runs:
                    assert runs.get_run(result.run_id).status == "completed"


            def test_server(fake_chat_server):
                server = fake_chat_server([reply("hello from the fake")])
                assert os.environ["OPENAI_BASE_URL"] == server.base_url
                agent = loopwise.Agent(name="a", instructions="Greet.")
                result = loopwise.run(agent, "hi", model=server.model(), store=None)
                assert result.output == "hello from the fake" and len(server.requests) == 1
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


TWO_AGENTS = '''
import loopwise
from loopwise.testing import ScriptedAgent


@loopwise.tool
def lookup_order(order_id: str) -> str:
    """Look an order up by its id."""
    return "shipped"


@loopwise.tool
def lookup_customer(customer_id: str) -> str:
    """Look a customer up by their id."""
    return "Ann"


orders = loopwise.Agent(name="orders", instructions="Orders.", tools=[lookup_order])
people = loopwise.Agent(name="people", instructions="People.", tools=[lookup_customer])
ORDERS = ScriptedAgent(("lookup_order", {"order_id": "O-1"}), answer="it shipped")
PEOPLE = ScriptedAgent(("lookup_customer", {"customer_id": "C-1"}), answer="it is Ann")
offline_model = {MAPPING}
'''


def _two_agents(tmp_path: Path, mapping: str) -> str:
    path = tmp_path / "desk.py"
    path.write_text(TWO_AGENTS.replace("{MAPPING}", mapping))
    return str(path)


def test_each_target_of_a_module_gets_its_own_offline_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    desk = _two_agents(tmp_path, '{"orders": ORDERS, "people": PEOPLE}')
    store = ["--store", str(tmp_path / "runs.db"), "--model", "scripted"]
    assert main(["run", f"{desk}:people", "--input-text", "who?", *store]) == 0
    assert "it is Ann" in capsys.readouterr().out
    assert main(["run", f"{desk}:orders", "--input-text", "where?", *store]) == 0
    assert "it shipped" in capsys.readouterr().out


def test_a_script_for_another_target_says_so_instead_of_looping(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    desk = _two_agents(tmp_path, "ORDERS")
    store = ["--store", str(tmp_path / "runs.db"), "--model", "scripted"]
    assert main(["run", f"{desk}:people", "--input-text", "who?", *store]) == 2
    err = capsys.readouterr().err
    assert "plans a call of 'lookup_order', a tool this target does not have" in err
    assert err.count("\n") == 1


def test_the_fake_server_serves_a_scripted_agent() -> None:
    @loopwise.tool
    def lookup_order(order_id: str) -> str:
        """Look an order up by its id."""
        return "shipped"

    agent = loopwise.Agent(name="orders", instructions="Orders.", tools=[lookup_order])
    scripted = ScriptedAgent(("lookup_order", {"order_id": "O-1"}), answer="it shipped")
    with FakeChatServer(scripted) as server:
        result = loopwise.run(agent, "where?", model=server.model(), store=None)
    assert result.status is loopwise.Status.COMPLETED and result.output == "it shipped"
    assert len(server.requests) == 2


def test_python_m_loopwise_testing_serve_serves_a_target_for_the_cli(tmp_path: Path) -> None:
    desk = _two_agents(tmp_path, '{"orders": ORDERS, "people": PEOPLE}')
    with subprocess.Popen(
        [sys.executable, "-m", "loopwise.testing.serve", f"{desk}:people"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as server:
        try:
            assert server.stdout is not None
            first = server.stdout.readline().strip()
            assert first.startswith("serving http://127.0.0.1:"), first
            base_url = first.split(" ", 1)[1]
            env = {**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "fake-key"}
            done = subprocess.run(
                [sys.executable, "-m", "loopwise.cli.main", "run", f"{desk}:people", "--model",
                 "fake-model", "--input-text", "who?", "--store", str(tmp_path / "r.db"),
                 "--json"],
                capture_output=True, text=True, env=env, check=False,
            )  # fmt: skip
        finally:
            server.terminate()
            server.communicate(timeout=10)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["output"] == "it is Ann"


def test_serving_something_that_is_not_a_model_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x = 3\n")
    done = subprocess.run(
        [sys.executable, "-m", "loopwise.testing.serve", f"{tmp_path / 'm.py'}:x"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "is not a scripted model" in done.stderr


@pytest.mark.parametrize(
    ("source", "args", "says"),
    [
        ("offline_model = lambda: 1\n", ["--port", "99999"], "is not a port"),
        ("offline_model = lambda: 1\n", ["--port", "-5"], "is not a port"),
        ("def offline_model(a, b):\n    return 1\n", [], "offline_model() raised TypeError"),
        ("def offline_model():\n    raise KeyError('x')\n", [], "raised KeyError"),
    ],
)
def test_serve_a_bad_port_or_a_factory_that_raises_is_one_line_exit_2(
    tmp_path: Path, source: str, args: list[str], says: str
) -> None:
    (tmp_path / "m.py").write_text(source)
    done = subprocess.run(
        [sys.executable, "-m", "loopwise.testing.serve", str(tmp_path / "m.py"), *args],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and says in done.stderr, done.stderr


def test_a_fault_in_the_agents_script_fails_the_graduated_workflows_call() -> None:
    # The agent's script is asked for the workflow's answer: a Fault in it is the model
    # failing (ModelAPIError), not a TypeError from sending the Fault as JSON.
    model = graduated_model(ScriptedModel([Fault(status=503)]))
    shown = {"task": "answer", "input": "where is O-1?", "calls": []}
    request = ModelRequest(messages=[{"role": "user", "content": json.dumps(shown)}])
    with pytest.raises(ModelAPIError, match="HTTP 503"):
        asyncio.run(model.complete(request))
