"""A stream whose run is cancelled while an effect runs: the effect is recorded once.

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
