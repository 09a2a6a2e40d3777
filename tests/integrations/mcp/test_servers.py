"""Tools from MCP servers (issue 16), against a real MCP server started by the tests.

The server (``_server.py`` beside this file) is written with the ``mcp`` package and logs every call
it really receives to ``$MCP_CALL_LOG``, so "called once" and "never called" are read
from the server's side.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT

try:
    import mcp as _mcp_sdk  # noqa: F401
except ImportError:  # pragma: no cover - the dev extra installs it
    if os.environ.get("CI") == "true":
        raise  # in CI a skipped MCP test is a failure
    pytest.skip("the mcp extra is not installed", allow_module_level=True)

import loopwise
from loopwise import Agent, Effect, IdPattern, Status, mcp
from loopwise.cli.main import main
from loopwise.errors import ConfigError, MCPServerError
from loopwise.testing import ScriptedModel, call, calls, reply
from loopwise.tools.gates import human

SERVER = Path(__file__).resolve().with_name("_server.py")
AGENTS = Path(__file__).resolve().with_name("_agents.py")
LOOPWISE = str(Path(sys.executable).with_name("loopwise"))


@pytest.fixture(scope="module")
def call_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp") / "calls.jsonl"


@pytest.fixture(scope="module")
def shop(call_log: Path) -> mcp.MCPTools:
    """The test server's tools, annotations trusted (declared once for the module)."""
    return _server(call_log, trust_annotations=True)


@pytest.fixture
def calls_made(call_log: Path) -> Callable[[], list[dict[str, Any]]]:
    """What the server was really asked during the test, as (tool, args, key) dicts."""
    call_log.write_text("")
    return lambda: _read(call_log)


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _server(call_log: Path, **options: Any) -> mcp.MCPTools:
    env = {"MCP_CALL_LOG": str(call_log)}
    return mcp.stdio(sys.executable, str(SERVER), env=env, name="test-shop", **options)


def _agent(*tools: Any, **options: Any) -> Agent:
    return Agent(name="clerk", instructions="Help with orders.", tools=list(tools), **options)


def test_trusted_annotations_map_to_effects_gates_and_taint(shop: mcp.MCPTools) -> None:
    mapped = {m.tool: m for m in shop.mappings}
    assert {name: (m.effect, m.gated, m.untrusted_output) for name, m in mapped.items()} == {
        "get_order": (Effect.READ, False, False),
        "search_orders": (Effect.READ, False, False),
        "fetch_page": (Effect.READ, False, True),  # openWorldHint unset: the open web
        "add_note": (Effect.WRITE, False, False),
        "refund": (Effect.IRREVERSIBLE, True, False),  # no destructiveHint: false
        "check_stock": (Effect.READ, False, False),
        "crash": (Effect.READ, False, False),
    }
    assert shop.get("refund").gate == human()
    assert mapped["refund"].describe() == "refund: openWorldHint=false -> irreversible, gated"
    # A tool listed with an invalid schema is left out, and says why.
    assert set(shop.skipped) == {"broken"}
    assert "no-such-type" in shop.skipped["broken"]
    with pytest.raises(ConfigError, match="has no tool 'broken'"):
        shop.get("broken")


def test_an_untrusted_server_s_hints_are_ignored_unless_the_user_overrides(
    call_log: Path,
) -> None:
    source = _server(
        call_log,
        include=["get_order", "fetch_page", "refund"],
        overrides={
            "get_order": mcp.Override(
                effect="read",
                untrusted_output=False,
                validators={"order_id": IdPattern(r"O-\d{4}")},
            )
        },
    )
    assert [t.name for t in source] == ["get_order", "fetch_page", "refund"]
    mapped = {m.tool: m for m in source.mappings}
    # fetch_page says it is read-only; from a server nobody vouched for, that is ignored.
    for name in ("fetch_page", "refund"):
        assert (mapped[name].effect, mapped[name].gated, mapped[name].untrusted_output) == (
            Effect.IRREVERSIBLE,
            True,
            True,
        )
        assert "server not trusted: hints ignored" in mapped[name].describe()
    assert (mapped["get_order"].effect, mapped["get_order"].untrusted_output) == (
        Effect.READ,
        False,
    )
    assert mapped["get_order"].overridden == ("effect", "untrusted_output", "validators")
    # The allow-list validator holds, and the model is shown it in the schema.
    order = source.get("get_order")
    assert order.schema["function"]["parameters"]["properties"]["order_id"]["pattern"] == (
        r"^O-\d{4}$"
    )
    with pytest.raises(loopwise.ToolArgumentsError, match="does not match the id pattern"):
        order.parse({"order_id": "1 OR 1=1"})


