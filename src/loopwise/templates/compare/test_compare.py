"""The workflow and the agent, offline: one ticket each, then both measured on the cases."""

from __future__ import annotations

from pathlib import Path

from tickets import Triage
from triage_agent import make_deps, triage_agent
from triage_agent import offline_model as agent_model
from triage_workflow import offline_model as workflow_model
from triage_workflow import triage

import loopwise

TICKET = "Charged twice\n\nMy card shows two charges for order O-1017, please refund one."


def test_the_workflow_and_the_agent_triage_a_ticket_alike() -> None:
    flow = loopwise.run(triage, TICKET, model=workflow_model, store=None)
    agent = loopwise.run(triage_agent, TICKET, model=agent_model, deps=make_deps(), store=None)
    assert flow.status == agent.status == "completed"
    assert isinstance(agent.output, Triage) and flow.output == agent.output
    assert (flow.output.category, flow.output.queue) == ("billing", "billing")
    assert (flow.usage.model_calls, agent.usage.model_calls) == (1, 2)
    assert agent.usage.tool_calls == 2  # the rules and the order, in one turn


def test_the_eval_recommends_one_of_them(tmp_path: Path) -> None:
    cases = loopwise.load_dataset(Path(__file__).with_name("tickets.jsonl"))
    report = loopwise.evaluate(
        [
            loopwise.EvalTarget(name="triage", step=triage, model=workflow_model),
            loopwise.EvalTarget(
                name="triage_agent", step=triage_agent, model=agent_model, make_deps=make_deps
            ),
        ],
        cases,
        store=tmp_path / "eval.db",
    )
    assert report.recommendation.choice == "triage", report.recommendation.text
