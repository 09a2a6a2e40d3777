"""A stream whose run is cancelled while an effect runs: the effect is recorded once; a
consumer that leaves sees no effect start after it.

On SQLite and PostgreSQL: cancelling a run while a sync write tool with a timeout runs
waits for the effect and journals it, so a resume never makes it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

import pytest

import loopwise
from loopwise import Status, open_store
from loopwise.testing import ScriptedModel, call, reply


def _tool_results(request: loopwise.ModelRequest) -> list[str]:
    return [str(m["content"]) for m in request.messages if m["role"] == "tool"]


def _payer(paid: list[int], release: threading.Event) -> loopwise.Tool:
    @loopwise.tool(effect="write", timeout=30)
    def pay(n: int) -> str:
        """Pay."""
        release.wait(30)
        paid.append(n)
        return f"paid {n}"

    return pay


def _pays(count: int) -> ScriptedModel:
    """Pays 1, 2, ... ``count``, one call a turn, then answers."""

    def respond(request: loopwise.ModelRequest) -> Any:
        done = len(_tool_results(request))
        return call("pay", {"n": done + 1}, id=f"p{done + 1}") if done < count else reply("ok")

    return ScriptedModel(respond)


def _status(store: str, run_id: str) -> str:
    with open_store(store) as st:
        return str(st.get_run(run_id).status)


def _results(store: str, run_id: str) -> list[str]:
    with open_store(store) as st:
        return [str(e.data["content"]) for e in st.events(run_id) if e.type == "tool_result"]


@pytest.mark.parametrize("how", ["aclose", "cancel the consumer"])
def test_cancelling_while_a_timed_effect_runs_records_it_and_resume_never_repeats_it(
    store_at: str, how: str
) -> None:
    paid: list[int] = []
    release = threading.Event()
    agent = loopwise.Agent(name="desk", tools=[_payer(paid, release)], max_steps=5)
    model = _pays(1)

    async def main() -> bool:
        stream = loopwise.astream(agent, "go", model=model, store=store_at, run_id="s1")
        started = asyncio.Event()

        async def consume() -> None:
            async for event in stream:
                if event.type == "tool_call":
                    started.set()

        consumer = asyncio.ensure_future(consume())
        await started.wait()
        if how == "aclose":
            stopping = asyncio.ensure_future(stream.aclose())
        else:
            consumer.cancel()
            stopping = consumer
        await asyncio.sleep(0.05)
        waited = not stopping.done()  # the effect is in flight: the run waits for it
        release.set()
        for task in (stopping, consumer):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return waited

    assert asyncio.run(main())
    assert paid == [1]
    assert _status(store_at, "s1") == Status.CANCELLED
    assert _results(store_at, "s1") == ["paid 1"]
    resumed = loopwise.resume("s1", step=agent, model=model, store=store_at)
    assert resumed.status == Status.COMPLETED
    assert paid == [1]  # never twice


class _End:
    """A sink that says when its run has logged its end."""

    def __init__(self) -> None:
        self.ended = asyncio.Event()

    def record(self, run_id: str, event: loopwise.Event) -> None:
        if event.type == "run_finished":
            self.ended.set()


def _quick_payer(paid: list[int]) -> loopwise.Tool:
    @loopwise.tool(effect="write")
    def pay(n: int) -> str:
        """Pay."""
        paid.append(n)
        return f"paid {n}"

    return pay


class _Left(Exception):
    pass


@pytest.mark.parametrize("how", ["raise, stream kept", "break, stream kept", "raise, dropped"])
def test_a_consumer_that_leaves_cancels_its_run_and_resume_pays_each_once(
    store_at: str, how: str
) -> None:
    paid: list[int] = []
    agent = loopwise.Agent(name="desk", tools=[_quick_payer(paid)], max_steps=8)
    model = _pays(5)
    end = _End()

    async def main() -> int:
        stream: Any = loopwise.astream(
            agent, "go", model=model, store=store_at, run_id="s2", sinks=(end,)
        )
        try:
            async for event in stream:
                if event.type == "tool_result":
                    if how.startswith("break"):
                        break
                    raise _Left  # the README's loop pattern: the body raises
        except _Left:
            pass
        if how.endswith("dropped"):
            del stream
        at_leaving = len(paid)
        await asyncio.wait_for(end.ended.wait(), 10)  # the run ends now, not at shutdown
        await asyncio.sleep(0.05)
        assert len(paid) == at_leaving  # no effect started after the consumer left
        return at_leaving

    asyncio.run(main())
    assert _status(store_at, "s2") == Status.CANCELLED
    assert len(paid) < 5  # the run did not go on to the end after its consumer left
    resumed = loopwise.resume("s2", step=agent, model=model, store=store_at)
    assert resumed.status == Status.COMPLETED
    assert paid == [1, 2, 3, 4, 5]  # every effect once: none repeated by the resume
    assert _results(store_at, "s2") == [f"paid {n}" for n in range(1, 6)]


def test_a_detached_run_goes_on_when_its_consumer_leaves(store_at: str) -> None:
    paid: list[int] = []
    agent = loopwise.Agent(name="desk", tools=[_quick_payer(paid)], max_steps=8)

    async def main() -> loopwise.RunResult:
        stream = loopwise.astream(
            agent, "go", model=_pays(5), store=store_at, run_id="s3", detached=True
        )
        with contextlib.suppress(_Left):
            async for event in stream:
                if event.type == "tool_result":
                    raise _Left
        return await stream.wait()

    result = asyncio.run(main())
    assert result.status == Status.COMPLETED and result.output == "ok"
    assert paid == [1, 2, 3, 4, 5]
    assert _status(store_at, "s3") == Status.COMPLETED


def test_a_detached_run_outlives_its_dropped_stream(tmp_path: Any) -> None:
    db = str(tmp_path / "runs.db")
    paid: list[int] = []
    agent = loopwise.Agent(name="desk", tools=[_quick_payer(paid)], max_steps=8)
    end = _End()

    async def main() -> None:
        async for event in loopwise.astream(
            agent, "go", model=_pays(3), store=db, run_id="s4", detached=True, sinks=(end,)
        ):
            if event.type == "tool_call":
                break
        await asyncio.wait_for(end.ended.wait(), 10)

    asyncio.run(main())
    assert paid == [1, 2, 3]
    assert _status(db, "s4") == Status.COMPLETED


@loopwise.tool
def look(n: int) -> str:
    """Look."""
    return f"seen {n}"


class _Counter:
    """Counts every item a run hands its sinks (events and text deltas)."""

    def __init__(self) -> None:
        self.items = 0
        self.deltas = 0

    def record(self, run_id: str, event: loopwise.Event) -> None:
        self.items += 1

    def text(self, run_id: str, delta: loopwise.TextDelta) -> None:
        self.items += 1
        self.deltas += 1


def test_a_slow_consumer_holds_a_bounded_queue_and_misses_no_event(tmp_path: Any) -> None:
    turns, db = 450, str(tmp_path / "runs.db")

    def respond(request: loopwise.ModelRequest) -> Any:
        done = len(_tool_results(request))
        if done < turns:
            turn = call("look", {"n": done}, id=f"c{done}")
            turn.text = f"looking at {done}"  # streamed as deltas before the call
            return turn
        return reply("the end " * 50)

    agent = loopwise.Agent(name="looker", tools=[look], max_steps=turns + 5)
    counter = _Counter()

    async def main() -> tuple[list[Any], int, loopwise.RunStream]:
        stream = loopwise.astream(
            agent, "go", model=ScriptedModel(respond), store=db, stream=True, sinks=(counter,)
        )
        seen: list[Any] = []
        most = 0
        async for item in stream:
            if not seen:
                await asyncio.sleep(0.3)  # slow at first: the run races ahead
            seen.append(item)
            most = max(most, counter.items - len(seen) - stream.dropped)
            await asyncio.sleep(0)
        return seen, most, stream

    seen, most, stream = asyncio.run(main())
    assert most <= 1_000 + 5  # never more than about UNREAD unread items
    events = [e for e in seen if not isinstance(e, loopwise.TextDelta)]
    with open_store(db) as st:
        stored = st.events(_run(st))
    assert [e.to_dict() for e in events] == [e.to_dict() for e in stored]  # every event
    deltas = len(seen) - len(events)
    assert deltas + stream.dropped == counter.deltas  # only deltas were dropped
    assert stream.result is not None and stream.result.status == Status.COMPLETED
    assert stream.result.output == "the end " * 50


def _run(st: Any) -> str:
    (row,) = st.list_runs()
    return str(row.run_id)


@pytest.mark.parametrize("how", ["break", "raise", "await, then break"])
def test_no_effect_starts_once_the_consumer_has_left_inline(store_at: str, how: str) -> None:
    paid: list[int] = []
    agent = loopwise.Agent(name="desk", tools=[_quick_payer(paid)], max_steps=10)
    model = _pays(6)
    end = _End()

    async def main() -> None:
        stream = loopwise.astream(
            agent, "go", model=model, store=store_at, run_id="s5", sinks=(end,)
        )
        with contextlib.suppress(_Left):
            async for event in stream:
                if event.type == "tool_result":
                    assert paid == [1]
                    if how.startswith("await"):
                        await asyncio.sleep(0.05)  # the consumer's own work, then it leaves
                    if how.endswith("break"):
                        break
                    raise _Left
        await asyncio.wait_for(end.ended.wait(), 10)

    asyncio.run(main())
    assert paid == [1]  # exactly the effect before the consumer left, none after
    assert _status(store_at, "s5") == Status.CANCELLED
    resumed = loopwise.resume("s5", step=agent, model=model, store=store_at)
    assert resumed.status == Status.COMPLETED
    assert paid == [1, 2, 3, 4, 5, 6]  # the rest once each
    assert _results(store_at, "s5") == [f"paid {n}" for n in range(1, 7)]