def test_overrides_and_include_that_name_no_tool_raise(call_log: Path) -> None:
    with pytest.raises(ConfigError, match="has no tool 'refnud'") as info:
        _server(call_log, overrides={"refnud": mcp.Override(effect="read")})
    assert info.value.name == "refnud"
    typo = mcp.Override(validators={"amount": IdPattern("x")})
    with pytest.raises(ConfigError, match=r"'amount', which is not one of its arguments: amount_"):
        _server(call_log, overrides={"refund": typo})


def test_server_options_are_one_set_for_stdio_and_http(tmp_path: Path) -> None:
    # Refused before any process starts or any request is sent, as a typo'd keyword was.
    with pytest.raises(TypeError, match=r"stdio\(\) got an unexpected keyword argument 'trust'"):
        mcp.stdio(sys.executable, str(tmp_path / "missing.py"), trust=True)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"http\(\) got an unexpected keyword argument 'timout'"):
        mcp.http("http://127.0.0.1:9/mcp", timout=1)  # type: ignore[call-arg]


def test_a_server_that_will_not_start_raises_naming_it(tmp_path: Path) -> None:
    with pytest.raises(MCPServerError, match=r"MCP server 'ghost' did not start") as info:
        mcp.stdio(sys.executable, str(tmp_path / "missing.py"), name="ghost")
    assert info.value.server == "ghost"
    assert "missing.py" in str(info.value)  # what the process said on stderr


def test_agent_reads_with_a_read_only_tool_and_bad_arguments_never_reach_the_server(
    shop: mcp.MCPTools, calls_made: Callable[[], list[dict[str, Any]]]
) -> None:
    model = ScriptedModel(
        [
            calls(
                ("search_orders", {"filters": {"status": "lost", "since": {"year": 2024}}}),
                ("search_orders", {"filters": {"status": "failed"}}),
                ("get_order", {"order_id": "O-1001", "note": "invented"}),
            ),
            calls(
                ("search_orders", {"filters": {"status": "failed", "since": {"year": 2024}}}),
                ("get_order", {"order_id": "O-1001"}),
                ("check_stock", {"sku": "LAMP-1"}),
            ),
            reply("O-1001's payment failed."),
        ]
    )
    agent = _agent(*shop, max_steps=5)
    result = loopwise.run(agent, "Which orders failed?", model=model)
    assert result.status is Status.COMPLETED, result.detail
    tool_results = [e.data for e in result.events if e.type == "tool_result"]
    errors = [r["content"] for r in tool_results if r["is_error"]]
    assert len(errors) == 4
    assert "filters.status" in errors[0] and "'failed' or 'ok'" in errors[0]
    assert "filters.since: missing required argument" in errors[1]
    assert "note: unknown argument" in errors[2]
    assert "the warehouse system is closed for maintenance" in errors[3]
    # A turn's calls run concurrently and each is recorded as it finishes (durability first).
    ok = sorted((r["content"] for r in tool_results if not r["is_error"]), key=len)
    assert [json.loads(c) for c in ok] == [
        ["O-1001"],
        {"id": "O-1001", "status": "payment_failed", "total_cents": 4200},
    ]
    # Only the valid calls reached the server (concurrently, so in any order), each once;
    # reads carry no idempotency key.
    assert sorted((c["tool"], c["key"]) for c in calls_made()) == [
        ("check_stock", None),
        ("get_order", None),
        ("search_orders", None),
    ]


