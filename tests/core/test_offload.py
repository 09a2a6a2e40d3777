"""The engine seam (loopwise.core.offload): what a run hands to an engine, and that without
one nothing changes. Engine-neutral: no Temporal here."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

import loopwise
from loopwise import (
    Agent,
    Edited,
    Escalate,
    RunOptions,
    Workflow,
    policy,
    policy_then_human,
    step,
    tool,
)
from loopwise.core.execute import execute, new_context
from loopwise.core.offload import Work
from loopwise.testing import ScriptedModel, calls

DONE: list[tuple[str, int]] = []


@tool(effect="write", gate=policy(lambda args: args["amount"] < 100 or "too much"))
def pay(order: str, amount: int) -> str:
    """Pay ``amount`` for ``order`` (a write the policy lets through below 100)."""
    DONE.append((order, amount))
    return f"paid {amount} for {order}"


@tool
def look(order: str) -> str:
    """Look an order up (read-only)."""
    return f"{order} is open"


class Answer(BaseModel):
    text: str


def _agent() -> Agent:
    return Agent(
        name="payer", instructions="Pay.", tools=[look, pay], output_type=Answer, max_steps=5
    )


def _script() -> ScriptedModel:
    return ScriptedModel(
        [
            calls(("look", {"order": "A"}, "c1"), ("pay", {"order": "A", "amount": 5}, "c2")),
            calls(("pay", {"order": "B", "amount": 500}, "c3")),
            calls(("final_answer", {"text": "done"}, "c4")),
        ]
    )


async def _run(target: Any, input: Any, model: Any, offload: Any) -> loopwise.RunResult:
    ctx = new_context(target, RunOptions(model=model, run_id="seam1"))
    ctx.offload = offload
    return await execute(target, input, ctx)


def _shape(result: loopwise.RunResult) -> list[tuple[str, str, Any]]:
    keep = ("tool", "call_id", "content", "decision", "args")
    return [
        (e.type.value, e.step, {k: e.data[k] for k in keep if k in e.data}) for e in result.events
    ]


def test_an_engine_gets_every_effect_and_judgement_and_never_final_answer() -> None:
    handed: list[Work] = []

    async def engine(work: Work) -> Any:
        handed.append(work)
        return await work.do(None)

    DONE.clear()
    offloaded = asyncio.run(_run(_agent(), "pay A", _script(), engine))
    assert offloaded.status == "completed"
    assert DONE == [("A", 5)]
    kinds = [(w.kind, w.tool, w.args, w.key) for w in handed]
    assert kinds == [
        ("judgement", "pay", {"order": "A", "amount": 5}, None),
        ("effect", "look", {"order": "A"}, None),
        ("effect", "pay", {"order": "A", "amount": 5}, "seam1:c2"),
        ("judgement", "pay", {"order": "B", "amount": 500}, None),
    ]
    assert {w.effect for w in handed if w.tool == "pay"} == {"write"}

    # Without an engine the same run makes the same log.
    DONE.clear()
    in_place = asyncio.run(_run(_agent(), "pay A", _script(), None))
    assert DONE == [("A", 5)]
    assert _shape(in_place) == _shape(offloaded)


def test_an_engine_decides_what_the_work_returns() -> None:
    async def engine(work: Work) -> Any:
        if work.kind == "judgement":
            return loopwise.Denied("the engine said no", by="engine")
        return await work.do(None)

    DONE.clear()
    result = asyncio.run(_run(_agent(), "pay A", _script(), engine))
    assert DONE == []
    denied = [e for e in result.events if e.type.value == "tool_result" and e.data["is_error"]]
    assert [e.data["tool"] for e in denied] == ["pay", "pay"]
    assert "the engine said no" in denied[0].data["content"]


def test_a_sync_step_runs_in_place_under_an_engine() -> None:
    import threading

    seen: list[bool] = []

    @step
    def where(x: int) -> int:
        seen.append(threading.current_thread() is threading.main_thread())
        return x + 1

    flow = Workflow("flow").then(where)

    async def engine(work: Work) -> Any:
        raise AssertionError("a step's own code is not outside-world work")

    assert asyncio.run(_run(flow, 1, None, engine)).output == 2
    assert asyncio.run(_run(flow, 1, None, None)).output == 2
    assert seen == [True, False]  # in the workflow code; in a worker thread without one


def test_an_engine_judges_a_persons_edit_again_under_the_tools_name() -> None:
    handed: list[Work] = []

    async def engine(work: Work) -> Any:
        handed.append(work)
        return await work.do(None)

    @tool(effect="write", gate=policy_then_human(lambda args: Escalate("a person decides")))
    def refund(order: str, amount: int) -> str:
        """Refund ``amount`` for ``order`` (a person decides what the policy lets through)."""
        return f"refunded {amount} for {order}"

    agent = Agent(name="desk", tools=[refund], output_type=Answer, max_steps=3)
    model = ScriptedModel(
        [
            calls(("refund", {"order": "A", "amount": 5}, "c1")),
            calls(("final_answer", {"text": "done"}, "c2")),
        ]
    )

    def edit(request: Any) -> Edited:
        return Edited({"order": "A", "amount": 7}, by="ana")

    ctx = new_context(agent, RunOptions(model=model, run_id="seam2", approvals=edit))
    ctx.offload = engine
    result = asyncio.run(execute(agent, "refund A", ctx))
    assert result.status == "completed"
    judged = [(w.kind, w.tool, w.args, w.effect) for w in handed if w.kind == "judgement"]
    # The policy as asked, then the person's edit judged again before it runs.
    assert judged == [
        ("judgement", "refund", {"order": "A", "amount": 5}, "write"),
        ("judgement", "refund", {"order": "A", "amount": 7}, "write"),
    ]
