"""Watching a run as it happens: :func:`astream` yields its events while it runs.

``async for event in loopwise.astream(step, input, ...)`` starts the run and yields every
:class:`~loopwise.core.step.Event` as it is emitted — the same objects, in the same order, that
the store records — and the stream's :attr:`RunStream.result` is the
:class:`~loopwise.core.result.RunResult` once the iteration has ended. :func:`astream_resume`
does the same for a resumed run (only the new events: ``run_resumed`` onwards). With
``stream=True`` the model streams its answers and the stream also yields each piece of
text as a :class:`~loopwise.core.step.TextDelta` (``type == "text_delta"``, not stored, no
``seq``) before the ``model_call`` event that holds the whole answer.

A stream's consumer that leaves cancels its run, safely: leaving the ``async for`` early
(``break``, or an exception out of its body, the stream still referenced or not), dropping
the stream (garbage-collected), cancelling the task that iterates, ``aclose()`` and the
end of ``async with astream(...)`` all cancel it; ``aclose()`` also waits until it is
recorded ``cancelled``. No effect starts after the consumer left: before each
``write``/``irreversible`` tool the run waits until its consumer has dealt with every event
before it (asks for the next one) or left. A sync effect in flight is seen through and
recorded first (:mod:`loopwise.tools.tool`), so a resume never makes it twice; an async tool is
cancelled at its current ``await`` as asyncio does, nothing of it is recorded, and the
resume calls it again with the same ``ctx.idempotency_key``. Started with
``detached=True``, the run goes on to its end instead when its consumer leaves (as long
as its event loop runs); :meth:`RunStream.wait` waits for it. Nothing emitted is lost
from the store: a stream only reads the run, the store is written before the run goes on.

The stream holds at most about :data:`UNREAD` unread items. A consumer that far behind
holds the run back: the run waits before its next step or model call until the consumer
has read half of them (back-pressure; every event still reaches the consumer). Text
deltas that arrive meanwhile, within one model call, are dropped and counted in
:attr:`RunStream.dropped`: the ``model_call`` event that follows has the whole answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from types import TracebackType
from typing import Unpack

from loopwise.core.events import Event, EventSink, TextDelta
from loopwise.core.options import ResumeOverrides, RunOptions, RunOverrides, merge_options
from loopwise.core.result import RunResult
from loopwise.core.step import Step
from loopwise.running.runner import aresume, arun
from loopwise.store.open import DEFAULT, StoreLike

__all__ = ["UNREAD", "RunStream", "astream", "astream_resume"]

_Start = Callable[[EventSink], Coroutine[object, None, RunResult]]

UNREAD = 1_000
"""Unread items a stream holds before its run waits (and text deltas are dropped)."""

# Detached runs whose consumer left: the event loop keeps only weak references to tasks.
_DETACHED: set[asyncio.Task[RunResult]] = set()


class _Feed:
    """The stream's queue and the sink a stream adds to its run (``record``, ``text``,
    ``pace``): every event onto the queue, text deltas while there is room, and the run
    held back while the consumer is :data:`UNREAD` items behind."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.queue: asyncio.Queue[Event | TextDelta | None] = asyncio.Queue()
        self.watching = True
        self.dropped = 0
        self._loop = loop
        self._thread = threading.get_ident()
        self._room: asyncio.Future[None] | None = None
        self._asking = False  # the consumer waits for an item, every earlier one dealt with
        self._caught_up: list[asyncio.Future[None]] = []

    def record(self, run_id: str, event: Event) -> None:
        """Queue ``event`` for the consumer (safely from a step's worker thread too)."""
        self._put(event)

    def text(self, run_id: str, delta: TextDelta) -> None:
        """Queue a piece of streamed answer text (``stream=True``), unless the consumer is
        :data:`UNREAD` items behind: then it is dropped (its ``model_call`` has it all)."""
        if self.queue.qsize() >= UNREAD:
            self.dropped += 1
        else:
            self._put(delta)

    async def pace(self) -> None:
        """Before a step or a model call: wait while the consumer is :data:`UNREAD` behind,
        until it has read half of them (or left)."""
        if self.queue.qsize() < UNREAD or not self.watching:
            return
        if asyncio.get_running_loop() is not self._loop:
            return  # a run driven from another loop cannot wait on this one
        self._room = self._loop.create_future()
        try:
            await self._room
        finally:
            self._room = None

    async def before_effect(self) -> None:
        """Before an effect starts: wait until the consumer has dealt with every event
        before it (it asks for the next one) or has left; leaving cancels the run here,
        so the effect never starts."""
        if not self.watching or (self._asking and self.queue.empty()):
            return
        if asyncio.get_running_loop() is not self._loop:
            return  # a run driven from another loop cannot wait on this one
        caught_up = self._loop.create_future()
        self._caught_up.append(caught_up)
        await caught_up

    def asking(self, waiting: bool) -> None:
        """The consumer asks for the next item (``True``) or has one (``False``); asking
        with none queued, it has dealt with every event so far: effects may start."""
        self._asking = waiting
        if waiting and self.queue.empty():
            self._catch_up()

    def _catch_up(self) -> None:
        waiting, self._caught_up = self._caught_up, []
        for caught_up in waiting:
            if not caught_up.done():
                caught_up.set_result(None)

    def read(self) -> None:
        """The consumer took an item: let a held-back run go on once half are read."""
        room = self._room
        if room is not None and not room.done() and self.queue.qsize() <= UNREAD // 2:
            room.set_result(None)

    def stop_watching(self) -> None:
        """No one reads any more: queue nothing, hold nothing back."""
        self.watching = False
        while not self.queue.empty():
            self.queue.get_nowait()
        room = self._room
        if room is not None and not room.done():
            room.set_result(None)
        self._catch_up()

    def _put(self, item: Event | TextDelta) -> None:
        if not self.watching:
            return
        if threading.get_ident() == self._thread:
            self.queue.put_nowait(item)
        else:
            self._loop.call_soon_threadsafe(self._put, item)


