"""Starting and continuing runs: one signature (options object or its fields as keywords)
for run, arun, resume and aresume, and the caller's cancellation reaching the caller."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise import Budget, ConfigError, Event, RunOptions, SQLiteStore, gates
from loopwise.testing import ScriptedModel, call, reply


def _forever(started: asyncio.Event) -> loopwise.Step:
    @loopwise.step
    async def forever(x: int) -> int:
        started.set()
        await asyncio.Event().wait()  # nothing sets it: only a cancellation ends this step
        return x

    return forever


def test_wait_for_raises_timeout_and_the_run_is_stored_cancelled(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"

    async def main() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(loopwise.arun(_forever(asyncio.Event()), 1, store=db), 0.05)

    asyncio.run(main())
    with SQLiteStore(db) as store:
        (row,) = store.list_runs()
        log = store.show(row.run_id)
    assert log["status"] == "cancelled"
    assert log["events"][-1]["type"] == "run_finished"
    assert log["events"][-1]["data"]["status"] == "cancelled"


def test_a_cancelled_task_raises_cancelled_and_its_sinks_see_the_run_end() -> None:
    seen: list[Event] = []

    class Sink:
        def record(self, run_id: str, event: Event) -> None:
            seen.append(event)

    async def main() -> None:
        started = asyncio.Event()
        task = asyncio.create_task(loopwise.arun(_forever(started), 1, store=None, sinks=(Sink(),)))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen[-1].type == "run_finished" and seen[-1].data["status"] == "cancelled"


def test_a_task_group_whose_sibling_fails_stops_the_run(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"

    async def main() -> None:
        started = asyncio.Event()

        async def fail_once_started() -> None:
            await started.wait()
            raise RuntimeError("sibling failed")

        with pytest.raises(ExceptionGroup):
            async with asyncio.TaskGroup() as group:
                group.create_task(loopwise.arun(_forever(started), 1, store=db, run_id="tg"))
                group.create_task(fail_once_started())

    asyncio.run(main())
    with SQLiteStore(db) as store:
        assert store.get_run("tg").status == "cancelled"


def test_a_cancelled_run_resumes_to_completion(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    answers = ScriptedModel([reply("late answer")])
    agent = loopwise.Agent(name="a", instructions="answer", max_steps=3)

    async def main() -> None:
        started = asyncio.Event()

        class Hanging:
            name = "scripted"

            async def complete(self, request: Any) -> Any:
                started.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(
            loopwise.arun(agent, "q?", model=Hanging(), store=db, run_id="c1")
        )
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    result = loopwise.resume("c1", RunOptions(model=answers), step=agent, store=db)
    assert result.status == "completed" and result.output == "late answer"


def _paused(db: Path) -> tuple[loopwise.Agent, str]:
    @loopwise.tool(effect="irreversible", gate=gates.human())
    def wipe(target: str) -> str:
        """Wipe a target. Call it when asked to wipe."""
        return f"wiped {target}"

    agent = loopwise.Agent(name="wiper", instructions="wipe", tools=[wipe], max_steps=4)
    model = ScriptedModel([call("wipe", {"target": "disk"}), reply("done")])
    paused = loopwise.run(agent, "wipe the disk", model=model, store=db)
    assert paused.status == "awaiting_approval"
    return agent, paused.run_id


def test_resume_takes_the_options_object_of_arun(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    agent, run_id = _paused(db)
    with SQLiteStore(db) as store:
        store.decide(run_id, store.pending(run_id)[0].approval_id, decision="approved", by="alice")
    seen: list[str] = []

    class Sink:
        def record(self, run_id: str, event: Event) -> None:
            seen.append(str(event.type))

    options = RunOptions(model=ScriptedModel([reply("done")]), sinks=(Sink(),), max_steps=9)
    result = loopwise.resume(run_id, options, step=agent, store=db)
    assert result.status == "completed" and result.output == "done"
    assert seen[0] == "run_resumed" and seen[-1] == "run_finished"
    assert result.events[-len(seen) - 1].type != "run_resumed"  # only new events were sunk


def test_resume_keeps_its_keyword_arguments(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    agent, run_id = _paused(db)
    with SQLiteStore(db) as store:
        store.decide(run_id, store.pending(run_id)[0].approval_id, decision="denied", by="bob")
    result = loopwise.resume(
        run_id,
        step=agent,
        model=ScriptedModel([reply("not wiped")]),
        store=db,
        budget=Budget(max_tokens=10_000),
        max_steps=5,
        approvals=None,
        sinks=(),
        force=False,
    )
    assert result.status == "completed" and result.output == "not wiped"


def test_sync_run_and_resume_both_release_a_given_model(tmp_path: Path) -> None:
    # A model's connections belong to the event loop of the call that opened them; the
    # next sync call may come from another thread, so each call releases them at its end.
    closed: list[str] = []

    class Closing(ScriptedModel):
        async def aclose(self) -> None:
            closed.append("closed")

    db = tmp_path / "runs.db"
    agent, run_id = _paused(db)
    with SQLiteStore(db) as store:
        store.decide(run_id, store.pending(run_id)[0].approval_id, decision="approved", by="al")
    resumed = loopwise.resume(run_id, step=agent, model=Closing([reply("done")]), store=db)
    assert resumed.status == "completed" and closed == ["closed"]
    ran = loopwise.run(agent, "wipe", RunOptions(model=Closing([reply("no")])), store=None)
    assert ran.status == "completed" and closed == ["closed", "closed"]


def test_resume_refuses_options_that_would_start_another_run(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    _, run_id = _paused(db)
    with pytest.raises(ConfigError, match="run_id") as caught:
        loopwise.resume(run_id, RunOptions(run_id="other"), store=db)
    assert caught.value.name == "run_id"
    with pytest.raises(ConfigError, match="unknown run option 'nonsense'"):
        loopwise.resume(run_id, store=db, nonsense=1)


def test_the_sync_api_refuses_to_run_inside_an_event_loop() -> None:
    async def main() -> None:
        with pytest.raises(ConfigError, match="await"):
            loopwise.run(_forever(asyncio.Event()), 1, store=None)
        with pytest.raises(ConfigError, match="await"):
            loopwise.resume("nope", store=None)

    asyncio.run(main())
