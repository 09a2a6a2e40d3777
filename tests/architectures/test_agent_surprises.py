"""Smaller surprises, fixed: what the model reads of an allowed folder, how failures of one
turn count, how a repeated invalid answer ends, and a list script across a resume."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pydantic
import pytest

import loopwise
from loopwise import Agent, InDirectory, Status, gates, tool
from loopwise.testing import ScriptedModel, call, calls, reply


def test_in_directory_paths_are_relative_to_the_folder_and_errors_hide_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "srv" / "notes"
    (root / "2026").mkdir(parents=True)
    (root / "2026" / "plan.md").write_text("ship it")
    elsewhere = tmp_path / "cwd"
    (elsewhere / "2026").mkdir(parents=True)
    (elsewhere / "2026" / "plan.md").write_text("the wrong file")
    monkeypatch.chdir(elsewhere)  # relative paths do not follow the working directory

    @tool(localns=locals())  # the annotation names root, a local here
    def read_note(path: Annotated[str, InDirectory(root)]) -> str:
        """Read one note. Call it with the note's path."""
        return Path(path).read_text()

    agent = Agent(name="notes", tools=[read_note], max_steps=4)
    script = [
        call("read_note", {"path": "2026/plan.md"}),
        call("read_note", {"path": "../../../etc/passwd"}),
        reply("done"),
    ]
    result = loopwise.run(agent, "Plan?", model=ScriptedModel(script), store=None)
    read, escaped = [e.data for e in result.events if e.type == "tool_result"]
    assert read["content"] == "ship it" and not read["is_error"]
    assert escaped["is_error"] and "outside the allowed directory" in escaped["content"]
    schema = read_note.schema["function"]["parameters"]["properties"]["path"]["description"]
    for text in (escaped["content"], schema):
        assert str(tmp_path) not in text and "srv" not in text


@tool
def flaky(n: int) -> str:
    """Always fails. Call it to fail."""
    raise RuntimeError(f"down ({n})")


def test_the_failure_cap_counts_turns_not_the_calls_of_one_turn() -> None:
    agent = Agent(name="a", tools=[flaky], failure_cap=3, max_steps=6)
    burst = calls(*[("flaky", {"n": i}) for i in range(3)])
    once = loopwise.run(agent, "Go.", model=ScriptedModel([burst, reply("gave up")]), store=None)
    assert once.status == Status.COMPLETED and once.output == "gave up"
    bursts = [calls(*[("flaky", {"n": 10 * t + i}) for i in range(3)]) for t in range(3)]
    thrice = loopwise.run(agent, "Go.", model=ScriptedModel(bursts), store=None)
    assert thrice.status == Status.TOOL_FAILED and "flaky failed 3 times" in str(thrice.detail)


class Verdict(pydantic.BaseModel):
    urgency: int = pydantic.Field(ge=1, le=5)


def test_the_same_invalid_answer_again_ends_invalid_output_not_stuck() -> None:
    agent = Agent(name="a", output_type=Verdict, failure_cap=3, max_steps=8)
    model = ScriptedModel([call("final_answer", {"urgency": 9})] * 3)
    result = loopwise.run(agent, "How urgent?", model=model, store=None)
    assert result.status == Status.INVALID_OUTPUT, result.detail
    assert model.calls == 3


@tool(effect="irreversible", gate=gates.human())
def pay(amount: int) -> str:
    """Pay an amount. Call it once the amount is known."""
    return f"paid {amount}"


def test_a_fresh_list_script_continues_after_the_turns_a_resume_replays(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    agent = Agent(name="payer", tools=[pay], max_steps=4)
    script = [call("pay", {"amount": 5}), reply("paid 5, done")]
    paused = loopwise.run(agent, "Pay 5.", model=ScriptedModel(script), store=store)
    assert paused.status == Status.AWAITING_APPROVAL
    with loopwise.open_store(store) as st:
        st.decide(paused.run_id, paused.pending[0]["approval_id"], decision="approved", by="me")
    # Another process would import the module again: a new model with the whole script.
    fresh = ScriptedModel(script)
    done = loopwise.resume(paused.run_id, step=agent, model=fresh, store=store)
    assert done.status == Status.COMPLETED and done.output == "paid 5, done"
    assert fresh.calls == 1


def test_a_list_of_only_what_comes_next_is_used_as_it_is(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    agent = Agent(name="payer", tools=[pay], max_steps=4)
    paused = loopwise.run(
        agent, "Pay 7.", model=ScriptedModel([call("pay", {"amount": 7})]), store=store
    )
    with loopwise.open_store(store) as st:
        st.decide(paused.run_id, paused.pending[0]["approval_id"], decision="approved", by="me")
    rest = ScriptedModel([reply("paid 7")])
    done = loopwise.resume(paused.run_id, step=agent, model=rest, store=store)
    assert done.status == Status.COMPLETED and done.output == "paid 7"
