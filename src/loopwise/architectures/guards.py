"""Route guards: which route choices every run of a workflow node depends on.

A node after a route runs only when the route picked its branch; its *guard* is the set of
``(route, branch)`` choices all its runs need. Two guards that need different branches of
one route exclude each other, which decides two things: a node joining such branches
:func:`merges` them (exactly one ran, and it gets that one's output), and two ends whose
guards do not exclude each other are a dangling branch (:func:`end_errors`).
"""

from __future__ import annotations

from loopwise.architectures.digraph import Digraph
from loopwise.architectures.nodes import NodeData
from loopwise.errors import GraphError

__all__ = ["Guards", "end_errors", "exclusive", "merges", "route_guards"]

Guard = frozenset[tuple[str, str]]
Guards = dict[str, Guard]
"""Node → the route choices (route, branch) every run of it depends on."""


def route_guards(dag: Digraph[NodeData], generations: list[list[str]]) -> Guards:
    """Every node's guard, computed in topological ``generations``."""
    guards: Guards = {}
    for node in (n for generation in generations for n in generation):
        preds = dag.predecessors(node)
        if not preds:
            guards[node] = frozenset()
            continue
        sets = [_edge_guard(dag, p, node, guards) for p in preds]
        guards[node] = frozenset.intersection(*sets)
    return guards


def merges(dag: Digraph[NodeData], node: str, guards: Guards) -> bool:
    """Whether ``node`` joins mutually exclusive route branches (so one ran)."""
    preds = dag.predecessors(node)
    if len(preds) < 2:
        return False
    edge = [_edge_guard(dag, p, node, guards) for p in preds]
    return all(exclusive(a, b) for i, a in enumerate(edge) for b in edge[i + 1 :])


def exclusive(a: Guard, b: Guard) -> bool:
    """Two guards exclude each other when they need different branches of one route."""
    return any(ra == rb and ta != tb for ra, ta in a for rb, tb in b)


def end_errors(ends: list[str], guards: Guards) -> list[GraphError]:
    """The ends (in declaration order) that may run together with an earlier end: a
    dangling branch, whose output would be lost."""
    errors = []
    for i, end in enumerate(ends):
        clash = [e for e in ends[:i] if not exclusive(guards[e], guards[end])]
        if clash:
            errors.append(
                GraphError(
                    f"node {end!r} ends a branch that nothing joins, while {clash[0]!r} "
                    f"also ends the workflow (a dangling branch: one output would be "
                    f"lost); join them with then(step) / add(..., after=[...])",
                    node=end,
                    code="dangling-branch",
                )
            )
    return errors


def _edge_guard(dag: Digraph[NodeData], pred: str, node: str, guards: Guards) -> Guard:
    """The guard of the edge ``pred`` → ``node``: ``pred``'s, and the branch when it routes."""
    if "route" in dag.data(pred):
        return guards[pred] | {(pred, node)}
    return guards[pred]
