"""The agent loop and every guardrail, through the public API with scripted models."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

import loopwise
from loopwise import (
    Agent,
    Budget,
    ContextPolicy,
    EventType,
    IdPattern,
    LoopDetection,
    ModelRequest,
    RunResult,
    Status,
    Tool,
    ToolError,
    as_tool,
    tool,
)
from loopwise.testing import FakeChatServer, ScriptedModel, call, calls, refuse, reply


@tool
def lookup(customer_id: Annotated[str, IdPattern(r"C-\d{4}")]) -> dict[str, str]:
    """Look up a customer by id."""
    return {"id": customer_id, "name": "Dana"}


@tool
def orders(customer_id: Annotated[str, IdPattern(r"C-\d{4}")]) -> list[str]:
    """List a customer's orders."""
    return ["O-1017", "O-1023"]


def _agent(**settings: Any) -> Agent:
    return Agent(name="helper", instructions="Help.", tools=[lookup, orders], **settings)


def _events(result: RunResult, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in result.events if e.type == kind]


def test_errors_are_results_and_the_run_goes_on() -> None:
    model = ScriptedModel(
        [
            call("lookup_customer", {"customer_id": "C-1004"}),
            call("lookup", '{"customer_id": "C-1004"'),
            call("lookup", {"customer_id": "1004"}),
            call("lookup", {"customer_id": "C-1004"}),
            reply("Dana has two orders."),
        ]
    )
    result = loopwise.run(_agent(), "Who is C-1004?", model=model)
    assert result.status == Status.COMPLETED and result.output == "Dana has two orders."
    results = _events(result, "tool_result")
    assert [r["is_error"] for r in results] == [True, True, True, False]
    invented, broken, invalid, _ = (r["content"] for r in results)
    assert "no tool named 'lookup_customer'; the tools are: lookup, orders" in invented
    assert "not valid JSON" in broken
    assert "'1004' does not match the id pattern" in invalid
    assert all(r["content"].startswith("ERROR: ") for r in results[:3])
    # The model read each error as the tool message bound to its call.
    sent = model.requests[1].messages[-1]
    assert sent["role"] == "tool" and sent["content"] == invented
    assert sent["tool_call_id"] == model.requests[1].messages[-2]["tool_calls"][0]["id"]
    first_call = _events(result, "tool_call")[0]
    assert first_call["effect"] is None and first_call["args"] == {"customer_id": "C-1004"}
    assert _events(result, "tool_call")[3]["effect"] == "read"
    assert result.usage.tool_calls == 4 and result.usage.model_calls == 5 and result.steps == 5


def _endless(request: ModelRequest) -> Any:
    """Never answers: a new (distinct) call every turn."""
    n = len(request.messages)
    return call("lookup", {"customer_id": f"C-{1000 + n}"})


def test_step_limit_ends_the_run_with_what_was_gathered() -> None:
    model = ScriptedModel(_endless)
    result = loopwise.run(_agent(max_steps=4), "Loop.", model=model)
    assert result.status == Status.STEP_LIMIT and len(model.requests) == 4
    assert "4 steps" in str(result.detail)
    assert len(result.output["tool_results"]) == 4
    assert result.output["tool_results"][0]["content"] == '{"id": "C-1002", "name": "Dana"}'
    # A run-level override wins over the agent's own limit.
    model = ScriptedModel(_endless)
    overridden = loopwise.run(_agent(max_steps=4), "Loop.", model=model, max_steps=2)
    assert overridden.status == Status.STEP_LIMIT and len(model.requests) == 2


def test_budget_stops_as_soon_as_usage_crosses_it() -> None:
    model = ScriptedModel(_endless)
    result = loopwise.run(_agent(), "Loop.", model=model, budget=Budget(max_tokens=600))
    assert result.status == Status.BUDGET_EXCEEDED and "max_tokens 600" in str(result.detail)
    assert result.usage.model_calls == len(model.requests) < 10
    calls_made = _events(result, "model_call")
    before_last = sum(c["input_tokens"] + c["output_tokens"] for c in calls_made[:-1])
    assert before_last <= 600
    assert result.output["tool_results"], "what was gathered is kept"


