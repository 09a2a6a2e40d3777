"""What a workflow's graph alone can get wrong: a cycle, a node nothing reaches, a route
branch that names no node or a node after a route that no branch leads to.

:meth:`~loopwise.architectures.workflow.Workflow.validation_errors` asks these first; then
:func:`route_errors` checks a route against the type it routes (the workflow works that type
out), and the edges' types are checked on the workflow.
"""

from __future__ import annotations

from loopwise.architectures.digraph import Digraph
from loopwise.architectures.nodes import NodeData, RouteSpec
from loopwise.architectures.wiring import domain_of, fields_of, strip_type, type_name
from loopwise.core.function_step import FunctionStep
from loopwise.errors import GraphError

__all__ = ["branch_errors", "cycle_error", "reach_errors", "route_errors"]


def cycle_error(dag: Digraph[NodeData]) -> GraphError | None:
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


def reach_errors(dag: Digraph[NodeData], start: str) -> list[GraphError]:
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


def branch_errors(dag: Digraph[NodeData]) -> list[GraphError]:
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


def route_errors(
    node: str, spec: RouteSpec, routed: object, *, joined: bool = False
) -> list[GraphError]:
    """What route ``node`` gets wrong about the values it routes on (``routed``: the type
    it receives; ``joined``: it joins several nodes, so that type is unknown): a branch for
    no value of the field, values no branch covers and no default, a field the type lacks."""
    domain = _route_domain(node, spec, routed, joined)
    if isinstance(domain, GraphError):
        return [domain]
    if domain is None:
        return []
    errors = []
    unknown = [k for k in spec.branches if k not in domain]
    if unknown:
        errors.append(
            GraphError(
                f"route {node!r} has a branch for {unknown[0]!r}, which is not a value of "
                f"{spec.describe()} ({', '.join(map(repr, domain))}); fix the branch key",
                node=node,
                code="unknown-branch",
            )
        )
    missing = [v for v in domain if v not in spec.branches]
    if missing and spec.default is None:
        errors.append(
            GraphError(
                f"route {node!r} on {spec.describe()} does not cover "
                f"{', '.join(map(repr, missing))}; add a branch for each, or a default",
                node=node,
                code="non-exhaustive-route",
            )
        )
    return errors


def _route_domain(
    node: str, spec: RouteSpec, routed: object, joined: bool
) -> list[object] | GraphError | None:
    if isinstance(spec.on, FunctionStep):
        return domain_of(spec.on.output_type)
    if joined:
        return None
    fields = fields_of(strip_type(routed))
    if fields is None:
        return None
    if spec.on not in fields:
        return GraphError(
            f"route {node!r} routes on {spec.on!r} but {type_name(routed)} has no such "
            f"field (fields: {', '.join(fields)})",
            node=node,
            code="unknown-route-field",
        )
    return domain_of(fields[spec.on])
