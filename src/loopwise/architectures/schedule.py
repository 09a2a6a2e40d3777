"""Running a graph's nodes as soon as they are ready: :func:`run_as_ready`.

A node starts the moment every node it depends on is *settled* — finished, or skipped
because no live edge reaches it — not when a whole topological generation before it is
done: an urgent action after a quick one never waits for an unrelated slow one. Nodes that
become ready together start in the graph's topological order, so the order of their first
events is the same on every run, and a resumed run replays them by their stable names.

A node that pauses for a person stays unsettled: nothing that depends on it starts, while
everything that does not goes on; the caller lists every pause together once nothing else
can run. A node that fails cancels the nodes still running (nothing keeps running, or takes
effect, after the run has ended) and its error is raised, a :class:`Halt` first.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Awaitable, Callable, Iterable, Sequence

from loopwise.core.concurrency import CarriedExit, carry_exits
from loopwise.core.result import Halt

__all__ = ["run_as_ready"]


class _Frontier:
    """Which nodes may start: each node's count of unsettled predecessors, and the nodes
    whose count reached 0, taken in the graph's order (a heap of positions)."""

    def __init__(self, order: Sequence[str], predecessors: Callable[[str], Iterable[str]]):
        self.order = list(order)
        self.position = {node: i for i, node in enumerate(self.order)}
        self.left = {node: 0 for node in self.order}
        self.after: dict[str, list[str]] = {node: [] for node in self.order}
        for node in self.order:
            for pred in predecessors(node):
                self.left[node] += 1
                self.after[pred].append(node)
        self.heap = [self.position[n] for n in self.order if self.left[n] == 0]
        heapq.heapify(self.heap)

    def settle(self, node: str) -> None:
        """``node`` is done or skipped: what follows it has one predecessor less to wait on."""
        for nxt in self.after[node]:
            self.left[nxt] -= 1
            if self.left[nxt] == 0:
                heapq.heappush(self.heap, self.position[nxt])

    def ready(self, wanted: Callable[[str], bool]) -> list[str]:
        """The nodes that may start now, in order; a node not wanted is settled at once
        (which may ready more)."""
        out: list[str] = []
        while self.heap:
            node = self.order[heapq.heappop(self.heap)]
            if wanted(node):
                out.append(node)
            else:
                self.settle(node)
        return out


async def run_as_ready(
    order: Sequence[str],
    predecessors: Callable[[str], Iterable[str]],
    wanted: Callable[[str], bool],
    run: Callable[[str], Awaitable[bool]],
    before_start: Callable[[], None],
) -> None:
    """Run the nodes of ``order`` (a topological order), each once its ``predecessors`` are
    settled. ``wanted(node)`` says whether a ready node runs (``False``: it is skipped,
    and counts as settled); ``run(node)`` runs it and says whether it finished (``False``:
    it paused); ``before_start()`` is called before each start (a budget check may raise).
    Returns when nothing runs and nothing more can start. Linear in nodes + edges."""
    frontier = _Frontier(order, predecessors)
    running: dict[asyncio.Task[bool], str] = {}
    try:
        while True:
            ready = frontier.ready(wanted)
            if len(ready) == 1 and not running:
                # One node and nothing beside it: awaited here, no task (the common chain).
                before_start()
                if await run(ready[0]):
                    frontier.settle(ready[0])
                continue
            for node in ready:
                before_start()
                running[asyncio.ensure_future(carry_exits(run(node)))] = node
            if not running:
                return
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            _settle(done, running, frontier)
    finally:
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)


def _settle(
    done: Iterable[asyncio.Task[bool]], running: dict[asyncio.Task[bool], str], frontier: _Frontier
) -> None:
    """Take the finished tasks off ``running``; a node that finished is settled. The first
    error among them (a :class:`Halt` first) is raised."""
    errors: list[BaseException] = []
    for task in done:
        node = running.pop(task)
        error = task.exception()
        if error is None:
            if task.result():
                frontier.settle(node)
        else:
            errors.append(error.error if isinstance(error, CarriedExit) else error)
    if errors:
        halts = [e for e in errors if isinstance(e, Halt)]
        raise (halts or errors)[0]
