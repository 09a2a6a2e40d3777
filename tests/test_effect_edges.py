"""Two edges of "a run ends as it should": a write or irreversible tool takes effect only
through the one executor (``Tool.perform`` elsewhere is refused, naming the tool), and an
agent whose final answer is empty text ends ``invalid_output``, never ``completed``."""

from __future__ import annotations

import asyncio

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
