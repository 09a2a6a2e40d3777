"""A run drawn as data: a proposed plan's graph, or what a run without a plan ran.

The run page (:func:`loopwise.serve.pages.run_page`) draws these with
:func:`loopwise.core.svg.graph_svg`; they read the store's record alone (the plan's
items, the run's events), never the target's code.
"""

from __future__ import annotations

from collections.abc import Sequence

from loopwise.core.events import Event, EventType
from loopwise.core.shape import Edge, Graph, Node
from loopwise.running.approvals import PlanItem

__all__ = ["plan_graph", "ran_graph"]


def plan_graph(plan: Sequence[PlanItem]) -> Graph:
    """A proposed plan as a :class:`Graph`: one node per step (its effect as the kind),
    edges from its dependencies."""
    nodes = tuple(
        Node(id=p.id, label=f"{p.id}: {p.action}", kind=p.effect or "unknown") for p in plan
    )
    known = {p.id for p in plan}
    edges = tuple(Edge(source=d, target=p.id) for p in plan for d in p.depends_on if d in known)
    return Graph(nodes=nodes, edges=edges)


_RUN_STATES = {
    "completed": "done",
    "awaiting_approval": "pending",
    "running": "planned",
    "queued": "planned",
    "denied": "denied",
}


def ran_graph(status: str, events: Sequence[Event]) -> tuple[Graph, dict[str, str]]:
    """What a run without a plan did, from its log: its target, the steps it entered
    directly and the tools it called itself (each with how often), and each one's state."""
    started = [e for e in events if e.type is EventType.STEP_STARTED]
    if not started:
        return Graph(nodes=()), {}
    root = started[0].step
    me = Node(id=root, label=root, kind=str(started[0].data.get("kind") or "step"))
    nodes: dict[str, Node] = {}
    calls: dict[str, int] = {}
    states = {root: _RUN_STATES.get(status, "failed")}
    for e in events:
        if e.type is EventType.STEP_STARTED and e.step.rpartition("/")[0] == root:
            name = e.step.rpartition("/")[2]
            nodes.setdefault(e.step, Node(id=e.step, label=name, kind=str(e.data.get("kind"))))
            states.setdefault(e.step, "planned")
        elif e.type is EventType.STEP_FINISHED and e.step in nodes:
            states[e.step] = "done"
        elif e.type is EventType.TOOL_CALL and e.step == root and not e.data.get("edit_of"):
            tool = str(e.data.get("tool"))
            key = f"{root}/tool:{tool}"
            nodes.setdefault(key, Node(id=key, label=tool, kind=str(e.data.get("effect"))))
            calls[key] = calls.get(key, 0) + 1
            states.setdefault(key, "done")
        elif e.type is EventType.TOOL_RESULT and e.step == root and e.data.get("is_error"):
            states[f"{root}/tool:{e.data.get('tool')}"] = "failed"
    edges = tuple(
        Edge(source=root, target=k, label=f"×{calls[k]}" if calls.get(k, 1) > 1 else "")
        for k in nodes
    )
    return Graph(nodes=(me, *nodes.values()), edges=edges), states
