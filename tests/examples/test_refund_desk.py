"""The refund desk through the CLI: propose, pause at the gates, decide and resume in new
processes; effects happen exactly once, and never after a denial."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise.architectures.planner import REJECTED
from loopwise.cli.main import main
from loopwise.running.targets import load_target
from loopwise.testing import ScriptedModel, calls
from tests.support import ROOT

LOOPWISE = str(Path(sys.executable).with_name("loopwise"))
TARGET = "workflows/refund_desk.py:refund_desk"
COMPLAINT = '"Order O-1003 arrived broken and I want my money back."'


@pytest.fixture
def env() -> dict[str, str]:
    """The environment for subprocesses: conftest points the shop DB and store at tmp."""
    return dict(os.environ)


def _here(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    """A read-only CLI command in this process (the decisions and resumes get new ones)."""
    capsys.readouterr()
    main([*args, "--json"])
    return json.loads(capsys.readouterr().out)


def _cli(env: dict[str, str], *args: str) -> tuple[int, str]:
    done = subprocess.run(
        [LOOPWISE, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout


def _json(env: dict[str, str], *args: str) -> Any:
    _, out = _cli(env, *args, "--json")
    return json.loads(out)


def _rows(env: dict[str, str], table: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(env["LOOPWISE_SHOP_DB"]) as db:
        return list(db.execute(f"SELECT order_id, * FROM {table}"))


def _start(env: dict[str, str]) -> dict[str, Any]:
    code, out = _cli(env, "run", TARGET, "--model", "scripted", "--input", COMPLAINT, "--json")
    result = json.loads(out)
    assert code == 1
    assert result["status"] == "awaiting_approval"
    assert "issue_refund" in {p["tool"] for p in result["pending"]}
    return result


def _decide_all(
    env: dict[str, str], capsys: pytest.CaptureFixture[str], run_id: str, verb: str, *extra: str
) -> None:
    for pending in _here(capsys, "pending"):
        assert pending["run_id"] == run_id
        code, _ = _cli(env, verb, run_id, "--approval", pending["approval_id"], *extra)
        assert code == 0


@pytest.mark.slow
def test_approved_refund_runs_exactly_once(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    started = _start(env)
    refund = next(p for p in started["pending"] if p["tool"] == "issue_refund")
    assert refund["args"]["order_id"] == "O-1003"
    assert refund["args"]["amount_cents"] == 18900  # the order's total, looked up
    email = next(p for p in started["pending"] if p["tool"] == "email_customer")
    assert email["args"]["to"] == "priya@raman-design.example"  # the order's customer
    assert _rows(env, "refunds") == []

    _decide_all(env, capsys, started["run_id"], "approve", "--by", "alice")
    resumed = _json(env, "resume", started["run_id"])
    assert resumed["status"] == "completed", resumed["detail"]
    assert {k: r["status"] for k, r in resumed["output"]["results"].items()} == {
        "s1": "done",
        "s2": "done",
        "s3": "done",
    }
    assert [r[0] for r in _rows(env, "refunds")] == ["O-1003"]
    assert len(_rows(env, "emails")) == 1 and len(_rows(env, "notes")) == 1

    again = _here(capsys, "resume", started["run_id"])
    assert again["status"] == "completed"
    assert len(_rows(env, "refunds")) == 1
    log = _here(capsys, "runs", "show", started["run_id"])
    refunds = [
        e
        for e in log["events"]
        if e["type"] == "tool_result" and e["data"]["tool"] == "issue_refund"
    ]
    assert len(refunds) == 1 and not refunds[0]["data"]["is_error"]


@pytest.mark.slow
def test_denied_refund_never_runs(env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    started = _start(env)
    _decide_all(env, capsys, started["run_id"], "deny", "--reason", "the lamp was fine on delivery")
    code, out = _cli(env, "resume", started["run_id"], "--json")
    resumed = json.loads(out)
    assert code == 1
    assert resumed["status"] == "denied"
    assert "the lamp was fine on delivery" in resumed["detail"]
    assert _rows(env, "refunds") == [] and _rows(env, "emails") == []


def test_refund_and_mail_policies_reject_bad_plans_before_anything_runs(
    env: dict[str, str],
) -> None:
    plan = {
        "steps": [
            {
                "id": "s1",
                "action": "issue_refund",
                "args": {"order_id": "O-1003", "amount_cents": 99_999, "reason": "x"},
                "reason": "too much",
            },
            {
                "id": "s2",
                "action": "email_customer",
                "args": {
                    "order_id": "O-1003",
                    "to": "evil@example.com",
                    "subject": "s",
                    "body": "b",
                },
                "reason": "wrong person",
            },
        ]
    }
    errors = _rejected(plan)
    assert "exceeds" in errors and "18900" in errors, errors
    assert "not the customer of O-1003" in errors, errors
    assert _rows(env, "refunds") == [] and _rows(env, "emails") == []


def _rejected(plan: dict[str, Any], deps: Any = None) -> str:
    """What the planner hears when ``plan`` is judged in a run ("" when it was valid)."""
    desk = load_target(str(ROOT / TARGET)).step
    heard: list[str] = []

    def planner(request: loopwise.ModelRequest) -> loopwise.Turn:
        asked = str(next(m["content"] for m in request.messages if m["role"] == "user"))
        if REJECTED not in asked:
            return calls(("final_answer", plan, "plan-1"))
        heard.append(asked.split(REJECTED)[1])
        return calls(("final_answer", {"steps": [], "reason": "gave up"}, "plan-2"))

    result = loopwise.run(desk, COMPLAINT.strip('"'), model=ScriptedModel(planner), deps=deps)
    # Judged, either way: a valid plan waits for its person, a rejected one gave up.
    expected = "completed" if heard else "awaiting_approval"
    assert result.status == expected, (result.status, result.detail)
    return "".join(heard)


def _approved_runs(capsys: pytest.CaptureFixture[str], count: int) -> list[str]:
    """``count`` refund desk runs on COMPLAINT, each paused and then approved in full."""
    runs = []
    for _ in range(count):
        capsys.readouterr()
        assert main(["run", TARGET, "--model", "scripted", "--input", COMPLAINT, "--json"]) == 1
        runs.append(json.loads(capsys.readouterr().out)["run_id"])
    for run_id in runs:
        assert main(["approve", run_id, "--all", "--by", "alice"]) == 0
    return runs


def test_two_approved_refunds_of_one_order_pay_it_once(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Both complaints were approved while neither had paid; the refund policy is asked
    # again when each resumes, and the second finds nothing left to refund.
    runs = _approved_runs(capsys, 2)
    first, second = (_here(capsys, "resume", run_id) for run_id in runs)
    assert first["status"] == "completed"
    assert second["status"] == "denied"
    assert "exceeds what is left to refund on O-1003 (0 of 18900" in second["detail"]
    assert [r[0] for r in _rows(env, "refunds")] == ["O-1003"]


def test_refreshing_the_shop_seed_keeps_recorded_refunds(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    (run_id,) = _approved_runs(capsys, 1)
    assert _here(capsys, "resume", run_id)["status"] == "completed"
    paid = _rows(env, "refunds")
    assert [r[0] for r in paid] == ["O-1003"]

    # The seed script is newer than the database (a checkout updated it), and a seed row
    # drifted: the next use refreshes the seed and keeps what the desk recorded.
    db_file = env["LOOPWISE_SHOP_DB"]
    with sqlite3.connect(db_file) as db:
        db.execute("UPDATE orders SET note = 'drifted' WHERE id = 'O-1003'")
    os.utime(db_file, (0, 0))
    capsys.readouterr()
    assert main(["run", TARGET, "--model", "scripted", "--input", COMPLAINT, "--json"]) == 1
    again = json.loads(capsys.readouterr().out)
    assert again["status"] != "awaiting_approval"  # nothing is left to refund on O-1003
    with sqlite3.connect(db_file) as db:
        note = db.execute("SELECT note FROM orders WHERE id = 'O-1003'").fetchone()[0]
    assert note != "drifted"
    assert _rows(env, "refunds") == paid
    assert len(_rows(env, "emails")) == 1 and len(_rows(env, "notes")) == 1


def _paid_cents(env: dict[str, str]) -> list[int]:
    with sqlite3.connect(env["LOOPWISE_SHOP_DB"]) as db:
        return [r[0] for r in db.execute("SELECT amount_cents FROM refunds ORDER BY created_at")]


def test_two_approved_refunds_resumed_at_once_never_pay_more_than_the_total(
    env: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    target = load_target(str(ROOT / TARGET))
    runs = _approved_runs(capsys, 2)

    # Force the race: each resumed run's refund policy reads the ledger, then waits until
    # the other's has read it too, so both gates pass before either refund is written.
    real = target.module._refunded_cents
    both_read = threading.Barrier(2, timeout=60)
    reads = iter(range(2))

    def read_then_wait(order_id: str, *rest: Any, **named: Any) -> int:
        cents = int(real(order_id, *rest, **named))
        if next(reads, None) is not None:
            both_read.wait()
        return cents

    monkeypatch.setattr(target.module, "_refunded_cents", read_then_wait)
    results: dict[str, loopwise.RunResult] = {}

    def resume(run_id: str) -> None:
        results[run_id] = loopwise.resume(
            run_id, step=target.step, model=target.module.offline_model()
        )

    threads = [threading.Thread(target=resume, args=(run_id,)) for run_id in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert _paid_cents(env) == [18900]
    statuses = sorted(str(r.status) for r in results.values())
    assert statuses[0] == "completed" and statuses[1] != "completed", statuses
    late = next(r for r in results.values() if r.status != "completed")
    assert "exceeds what is left to refund on O-1003 (0 of 18900" in str(late.detail)


def test_a_refund_below_the_minimum_is_rejected_before_any_gate() -> None:
    desk = load_target(str(ROOT / TARGET)).module
    args = {"order_id": "O-1003", "amount_cents": -5, "reason": "negative"}
    with pytest.raises(loopwise.ToolArgumentsError, match="is below the minimum 1"):
        desk.issue_refund.parse(args)


def _two_refunds(amount: int) -> dict[str, Any]:
    def refund(why: str) -> dict[str, Any]:
        return {"order_id": "O-1003", "amount_cents": amount, "reason": why}

    return {
        "steps": [
            {"id": "s1", "action": "issue_refund", "args": refund("lamp"), "reason": "first"},
            {"id": "s2", "action": "issue_refund", "args": refund("shade"), "reason": "again"},
        ]
    }


def test_one_plan_cannot_refund_an_order_twice_over(env: dict[str, str]) -> None:
    errors = _rejected(_two_refunds(18_900))
    assert errors.count("plus 18900 in the plan's other refunds of it exceeds") == 2, errors
    assert _rejected(_two_refunds(9_450)) == ""


def test_the_refund_policy_judges_the_runs_own_books(env: dict[str, str], tmp_path: Path) -> None:
    # An eval's sandbox (or any --deps) holds its own refunds: the policy reads those,
    # not the shop's, so a refund the sandbox already paid is not approved again.
    desk = load_target(str(ROOT / TARGET)).module
    books = tmp_path / "books.db"
    with desk.make_eval_deps() as fresh:
        books.write_bytes(fresh.path.read_bytes())
    refund = {"order_id": "O-1003", "amount_cents": 18_900, "reason": "broken lamp"}
    plan = {"steps": [{"id": "s1", "action": "issue_refund", "args": refund, "reason": "r"}]}
    assert _rejected(plan, deps=desk.Books(books)) == ""  # nothing refunded yet
    with sqlite3.connect(books) as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS refunds (idempotency_key TEXT PRIMARY KEY, "
            "order_id TEXT, amount_cents INTEGER, reason TEXT, created_at TEXT)"
        )
        db.execute("INSERT INTO refunds VALUES ('k', 'O-1003', 18900, 'paid', '2026-12-01')")
    assert "exceeds what is left to refund on O-1003 (0 of 18900" in _rejected(
        plan, deps=desk.Books(books)
    )
    assert _rejected(plan) == ""  # the shop's own books have no refund of it
    assert _rows(env, "refunds") == []


def test_the_planner_hears_that_its_refunds_of_one_order_sum_past_the_total(
    env: dict[str, str],
) -> None:
    desk = load_target(str(ROOT / TARGET)).step
    heard: list[str] = []

    def planner(request: loopwise.ModelRequest) -> loopwise.Turn:
        asked = str(next(m["content"] for m in request.messages if m["role"] == "user"))
        if REJECTED not in asked:
            return calls(("final_answer", _two_refunds(18_900), "plan-1"))
        heard.append(asked.split(REJECTED)[1])
        return calls(("final_answer", {"steps": _two_refunds(18_900)["steps"][:1]}, "plan-2"))

    result = loopwise.run(desk, COMPLAINT.strip('"'), model=ScriptedModel(planner))
    assert result.status == "awaiting_approval"
    assert [p["tool"] for p in result.pending] == ["issue_refund"]
    assert len(heard) == 1 and "in the plan's other refunds of it" in heard[0]
