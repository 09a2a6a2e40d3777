"""MCP servers that misbehave: a listing that never comes, schemas past the limits or too
deep to read (that tool left out, the others kept), patterns that would freeze argument
checks, tools named to break or shadow things.

The server (tests/integrations/mcp/_hostile.py) speaks JSON-RPC over stdio by hand and lists exactly
the tools a test writes to a file, as written.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import loopwise
from loopwise import Agent, mcp
from loopwise.cli.main import main
from loopwise.errors import MCPServerError
from loopwise.testing import ScriptedModel, call, reply

HOSTILE = str(Path(__file__).resolve().with_name("_hostile.py"))
OBJECT = {"type": "object", "properties": {"q": {"type": "string"}}}


def _listing(tmp_path: Path, *tools: dict[str, Any] | str, **options: Any) -> mcp.MCPTools:
    """The hostile server listing ``tools`` (a tool as JSON text: as spelled)."""
    listed = tmp_path / "tools.json"
    spelled = [t if isinstance(t, str) else json.dumps(t) for t in tools]
    listed.write_text(f"[{', '.join(spelled)}]")
    options.setdefault("connect_timeout", 20)
    return mcp.stdio(sys.executable, HOSTILE, str(listed), name="hostile", **options)


def _deep(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


def _deep_text(levels: int) -> str:
    """A tool named ``deep`` whose schema nests ``levels`` objects, as JSON text (deeper
    than Python's own JSON reader and writer go)."""
    nested = '{"type": "object", "properties": {"x": ' * levels
    schema = nested + '{"type": "string"}' + "}}" * levels
    return f'{{"name": "deep", "inputSchema": {schema}}}'


def _fanning_refs(levels: int) -> dict[str, Any]:
    """Each definition refers twice to the next: 2**levels expansions, no recursion."""
    defs: dict[str, Any] = {f"d{levels}": {"type": "string"}}
    for i in range(levels):
        ref = {"$ref": f"#/$defs/d{i + 1}"}
        defs[f"d{i}"] = {"type": "object", "properties": {"a": ref, "b": ref}}
    return {"type": "object", "properties": {"root": {"$ref": "#/$defs/d0"}}, "$defs": defs}


def test_a_server_that_never_lists_its_tools_is_refused_in_bounded_time() -> None:
    with pytest.raises(MCPServerError, match=r"'hang-server' did not list its tools within 2"):
        mcp.stdio(sys.executable, HOSTILE, "hang", name="hang-server", connect_timeout=2)


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        (_deep(60), "nests deeper than 32 levels"),
        (
            {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(50_000)}},
            "more than 5,000 parts",
        ),
        (_fanning_refs(24), "expands to more than 5,000 parts"),
        (
            {"type": "object", "properties": {"q": {"type": "string", "pattern": r"(a)\1"}}},
            "only a backtracking engine matches",
        ),
    ],
    ids=["60-deep", "50k-properties", "fanning-refs", "backreference"],
)
def test_a_schema_past_the_limits_leaves_that_tool_out_and_keeps_the_others(
    tmp_path: Path, schema: dict[str, Any], why: str
) -> None:
    tools = [{"name": "fine", "inputSchema": OBJECT}, {"name": "greedy", "inputSchema": schema}]
    listed = _listing(tmp_path, *tools)
    assert re.search(f"past loopwise's limits.*{why}", listed.skipped["greedy"])
    _fine_still_answers(listed)


def _fine_still_answers(tools: mcp.MCPTools) -> None:
    """The server's usable tool is kept, and a run calls it."""
    assert [t.name for t in tools] == ["fine"]
    model = ScriptedModel([call("fine", {"q": "still here"}, id="c1"), reply("done")])
    agent = Agent(name="clerk", tools=[tools], max_steps=3)
    done = loopwise.run(agent, "go", model=model, store=None, approvals=lambda r: True)
    assert done.status == "completed", done
    (result,) = [e.data for e in done.events if e.type == "tool_result"]
    assert not result["is_error"] and '"q": "still here"' in result["content"]


@pytest.mark.parametrize("levels", [150, 300, 50_000])
def test_a_tool_too_deep_for_the_sdks_reader_is_left_out_and_the_others_kept(
    tmp_path: Path, levels: int
) -> None:
    # Past the JSON reader's own nesting limit (about 200 levels of JSON): the SDK could
    # not read the listing at all, which then timed out with every tool of the server.
    fine = {"name": "fine", "description": 'says "[{" and \\ in text', "inputSchema": OBJECT}
    listed = _listing(tmp_path, fine, _deep_text(levels))
    assert "nests deeper than 32 levels" in listed.skipped["deep"]
    assert listed.get("fine").description == 'says "[{" and \\ in text'  # brackets in text
    _fine_still_answers(listed)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.parametrize("body", ["json", "sse"])