def test_failure_cap_ends_with_tool_failed() -> None:
    @tool
    def flaky(n: int) -> None:
        """Always fails."""
        raise RuntimeError(f"database is down ({n})")

    model = ScriptedModel(lambda r: call("flaky", {"n": len(r.messages)}))
    result = loopwise.run(Agent(name="a", tools=[flaky]), "Go.", model=model)
    assert result.status == Status.TOOL_FAILED and len(model.requests) == 3
    assert "flaky failed 3 times" in str(result.detail) and "database is down" in str(result.detail)
    assert "raised RuntimeError: database is down" in _events(result, "tool_result")[0]["content"]


def test_invented_names_share_one_failure_count() -> None:
    script = [call("search", {}), call("find", {}), call("grep", {}), reply("never")]
    result = loopwise.run(_agent(), "Go.", model=ScriptedModel(script))
    assert result.status == Status.TOOL_FAILED
    assert "(unknown tool) failed 3 times" in str(result.detail)


def test_repeating_the_same_call_is_stuck() -> None:
    same = call("lookup", {"customer_id": "C-1004"})
    model = ScriptedModel([same, same, same, reply("never")])
    result = loopwise.run(_agent(), "Go.", model=model)
    assert result.status == Status.STUCK and "3 times in a row" in str(result.detail)
    # The third identical call is not run.
    assert len(_events(result, "tool_result")) == 2 and len(model.requests) == 3


def test_ping_pong_is_stuck() -> None:
    a = call("lookup", {"customer_id": "C-1004"})
    b = call("orders", {"customer_id": "C-1004"})
    result = loopwise.run(_agent(), "Go.", model=ScriptedModel([a, b, a, b, reply("never")]))
    assert result.status == Status.STUCK and "ping-ponged" in str(result.detail)


def test_three_calls_of_one_turn_run_concurrently_and_answer_in_call_order() -> None:
    inside, peak = [0], [0]
    all_in = asyncio.Event()

    @tool
    async def slow(n: int) -> str:
        """Wait until all three calls are inside."""
        inside[0] += 1
        peak[0] = max(peak[0], inside[0])
        if inside[0] == 3:
            all_in.set()
        await asyncio.wait_for(all_in.wait(), 5)
        inside[0] -= 1
        return f"done {n}"

    turn = calls(("slow", {"n": 1}, "c1"), ("slow", {"n": 2}, "c2"), ("slow", {"n": 3}, "c3"))
    model = ScriptedModel([turn, reply("ok")])
    result = loopwise.run(Agent(name="a", tools=[slow]), "Go.", model=model)
    assert result.status == Status.COMPLETED and peak[0] == 3
    answers = [m for m in model.requests[1].messages if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in answers] == [
        ("c1", "done 1"),
        ("c2", "done 2"),
        ("c3", "done 3"),
    ]


def test_sync_tools_of_one_turn_also_overlap() -> None:
    barrier = threading.Barrier(3, timeout=5)

    @tool
    def blocking(n: int) -> int:
        """Block until three threads are here."""
        return barrier.wait() * 0 + n

    turn = calls(("blocking", {"n": 1}), ("blocking", {"n": 2}), ("blocking", {"n": 3}))
    model = ScriptedModel([turn, reply("ok")])
    result = loopwise.run(Agent(name="a", tools=[blocking]), "Go.", model=model)
    assert result.status == Status.COMPLETED
    answers = [m["content"] for m in model.requests[1].messages if m["role"] == "tool"]
    assert answers == ["1", "2", "3"]


def test_timeouts_and_huge_outputs_become_honest_results() -> None:
    @tool(timeout=0.01)
    async def hang() -> None:
        """Never returns."""
        await asyncio.Event().wait()

    @tool
    def dump() -> str:
        """Too much text."""
        return "x" * 50_000

    script = [calls(("hang", {}), ("dump", {})), reply("ok")]
    agent = Agent(name="a", tools=[hang, dump], max_tool_output_chars=1000)
    result = loopwise.run(agent, "Go.", model=ScriptedModel(script))
    by_tool = {r["tool"]: r for r in _events(result, "tool_result")}
    timed_out, big = by_tool["hang"], by_tool["dump"]
    assert timed_out["is_error"] and "timed out after 0.01s" in timed_out["content"]
    assert not big["is_error"] and len(big["content"]) < 1100
    assert big["content"].endswith("[truncated: showing 1000 of 50000 characters]")


