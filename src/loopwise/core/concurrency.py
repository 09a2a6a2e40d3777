"""Concurrency inside a run: awaiting several calls at once, and carrying an exit out of a task.

:func:`concurrently` is how a turn's tool calls and a workflow's parallel nodes are awaited
(one failing cancels the rest); :func:`carry_exits` and :class:`CarriedExit` keep a
``SystemExit``/``KeyboardInterrupt`` raised in a task of its own from stopping the whole
event loop (a worker running other runs).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator, Sequence
from typing import TypeVar

from loopwise.core.result import Halt

__all__ = ["CarriedExit", "carry_exits", "concurrently"]

T = TypeVar("T")


async def concurrently(coros: Sequence[Awaitable[T]]) -> list[T]:
    """Await ``coros`` concurrently and return their results in order.

    When one fails the others are cancelled (nothing keeps running, or takes effect,
    after the run has ended) and its exception is raised, a :class:`Halt` first.
    """
    if len(coros) == 1:
        return [await coros[0]]
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(carry_exits(c)) for c in coros]
    except BaseExceptionGroup as failed:
        errors = [e.error if isinstance(e, CarriedExit) else e for e in _leaves(failed)]
        halts = [e for e in errors if isinstance(e, Halt)]
        raise (halts or errors)[0] from None
    return [t.result() for t in tasks]


class CarriedExit(Exception):
    """A ``SystemExit``/``KeyboardInterrupt`` carried out of a task of its own (a concurrent
    call, a tool's timeout): raised in a task, asyncio would also throw it out of the event
    loop, past the run's own task (a worker running other runs would stop); whoever awaits
    the task raises :attr:`error` instead, in the run's task."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


async def carry_exits(work: Awaitable[T]) -> T:
    """Await ``work`` in a task of its own: its ``SystemExit``/``KeyboardInterrupt`` comes
    out as a :class:`CarriedExit`."""
    try:
        return await work
    except (SystemExit, KeyboardInterrupt) as e:
        raise CarriedExit(e) from None


def _leaves(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            yield from _leaves(error)
        else:
            yield error