def test_over_http_a_tool_too_deep_for_the_sdks_reader_is_left_out_and_the_others_kept(
    tmp_path: Path, body: str
) -> None:
    # Over HTTP the SDK answered the listing with a parse error: the whole server refused.
    listed = tmp_path / "tools.json"
    listed.write_text(f"[{json.dumps({'name': 'fine', 'inputSchema': OBJECT})}, {_deep_text(300)}]")
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, HOSTILE, str(listed), "http", str(port), body],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None and "listening" in server.stderr.readline()
        tools = mcp.http(f"http://127.0.0.1:{port}/mcp", name="hostile", connect_timeout=20)
        assert "nests deeper than 32 levels" in tools.skipped["deep"]
        _fine_still_answers(tools)
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stderr is not None:
            server.stderr.close()


_TARGET = """
import sys
from loopwise import Agent, mcp

SERVER = mcp.stdio(sys.executable, {hostile!r}, {listed!r}, name="hostile")
clerk = Agent(name="clerk", tools=[SERVER], max_steps=3)
"""


def test_check_names_the_tool_left_out_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    listed = tmp_path / "tools.json"
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(6_000)}}
    tools = [
        json.dumps({"name": n, "inputSchema": s}) for n, s in [("fine", OBJECT), ("wide", wide)]
    ]
    listed.write_text(f"[{', '.join([*tools, _deep_text(300)])}]")
    target = tmp_path / "desk.py"
    target.write_text(_TARGET.format(hostile=HOSTILE, listed=str(listed)))
    capsys.readouterr()
    code = main(["check", f"{target}:clerk", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    left = sorted(f["message"] for f in doc["findings"] if f["code"] == "tool-left-out")
    assert len(left) == 2
    assert "lists 'deep', left out: it is past loopwise's limits: " in left[0]
    assert "nests deeper than 32 levels" in left[0]
    assert "lists 'wide', left out: it is past loopwise's limits: " in left[1]
    assert "more than 5,000 parts" in left[1]
    origins = [f["where"] for f in doc["findings"] if f["code"] == "tool-origin"]
    assert origins == ["clerk/tools/fine"]


def test_a_server_listing_too_many_tools_is_refused(tmp_path: Path) -> None:
    many = [{"name": f"t{i}", "inputSchema": OBJECT} for i in range(1_001)]
    with pytest.raises(MCPServerError, match="lists more than 1,000 tools"):
        _listing(tmp_path, *many)


def test_a_recursive_ref_is_listed_and_its_arguments_checked(tmp_path: Path) -> None:
    # Recursion itself is fine: the model stops at a reference it is already inside.
    node = {"type": "object", "properties": {"name": {"type": "string"}}}
    node["properties"]["child"] = {"$ref": "#/$defs/node"}  # type: ignore[index]
    schema = {"type": "object", "properties": {"tree": {"$ref": "#/$defs/node"}}}
    tools = _listing(tmp_path, {"name": "walk", "inputSchema": {**schema, "$defs": {"node": node}}})
    (walk,) = tools
    assert walk.parse({"tree": {"name": "a", "child": {"name": "b"}}})
    with pytest.raises(loopwise.ToolArgumentsError, match="is not of type 'string'"):
        walk.parse({"tree": {"name": "a", "child": {"name": 3}}})


def test_a_catastrophic_pattern_checks_arguments_in_linear_time(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {"word": {"type": "string", "pattern": "^(a+)+$"}},
        "required": ["word"],
    }
    tools = _listing(tmp_path, {"name": "echo", "inputSchema": schema}, trust_annotations=True)
    # 40 a's and a '!': Python's re would try about 2**40 ways before saying no.
    model = ScriptedModel(
        [
            call("echo", {"word": "a" * 40 + "!"}, id="c1"),
            call("echo", {"word": "aaaa"}, id="c2"),
            reply("done"),
        ]
    )
    agent = Agent(name="clerk", tools=[*tools], max_steps=4)
    done = loopwise.run(agent, "go", model=model, store=None, approvals=lambda r: True)
    assert done.status == "completed", done
    results = [e.data for e in done.events if e.type == "tool_result"]
    assert results[0]["is_error"] and "does not match '^(a+)+$'" in results[0]["content"]
    assert not results[1]["is_error"] and '"word": "aaaa"' in results[1]["content"]


def test_unusable_tools_are_left_out_with_why_and_the_others_kept(tmp_path: Path) -> None:
    tools = _listing(
        tmp_path,
        {"name": "lookup", "inputSchema": OBJECT},
        {"name": "stringy", "inputSchema": {"type": "string"}},
        {"name": "final_answer", "inputSchema": OBJECT},
        {"name": "", "inputSchema": OBJECT},
        {"name": "../../etc", "inputSchema": OBJECT},
        {"name": "nul\x00byte", "inputSchema": OBJECT},
        {"name": "x" * 5_000, "inputSchema": OBJECT},
        {"name": 7, "inputSchema": OBJECT},
        {"name": "lookup", "inputSchema": OBJECT},
        {"name": "keyed", "inputSchema": {"type": "object", "patternProperties": {"^a": {}}}},
    )
    assert [t.name for t in tools] == ["lookup"]
    skipped = tools.skipped
    assert "not an object schema" in skipped["stringy"]
    assert "reserves" in skipped["final_answer"]
    assert "of that name twice" in skipped["lookup"]
    assert "patternProperties" in skipped["keyed"]
    bad_names = [k for k, why in skipped.items() if "1-64 letters" in why]
    assert len(bad_names) == 5 and all(len(k) < 80 and "\x00" not in k for k in bad_names)
    shown = tools[0].describe().left_out
    assert len(shown) == len(skipped) and all("MCP server 'hostile'" in s for s in shown)


def test_a_servers_final_answer_never_answers_a_text_agent(tmp_path: Path) -> None:
    tools = _listing(
        tmp_path,
        {"name": "final_answer", "inputSchema": OBJECT},
        {"name": "lookup", "inputSchema": OBJECT},
        trust_annotations=True,
    )
    agent = Agent(name="clerk", tools=[*tools], max_steps=3)
    model = ScriptedModel([call("final_answer", {"q": "the server's answer"}), reply("mine")])
    done = loopwise.run(agent, "go", model=model, store=None)
    assert (done.status, done.output) == ("completed", "mine")


def test_a_server_that_says_its_list_changed_is_listed_again_for_the_next_run(
    tmp_path: Path,
) -> None:
    source = _listing(
        tmp_path, {"name": "grow", "inputSchema": {"type": "object"}}, trust_annotations=True
    )
    agent = Agent(name="gardener", tools=[source], max_steps=3)  # the source itself
    _approved: dict[str, Any] = {"store": None, "approvals": lambda request: True}
    first = loopwise.run(
        agent, "grow", model=ScriptedModel([call("grow", {}), reply("grown")]), **_approved
    )
    assert first.status == "completed" and [t.name for t in source] == ["grow"]
    second = loopwise.run(
        agent, "use it", model=ScriptedModel([call("grown", {}), reply("ok")]), **_approved
    )
    assert second.status == "completed"
    (result,) = [e.data for e in second.events if e.type == "tool_result"]
    assert not result["is_error"] and '"tool": "grown"' in result["content"]
    assert [t.name for t in source] == ["grow", "grown"]


def test_only_a_message_too_deep_for_the_sdk_is_cut_and_then_it_reads() -> None:
    from loopwise.integrations.mcp.wire import MAX_NESTING, SDK_NESTING, TOO_DEEP, shallow

    readable = "[" * SDK_NESTING + "]" * SDK_NESTING
    assert shallow(readable) is readable  # the SDK reads it: passed on as sent
    text = '{"say": "[[{{ \\" ]]", "deep": ' + "[" * 300 + "1" + "]" * 300 + "}"
    cut = json.loads(shallow(text))
    assert cut["say"] == '[[{{ " ]]'  # brackets inside strings do not count
    inner = cut["deep"]
    for _ in range(MAX_NESTING - 1):  # the object is the first level
        (inner,) = inner
    assert inner == TOO_DEEP


def test_a_validator_on_an_argument_whose_schema_is_true_narrows_it(tmp_path: Path) -> None:
    # `true` is JSON Schema for "any value": the validator's hint now narrows an empty schema
    # (it used to fail on dict(True) and leave the whole tool out as a TypeError).
    schema = {"type": "object", "properties": {"order_id": True}, "required": ["order_id"]}
    check = loopwise.IdPattern(r"O-\d{4}")
    override = mcp.Override(validators={"order_id": check})
    tools = _listing(
        tmp_path, {"name": "refund", "inputSchema": schema}, overrides={"refund": override}
    )
    (refund,) = tools
    assert not tools.skipped
    shown = refund.schema["function"]["parameters"]["properties"]["order_id"]
    assert shown.get("pattern")
    assert refund.parse({"order_id": "O-1234"})
    with pytest.raises(loopwise.ToolArgumentsError):
        refund.parse({"order_id": "nope"})