def test_context_policy_compacts_old_results_and_keeps_instructions() -> None:
    @tool
    def page(n: int) -> str:
        """Read page n."""
        return f"page {n}: " + "lorem ipsum " * 200

    def script(request: ModelRequest) -> Any:
        done = sum(m["role"] == "tool" for m in request.messages)
        return call("page", {"n": done}) if done < 6 else reply("read them all")

    def tokens_per_step(policy: ContextPolicy | None) -> list[int]:
        model = ScriptedModel(script)
        agent = Agent(name="reader", instructions="Read.", tools=[page], context_policy=policy)
        result = loopwise.run(agent, "Read six pages.", model=model)
        assert result.status == Status.COMPLETED
        if policy is not None:
            last = model.requests[-1].messages
            assert last[0] == {"role": "system", "content": "Read."}
            tool_messages = [m["content"] for m in last if m["role"] == "tool"]
            assert all("[compacted" in c for c in tool_messages[:-2])
            assert all("[compacted" not in c for c in tool_messages[-2:])
        return [c["input_tokens"] for c in _events(result, "model_call")]

    grown = tokens_per_step(None)
    kept = tokens_per_step(ContextPolicy(keep_last=2))
    assert grown == sorted(grown) and grown[-1] > 2 * kept[-1]
    assert kept[-1] - kept[-2] < grown[-1] - grown[-2]


def test_refusal_ends_the_run_refused() -> None:
    result = loopwise.run(_agent(), "Do something bad.", model=ScriptedModel([refuse("No.")]))
    assert result.status == Status.REFUSED and result.detail == "No."


def test_an_ungated_irreversible_tool_is_refused_at_construction() -> None:
    @tool(effect="irreversible")
    def refund(order_id: str, cents: int) -> None:
        """Refund an order."""

    with pytest.raises(ToolError, match=r"'refund' is irreversible and has no gate") as info:
        Agent(name="desk", tools=[refund])
    assert info.value.tool == "refund"

    @tool(effect="irreversible", gate=object())
    def gated_refund(order_id: str, cents: int) -> None:
        """Refund an order (gated)."""

    assert "gated_refund" in Agent(name="desk", tools=[gated_refund]).tool_map
    with pytest.raises(ToolError, match="two tools are named 'lookup'"):
        Agent(name="dup", tools=[lookup, lookup])


class Verdict(BaseModel):
    """A structured answer."""

    reason: str = Field(description="Why.")
    failed_orders: int = Field(ge=0)


def test_structured_answer_through_final_answer_with_validation_feedback() -> None:
    agent = _agent(output_type=Verdict)
    model = ScriptedModel(
        [
            call("final_answer", {"reason": "declined", "failed_orders": -1}),
            call("final_answer", {"reason": "declined", "failed_orders": 2}),
        ]
    )
    result = loopwise.run(agent, "Why?", model=model)
    assert result.status == Status.COMPLETED
    assert result.output == Verdict(reason="declined", failed_orders=2)
    error = _events(result, "tool_result")[0]
    assert error["is_error"] and "failed_orders" in error["content"]
    assert model.requests[0].output_schema == Verdict.model_json_schema()
    assert any(t["function"]["name"] == "final_answer" for t in model.requests[0].tools or [])


def test_structured_answer_as_text_json_and_invalid_output_cap() -> None:
    text = reply({"reason": "lost parcel", "failed_orders": 1})
    assert loopwise.run(_agent(output_type=Verdict), "Why?", model=ScriptedModel([text])).output
    model = ScriptedModel([reply("no idea")] * 3)
    result = loopwise.run(_agent(output_type=Verdict), "Why?", model=model)
    assert result.status == Status.INVALID_OUTPUT and len(model.requests) == 3
    assert "final_answer" in model.requests[1].messages[-1]["content"]


def test_offline_scripted_model_completes_a_structured_agent() -> None:
    result = loopwise.run(_agent(output_type=Verdict), "Why?", model="scripted")
    assert result.status == Status.COMPLETED and isinstance(result.output, Verdict)


