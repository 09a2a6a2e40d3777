"""Steps describe themselves; check, the eval, the report and the drawings read that."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import BaseModel

import loopwise
from loopwise import Agent, Budget, GraphError, Structured, ToolError, Workflow, as_tool, check
from loopwise.architectures.hybrid import Hybrid
from loopwise.cli.main import main
from loopwise.core.shape import Kind, Limits, Shape, describe, mermaid
from loopwise.evidence.evals.harness import architecture_of
from loopwise.evidence.report import describe_graph
from loopwise.running.targets import load_target
from loopwise.tools.gates import human
from loopwise.tools.tool import tool
from tests.support import ROOT


@tool
def lookup(order_id: str) -> str:
    """Look up an order by id. Use it when the customer names an order."""
    return order_id


@tool(effect="irreversible", gate=human())
def refund(order_id: str) -> str:
    """Refund an order in full. Use it when a refund was promised."""
    return order_id


@loopwise.step
def shout(text: str) -> str:
    return text.upper()


class Answer(BaseModel):
    category: Literal["a", "b"]


class Unlimited:
    """A hand-rolled tool-using step that describes itself: a loop with no step limit."""

    name = "digger"
    input_type = str

    async def run(self, input: Any, ctx: Any) -> Any:
        return input

    def describe(self) -> Shape:
        return Shape(kind=Kind.AGENT, name=self.name, tools=(lookup.describe(),))


class Opaque:
    """A hand-rolled step that says nothing about itself."""

    name = "mystery"
    tools = (refund,)  # never read: only a description is

    async def run(self, input: Any, ctx: Any) -> Any:
        return input


def test_every_step_kind_says_what_it_is() -> None:
    agent = Agent(name="helper", tools=[lookup], max_steps=4, budget=Budget(max_tokens=100))
    structured = Structured("classify", Answer, "Classify the text.")
    hybrid = Hybrid("desk", actions=[refund], tools=[lookup])
    flow = Workflow("flow").then(shout).then(agent)
    kinds = {s.name: describe(s).kind for s in (agent, structured, hybrid, flow, shout, Opaque())}
    assert kinds == {
        "helper": Kind.AGENT,
        "classify": Kind.STRUCTURED,
        "desk": Kind.HYBRID,
        "flow": Kind.WORKFLOW,
        "shout": Kind.FUNCTION,
        "mystery": Kind.OPAQUE,
    }
    shape = describe(agent)
    assert [t.name for t in shape.tools] == ["lookup"]
    assert shape.limits == Limits(max_steps=4, budget=Budget(max_tokens=100))
    assert shape.tools[0].parameters == {"order_id": None} and shape.tools[0].effect == "read"
    desk = describe(hybrid)
    assert [(a.name, a.effect, a.gated) for a in desk.actions] == [("refund", "irreversible", True)]
    assert dict(desk.parts)["planner"].kind is Kind.AGENT
    assert [(p, s.kind) for p, s in describe(flow).children()] == [
        ("nodes/shout", Kind.FUNCTION),
        ("nodes/helper", Kind.AGENT),
    ]
    archs = [architecture_of(s) for s in (agent, structured, hybrid, flow, shout, Opaque())]
    assert archs == ["agent", "step", "hybrid", "workflow", "step", "step"]


def test_check_sees_through_a_step_given_as_a_tool() -> None:
    alone = {f.code for f in check(Unlimited())}
    assert "no-step-limit" in alone
    outer = Agent(
        name="outer",
        tools=[as_tool(Unlimited(), description="Dig into an order. Use it when asked why.")],
    )
    findings = check(outer)
    where = {(f.code, f.where) for f in findings}
    assert ("no-step-limit", "outer/tools/digger") in where
    assert findings[0].level == "error"
    big = Agent(name="big", tools=[lookup], max_steps=100)
    wrapped = Agent(name="wrapped", tools=[as_tool(big, description="Ask big. Use it first.")])
    assert ("large-step-limit", "wrapped/tools/big") in {(f.code, f.where) for f in check(wrapped)}


def test_an_opaque_step_is_run_but_not_reviewed() -> None:
    assert check(Opaque()) == []
    assert describe_graph(Opaque())["nodes"] == [
        {"id": "mystery", "label": "mystery", "kind": "opaque", "detail": ""}
    ]


def test_a_step_that_contains_itself_is_described_once() -> None:
    flow = Workflow("flow").then(shout)
    flow.add("again", flow, after=["shout"])
    (_, inner), *_ = [(p, s) for p, s in describe(flow).children() if p == "nodes/again"]
    assert inner.repeated
    assert check(flow) == []


def test_callers_branch_on_error_codes_not_messages() -> None:
    @tool(effect="irreversible")
    def delete(order_id: str) -> str:
        """Delete an order. Use it never."""
        return order_id

    with pytest.raises(ToolError) as raised:
        Agent(name="a", tools=[delete])
    assert raised.value.code == "ungated-irreversible"

    @loopwise.step
    def classify(x: dict[str, Any]) -> Answer:
        return Answer(category="a")

    flow = Workflow("routes", input_type=dict)
    flow.add("classify", classify)
    flow.add_route("by", "category", {"a": "shout"}, after=["classify"])
    flow.add("shout", shout)
    codes = {e.code for e in flow.validation_errors()}
    assert "non-exhaustive-route" in codes
    assert all(isinstance(e, GraphError) for e in flow.validation_errors())
    assert loopwise.ConfigError("x").code == "config"
    assert loopwise.StoreError("x").code == "store"


def test_one_mermaid_renderer_draws_every_kind(capsys: pytest.CaptureFixture[str]) -> None:
    desk = load_target(f"{ROOT}/workflows/refund_desk.py:refund_desk").step
    chart = desk.to_mermaid()
    assert chart.startswith("%% hybrid refund_desk\nflowchart TD\n")
    assert 'validate{"validate plan"}' in chart and 'validate -->|"errors"| plan' in chart
    assert 'issue_refund["issue_refund (irreversible)"]' in chart
    assert main(["graph", f"{ROOT}/workflows/refund_desk.py:refund_desk"]) == 0
    assert capsys.readouterr().out == chart
    agent = Agent(name="end", tools=[lookup])
    drawn = mermaid(describe(agent))
    # "end" is Mermaid syntax: the node id is made safe, the label stays.
    assert 'n_end["end"]' in drawn and "n_end --> lookup" in drawn
    assert describe_graph(agent)["mermaid"] == drawn
