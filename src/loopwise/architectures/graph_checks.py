"""What a workflow's graph alone can get wrong: a cycle, a node nothing reaches, a route
branch that names no node or a node after a route that no branch leads to.

:meth:`~loopwise.architectures.workflow.Workflow.validation_errors` asks these first; the
checks that need the steps' types (edges, routes, ends) stay on the workflow.
"""

from __future__ import annotations

from loopwise.architectures.digraph import Digraph
from loopwise.architectures.nodes import RouteSpec
from loopwise.errors import GraphError

__all__ = ["branch_errors", "cycle_error", "reach_errors"]


def cycle_error(dag: Digraph) -> GraphError | None:
    """The first cycle of ``dag`` as an error (a workflow is acyclic), or ``None``."""
    cycle = dag.find_cycle()
    if cycle is None:
        return None
    path = " → ".join([*cycle, cycle[0]])
    return GraphError(
        f"node {cycle[0]!r} is on a cycle ({path}); a workflow is acyclic: remove the "
        f"edge {cycle[-1]} → {cycle[0]}, or put the loop inside one step (an agent)",
        node=cycle[0],
        code="cycle",
    )


def reach_errors(dag: Digraph, start: str) -> list[GraphError]:
    """The nodes of ``dag`` nothing leads to from ``start``."""
    reached = dag.reachable(start)
    return [
        GraphError(
            f"node {n!r} is unreachable from the start node {start!r}: nothing leads to "
            f"it; give it after=[...] (or name it as a branch), or remove it",
            node=n,
            code="unreachable",
        )
        for n in dag
        if n not in reached
    ]


def branch_errors(dag: Digraph) -> list[GraphError]:
    """Routes whose branches name no node, and nodes after a route no branch leads to."""
    errors = []
    for node, data in dag.items():
        spec: RouteSpec | None = data.get("route")
        if spec is None:
            continue
        targets = spec.targets()
        for target in targets:
            if target not in dag:
                errors.append(
                    GraphError(
                        f"route {node!r} sends {', '.join(spec.labels(target))} to "
                        f"{target!r}, which is not a node (a dangling branch); add "
                        f"{target!r} or fix the branch",
                        node=node,
                        code="dangling-branch",
                    )
                )
        for succ in dag.successors(node):
            if succ not in targets:
                errors.append(
                    GraphError(
                        f"node {succ!r} follows route {node!r} but no branch leads to it; "
                        f"name it in the route's branches (or default)",
                        node=succ,
                        code="unrouted-node",
                    )
                )
    return errors
