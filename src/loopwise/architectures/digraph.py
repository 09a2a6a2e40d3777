"""A directed graph in plain dicts: what declaring, validating and running a graph needs.

A :class:`~loopwise.architectures.workflow.Workflow` holds its nodes here, and a hybrid's plan is
ordered here, so that a process that declares and runs them never imports networkx
(~12 MiB and ~0.1 s to load, for a few loops over dicts). The algorithms are the three
that validation and the schedule use, each linear in nodes + edges: topological
generations (Kahn's algorithm, in networkx's order), the nodes reachable from one, and a
cycle's path. networkx stays for what reads a finished graph: ``Workflow.graph`` (a
``networkx.DiGraph`` copy, built on first use) and the drawings.

Nodes, and each node's successors and predecessors, keep their declaration order, so the
schedule (and with it the order of a generation's events) is the same on every run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

__all__ = ["Digraph"]

D = TypeVar("D")
"""What a node carries (a workflow node's :class:`~loopwise.architectures.nodes.NodeData`;
``None`` for a plan's steps, which the graph only orders)."""


class Digraph(Generic[D]):
    """Nodes with their data and the edges between them, in declaration order."""

    __slots__ = ("_data", "_pred", "_succ")

    def __init__(self) -> None:
        self._data: dict[str, D] = {}
        self._succ: dict[str, dict[str, None]] = {}
        self._pred: dict[str, dict[str, None]] = {}

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __contains__(self, node: object) -> bool:
        return node in self._data

    def add_node(self, node: str, data: D) -> None:
        """Add ``node`` (not yet in the graph) with its data."""
        self._data[node] = data
        self._succ[node] = {}
        self._pred[node] = {}

    def add_edge(self, source: str, target: str) -> None:
        """Add the edge ``source`` → ``target`` between two nodes of the graph (once)."""
        self._succ[source][target] = None
        self._pred[target][source] = None

    def data(self, node: str) -> D:
        """``node``'s data (the object itself: a dict's key set here is set on the node)."""
        return self._data[node]

    def items(self) -> Iterator[tuple[str, D]]:
        """Each node with its data."""
        return iter(self._data.items())

    def successors(self, node: str) -> list[str]:
        return list(self._succ[node])

    def predecessors(self, node: str) -> list[str]:
        return list(self._pred[node])

    def in_degree(self, node: str) -> int:
        return len(self._pred[node])

    def out_degree(self, node: str) -> int:
        return len(self._succ[node])

    def edges(self) -> Iterator[tuple[str, str]]:
        """Every edge, by source in declaration order."""
        return ((source, target) for source, succ in self._succ.items() for target in succ)

    def generations(self) -> list[list[str]] | None:
        """The topological generations (each node after all its predecessors, a node in
        the first generation that follows them all), or ``None`` when there is a cycle."""
        generations, waiting = self._kahn()
        return None if waiting else generations

    def find_cycle(self) -> list[str] | None:
        """The nodes of one cycle in edge order (the last has an edge to the first),
        starting at its earliest-declared node; ``None`` when there is no cycle."""
        _, waiting = self._kahn()
        if not waiting:
            return None
        # Each node Kahn's algorithm left waits for another one it left, so walking back
        # along those predecessors must come round to a node already seen.
        walk: list[str] = []
        seen: dict[str, int] = {}
        node = next(iter(waiting))
        while node not in seen:
            seen[node] = len(walk)
            walk.append(node)
            node = next(p for p in self._pred[node] if p in waiting)
        cycle = walk[seen[node] :][::-1]
        order = {n: i for i, n in enumerate(self._data)}
        first = min(range(len(cycle)), key=lambda i: order[cycle[i]])
        return cycle[first:] + cycle[:first]

    def reachable(self, start: str) -> set[str]:
        """``start`` and every node a path leads to from it."""
        found = {start}
        todo = [start]
        while todo:
            for succ in self._succ[todo.pop()]:
                if succ not in found:
                    found.add(succ)
                    todo.append(succ)
        return found

    def _kahn(self) -> tuple[list[list[str]], dict[str, int]]:
        """The generations, and the nodes left waiting (with predecessors left) by a cycle."""
        waiting = {n: len(p) for n, p in self._pred.items() if p}
        current = [n for n, p in self._pred.items() if not p]
        generations = []
        while current:
            generations.append(current)
            following = []
            for node in current:
                for child in self._succ[node]:
                    waiting[child] -= 1
                    if not waiting[child]:
                        following.append(child)
                        del waiting[child]
            current = following
        return generations, waiting
