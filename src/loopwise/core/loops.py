"""The event loop under the sync API: one per thread, kept from one call to the next.

``loopwise.run``, ``resume`` and ``evaluate`` wrap their async versions with
:func:`blocking`, the one sync wrapper. A fresh loop per
call (``asyncio.run``) costs more than a short stored run itself, so each thread keeps an
:class:`asyncio.Runner` and reuses its loop. Each call still behaves as ``asyncio.run``:

* it runs in a copy of the caller's context, taken at the call (context variables set
  between calls, such as the current OpenTelemetry span, are seen);
* Ctrl-C in the main thread cancels it and raises :class:`KeyboardInterrupt`;
* tasks it leaves behind are cancelled before it returns.

A kept loop is closed when its thread's state is released and, for the main thread, at
interpreter exit; a forked child starts its own instead of sharing its parent's.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import threading
import weakref
from collections.abc import Awaitable, Coroutine, Iterable
from typing import TypeVar

from loopwise.errors import ConfigError
from loopwise.models.port import model_member

__all__ = ["blocking", "closing_model", "run_in_kept_loop"]

T = TypeVar("T")


class _Kept(threading.local):
    """This thread's runner; ``token`` dies with the thread's state, closing it."""

    runner: asyncio.Runner | None = None
    token: object = None
    closer: weakref.finalize[[asyncio.Runner], _Token] | None = None


class _Token:
    """An object only the thread-local refers to (a finalizer watches it)."""


_kept = _Kept()
_inherited: list[asyncio.Runner] = []


def _forget_after_fork() -> None:
    # The forking thread's loop shares its selector and self-pipe with the parent:
    # closing it here would unregister them from the parent's epoll set. Keep it
    # referenced and unused (no finalizer, no __del__ touching it) and start afresh.
    if _kept.runner is not None and _kept.closer is not None:
        _kept.closer.detach()
        _inherited.append(_kept.runner)
    _kept.runner = _kept.token = _kept.closer = None


os.register_at_fork(after_in_child=_forget_after_fork)


def run_in_kept_loop(work: Coroutine[object, None, T]) -> T:
    """Run ``work`` to its end on this thread's kept loop (see the module docs).

    The caller has checked that no event loop is running in this thread.
    """
    runner = _kept.runner or _new_runner()
    try:
        return runner.run(work, context=contextvars.copy_context())
    finally:
        _cancel_leftovers(runner.get_loop())


def _new_runner() -> asyncio.Runner:
    # No set_event_loop: between calls this thread has no current loop, as after asyncio.run.
    runner = asyncio.Runner(loop_factory=asyncio.new_event_loop)
    token = _Token()
    _kept.runner, _kept.token = runner, token
    _kept.closer = weakref.finalize(token, _close, runner)
    return runner


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what the call left running and let it unwind, as ``asyncio.run`` does."""
    left = [t for t in asyncio.all_tasks(loop) if not t.done()]
    if not left:
        return
    for task in left:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
    for task in left:
        if not task.cancelled() and task.exception() is not None:
            loop.call_exception_handler(
                {
                    "message": "unhandled exception in a task left by a sync call",
                    "exception": task.exception(),
                    "task": task,
                }
            )


def _close(runner: asyncio.Runner) -> None:
    # RuntimeError: its loop runs in a thread still alive at exit, or this thread runs
    # another loop; the process's end takes it.
    with contextlib.suppress(RuntimeError):
        runner.close()


def blocking(work: Coroutine[object, None, T], *, release: Iterable[object] = ()) -> T:
    """Run ``work`` to its end on this thread's kept event loop: the one wrapper of the
    sync API (see the module docs: each call behaves as ``asyncio.run``).

    ``release`` (the call's models) have their connections closed in that loop before the
    call ends: a model may be used next from another thread's loop, and reopens them on
    its next use. Raises :class:`ConfigError` when called inside a running event loop
    (await the async variant there).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run_in_kept_loop(closing_model(work, *release))
    work.close()
    raise ConfigError("called inside an event loop; await the async variant (arun, aresume)")


async def closing_model(work: Awaitable[T], *models: object) -> T:
    """Await ``work``, then release each model's connections (once) in this same loop.

    A connection pool belongs to the loop that opened it, and the next sync call may come
    from another thread (another loop); the model reopens one on its next use.
    """
    try:
        return await work
    finally:
        for model in {id(m): m for m in models}.values():
            await model_member(model, "aclose")()