def test_open_world_output_forces_a_person_on_a_later_write(
    shop: mcp.MCPTools, calls_made: Callable[[], list[dict[str, Any]]]
) -> None:
    model = ScriptedModel(
        [
            call("fetch_page", {"url": "https://example.test/help"}, id="read"),
            call("add_note", {"order_id": "O-1001", "text": "refund all"}, id="note"),
            reply("noted"),
        ]
    )
    agent = _agent(shop.get("fetch_page"), shop.get("add_note"), max_steps=4)
    result = loopwise.run(agent, "Read the help page and note what it says.", model=model)
    assert result.status is Status.AWAITING_APPROVAL, result.detail
    [pending] = result.pending
    assert (pending["tool"], pending["tainted_by"]) == ("add_note", "fetch_page (read)")
    # add_note is a write that passes on its own; after the open web, it waits for a person.
    assert [c["tool"] for c in calls_made()] == ["fetch_page"]


def test_a_server_killed_mid_run_ends_the_run_with_an_error_naming_it(
    shop: mcp.MCPTools, calls_made: Callable[[], list[dict[str, Any]]]
) -> None:
    model = ScriptedModel(
        [call("get_order", {"order_id": "O-1002"}), call("crash", {}), reply("never")]
    )
    agent = _agent(shop.get("get_order"), shop.get("crash"), max_steps=4)
    result = loopwise.run(agent, "Check O-1002, then crash.", model=model)
    assert result.status is Status.ERROR
    assert result.detail is not None
    assert "MCP server 'test-shop' closed the connection during a call of 'crash'" in (
        result.detail
    )
    assert "crash requested" in result.detail  # what it said on stderr
    assert [c["tool"] for c in calls_made()] == ["get_order", "crash"]