def test_recorded_tool_results_are_replayed_not_rerun() -> None:
    runs = [0]

    @tool(effect="write")
    def note(text: str, ctx: loopwise.Context) -> str:
        """Write a note."""
        runs[0] += 1
        return f"noted {text} with key {ctx.idempotency_key}"

    def script(request: ModelRequest) -> Any:
        if any(m["role"] == "tool" for m in request.messages):
            return reply("done")
        return call("note", {"text": "hi"}, id="call_note")

    agent = Agent(name="notes", tools=[note])
    first = loopwise.run(agent, "Note hi.", model=ScriptedModel(script), run_id="r1")
    assert runs[0] == 1
    result = _events(first, "tool_result")[0]
    assert result["content"] == "noted hi with key r1:call_note"
    assert result["key"] == "notes:tool:1:call_note"
    assert _events(first, "tool_call")[0]["key"].startswith("notes:tool:1:call_note")
    replay = {e.data["key"]: e.data for e in first.events if "key" in e.data}
    again = loopwise.run(agent, "Note hi.", model=ScriptedModel(script), run_id="r2", replay=replay)
    assert again.status == Status.COMPLETED and runs[0] == 1 and again.output == "done"


def test_read_tools_get_no_idempotency_key() -> None:
    seen: list[str | None] = []

    @tool
    def peek(ctx: loopwise.Context) -> str:
        """Look."""
        seen.append(ctx.idempotency_key)
        return "ok"

    loopwise.run(Agent(name="a", tools=[peek]), "Go.", model=ScriptedModel([call("peek"), "k"]))
    assert seen == [None]


def test_steps_and_agents_become_tools() -> None:
    @loopwise.step
    def shout(text: str) -> str:
        return text.upper()

    inner = Agent(name="inner", tools=[lookup])
    outer = Agent(
        name="outer",
        tools=[
            as_tool(shout, description="Shout a text."),
            as_tool(inner, description="Ask the inner agent."),
        ],
    )
    script = [
        calls(("shout", {"input": "hi"}), ("inner", {"input": "who is C-1004?"})),
        reply("inner answer"),
        reply("all done"),
    ]
    result = loopwise.run(outer, "Go.", model=ScriptedModel(script))
    assert result.status == Status.COMPLETED and result.output == "all done"
    contents = {r["tool"]: r["content"] for r in _events(result, "tool_result")}
    assert contents == {"shout": "HI", "inner": "inner answer"}
    started = [e.step for e in result.events if e.type == "step_started"]
    assert "outer/inner/inner" in started and "outer/shout/shout" in started
    with pytest.raises(ToolError, match="is a step, not a tool"):
        Agent(name="x", tools=[shout])


def test_an_agent_is_a_workflow_node() -> None:
    @loopwise.step
    def count_words(text: str) -> int:
        return len(text.split())

    flow = loopwise.Workflow("flow", input_type=str).then(_agent()).then(count_words)
    result = loopwise.run(flow, "Go.", model=ScriptedModel([reply("three short words")]))
    assert result.status == Status.COMPLETED and result.output == 3


def test_the_loop_runs_against_the_fake_server() -> None:
    script = [
        call("lookup", {"customer_id": "C-1004"}),
        call("final_answer", {"reason": "declined", "failed_orders": 1}),
    ]

    async def go(server: FakeChatServer) -> RunResult:
        model = server.model()
        try:
            return await loopwise.arun(_agent(output_type=Verdict), "Why?", model=model)
        finally:
            await model.aclose()

    with FakeChatServer(script) as server:
        result = asyncio.run(go(server))
    assert result.status == Status.COMPLETED and result.output.failed_orders == 1
    sent = server.requests[1]
    assert [t["function"]["name"] for t in sent["tools"]] == ["lookup", "orders", "final_answer"]
    assert sent["messages"][-1]["role"] == "tool"
    assert json.loads(sent["messages"][-1]["content"]) == {"id": "C-1004", "name": "Dana"}


def _write_beside_a_budget_breaker(
    write: Tool, before_answer: Callable[[], object] = lambda: None
) -> tuple[Agent, ScriptedModel]:
    """An outer agent whose one turn calls ``write`` and a nested agent; the nested
    agent's long answer (given after ``before_answer()``) crosses a 300-token budget."""
    inner = Agent(name="inner")
    outer = Agent(
        name="outer",
        tools=[write, as_tool(inner, description="Ask the helper. Call it for facts.")],
    )

    def respond(request: ModelRequest) -> Any:
        if request.tools is None:  # the inner agent: a long answer crosses the budget
            before_answer()
            return reply("word " * 400)
        return calls((write.name, {}), ("inner", {"input": "q"}))

    return outer, ScriptedModel(respond)


