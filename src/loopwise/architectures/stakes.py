"""What a plan puts at stake, for the people asked about it: each step's estimated cost
and its unit (:func:`step_stake`), the plan's sum (:func:`plan_stake`, in mixed units it
says so), and the plan as a Mermaid graph with each action's effect and estimate
(:func:`plan_mermaid`)."""

from __future__ import annotations

from typing import TypedDict

from loopwise.architectures.plans import Action, ActionCatalog, Plan, PlanStep
from loopwise.core.shape import Edge, Graph, Node, mermaid

__all__ = [
    "Stake",
    "plan_cost",
    "plan_mermaid",
    "plan_stake",
    "plan_unit",
    "step_cost",
    "step_stake",
    "step_unit",
]


def plan_mermaid(plan: Plan, catalog: ActionCatalog) -> str:
    """The plan as a Mermaid graph: each action with its effect and estimated cost."""
    nodes = []
    for s in plan.steps:
        action = catalog.get(s.action)
        effect = action.effect if action else "unknown"
        label = f"{s.id}: {s.action}<br/>{effect}"
        cost = _estimate(action, s.args)
        if cost is not None:
            label += f", est. cost {cost:,.2f}"
        # Step ids are model output: prefixed, so none is read as Mermaid syntax.
        nodes.append(Node(id=f"n_{s.id}", label=label, kind=effect))
    edges = [Edge(source=f"n_{d}", target=f"n_{s.id}") for s in plan.steps for d in s.depends_on]
    return mermaid(Graph(nodes=tuple(nodes), edges=tuple(edges)))


def _estimate(action: Action | None, args: object) -> float | None:
    if action is None or action.estimate is None:
        return None
    try:
        return float(action.estimate(args))
    except (TypeError, ValueError, AttributeError):
        return None


def step_cost(step: PlanStep, catalog: ActionCatalog) -> float | None:
    """What ``step``'s action estimates it costs (``None`` when it has no estimate)."""
    return _estimate(catalog.get(step.action), step.args)


def _unit(action: Action | None, args: object) -> str | None:
    if action is None or action.unit is None or action.estimate is None:
        return None
    if isinstance(action.unit, str):
        return action.unit
    try:
        unit = action.unit(args)
    except (TypeError, ValueError, AttributeError, LookupError):
        return None
    return str(unit) if unit else None


def step_unit(step: PlanStep, catalog: ActionCatalog) -> str | None:
    """What :func:`step_cost`'s number is in (``None`` when its action declares no unit)."""
    return _unit(catalog.get(step.action), step.args)


def plan_unit(plan: Plan, catalog: ActionCatalog) -> str | None:
    """What :func:`plan_cost`'s sum is in: the steps' one unit; ``"mixed units: EUR, USD"``
    when they differ (the sum then adds unlike amounts, and says so); ``None`` when any
    estimated step declares no unit."""
    units = [
        _unit(catalog[s.action], s.args)
        for s in plan.steps
        if s.action in catalog and _estimate(catalog[s.action], s.args) is not None
    ]
    if not units or None in units:
        return None
    distinct = sorted({u for u in units if u is not None})
    return distinct[0] if len(distinct) == 1 else "mixed units: " + ", ".join(distinct)


class Stake(TypedDict):
    """What an ask puts at stake, as :class:`~loopwise.tools.gates.Ask` takes it."""

    at_stake: float | None
    at_stake_unit: str | None


def step_stake(step: PlanStep, catalog: ActionCatalog) -> Stake:
    """:func:`step_cost` and :func:`step_unit` of ``step``."""
    return {"at_stake": step_cost(step, catalog), "at_stake_unit": step_unit(step, catalog)}


def plan_stake(plan: Plan, catalog: ActionCatalog) -> Stake:
    """:func:`plan_cost` and :func:`plan_unit` of ``plan``."""
    return {"at_stake": plan_cost(plan, catalog), "at_stake_unit": plan_unit(plan, catalog)}


def plan_cost(plan: Plan, catalog: ActionCatalog) -> float | None:
    """The sum of the steps' estimates (``None`` when no action has an estimate)."""
    costs = [_estimate(catalog[s.action], s.args) for s in plan.steps if s.action in catalog]
    known = [c for c in costs if c is not None]
    return sum(known) if known else None
