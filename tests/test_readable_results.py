"""Results people can read: `runs list` columns, one output shape per status."""

from __future__ import annotations

from pathlib import Path

import pytest

import loopwise
from loopwise.cli import main
from loopwise.testing import ScriptedModel, reply


def test_runs_list_has_a_header_and_columns_that_hold_with_long_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clerk = loopwise.Agent(name="clerk", instructions="Answer.", max_steps=2)
    long_model = "meta-llama/Llama-3.1-70B-Instruct-Turbo-quantized-q4_k_m-gguf-v2"
    for name in ("scripted", long_model, "m"):
        loopwise.run(clerk, "Hi?", model=ScriptedModel([reply("Hello.")], name=name))
    assert main(["runs", "list"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["RUN", "STATUS", "TARGET", "MODEL", "TOKENS", "CREATED", "(UTC)"]
    assert len(rows) == 3
    created = header.index("CREATED")
    tokens_end = header.index("TOKENS") + len("TOKENS")
    for row in rows:
        assert row[header.index("STATUS") :].startswith("completed")
        assert row[header.index("TARGET") :].startswith("clerk")
        assert row[created : created + 4].isdigit()  # the year, in its column
        assert row[tokens_end - 1].isdigit()  # right-aligned under its header
    assert any("…" in row for row in rows)  # a 64-character model name is cut, not shifting


ROOT = Path(__file__).resolve().parents[1]


def test_graph_draws_agents_as_a_loop_and_hybrids_with_what_the_planner_reads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["graph", f"{ROOT}/agents/order_investigation.py:investigate"]) == 0
    agent = capsys.readouterr().out
    assert agent.startswith("%% agent investigate\nflowchart TD\n")
    assert "investigate --> get_payments" in agent
    assert 'get_payments -->|"result"| investigate' in agent
    assert 'investigate_answer{"answer"}' in agent
    assert 'investigate -->|"no more calls"| investigate_answer' in agent
    assert main(["graph", f"{ROOT}/workflows/refund_desk.py:refund_desk"]) == 0
    desk = capsys.readouterr().out
    assert 'plan -->|"reads"| planner_list_orders' in desk
    assert 'validate -->|"valid"| issue_refund' in desk


@pytest.mark.parametrize("verb", [["graph", "T"], ["check", "T"], ["decide"], ["init"]])
def test_every_verb_takes_store(
    verb: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = f"{ROOT}/workflows/ticket_triage.py:triage"
    argv = [target if a == "T" else a for a in verb]
    if verb == ["decide"]:
        argv += ["--steps-known", "yes", "--wrong-step-cost", "cheap"]
    if verb == ["init"]:
        argv += ["workflow", str(tmp_path / "project")]
    assert main([*argv, "--store", str(tmp_path / "runs.db")]) == 0
    capsys.readouterr()
    assert (
        main(
            [*argv, "--store", "mysql://db/x", "--force"]
            if verb == ["init"]
            else [*argv, "--store", "mysql://db/x"]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mysql" in err
