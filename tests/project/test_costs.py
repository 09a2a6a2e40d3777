"""Costs that must not come back (issue 17), checked without a clock.

Each test counts Python function calls (``sys.setprofile``), formatted objects or
imported modules: work that re-walks everything gathered so far shows up as a count
that grows with the size, and a heavy import as a module in ``sys.modules``, on any
machine, however loaded.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

import loopwise
from loopwise import Agent, Budget, ContextPolicy, LoopDetection, ModelRequest, Workflow
from loopwise.core.events import Event
from loopwise.models.port import Turn, message_chars
from loopwise.store.sqlite import SQLiteStore
from loopwise.testing import ScriptedModel, call, reply
from tests.support import ROOT


def _calls(fn: Callable[[], Any]) -> int:
    """How many Python function calls (and generator resumptions) ``fn()`` makes."""
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


@loopwise.step
async def _pass(value: int) -> int:
    return value


async def _parity(value: int) -> int:
    return value % 2


def _add_diamond(wf: Workflow, i: int, last: str) -> str:
    """route -> one of two branches (named before they exist) -> merge; returns the merge."""
    wf.add_route(f"r{i}", _parity, {0: f"even{i}", 1: f"odd{i}"}, after=[last])
    wf.add(f"even{i}", _pass)
    wf.add(f"odd{i}", _pass)
    wf.add(f"merge{i}", _pass, after=[f"even{i}", f"odd{i}"])
    return f"merge{i}"


def _diamonds(count: int) -> Workflow:
    wf = Workflow("diamonds", input_type=int).add("start", _pass)
    last = "start"
    for i in range(count):
        last = _add_diamond(wf, i, last)
    return wf


def test_adding_a_node_costs_the_same_in_a_small_and_a_large_workflow() -> None:
    small, large = _diamonds(5), _diamonds(300)
    assert _calls(lambda: _add_diamond(small, 5, "merge4")) == _calls(
        lambda: _add_diamond(large, 300, "merge299")
    )


def test_validating_and_running_a_workflow_is_linear_in_its_nodes() -> None:
    small, large = _diamonds(20), _diamonds(400)
    per_node = [
        _calls(lambda wf=wf: loopwise.run(wf, 3, store=None)) / len(wf.graph)
        for wf in (small, large)
    ]
    assert loopwise.run(large, 3, store=None).output == 3
    # A re-walk per merge node made the large graph ~20x dearer per node; linear stays ~1x.
    assert per_node[1] < 1.3 * per_node[0]


def _long_agent(
    steps: int, sent: list[ModelRequest] | None = None, **settings: Any
) -> tuple[Agent, ScriptedModel]:
    """An agent that reads ``steps - 1`` pages (each ~300 characters), then answers;
    ``sent`` gets the last request."""
    left = [steps]

    def script(request: ModelRequest) -> Turn:
        if sent is not None:
            sent[:] = [request]
        left[0] -= 1
        turn = call("fetch_page", {"page": steps - left[0]}) if left[0] else reply("done")
        turn.input_tokens = turn.output_tokens = 1  # nothing estimated from the prompt
        return turn

    async def fetch_page(page: int) -> str:
        """Fetch one page of the history.

        Args:
            page: The page number.
        """
        return f"page {page}: " + "order failed, card declined; " * 10

    agent = Agent(
        name="reader",
        tools=[fetch_page],
        max_steps=steps + 1,
        loop_detection=LoopDetection(repeats=0, ping_pong=0),
        **settings,
    )
    return agent, ScriptedModel(script)


def test_a_run_result_repr_is_one_line_and_sync_run_formats_no_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    formatted: list[Event] = []
    monkeypatch.setattr(Event, "__repr__", lambda self: formatted.append(self) or "event")
    agent, model = _long_agent(200)
    result = loopwise.run(agent, "Read it all.", model=model, store=None)
    assert result.status == "completed" and len(result.events) > 600
    assert formatted == []  # asyncio.run formats the task's result on Python 3.11
    text = repr(result)
    assert "\n" not in text and len(text) < 400
    assert text.startswith(f"RunResult(run_id={result.run_id!r}, status='completed'")
    assert f"events={len(result.events)}" in text


def test_a_context_policy_compacts_each_old_result_once(monkeypatch: pytest.MonkeyPatch) -> None:
    compacted: list[Any] = []
    compact = ContextPolicy.compact
    monkeypatch.setattr(
        ContextPolicy, "compact", lambda self, m: compacted.append(m) or compact(self, m)
    )
    sent: list[ModelRequest] = []
    agent, model = _long_agent(100, sent, context_policy=ContextPolicy(keep_last=3))
    assert loopwise.run(agent, "Read it all.", model=model, store=None).status == "completed"
    assert len(compacted) == 99 - 3  # 99 results; each but the last three compacted once
    # The size the policy keeps up to date is the size of what is sent.
    assert sent[0].known_chars == sum(message_chars(m) for m in sent[0].messages)
    results = [m["content"] for m in sent[0].messages if m["role"] == "tool"]
    assert len(results) == 99
    assert all("[compacted: " in r for r in results[:-3])
    assert all(r.startswith("page ") and "[compacted" not in r for r in results[-3:])


def test_a_late_agent_step_makes_as_many_calls_as_an_early_one() -> None:
    def per_step(steps: int) -> float:
        # A token budget has every prompt's size estimated, under the policy's compaction.
        agent, model = _long_agent(
            steps, context_policy=ContextPolicy(keep_last=3), budget=Budget(max_tokens=10**9)
        )
        return _calls(lambda: loopwise.run(agent, "Read.", model=model, store=None)) / steps

    short, long = per_step(50), per_step(400)
    # Re-walking the transcript every turn made a 400-step run ~4x dearer per step.
    assert long < 1.1 * short


def test_the_store_verbs_do_not_load_the_openai_sdk(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    paused = []
    for _ in range(2):
        agent, model = _gated_refunder()
        result = loopwise.run(agent, "Refund O-1.", model=model, store=store)
        assert result.status == "awaiting_approval"
        paused.append(result.run_id)
    at = ["--store", str(store)]
    verbs = [
        ["runs", "list", *at],
        ["runs", "show", paused[0], *at, "--json"],
        ["pending", *at, "--json"],
        ["approve", paused[0], *at, "--by", "alice"],
        ["deny", paused[1], *at, "--reason", "no"],
        ["decide", "--steps-known", "no", "--wrong-step-cost", "expensive"],
    ]
    script = textwrap.dedent(
        f"""
        import sys
        from loopwise.cli.main import main
        codes = [main(argv) for argv in {verbs!r}]
        sdk = sorted(m for m in sys.modules if m.split(".")[0] == "openai")
        print(codes, sdk[:3])
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines()[-1] == "[0, 0, 0, 0, 0, 0] []"