class RunStream:
    """An async iterator over one run's events as they happen (see the module docs).

    Iterating starts the run; a configuration mistake raises from the iteration. After
    the last event :attr:`result` holds the :class:`RunResult`; it stays ``None`` when the
    consumer left early (the run was then cancelled, unless detached; the store has how
    it ended). Each ``async for`` over the stream is its consumer: leaving the loop before
    the run's end is leaving the stream.
    """

    def __init__(self, start: _Start, *, detached: bool = False) -> None:
        self._start = start
        self._feed: _Feed | None = None
        self._task: asyncio.Task[RunResult] | None = None
        self._ended = False
        self.detached = detached
        """Whether the run goes on when its consumer leaves (``astream(detached=True)``)."""
        self.result: RunResult | None = None
        """The run's result once the iteration has ended (``None`` before, or if cancelled)."""

    @property
    def dropped(self) -> int:
        """Text deltas left out while the consumer was :data:`UNREAD` items behind."""
        return self._feed.dropped if self._feed is not None else 0

    def __aiter__(self) -> _Consumer:
        return _Consumer(self)

    async def __anext__(self) -> Event | TextDelta:
        if self._ended:
            raise StopAsyncIteration
        task = self._task or self._begin()
        feed = self._feed
        assert feed is not None
        feed.asking(True)
        try:
            item = await feed.queue.get()
        except asyncio.CancelledError:
            # The consumer is being cancelled: the run it watches goes with it.
            await self._leave(task)
            raise
        feed.asking(False)
        feed.read()
        if item is None:
            self._ended = True
            self.result = task.result()  # the run's own exception, if it raised one
            raise StopAsyncIteration
        return item

    def _begin(self) -> asyncio.Task[RunResult]:
        loop = asyncio.get_running_loop()
        feed = self._feed = _Feed(loop)
        task = loop.create_task(self._start(feed))
        # Done callbacks run after the task's last step, so the end mark follows every event.
        task.add_done_callback(lambda _: feed.queue.put_nowait(None))
        if self.detached:
            _DETACHED.add(task)
            task.add_done_callback(_DETACHED.discard)
        self._task = task
        return task

    async def wait(self) -> RunResult:
        """Stop reading events and wait for the run to end (starting it if no iteration
        has); its :class:`RunResult`. Cancelling the wait cancels the run, unless detached;
        a run already cancelled raises ``CancelledError`` (the store has its end)."""
        task = self._task or self._begin()
        self._stop_watching()
        self.result = await (asyncio.shield(task) if self.detached else task)
        return self.result

    async def aclose(self) -> None:
        """Stop watching: cancel the run if it is still going and wait until it has ended;
        a detached run goes on."""
        if self._task is not None:
            await self._leave(self._task)

    async def _leave(self, task: asyncio.Task[RunResult]) -> None:
        if self.detached:
            self._stop_watching()
            return
        task.cancel()
        try:
            # A run that raised: its error was the consumer's to read, and it left.
            with contextlib.suppress(Exception):
                self.result = await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # our own cancellation, not only the run's

    def _left(self) -> None:
        """The consumer is gone without closing (a loop left early, the stream dropped):
        cancel the run, or stop watching a detached one. Safe from any thread."""
        task = self._task
        if task is None or task.done() or self._ended:
            return
        action = self._stop_watching if self.detached else task.cancel
        try:
            if asyncio.get_running_loop() is task.get_loop():
                action()
                return
        except RuntimeError:
            pass  # no event loop in this thread (a garbage collection elsewhere)
        with contextlib.suppress(RuntimeError):  # its event loop is already closed
            task.get_loop().call_soon_threadsafe(action)

    def _stop_watching(self) -> None:
        if self._feed is not None:
            self._feed.stop_watching()

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
        self._left()