def test_a_call_that_ends_the_run_cancels_its_siblings_so_no_effect_follows() -> None:
    """A nested agent that blows the run's budget ends the run; the slow write beside it
    in the same turn is cancelled, not left to take effect after the run has ended."""
    effects: list[str] = []
    cancelled: list[str] = []
    release: list[asyncio.Event] = []

    @tool(effect="write")
    async def slow_write() -> str:
        """Write something slowly. Call it to write."""
        try:
            await release[0].wait()
        except asyncio.CancelledError:
            cancelled.append("slow_write")
            raise
        effects.append("written")
        return "written"

    outer, model = _write_beside_a_budget_breaker(slow_write)

    async def go() -> RunResult:
        release.append(asyncio.Event())
        result = await loopwise.arun(
            outer, "go", model=model, budget=Budget(max_tokens=300), store=None
        )
        release[0].set()  # a sibling left running would now take effect
        for _ in range(5):
            await asyncio.sleep(0)
        return result

    result = asyncio.run(go())
    assert result.status == Status.BUDGET_EXCEEDED
    assert cancelled == ["slow_write"] and effects == []


@pytest.mark.parametrize(
    ("build", "culprit"),
    [
        (lambda: Agent(name="a", max_steps=0), "max_steps"),
        (lambda: Agent(name="a", failure_cap=-1), "failure_cap"),
        (lambda: Agent(name="a", budget={"max_tokens": 5}), "budget"),
        (lambda: Agent(name=""), "name"),
        (lambda: Agent(name="a/b"), "name"),
        (lambda: LoopDetection(repeats=1), "repeats"),
        (lambda: LoopDetection(ping_pong=1), "ping_pong"),
        (lambda: ContextPolicy(keep_last=-1), "keep_last"),
    ],
)
def test_agent_settings_that_cannot_work_raise_naming_the_setting(build: Any, culprit: str) -> None:
    with pytest.raises(loopwise.ConfigError) as caught:
        build()
    assert caught.value.name == culprit and culprit in str(caught.value)


def test_a_tool_timeout_must_be_positive() -> None:
    with pytest.raises(ToolError, match="timeout must be seconds > 0"):

        @tool(timeout=0)
        def instant() -> str:
            """Do nothing. Call it never."""
            return ""


def test_a_step_whose_budget_is_not_a_budget_is_refused_not_ignored() -> None:
    flow = loopwise.Workflow("w", budget={"max_tokens": 5})  # type: ignore[arg-type]
    flow.then(loopwise.step(lambda x: x, name="same"))
    with pytest.raises(loopwise.ConfigError, match=r"budget must be a loopwise\.Budget"):
        loopwise.run(flow, 1, store=None)


def test_a_sync_write_already_running_when_the_run_ends_is_seen_through_and_recorded() -> None:
    """A thread cannot be cancelled: its effect is awaited and logged, never left unseen."""
    effects: list[str] = []
    started = threading.Event()
    over_budget = threading.Event()

    class Watch:
        def record(self, run_id: str, event: loopwise.Event) -> None:
            if event.type is EventType.MODEL_CALL and event.step.endswith("/inner"):
                over_budget.set()  # the nested agent's answer has crossed the budget

    @tool(effect="write")
    def slow_sync_write() -> str:
        """Write something slowly. Call it to write."""
        started.set()
        # Still running when the sibling ends the run: it finishes only after that.
        assert over_budget.wait(10)
        effects.append("written")
        return "written"

    outer, model = _write_beside_a_budget_breaker(
        slow_sync_write, before_answer=lambda: started.wait(5)
    )
    result = loopwise.run(
        outer, "go", model=model, budget=Budget(max_tokens=300), store=None, sinks=[Watch()]
    )
    assert result.status == Status.BUDGET_EXCEEDED
    assert effects == ["written"]
    kinds = [(e.type, e.data.get("tool")) for e in result.events]
    assert kinds.index(("tool_result", "slow_sync_write")) < kinds.index(("run_finished", None))


def test_a_mistyped_tool_name_is_answered_with_the_closest_tool() -> None:
    @loopwise.tool
    def lookup_order(order_id: str) -> str:
        """Look an order up by its id."""
        return "shipped"

    agent = loopwise.Agent(name="clerk", instructions="Help.", tools=[lookup_order])
    model = ScriptedModel([call("lookup_ordr", {"order_id": "O-1"}), reply("done")])
    result = loopwise.run(agent, "Where is O-1?", model=model, store=None)
    assert result.status is loopwise.Status.COMPLETED
    told = json.dumps(model.requests[1].messages)
    assert "there is no tool named 'lookup_ordr'; did you mean 'lookup_order'?" in told
