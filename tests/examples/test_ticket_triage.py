"""The canonical workflow: one structured call + routing code, offline and over HTTP."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest

import loopwise
from loopwise import EventType
from loopwise.cli.main import main
from loopwise.running.targets import load_target, model_for
from loopwise.testing import FakeChatServer, reply
from tests.support import ROOT

TARGET = f"{ROOT / 'workflows' / 'ticket_triage.py'}:triage"
DATASET = ROOT / "workflows" / "data" / "tickets.jsonl"
FIELDS = {"summary", "category", "urgency", "queue"}
TICKET = {
    "subject": "Charged twice this month",
    "body": "My card shows two charges of $49 on March 3. Please refund the duplicate.",
}


def _cases() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DATASET.read_text().splitlines() if line.strip()]


def test_cli_run_offline_makes_one_model_call_and_prints_four_fields(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["run", TARGET, "--input", json.dumps(TICKET), "--json", "--model", "scripted"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "completed"
    assert doc["usage"]["model_calls"] == 1
    assert set(doc["output"]) == FIELDS
    assert doc["output"]["category"] == "billing" and doc["output"]["queue"] == "billing"
    assert 1 <= doc["output"]["urgency"] <= 5 and doc["output"]["summary"]


def test_urgent_tickets_are_escalated_by_the_routing_code() -> None:
    target = load_target(TARGET)
    ticket = {
        "subject": "API down",
        "body": "Every request returns 500 and our production checkout is down. Critical!",
    }
    result = loopwise.run(target.step, ticket, model=model_for(target, "scripted"))
    assert result.status == "completed"
    assert result.output.category == "technical" and result.output.urgency == 5
    assert result.output.queue == "escalations"
    # Two nodes ran, one of them called the model once.
    finished = [e.step for e in result.events if e.type is EventType.STEP_FINISHED]
    assert finished[:2] == ["triage/classify", "triage/route"]
    assert [e.step for e in result.events if e.type is EventType.MODEL_CALL] == ["triage/classify"]


def test_bad_input_ends_with_a_status_and_the_cli_refuses_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    triage = load_target(TARGET).step
    result = loopwise.run(triage, {"subject": "no body"}, model="scripted", store=None)
    assert result.status == "error" and "body" in str(result.detail)
    assert result.usage.model_calls == 0
    argv = ["run", TARGET, "--input", '{"subject": "no body"}', "--json", "--model", "scripted"]
    assert main(argv) == 2
    assert "body: Field required" in capsys.readouterr().err


def test_against_a_real_http_server(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answer = {"summary": "Lost parcel.", "category": "shipping", "urgency": 3}
    with FakeChatServer([reply(answer)]) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "fake-key")
        argv = ["run", TARGET, "--input", json.dumps(TICKET), "--json", "--model", "m"]
        assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "completed" and doc["usage"]["model_calls"] == 1
    assert doc["output"] == {**answer, "queue": "logistics"}
    assert len(server.requests) == 1
    assert server.requests[0]["response_format"]["type"] == "json_schema"
    assert json.loads(server.requests[0]["messages"][-1]["content"]) == TICKET


def test_graph_prints_the_two_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["graph", TARGET]) == 0
    assert "classify --> route" in capsys.readouterr().out
    assert load_target(TARGET).step.validation_errors() == []  # type: ignore[attr-defined]


def test_dataset_is_labeled_and_covers_every_category_and_escalation() -> None:
    cases = _cases()
    assert len(cases) >= 40
    categories = Counter(c["expected"]["category"] for c in cases)
    assert set(categories) == {"billing", "technical", "account", "shipping", "other"}
    assert min(categories.values()) >= 5
    queues = Counter(c["expected"]["queue"] for c in cases)
    assert queues["escalations"] >= 5
    for case in cases:
        assert set(case["input"]) == {"subject", "body"}
        assert case["expected"]["queue"] in {
            "escalations",
            {
                "billing": "billing",
                "technical": "tech-support",
                "account": "accounts",
                "shipping": "logistics",
                "other": "general",
            }[case["expected"]["category"]],
        }


def test_offline_model_is_sensible_but_not_an_oracle() -> None:
    target = load_target(TARGET)
    model = model_for(target, "scripted")
    cases = _cases()

    async def run_all() -> list[loopwise.RunResult]:
        runs = [loopwise.arun(target.step, c["input"], model=model) for c in cases]
        return list(await asyncio.gather(*runs))

    right = 0
    for case, result in zip(cases, asyncio.run(run_all()), strict=True):
        assert result.status == "completed" and result.usage.model_calls == 1
        out = result.output
        expected = case["expected"]
        right += (out.category, out.queue) == (expected["category"], expected["queue"])
    # A keyword heuristic: right on most tickets, wrong on some ambiguous ones.
    assert 0.8 * len(cases) <= right < len(cases)


def test_the_module_alone_names_the_workflow_not_its_nodes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ticket = '{"subject": "Charged twice", "body": "Two charges of $49 on March 3."}'
    argv = ["run", "workflows/ticket_triage.py", "--model", "scripted", "--input", ticket]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "completed" and doc["output"]["queue"] == "billing"
