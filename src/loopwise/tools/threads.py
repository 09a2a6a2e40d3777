"""Running a sync tool function off the event loop, and seeing an effect through.

A thread cannot be stopped: :func:`to_the_end` awaits a sync tool with an effect to its
end even when its call is cancelled (so its result is recorded), :func:`seen_through` does
the same up to the tool's timeout, and :func:`in_own_thread` runs a sync tool that has a
timeout in a daemon thread of its own (a hung call holds up neither ``asyncio.run`` nor
the interpreter's exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable, Coroutine
from typing import TypeVar

__all__ = ["in_own_thread", "seen_through", "to_the_end"]

T = TypeVar("T")


async def to_the_end(fn: Callable[..., T], kwargs: dict[str, object]) -> T:
    """Run a sync tool with an effect in a worker thread and see it through.

    A thread cannot be stopped, so cancelling the call (a sibling call ended the run, the
    caller cancelled it) would not stop the effect, only hide it: the result would never
    be recorded. Once started, the call is awaited to its end and returned, so the caller
    records it. The cancellation is not undone (``Task.cancelling()`` still counts it):
    the run ends ``cancelled`` before its next step or model call
    (:meth:`~loopwise.core.step.Context.call_model`).
    """
    context = contextvars.copy_context()
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(None, lambda: context.run(fn, **kwargs))
    while True:
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.cancelled():
                raise
            continue  # the thread runs on: wait for what it did


async def seen_through(work: Coroutine[object, object, T], timeout: float) -> T:
    """Await a sync effect with a timeout (its thread: :func:`in_own_thread`) to its end
    or its timeout, whichever comes first, even when the call is cancelled.

    As :func:`to_the_end` does without a timeout: cancelling the run while the effect runs
    would drop its result, so the run would be stored ``cancelled`` with the effect done
    and unrecorded, and a resume would make it again. Seen through, its result (or its
    timeout, recorded as "may still take effect") is recorded first; the cancellation
    stays requested and ends the run at its next step.
    """
    loop = asyncio.get_running_loop()
    running = asyncio.ensure_future(work)
    deadline = loop.time() + timeout
    while True:
        try:
            return await asyncio.wait_for(asyncio.shield(running), deadline - loop.time())
        except asyncio.CancelledError:
            if running.cancelled():
                raise
            continue  # the thread runs on: wait for what it did (until its timeout)
        except TimeoutError:
            running.cancel()
            raise


async def in_own_thread(fn: Callable[..., T], kwargs: dict[str, object]) -> T:
    """Run a sync tool that has a timeout in a daemon thread of its own.

    A thread cannot be killed: one that hangs past the timeout runs on. In asyncio's
    default executor it would hold up ``asyncio.run``'s shutdown (so ``loopwise.run``
    would not return until the hung call ended) and the interpreter's exit; a daemon
    thread holds up neither, and what it returns late is dropped.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def settle(outcome: tuple[T] | BaseException) -> None:
        if future.done():
            return  # timed out and cancelled already
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome[0])

    def work() -> None:
        outcome: tuple[T] | BaseException
        try:
            outcome = (context.run(fn, **kwargs),)
        except BaseException as e:  # handed to the awaiting coroutine
            outcome = e
        with contextlib.suppress(RuntimeError):  # the loop closed while it hung
            loop.call_soon_threadsafe(settle, outcome)

    threading.Thread(target=work, name=f"loopwise-tool-{fn.__name__}", daemon=True).start()
    return await future
