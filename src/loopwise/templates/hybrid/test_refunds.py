"""The refund desk, offline: its own offline model, a scratch ledger, no network."""

from __future__ import annotations

from pathlib import Path

from refunds import Ledger, offline_model, refund_desk

import loopwise


def test_a_small_refund_runs_at_once_and_a_large_one_after_a_person_approves(
    tmp_path: Path,
) -> None:
    ledger, store = Ledger(":memory:"), tmp_path / "runs.db"

    def desk(complaint: str) -> loopwise.RunResult:
        return loopwise.run(refund_desk, complaint, model=offline_model, deps=ledger, store=store)

    assert desk("Order O-3001 arrived broken.").status == "completed"
    assert ledger.refunded_cents("O-3001") == 1999
    large = desk("Order O-3004 never came.")
    assert large.status == "awaiting_approval" and ledger.refunded_cents("O-3004") == 0
    (waiting,) = large.pending
    assert (waiting["tool"], waiting["args"]["amount_cents"]) == ("issue_refund", 12900)
    loopwise.approve(large.run_id, store=store, by="test")
    resumed = loopwise.resume(large.run_id, store=store, deps=ledger)
    assert resumed.status == "completed" and ledger.refunded_cents("O-3004") == 12900
    assert loopwise.resume(large.run_id, store=store, deps=ledger).status == "completed"
    assert ledger.refunded_cents("O-3004") == 12900  # paid once
