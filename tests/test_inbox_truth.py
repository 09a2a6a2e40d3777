"""The inbox and the CLI say what is true (issue 45): a plan step a person edited shows
the arguments it ran with beside the planner's proposal, and the approvals table says
what the edit changed and who changed it; on SQLite and PostgreSQL.
"""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from loopwise.cli.main import main
from test_serve import COMPLAINT, DESK, serve

sys.path.insert(0, str(Path(__file__).parent))

__all__ = ["serve"]  # the fixture, used by name

REFUND = {"order_id": "O-1003", "amount_cents": 4000, "reason": "a partial refund"}
NOTE = {"order_id": "O-1003", "text": "Refunded 40.00 INR after the complaint."}


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(argv))
    return code, capsys.readouterr().out


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    _code, out = _cli(capsys, *argv, "--json")
    found: dict[str, Any] = json.loads(out)
    return found


def edited_desk(capsys: pytest.CaptureFixture[str], store: str) -> str:
    """A refund desk run whose refund ann edited from 18900 to 4000 cents, whose mail
    and note (asked again after the edit) bo approved as they were and edited, finished."""
    at = ("--store", store)
    paused = _json(capsys, "run", DESK, "--model", "scripted", "--input", COMPLAINT, *at)
    run_id = str(paused["run_id"])
    approve = ("approve", run_id, "--approval")
    assert main([*approve, "execute.s1", "--by", "ann", "--args", json.dumps(REFUND), *at]) == 0
    assert main([*approve, "execute.s2", "--by", "ann", *at]) == 0
    again = _json(capsys, "resume", run_id, *at)
    assert {p["approval_id"] for p in again["pending"]} == {
        "execute.s2.recheck",
        "execute.s3.recheck",
    }
    assert main([*approve, "execute.s2.recheck", "--by", "bo", *at]) == 0
    note = ("--args", json.dumps(NOTE))
    assert main([*approve, "execute.s3.recheck", "--by", "bo", *note, *at]) == 0
    done = _json(capsys, "resume", run_id, *at)
    assert done["status"] == "completed", done
    return run_id


def _rows(page: str, table: str) -> dict[str, str]:
    """The rows of one of the run page's tables, by their first cell, as plain text."""
    body = page.split(f"<table class='stack {table}'>", 1)[1].split("</table>", 1)[0]
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)[1:]:
        inline = re.sub(r"</?(strong|code|span)[^>]*>", "", row)
        text = html.unescape(re.sub(r"<[^>]+>", " ", inline))
        cells = " ".join(text.split())
        rows[cells.split(" ", 1)[0]] = cells
    return rows


def test_an_edited_step_shows_what_ran_beside_what_was_proposed(
    serve: Any, store_at: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = edited_desk(capsys, store_at)
    _, client = serve(store=store_at)
    page = client.get(f"/runs/{run_id}").body
    plan = _rows(page, "plan")
    # What ran first, the planner's 18900 only as its proposal.
    assert "done edited by ann" in plan["s1"]
    ran, proposed = plan["s1"].split("the planner proposed")
    assert "ran with (edited by ann) order_id O-1003 amount_cents 4000" in ran
    assert "amount_cents 18900" in proposed and "18900" not in ran
    # The note the person rewrote after the edit shows the text written, not the plan's.
    ran, proposed = plan["s3"].split("the planner proposed")
    assert "Refunded 40.00 INR after the complaint." in ran and "189.00" in proposed
    # The mail, asked again and approved as it was, ran as planned: one set of arguments.
    assert "the planner proposed" not in plan["s2"] and "edited" not in plan["s2"]
    approvals = _rows(page, "approvals")
    assert approvals["execute.s1"].startswith("execute.s1 issue_refund edited ann ")
    assert "amount_cents: 18900 → 4000" in approvals["execute.s1"]
    assert 'text: "Refunded 189.00 INR' in approvals["execute.s3.recheck"]
    assert "→" not in approvals["execute.s2.recheck"]
    # The CLI's audit log says the same.
    _code, shown = _cli(capsys, "runs", "show", run_id, "--store", store_at)
    refund = json.dumps(REFUND)
    assert f"issue_refund({refund}) edited by ann" in shown
