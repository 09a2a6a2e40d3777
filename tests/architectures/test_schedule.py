"""As soon as ready (issue 47): a workflow's or a plan's node starts when what it depends
on is done, not when its whole topological generation is. Each test would deadlock under
generation order — the slow node waits for a signal that only the urgent one, a
generation later, sends — so it is caught by a guard, never by a clock."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

import loopwise
from loopwise import ActionCatalog, Hybrid, Status, Workflow, gates, step, tool
from loopwise.testing import ScriptedModel, reply

GUARD = 10.0
"""Seconds a node waits for the urgent one before the test calls it a deadlock."""

RAN: list[str] = []
URGENT_DONE: list[asyncio.Event] = []


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    RAN.clear()
    URGENT_DONE.clear()
    yield


async def _urgent_seen() -> None:
    if not URGENT_DONE:
        URGENT_DONE.append(asyncio.Event())
    try:
        await asyncio.wait_for(URGENT_DONE[0].wait(), GUARD)
    except TimeoutError:
        raise AssertionError("the urgent node never started: nodes ran by generation") from None


def _urgent_done() -> None:
    if not URGENT_DONE:
        URGENT_DONE.append(asyncio.Event())
    URGENT_DONE[0].set()


@step
def reset(ticket: dict[str, Any]) -> str:
    RAN.append("reset")
    return "reset"


@step
def disable(previous: str) -> str:
    RAN.append("disable")
    _urgent_done()
    return "disabled"


@step
async def wipe(ticket: dict[str, Any]) -> str:
    await _urgent_seen()
    RAN.append("wipe")
    return "wiped"


def test_a_workflow_node_starts_when_its_own_predecessor_is_done() -> None:
    flow = Workflow("incident")
    flow.add("start", step(lambda t: t, name="start"))
    flow.add("reset", reset, after=["start"])
    flow.add("wipe", wipe, after=["start"])
    flow.add("disable", disable, after=["reset"])
    flow.add("done", step(_collect, name="done"), after=["wipe", "disable"], join=dict)
    result = loopwise.run(flow, {"host": "h1"}, store=None)
    assert result.status is Status.COMPLETED, result.detail
    assert RAN.index("disable") < RAN.index("wipe")


@tool(effect="write", gate=gates.policy(lambda args: True))
def reset_password(user: str) -> str:
    """Reset a user's password."""
    RAN.append("reset")
    return "reset"


@tool(effect="irreversible", gate=gates.policy(lambda args: True))
def disable_account(user: str) -> str:
    """Disable a user's account now (urgent)."""
    RAN.append("disable")
    _urgent_done()
    return "disabled"


@tool(effect="irreversible", gate=gates.policy(lambda args: True))
async def wipe_laptop(serial: str) -> str:
    """Wipe a laptop (slow)."""
    await _urgent_seen()
    RAN.append("wipe")
    return "wiped"


@tool(effect="irreversible", gate=gates.human())
def revoke_badge(user: str) -> str:
    """Revoke a building badge (a person decides)."""
    RAN.append("revoke")
    return "revoked"


def _desk() -> Hybrid:
    catalog = ActionCatalog()
    for action in (reset_password, disable_account, wipe_laptop, revoke_badge):
        catalog.add(action)
    return Hybrid("incident_desk", actions=catalog, task="Contain the incident.")


def _plan(*steps: tuple[str, str, dict[str, Any], list[str]]) -> dict[str, Any]:
    return {
        "steps": [
            {"id": sid, "action": a, "args": args, "depends_on": deps, "reason": "r"}
            for sid, a, args, deps in steps
        ]
    }


INCIDENT = _plan(
    ("s1", "reset_password", {"user": "ann"}, []),
    ("s2", "wipe_laptop", {"serial": "L-1"}, []),
    ("s3", "disable_account", {"user": "ann"}, ["s1"]),
)


def test_a_plans_urgent_action_does_not_wait_for_an_unrelated_slow_one() -> None:
    result = loopwise.run(
        _desk(), "ann's laptop is compromised", model=ScriptedModel([reply(INCIDENT)]), store=None
    )
    assert result.status is Status.COMPLETED, result.detail
    assert RAN.index("disable") < RAN.index("wipe")
    assert sorted(RAN) == ["disable", "reset", "wipe"]


def test_a_plan_asks_its_gates_together_before_any_action_then_runs_as_ready(
    tmp_path: Any,
) -> None:
    # A hybrid's plan is known in advance: every gate is asked before the first effect
    # (authorize_plan), so a person's gate holds back the whole plan; once decided, the
    # actions run as soon as ready.
    plan = _plan(
        ("s1", "revoke_badge", {"user": "ann"}, []),
        ("s2", "reset_password", {"user": "ann"}, ["s1"]),
        ("s3", "disable_account", {"user": "ann"}, []),
    )
    store = loopwise.open_store(tmp_path / "runs.db")
    model = ScriptedModel([reply(plan)])
    paused = loopwise.run(_desk(), "ann", model=model, store=store, approvals=None)
    assert paused.status is Status.AWAITING_APPROVAL
    assert RAN == []
    for approval in store.pending(paused.run_id):
        loopwise.approve(paused.run_id, approval=approval.approval_id, by="ann", store=store)
    done = loopwise.resume(paused.run_id, store=store, step=_desk())
    assert done.status is Status.COMPLETED, done.detail
    assert sorted(RAN) == ["disable", "reset", "revoke"]
    assert RAN.index("revoke") < RAN.index("reset")


def test_a_workflow_pause_holds_back_only_what_depends_on_it(tmp_path: Any) -> None:
    flow = Workflow("offboard")
    flow.add("start", step(lambda t: {"user": t["user"]}, name="start"))
    flow.add("revoke", revoke_badge, after=["start"])
    flow.add("after_revoke", step(_after_revoke, name="after_revoke"), after=["revoke"])
    flow.add("urgent", step(_urgent, name="urgent"), after=["start"])
    flow.add("next", step(_next, name="next"), after=["urgent"])
    flow.add(
        "done",
        step(_collect, name="done"),
        after=["after_revoke", "next"],
        join=dict,
    )
    store = loopwise.open_store(tmp_path / "runs.db")
    paused = loopwise.run(flow, {"user": "ann"}, store=store, approvals=None)
    assert paused.status is Status.AWAITING_APPROVAL
    # everything that does not depend on the person's gate ran before the pause
    assert RAN == ["urgent", "next"]
    [approval] = store.pending(paused.run_id)
    loopwise.approve(paused.run_id, approval=approval.approval_id, by="ann", store=store)
    done = loopwise.resume(paused.run_id, store=store, step=flow)
    assert done.status is Status.COMPLETED, done.detail
    assert RAN == ["urgent", "next", "revoke", "after_revoke"]


def _collect(parts: dict[str, Any]) -> list[str]:
    return sorted(parts)


def _after_revoke(result: str) -> str:
    RAN.append("after_revoke")
    return result


def _urgent(user: dict[str, Any]) -> str:
    RAN.append("urgent")
    return "u"


def _next(previous: str) -> str:
    RAN.append("next")
    return "n"
