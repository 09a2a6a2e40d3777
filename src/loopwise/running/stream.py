"""Watching a run as it happens: :func:`astream` yields its events while it runs.

``async for event in loopwise.astream(step, input, ...)`` starts the run and yields every
:class:`~loopwise.core.step.Event` as it is emitted — the same objects, in the same order, that
the store records — and the stream's :attr:`RunStream.result` is the
:class:`~loopwise.core.step.RunResult` once the iteration has ended. :func:`astream_resume`
does the same for a resumed run (only the new events: ``run_resumed`` onwards). With
``stream=True`` the model streams its answers and the stream also yields each piece of
text as a :class:`~loopwise.core.step.TextDelta` (``type == "text_delta"``, not stored, no
``seq``) before the ``model_call`` event that holds the whole answer.

Leaving early cancels the run: ``aclose()`` or the end of ``async with astream(...)``
cancels it and waits until it is recorded ``cancelled``; a bare ``break`` out of
``async for`` cancels it as soon as the stream is dropped (the run records ``cancelled``
on its next step, at the latest when the event loop shuts down). Nothing emitted is lost
from the store: a stream only reads the run, the store is written before the run goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from dataclasses import replace
from types import TracebackType
from typing import Any

from loopwise.core.events import Event, EventSink, TextDelta
from loopwise.core.options import RunOptions, merge_options
from loopwise.core.result import RunResult
from loopwise.core.step import Step
from loopwise.running.runner import DEFAULT, aresume, arun

__all__ = ["RunStream", "astream", "astream_resume"]

_Start = Callable[[EventSink], Coroutine[Any, Any, RunResult]]


class _QueueSink:
    """The sink a stream adds to its run: every event onto the stream's queue."""

    def __init__(
        self, queue: asyncio.Queue[Event | TextDelta | None], loop: asyncio.AbstractEventLoop
    ):
        self._queue = queue
        self._loop = loop
        self._thread = threading.get_ident()

    def record(self, run_id: str, event: Event) -> None:
        """Queue ``event`` for the consumer (safely from a step's worker thread too)."""
        self._put(event)

    def text(self, run_id: str, delta: TextDelta) -> None:
        """Queue a piece of streamed answer text (``stream=True``)."""
        self._put(delta)

    def _put(self, item: Event | TextDelta) -> None:
        if threading.get_ident() == self._thread:
            self._queue.put_nowait(item)
        else:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)


class RunStream:
    """An async iterator over one run's events as they happen (see the module docs).

    Iterating starts the run; a configuration mistake raises from the iteration. After
    the last event :attr:`result` holds the :class:`RunResult`; it stays ``None`` when the
    consumer left early (the run was then cancelled; the store has its ``cancelled`` end).
    """

    def __init__(self, start: _Start) -> None:
        self._start = start
        self._queue: asyncio.Queue[Event | TextDelta | None] = asyncio.Queue()
        self._task: asyncio.Task[RunResult] | None = None
        self.result: RunResult | None = None
        """The run's result once the iteration has ended (``None`` before, or if cancelled)."""

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> Event | TextDelta:
        task = self._task or self._begin()
        try:
            item = await self._queue.get()
        except asyncio.CancelledError:
            # The consumer is being cancelled: the run it watches goes with it.
            await self._cancel(task)
            raise
        if item is None:
            self.result = task.result()  # the run's own exception, if it raised one
            raise StopAsyncIteration
        return item

    def _begin(self) -> asyncio.Task[RunResult]:
        loop = asyncio.get_running_loop()
        queue = self._queue
        task = loop.create_task(self._start(_QueueSink(queue, loop)))
        # Done callbacks run after the task's last step, so the end mark follows every event.
        task.add_done_callback(lambda _: queue.put_nowait(None))
        self._task = task
        return task

    async def aclose(self) -> None:
        """Stop watching: cancel the run if it is still going and wait until it has ended."""
        if self._task is not None:
            await self._cancel(self._task)

    async def _cancel(self, task: asyncio.Task[RunResult]) -> None:
        task.cancel()
        try:
            # A run that raised: its error was the consumer's to read, and it left.
            with contextlib.suppress(Exception):
                self.result = await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # our own cancellation, not only the run's

    async def __aenter__(self) -> RunStream:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __del__(self) -> None:
        # A bare `break` out of `async for` drops the stream without closing it.
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(RuntimeError):  # its event loop is already closed
                task.cancel()


def astream(
    target: Step,
    input: Any = None,
    options: RunOptions | None = None,
    *,
    store: Any = DEFAULT,
    spec: str | None = None,
    **overrides: Any,
) -> RunStream:
    """Run ``target`` on ``input`` as :func:`loopwise.arun` does (same options), yielding
    its events as they happen: ``async for event in loopwise.astream(step, x): ...``.

    Unknown options raise :class:`~loopwise.errors.ConfigError` here, before the run.
    """
    opts = merge_options(options, overrides, also="store, spec")

    def start(sink: EventSink) -> Coroutine[Any, Any, RunResult]:
        watched = replace(opts, sinks=(*opts.sinks, sink))
        return arun(target, input, watched, store=store, spec=spec)

    return RunStream(start)


def astream_resume(
    run_id: str,
    options: RunOptions | None = None,
    *,
    step: Step | None = None,
    store: Any = DEFAULT,
    force: bool = False,
    **overrides: Any,
) -> RunStream:
    """Resume ``run_id`` as :func:`loopwise.aresume` does (same options), yielding its new
    events (``run_resumed`` onwards) as they happen. A run that does not continue (it
    finished, or still waits for a decision) yields nothing; ``result`` says how it is."""
    opts = merge_options(options, overrides, also="step, store, force")

    def start(sink: EventSink) -> Coroutine[Any, Any, RunResult]:
        watched = replace(opts, sinks=(*opts.sinks, sink))
        return aresume(run_id, watched, step=step, store=store, force=force)

    return RunStream(start)