def test_the_store_and_approval_verbs_load_no_model_stack(tmp_path: Path) -> None:
    # One fresh process runs every store verb through the console script's own entry
    # point: a module any of them loads stays in sys.modules for the check at the end.
    # asyncio and the run machinery (step, history) were half of these verbs' wall time.
    store = tmp_path / "runs.db"
    paused = []
    for _ in range(3):
        agent, model = _gated_refunder()
        paused.append(loopwise.run(agent, "Refund O-1.", model=model, store=store).run_id)
    at = ["--store", str(store)]
    verbs = [
        ["runs", "list", *at],
        ["runs", "list", *at, "--json"],
        ["runs", "show", paused[0], *at],
        ["pending", *at],
        ["pending", paused[0], *at, "--json"],
        ["approve", paused[0], *at, "--by", "alice", "--reason", "ok"],
        ["approve", paused[1], *at, "--all"],
        ["deny", paused[2], *at, "--reason", "no"],
    ]
    script = textwrap.dedent(
        f"""
        import sys
        from loopwise.cli.main import main
        codes = [main(argv) for argv in {verbs!r}]
        heavy = {{"openai", "networkx", "pydantic", "httpx", "loopwise.architectures.agent",
                  "loopwise.architectures.workflow", "loopwise.tools.tool",
                  "loopwise.running.runner", "asyncio", "loopwise.core.step",
                  "loopwise.architectures.history", "loopwise.core.loops"}}
        print(codes, sorted({{m.split(".")[0] for m in sys.modules}} & heavy
                            | set(sys.modules) & heavy))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines()[-1] == f"{[0] * len(verbs)} []"


def test_reading_a_run_input_loads_neither_pydantic_nor_the_sdk(tmp_path: Path) -> None:
    # --input is read with core's json_value (beside jsonable), not the tools layer's, so
    # the CLI knows its input is JSON (or says why not) before it loads a model stack.
    doc = tmp_path / "ticket.json"
    doc.write_text('{"subject": "Charged twice", "amounts": [49, 49.0]}')
    script = textwrap.dedent(
        f"""
        import argparse, sys
        from loopwise.cli.input import input_of
        from loopwise.errors import ConfigError
        read = [input_of(argparse.Namespace(input=raw, input_text=None))
                for raw in ['{{"a": [1, 2.5, null]}}', "@{doc}"]]
        try:
            input_of(argparse.Namespace(input='{{"amount": NaN}}', input_text=None))
        except ConfigError as e:
            read.append(str(e).split(" (")[0])
        heavy = {{"pydantic", "openai", "loopwise.tools.tool"}}
        print(read, sorted({{m.split(".")[0] for m in sys.modules}} & heavy
                           | set(sys.modules) & heavy))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    expected = [
        {"a": [1, 2.5, None]},
        {"subject": "Charged twice", "amounts": [49, 49.0]},
        "--input is not valid JSON",
    ]
    assert out.splitlines()[-1] == f"{expected} []"


def test_declaring_validating_and_running_workflows_and_plans_loads_no_networkx(
    tmp_path: Path,
) -> None:
    # networkx is ~300 modules and ~12 MiB: loading it made a process running the triage
    # workflow peak at 1.25x the raw loop's memory. Only the graph view and drawings need it.
    triage = ROOT / "workflows" / "ticket_triage.py"
    ticket = '{"subject": "Charged twice", "body": "Two charges of $49 on March 3."}'
    run = ["run", f"{triage}:triage", "--model", "scripted", "--input", ticket]
    store = ["--store", str(tmp_path / "runs.db")]
    script = textwrap.dedent(
        f"""
        import sys
        import loopwise
        from loopwise import Workflow
        from loopwise.cli.main import main
        from loopwise.architectures.hybrid import Hybrid
        from loopwise.testing import ScriptedModel, reply

        codes = [main(argv) for argv in ({run + store!r}, ["check", {str(triage)!r}],
                                         ["graph", {str(triage)!r}])]

        @loopwise.tool(effect="read")
        def probe(label: str) -> str:
            \"\"\"Probe.\"\"\"
            return label

        steps = [{{"id": i, "action": "probe", "args": {{"label": i}}, "reason": "r",
                   "depends_on": d}} for i, d in [("a", []), ("b", []), ("c", ["a", "b"])]]
        model = ScriptedModel([reply({{"steps": steps}})])
        hybrid = loopwise.run(Hybrid("h", actions=[probe]), "go", model=model, store=None)

        @loopwise.step
        def one(x: int) -> int:
            return x

        wf = Workflow("w", input_type=int).add("a", one).add("b", one, after=["a"])
        wf.add_route("r", lambda x: x % 2, {{0: "even", 1: "odd"}}, after=["b"])
        wf.add("even", one).add("odd", one).add("end", one, after=["even", "odd"])
        routed = loopwise.run(wf, 3, store=None)
        cyclic = Workflow("c").add("a", one).add("b", one, after=["a"]).connect("b", "a")
        codes += [hybrid.status.value, routed.output, [e.code for e in cyclic.validation_errors()]]
        before = "networkx" in sys.modules
        view = wf.graph
        print(codes, before, type(view).__module__.split(".")[0], sorted(view.edges))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    edges = [("a", "b"), ("b", "r"), ("even", "end"), ("odd", "end"), ("r", "even"), ("r", "odd")]
    assert out.splitlines()[-1] == f"[0, 0, 0, 'completed', 3, ['cycle']] False networkx {edges}"


def _gated_refunder() -> tuple[Agent, ScriptedModel]:
    @loopwise.tool(effect="irreversible", gate=loopwise.tools.gates.human())
    async def refund(order_id: str) -> str:
        """Refund one order that was charged in error.

        Args:
            order_id: The order to refund.
        """
        return f"refunded {order_id}"

    agent = Agent(name="refunder", tools=[refund], max_steps=3)
    return agent, ScriptedModel([call("refund", {"order_id": "O-1"}), reply("done")])


def test_reading_a_long_run_log_sets_off_at_most_one_collection(tmp_path: Path) -> None:
    agent, model = _long_agent(600)
    result = loopwise.run(agent, "Read it all.", model=model, store=tmp_path / "runs.db")
    assert len(result.events) > 1800
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(count)
    try:
        with SQLiteStore(tmp_path / "runs.db") as store:
            log = store.show(result.run_id)
            journal = store.journal(result.run_id)
    finally:
        gc.callbacks.remove(count)
    assert len(log["events"]) == len(result.events) and len(journal) > 600
    # Allocating the decoded log set off a collection every ~700 objects, and full ones
    # that rescan the heap, so reading grew faster than the log; now at most the one
    # deferred pass after the read.
    assert len(collections) <= 2


def test_the_model_port_sends_the_bytes_the_sdk_create_sends() -> None:
    sent: list[tuple[str, str, list[tuple[str, str]], bytes]] = []
    answer = {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }

    def handler(request: httpx2.Request) -> httpx2.Response:
        headers = sorted(request.headers.items())
        sent.append((request.method, str(request.url), headers, request.content))
        return httpx2.Response(200, json=answer)

    client = openai.AsyncOpenAI(
        base_url="http://127.0.0.1:9/v1",
        api_key="sk-test",
        max_retries=0,
        http_client=openai.DefaultAsyncHttpxClient(transport=httpx2.MockTransport(handler)),
    )
    model = loopwise.OpenAIModel("m", client=client)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi é ☃"},
        {"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]  # fmt: skip
    fmt = {"type": "json_schema", "json_schema": {"name": "A", "schema": {"type": "object"}}}
    cases: list[tuple[ModelRequest, dict[str, Any]]] = [
        (ModelRequest(messages=history[:2]), {}),
        # Tools with no choice go out with OpenAI's default said out loud (llama-cpp-python
        # reads a missing choice as "no tools").
        (ModelRequest(messages=history, tools=tools), {"tool_choice": "auto", "tools": tools}),
        (
            ModelRequest(
                messages=history[:2],
                response_format=fmt,
                tool_choice="none",
                temperature=0.2,
                max_output_tokens=50,
            ),
            {
                "tool_choice": "none",
                "response_format": fmt,
                "temperature": 0.2,
                "max_completion_tokens": 50,
            },
        ),
    ]

    async def both() -> None:
        for request, extra in cases:
            turn = await model.complete(request)
            assert turn.text == "ok" and turn.input_tokens == 3
            await client.chat.completions.create(model="m", messages=request.messages, **extra)

    asyncio.run(both())
    assert len(sent) == 2 * len(cases)
    for port, sdk in zip(sent[::2], sent[1::2], strict=True):
        assert port == sdk
