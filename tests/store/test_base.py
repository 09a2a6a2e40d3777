"""The run store's roles: RunStore is exactly their union, both stores implement every
role, and a consumer that asks for one role works over a fake of that role alone."""

from __future__ import annotations

import asyncio
from typing import Any

from loopwise.running.store_approvals import StoreApprovals
from loopwise.store import base
from loopwise.store.postgres import PostgresStore
from loopwise.store.sqlite import SQLiteStore
from loopwise.tools.verdicts import ApprovalRequest, Denied

ROLES = (
    base.EventLog,
    base.RunLeases,
    base.RunQueries,
    base.ApprovalBook,
    base.EvalHistory,
    base.LiveEvidence,
)


def _members(protocol: type) -> set[str]:
    own = {n for n in vars(protocol) if not n.startswith("_")}
    return own | set(getattr(protocol, "__annotations__", {}))


def test_the_roles_do_not_overlap_and_the_store_is_their_union() -> None:
    seen: set[str] = set()
    for role in ROLES:
        assert not seen & _members(role), role
        seen |= _members(role)
    assert _members(base.RunStore) == {"close"}
    assert base.RunStore.__mro__[1:7] == ROLES


def test_both_stores_implement_every_role() -> None:
    for store in (SQLiteStore, PostgresStore):
        missing = {n for role in ROLES for n in _members(role) if not hasattr(store, n)}
        missing -= {"lease_seconds"}  # set per instance
        assert not missing, (store, missing)


class _OnlyApprovals:
    """A fake of the approval role alone: no events, no leases, no queries."""

    def __init__(self, row: Any) -> None:
        self.row = row

    def approval(self, run_id: str, approval_id: str) -> Any:
        return self.row


def test_the_durable_handler_needs_only_the_approval_role() -> None:
    request = ApprovalRequest(
        run_id="r",
        approval_id="a",
        step="s",
        tool="t",
        args={},
        effect="write",
        reason="",
        args_hash="h",
    )
    assert asyncio.run(StoreApprovals(_OnlyApprovals(None)).decide(request)) is None  # type: ignore[arg-type]
    other = type("Row", (), {"status": "approved", "step": "other", "args_hash": "h"})()
    verdict = asyncio.run(StoreApprovals(_OnlyApprovals(other)).decide(request))  # type: ignore[arg-type]
    assert isinstance(verdict, Denied)