def _cli(env: dict[str, str], *args: str) -> tuple[int, Any]:
    done = subprocess.run(
        [LOOPWISE, *args, "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=180,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_a_destructive_tool_pauses_and_runs_once_after_approval_in_a_new_process(
    call_log: Path, calls_made: Callable[[], list[dict[str, Any]]]
) -> None:
    env = {**os.environ, "MCP_CALL_LOG": str(call_log)}
    target = f"{AGENTS}:refunder"
    code, started = _cli(env, "run", target, "--model", "scripted", "--input", '"refund O-1001"')
    assert code == 1
    assert started["status"] == "awaiting_approval"
    assert [(p["tool"], p["effect"]) for p in started["pending"]] == [("refund", "irreversible")]
    assert [c["tool"] for c in calls_made()] == ["get_order"]
    run_id = started["run_id"]
    assert main(["approve", run_id, "--by", "alice"]) == 0
    code, resumed = _cli(env, "resume", run_id)
    assert code == 0
    assert resumed["status"] == "completed", resumed
    assert resumed["output"] == "done: refunded 4200 on O-1001"
    # The resumed process reconnected and replayed the journaled read instead of calling
    # it again; the refund ran once, its idempotency key in the request's _meta.
    assert [(c["tool"], c["key"]) for c in calls_made()] == [
        ("get_order", None),
        ("refund", f"{run_id}:pay"),
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def http_server(call_log: Path) -> Iterator[str]:
    """The test server over Streamable HTTP on 127.0.0.1; yields its URL once it listens."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "MCP_CALL_LOG": str(call_log)},
    )
    try:
        assert process.stderr is not None
        for line in process.stderr:  # ends if the server exits
            if re.search(r"Uvicorn running on", line):
                break
        else:
            pytest.fail("the HTTP MCP server did not start")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()


def test_tools_over_streamable_http(
    http_server: str, calls_made: Callable[[], list[dict[str, Any]]]
) -> None:
    source = mcp.http(http_server, trust_annotations=True, include=["get_order", "refund"])
    assert source.server == "test-shop"  # what it calls itself
    assert [(t.name, t.effect) for t in source] == [
        ("get_order", Effect.READ),
        ("refund", Effect.IRREVERSIBLE),
    ]
    model = ScriptedModel([call("get_order", {"order_id": "O-1002"}), reply("delivered")])
    result = loopwise.run(_agent(source.get("get_order")), "Where is O-1002?", model=model)
    assert result.status is Status.COMPLETED, result.detail
    assert [c["tool"] for c in calls_made()] == ["get_order"]


QUESTION = '"Why did customer C-1004\'s last three orders fail?"'


def test_the_canonical_agent_with_its_tools_from_an_mcp_server(
    capsys: pytest.CaptureFixture[str],
) -> None:
    outputs = []
    for target in (
        "agents/order_investigation_mcp.py:investigate_mcp",
        "agents/order_investigation.py:investigate",
    ):
        capsys.readouterr()
        argv = ["run", str(ROOT / target), "--model", "scripted", "--input", QUESTION, "--json"]
        assert main(argv) == 0
        done = json.loads(capsys.readouterr().out)
        assert done["status"] == "completed"
        outputs.append(done["output"])
    # The same investigation, whether the tools are local or served over MCP.
    assert outputs[0] == outputs[1]
    assert "O-1017 payment_failed: card declined 2 time(s)" in outputs[0]


def test_the_cli_says_in_one_line_when_a_target_s_server_will_not_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "ghost_agent.py"
    target.write_text(
        "import sys\n"
        "from loopwise import Agent, mcp\n"
        f"ghost = mcp.stdio(sys.executable, {str(tmp_path / 'nope.py')!r}, name='ghost')\n"
        "agent = Agent(name='a', tools=[*ghost])\n"
    )
    code = main(["run", f"{target}:agent", "--model", "scripted", "--input", '"hi"'])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "MCP server 'ghost' did not start" in err


def test_check_shows_the_mapping_applied_and_the_tools_left_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    capsys.readouterr()
    code = main(["check", f"{AGENTS}:refunder", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert (code, doc["ok"]) == (0, True)
    origins = {f["where"]: f["message"] for f in doc["findings"] if f["code"] == "tool-origin"}
    assert origins == {
        "refunder/tools/get_order": (
            "MCP server 'test-shop': get_order: readOnlyHint=true, openWorldHint=false -> read"
        ),
        "refunder/tools/refund": (
            "MCP server 'test-shop': refund: openWorldHint=false -> irreversible, gated"
        ),
    }
    assert {f["level"] for f in doc["findings"] if f["code"] == "tool-origin"} == {"info"}
    [left_out] = [f for f in doc["findings"] if f["code"] == "tool-left-out"]
    assert left_out["level"] == "warning"
    assert "lists 'broken', left out: its input schema is invalid" in left_out["message"]


def test_the_source_itself_goes_in_tools_and_in_a_hybrids_planner_tools_and_actions(
    call_log: Path, calls_made: Callable[[], list[dict[str, Any]]]
) -> None:
    reads = _server(call_log, trust_annotations=True, include=["get_order"])
    notes = _server(call_log, trust_annotations=True, include=["add_note"])

    @loopwise.tool
    def today() -> str:
        """Today's date. Call it when asked what day it is."""
        return "2026-12-02"

    agent = _agent(reads, today)  # the sources themselves, beside a @tool
    assert sorted(agent.tool_map) == ["get_order", "today"]
    model = ScriptedModel([call("get_order", {"order_id": "O-1001"}), reply("failed payment")])
    assert loopwise.run(agent, "O-1001?", model=model, store=None).status == "completed"
    plan = {"steps": [{"id": "s1", "action": "add_note", "reason": "record it",
                       "args": {"order_id": "O-1001", "text": "payment failed"}}]}  # fmt: skip
    desk = loopwise.Hybrid("desk", actions=[notes], tools=[reads])
    answers = ScriptedModel(
        [call("get_order", {"order_id": "O-1001"}), calls(("final_answer", plan, "p"))]
    )
    done = loopwise.run(desk, "note O-1001's state", model=answers, store=None)
    assert done.status == "completed", done
    assert [c["tool"] for c in calls_made()] == ["get_order", "get_order", "add_note"]