class _Consumer:
    """One ``async for`` over a stream: dropped before the run's end, it leaves the stream."""

    __slots__ = ("_stream",)

    def __init__(self, stream: RunStream) -> None:
        self._stream = stream

    def __aiter__(self) -> _Consumer:
        return self

    def __anext__(self) -> Awaitable[Event | TextDelta]:
        return self._stream.__anext__()

    def __del__(self) -> None:
        self._stream._left()


def astream(
    target: Step,
    input: object = None,
    options: RunOptions | None = None,
    *,
    store: StoreLike = DEFAULT,
    spec: str | None = None,
    detached: bool = False,
    **overrides: Unpack[RunOverrides],
) -> RunStream:
    """Run ``target`` on ``input`` as :func:`loopwise.arun` does (same options), yielding
    its events as they happen: ``async for event in loopwise.astream(step, x): ...``.

    When the consumer leaves before the end the run is cancelled; ``detached=True`` lets
    it go on to its end instead (see the module docs). Unknown options raise
    :class:`~loopwise.errors.ConfigError` here, before the run.
    """
    opts = merge_options(options, overrides, also="store, spec, detached")

    def start(sink: EventSink) -> Coroutine[object, None, RunResult]:
        watched = replace(opts, sinks=(*opts.sinks, sink))
        return arun(target, input, watched, store=store, spec=spec)

    return RunStream(start, detached=detached)


def astream_resume(
    run_id: str,
    options: RunOptions | None = None,
    *,
    step: Step | None = None,
    store: StoreLike = DEFAULT,
    force: bool = False,
    detached: bool = False,
    **overrides: Unpack[ResumeOverrides],
) -> RunStream:
    """Resume ``run_id`` as :func:`loopwise.aresume` does (same options), yielding its new
    events (``run_resumed`` onwards) as they happen. A run that does not continue (it
    finished, or still waits for a decision) yields nothing; ``result`` says how it is.
    ``detached`` is :func:`astream`'s."""
    opts = merge_options(options, overrides, also="step, store, force, detached")

    def start(sink: EventSink) -> Coroutine[object, None, RunResult]:
        watched = replace(opts, sinks=(*opts.sinks, sink))
        return aresume(run_id, watched, step=step, store=store, force=force)

    return RunStream(start, detached=detached)
