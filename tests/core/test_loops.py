"""The sync API's kept event loop (loopwise.core.loops): one per thread, reused from one
``loopwise.run`` to the next, each call still behaving as ``asyncio.run`` would."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import os
import signal
import threading

import pytest

import loopwise
from loopwise import ConfigError

_seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")


@loopwise.step
async def loop_of(x: int) -> int:
    return id(asyncio.get_running_loop())


def test_sync_runs_in_one_thread_share_a_loop_and_another_thread_has_its_own() -> None:
    first = loopwise.run(loop_of, 0, store=None).output
    assert loopwise.run(loop_of, 0, store=None).output == first
    other: list[int] = []
    worker = threading.Thread(target=lambda: other.append(loopwise.run(loop_of, 0).output))
    worker.start()
    worker.join()
    assert other and other[0] != first


def test_a_threads_loop_is_closed_when_the_thread_ends() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    @loopwise.step
    async def keep(x: int) -> int:
        loops.append(asyncio.get_running_loop())
        return x

    worker = threading.Thread(target=lambda: loopwise.run(keep, 1, store=None))
    worker.start()
    worker.join()
    gc.collect()
    assert loops[0].is_closed()


def test_each_call_sees_the_callers_context_at_the_call() -> None:
    @loopwise.step
    async def read(x: int) -> str:
        return _seen.get()

    token = _seen.set("first")
    try:
        assert loopwise.run(read, 0, store=None).output == "first"
        _seen.set("second")
        assert loopwise.run(read, 0, store=None).output == "second"
    finally:
        _seen.reset(token)


def test_tasks_a_call_leaves_behind_are_cancelled_before_it_returns() -> None:
    left: list[asyncio.Task[None]] = []

    @loopwise.step
    async def leave(x: int) -> int:
        left.append(asyncio.get_running_loop().create_task(asyncio.Event().wait()))
        return x

    loopwise.run(leave, 0, store=None)
    assert left[0].cancelled()


def test_a_sync_run_inside_a_running_loop_is_still_refused() -> None:
    async def inside() -> None:
        with pytest.raises(ConfigError, match="await the async variant"):
            loopwise.run(loop_of, 0, store=None)

    asyncio.run(inside())


def test_ctrl_c_cancels_the_run_and_the_next_run_works(tmp_path: object) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")

    @loopwise.step
    async def interrupted(x: int) -> int:
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(60)  # until the interrupt cancels it (bounded: never hang CI)
        return x

    store = f"{tmp_path}/runs.db"
    # asyncio turns SIGINT into a cancellation only when Python's default handler is in
    # place; once in the suite it was not (a hang), so this test sets it itself.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        for _ in range(2):  # a second Ctrl-C is handled as the first (not a repeat)
            with pytest.raises(KeyboardInterrupt):
                loopwise.run(interrupted, 0, store=store)
    finally:
        if previous is not None:  # None: a handler not set from Python
            signal.signal(signal.SIGINT, previous)
    with loopwise.open_store(store) as st:
        assert {r.status for r in st.list_runs()} == {"cancelled"}
    assert loopwise.run(loop_of, 0, store=None).status == "completed"
