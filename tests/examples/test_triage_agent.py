"""The triage agent: same input and output fields as the triage workflow, offline sensibly."""

from __future__ import annotations

import json

import pytest

import loopwise
from loopwise import Status
from loopwise.running.targets import load_target, model_for
from tests.support import ROOT


def test_offline_triage_agent_looks_things_up_then_answers_like_the_workflow() -> None:
    agent = load_target(f"{ROOT / 'agents/triage_agent.py'}:triage_agent")
    flow = load_target(f"{ROOT / 'workflows/ticket_triage.py'}:triage")
    ticket = {
        "subject": "Charged twice for order O-1017",
        "body": "My card was charged twice for O-1017. I'm dana.whitfield@example.com.",
    }
    result = loopwise.run(agent.step, ticket, model=model_for(agent, "scripted"))
    assert result.status == Status.COMPLETED and result.usage.model_calls == 2
    looked_up = sorted(e.data["tool"] for e in result.events if e.type == "tool_call")
    assert looked_up == ["final_answer", "find_customer", "get_order", "routing_rules"]
    assert all(not e.data["is_error"] for e in result.events if e.type == "tool_result")
    workflow = loopwise.run(flow.step, ticket, model=model_for(flow, "scripted"))
    assert result.output.model_dump() == workflow.output.model_dump()
    assert result.output.queue == "billing"


def test_triage_agent_over_the_dataset_stays_within_three_calls() -> None:
    agent = load_target(f"{ROOT / 'agents/triage_agent.py'}:triage_agent")
    lines = (ROOT / "workflows/data/tickets.jsonl").read_text().splitlines()[:10]
    for line in lines:
        case = json.loads(line)
        result = loopwise.run(agent.step, case["input"], model=model_for(agent, "scripted"))
        assert result.status == Status.COMPLETED and result.usage.model_calls <= 3
        assert set(result.output.model_dump()) == {"summary", "category", "urgency", "queue"}


def test_the_agent_and_the_workflow_share_one_input_and_one_output_model() -> None:
    agent = load_target(f"{ROOT / 'agents/triage_agent.py'}:triage_agent").step
    flow = load_target(f"{ROOT / 'workflows/ticket_triage.py'}:triage").step
    assert agent.input_type is flow.input_type  # type: ignore[attr-defined]
    assert agent.tool_map["final_answer"].args_model is flow.output_type  # type: ignore[attr-defined]


def test_input_that_is_not_a_ticket_exits_2_for_the_agent_too(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from loopwise.cli.main import main

    spec = f"{ROOT / 'agents/triage_agent.py'}:triage_agent"
    code = main(["run", spec, "--model", "scripted", "--input", '"just text"', "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "does not match Ticket" in err
