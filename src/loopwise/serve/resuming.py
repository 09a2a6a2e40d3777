"""``loopwise serve --resume``: the inbox continues every decided run on its store, as a
worker does.

A thread of the server runs :func:`loopwise.running.worker.awork` over the inbox's store
with ``decided_only=True``: it claims each paused run whose approvals are all decided,
wherever they were decided (this inbox's forms, another inbox, ``loopwise approve``/
``deny``, :func:`loopwise.approve`), and continues it. The claim is the workers' own
(atomic, with a renewed lease), so a run is resumed once even when ``loopwise worker``
processes and other inboxes watch the same store. It never starts a queued run nor takes
over an interrupted one: that is a worker's job.

A run whose target cannot be loaded now (it raises or calls ``sys.exit()`` at import, has
a syntax error, was deleted) ends ``error`` with why in its detail, as under a worker: the
decisions stay recorded, the run page says it could not be resumed and why, and
``loopwise resume RUN_ID`` finishes it once the target loads (this thread and the
workers leave ``error`` runs alone: the claim makes that one resume the only one).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from loopwise.running.worker import Finished, awork
from loopwise.store.base import RunStore

__all__ = ["Resumer"]


class Resumer:
    """The thread that resumes decided runs of ``store`` until :meth:`close`."""

    def __init__(
        self,
        store: RunStore,
        *,
        concurrency: int = 4,
        poll_seconds: float = 1.0,
        on_finished: Finished | None = None,
    ) -> None:
        self._store = store
        self._concurrency = concurrency
        self._poll = poll_seconds
        self._on_finished = on_finished
        self._waiting: list[threading.Event] = []
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._serve, name="loopwise-resume", daemon=True)
        self._thread.start()
        self._ready.wait()

    def _serve(self) -> None:
        try:
            asyncio.run(self._work())
        finally:
            self._ready.set()  # (when the loop could not even start)

    async def _work(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop, self._wake = asyncio.Event(), asyncio.Event()
        self._ready.set()
        try:
            await awork(
                self._store,
                concurrency=self._concurrency,
                poll_seconds=self._poll,
                stop=self._stop,
                on_finished=self._on_finished,
                decided_only=True,
                wake=self._wake,
                on_idle=self._idle,
            )
        finally:
            self._release()

    def look(self) -> threading.Event:
        """Have the thread look for decided runs now; the returned event is set once it
        looked after this call and has no run in hand (or has stopped)."""
        done = threading.Event()

        def arrived() -> None:
            assert self._wake is not None
            self._waiting.append(done)
            self._wake.set()

        try:
            if self._loop is None or not self._thread.is_alive():
                raise RuntimeError("not resuming")
            self._loop.call_soon_threadsafe(arrived)
        except RuntimeError:  # the loop has ended: nothing is resumed here any more
            done.set()
        return done

    def _idle(self) -> None:
        assert self._wake is not None
        if self._wake.is_set():
            return  # asked to look again during this look: the next one answers them
        self._release()

    def _release(self) -> None:
        waiting, self._waiting = self._waiting, []
        for done in waiting:
            done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every run decided so far that this thread can take has ended or
        paused again (for tests and shutdown); ``False`` when ``timeout`` passed first."""
        return self.look().wait(timeout)

    def close(self) -> None:
        """Stop claiming, let the runs in hand finish or pause, and end the thread."""
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # (it ended meanwhile)
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join()
