"""The core contract through the public API: steps, run results, budgets, statuses."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

import loopwise
from loopwise import Budget, ConfigError, ModelRequest, Status
from loopwise.testing import ScriptedModel, reply

EXPECTED_ALL = {
    "Action", "ActionCatalog", "ActionResult", "Agent", "ApprovalRequest", "Approved", "Bounds",
    "Budget", "Case", "ConfigError", "Context", "ContextPolicy", "Decision", "DecisionError",
    "Denied", "DirectEffectError", "Edited", "ConversationError", "SummarizingPolicy",
    "Effect", "Escalate", "EvalOptions", "EvalReport", "EvalTarget", "Event", "EventType",
    "Finding", "Gate",
    "GraphError", "Graduated", "Graduation", "Halt", "Hybrid", "HybridOutput", "IdPattern",
    "InDirectory", "LoopDetection",
    "LoopwiseError", "Model", "ModelAPIError", "ModelNotConfigured", "ModelRequest", "OneOf",
    "OpenAIModel", "OpenAIOptions", "Plan", "PlanContext", "PlanStep",
    "REJECTED", "policy", "policy_then_human", "PostgresStore", "Price", "Pricing", "RunOptions",
    "RunResult", "RunStore", "RunStream", "SQLiteStore", "Status", "Step", "StoreError",
    "StoredApproval", "StoredRun", "Structured", "TargetError", "TerminalApprovals", "TextDelta",
    "Tool", "ToolArgumentsError", "ToolCall", "ToolError", "ToolResult", "TraceAnalysis", "Turn",
    "Judge", "JudgeError", "ProbabilitiesMissing", "Ruling", "AskPerson", "Cascade", "Weighed",
    "Sweep", "SweepPoint", "asweep", "sweep", "Shadow",
    "Usage", "Workflow", "aevaluate", "analyze", "approve", "aresume", "arun", "as_tool", "astream",
    "astream_resume", "check", "decide", "deny", "enqueue", "evaluate", "field_match",
    "graduate", "load_dataset", "open_store", "resolve_model", "resume", "run", "step", "tool",
    "approvals", "call_tools", "calls", "gates", "hybrid", "mcp", "otel",
    "DEFAULT", "ApprovalHandler", "ModelLike", "ResumeOverrides", "RunOverrides", "StoreLike",
    "asgi_inbox", "wsgi_inbox",
}  # fmt: skip


def test_public_api_is_exactly_the_curated_list() -> None:
    assert set(loopwise.__all__) == EXPECTED_ALL
    # ruff's order (RUF022): CONSTANTS, then Classes, then functions
    order = sorted(loopwise.__all__, key=lambda n: (not n.isupper(), not n[0].isupper(), n))
    assert list(loopwise.__all__) == order
    for name in loopwise.__all__:
        assert getattr(loopwise, name) is not None, name


def test_root_functions_stay_functions_when_their_modules_load() -> None:
    # In a fresh interpreter, so that importing the modules first is what happens: their
    # homes are in folders, so no root module shadows a root function (no hook needed).
    code = (
        "import loopwise.evidence.graduate.analyze, loopwise.evidence.check\n"
        "import loopwise.evidence.decide\n"
        "import loopwise.core.step\n"
        "from loopwise import analyze, check, decide\n"
        "import loopwise\n"
        "assert all(callable(f) for f in (analyze, check, decide, loopwise.check))\n"
        "print(decide('yes', 'cheap').architecture)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "workflow"), done.stderr


def test_status_is_the_closed_set() -> None:
    assert {s.value for s in Status} == {
        "completed", "step_limit", "budget_exceeded", "tool_failed", "stuck",
        "invalid_output", "refused", "awaiting_approval", "denied", "error", "cancelled",
    }  # fmt: skip


def test_sync_and_async_function_steps() -> None:
    @loopwise.step
    def double(x: int) -> int:
        return 2 * x

    @loopwise.step(name="inc")
    async def increment(x: int, ctx: loopwise.Context) -> int:
        return x + 1

    assert loopwise.run(double, 4).output == 8
    result = asyncio.run(loopwise.arun(increment, 4))
    assert result.output == 5
    assert [e.type for e in result.events] == [
        "run_started", "step_started", "step_finished", "run_finished",
    ]  # fmt: skip
    assert [e.seq for e in result.events] == [1, 2, 3, 4]
    assert increment.name == "inc" and double.input_type is int


def test_budget_is_per_run_across_nested_steps() -> None:
    model = ScriptedModel([reply("a" * 400)] * 5)

    @loopwise.step
    async def inner(x: str, ctx: loopwise.Context) -> str:
        turn = await ctx.call_model(ModelRequest(messages=[{"role": "user", "content": x}]))
        return str(turn.text)

    @loopwise.step
    async def outer(x: str, ctx: loopwise.Context) -> list[str]:
        return [await ctx.run_step(inner, x) for _ in range(5)]

    result = loopwise.run(outer, "hi", model=model, budget=Budget(max_tokens=250))
    assert result.status == Status.BUDGET_EXCEEDED
    # Each call costs ~101 tokens: the third crosses 250 and nothing further is sent.
    assert result.usage.model_calls == 3
    assert len(model.requests) == 3
    assert "max_tokens 250" in str(result.detail)


def test_a_bug_in_a_step_ends_the_run_with_error_not_an_exception() -> None:
    @loopwise.step
    def broken(x: Any) -> None:
        raise KeyError("boom")

    result = loopwise.run(broken, None)
    assert result.status == Status.ERROR and "KeyError" in str(result.detail)


def test_configuration_mistakes_raise_typed_errors() -> None:
    @loopwise.step
    def noop(x: Any) -> Any:
        return x

    with pytest.raises(ConfigError, match="unknown run option 'max_step'"):
        loopwise.run(noop, 1, max_step=3)
    with pytest.raises(ConfigError, match="not a step"):
        loopwise.run(print, 1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="must take"):
        loopwise.step(lambda a, b, c: None)


def test_unknown_model_price_is_unknown_not_zero() -> None:
    priced = loopwise.Pricing()
    assert priced.cost("gpt-4o-mini-2024-07-18", 1_000_000, 0) == pytest.approx(0.15)
    assert priced.cost("my-local-llama", 10, 10) is None
    usage = loopwise.Usage()
    usage.add_call(10, 10, 0.001)
    usage.add_call(10, 10, None)
    assert usage.cost_usd is None


@pytest.mark.parametrize(
    ("options", "culprit"),
    [
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": -1}, "max_steps"),
        ({"budget": {"max_tokens": 10}}, "budget"),
        ({"model": 42}, "model"),
    ],
)
def test_run_options_of_the_wrong_kind_raise_naming_the_option(
    options: dict[str, Any], culprit: str
) -> None:
    agent = loopwise.Agent(name="a")
    with pytest.raises(ConfigError, match=culprit) as caught:
        loopwise.run(agent, "hi", store=None, **({"model": ScriptedModel()} | options))
    assert caught.value.name == culprit


@pytest.mark.parametrize(
    ("limits", "culprit"),
    [
        ({"max_tokens": -5}, "max_tokens"),
        ({"max_tokens": "10"}, "max_tokens"),
        ({"max_tokens": 2.5}, "max_tokens"),
        ({"max_cost_usd": float("nan")}, "max_cost_usd"),
        ({"max_seconds": -1.0}, "max_seconds"),
    ],
)
def test_a_budget_limit_that_is_not_a_number_at_least_zero_raises(
    limits: dict[str, Any], culprit: str
) -> None:
    with pytest.raises(ConfigError, match=f"Budget.{culprit}") as caught:
        Budget(**limits)
    assert caught.value.name == culprit
    assert Budget(max_tokens=0, max_cost_usd=0, max_seconds=0.5).max_tokens == 0


def test_a_call_refused_before_it_is_made_says_the_tokens_are_an_estimate() -> None:
    result = loopwise.run(
        loopwise.Agent(name="a"), "x" * 400, model=ScriptedModel(), budget=Budget(max_tokens=50)
    )
    assert result.status == Status.BUDGET_EXCEEDED and result.usage.model_calls == 0
    assert "tokens 0 used + ~" in str(result.detail) and "next prompt" in str(result.detail)


def test_a_model_call_is_cut_off_when_the_wall_time_budget_runs_out() -> None:
    started = asyncio.Event()

    class Hanging:
        name = "hanging"

        async def complete(self, request: ModelRequest) -> loopwise.Turn:
            started.set()
            await asyncio.Event().wait()  # never answers
            raise AssertionError("unreachable")

    result = loopwise.run(
        loopwise.Agent(name="a"), "hi", model=Hanging(), budget=Budget(max_seconds=0.2)
    )
    assert started.is_set()
    assert result.status == Status.BUDGET_EXCEEDED and "cut off" in str(result.detail)


def test_a_usd_limit_that_cannot_be_checked_is_not_kept_silently() -> None:
    unpriced = ScriptedModel([reply("a")] * 3, name="my-local-llama")
    result = loopwise.run(
        loopwise.Agent(name="a"), "hi", model=unpriced, budget=Budget(max_cost_usd=0.01)
    )
    assert result.status == Status.BUDGET_EXCEEDED and result.usage.cost_usd is None
    assert "cost unknown" in str(result.detail) and "Pricing(extra=" in str(result.detail)
    priced = loopwise.Pricing(extra={"my-local-llama": loopwise.Price(input=0.0, output=0.0)})
    again = loopwise.run(
        loopwise.Agent(name="a"),
        "hi",
        model=ScriptedModel([reply("a")], name="my-local-llama"),
        budget=Budget(max_cost_usd=0.01),
        pricing=priced,
    )
    assert again.status == Status.COMPLETED


def test_an_object_with_an_async_call_is_awaited_as_a_step() -> None:
    class Doubler:
        async def __call__(self, x: int) -> int:
            return 2 * x

    def later(x: int) -> Any:  # a sync function that hands back a coroutine
        async def value() -> int:
            return x + 1

        return value()

    assert loopwise.run(loopwise.step(name="double")(Doubler()), 4).output == 8
    assert loopwise.run(loopwise.step(later), 4).output == 5


# Since issue 46 a journaled turn was read with json_object(recorded["turn"]): a stored
# turn that is not an object replayed as an empty one, so the resumed agent dropped the
# approved call and completed (review1). {} and a call without an id are damage as well.
@pytest.mark.parametrize(
    "damaged", ["not a turn", None, {}, {"tool_calls": [{"name": "refund", "arguments": "{}"}]}]
)
def test_a_damaged_journaled_model_turn_does_not_replay_as_an_empty_answer(
    tmp_path: Any, damaged: object
) -> None:
    import json
    import sqlite3

    from loopwise import gates
    from loopwise.testing import call

    paid: list[str] = []

    @loopwise.tool(effect="irreversible", gate=gates.human())
    def refund(order_id: str) -> str:
        """Refund an order."""
        paid.append(order_id)
        return "refunded"

    agent = loopwise.Agent(name="payer", tools=[refund], max_steps=5)
    db = str(tmp_path / "runs.db")
    model = ScriptedModel([call("refund", {"order_id": "O-1"}), reply("done")])
    paused = loopwise.run(agent, "go", model=model, store=db)
    assert paused.status == Status.AWAITING_APPROVAL
    with sqlite3.connect(db) as con:  # the log damaged at rest: the turn that asked to pay
        seq, data = con.execute(
            "SELECT seq, data FROM events WHERE run_id = ? AND type = 'model_call' ORDER BY seq",
            (paused.run_id,),
        ).fetchone()
        con.execute(
            "UPDATE events SET data = ? WHERE run_id = ? AND seq = ?",
            (json.dumps({**json.loads(data), "turn": damaged}), paused.run_id, seq),
        )
    con.close()
    loopwise.approve(paused.run_id, store=db, by="ann")
    for model in (ScriptedModel([reply("done")]), ScriptedModel(lambda request: reply("done"))):
        # A list script is told the journaled turns up front (runner); a function is not,
        # and the agent's replay reads the turn itself (core/step.py).
        with pytest.raises(loopwise.ConfigError) as refused:
            loopwise.resume(paused.run_id, step=agent, model=model, store=db)
        assert refused.value.name == paused.run_id and ":model:1" in str(refused.value)
        assert "damaged" in str(refused.value)
    assert paid == []
