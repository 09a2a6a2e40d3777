"""`graduate` decides only as far as the held-out cases carry it: on 3 and 11 agreeing cases
there is not enough evidence (exit 3, with how many cases would decide), on 60 it graduates."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise.cli.main import main
from loopwise.evidence.evals.bounds import clopper_pearson_upper
from loopwise.running.targets import load_target, model_for
from tests.support import ROOT

INVESTIGATE = f"{ROOT}/agents/order_investigation.py:investigate"
CUSTOMERS = [f"C-{1001 + i}" for i in range(12)]


def _held(question: str) -> bool:
    """Written again from the documented rule: about one input in four, by a hash of it."""
    digest = hashlib.sha256(json.dumps(question, sort_keys=True).encode()).digest()
    return int.from_bytes(digest[:4], "big") % 4 == 0


def _inputs(held: int, mined_per_customer: int = 2) -> list[str]:
    """``held`` held-out questions and ``mined_per_customer`` mined ones per customer."""
    out: list[str] = []
    want_held, want_mined = held, {c: mined_per_customer for c in CUSTOMERS}
    i = 0
    while want_held or any(want_mined.values()):
        c = CUSTOMERS[i % 12]
        question = f"Why did the last orders of {c} fail? (ticket {i})"
        if _held(question) and want_held:
            out.append(question)
            want_held -= 1
        elif not _held(question) and want_mined[c]:
            out.append(question)
            want_mined[c] -= 1
        i += 1
    return out


def _store(tmp_path: Path, held: int) -> Path:
    store = tmp_path / "runs.db"
    target = load_target(INVESTIGATE)
    model = model_for(target, "scripted")
    for question in _inputs(held):
        result = loopwise.run(
            target.step, question, model=model, store=str(store), spec=INVESTIGATE
        )
        assert result.status == "completed", result.detail
    return store


@pytest.mark.parametrize(
    ("held", "code", "decision"),
    [(3, 3, "not_enough_evidence"), (11, 3, "not_enough_evidence"), (60, 0, "graduate")],
)
def test_graduate_decides_only_on_enough_held_out_cases(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    *,
    held: int,
    code: int,
    decision: str,
) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "agents"))  # the module imports the agent by name
    store = _store(tmp_path, held)
    argv = ["graduate", INVESTIGATE, "--store", str(store), "--model", "scripted"]
    out = ["--out", str(tmp_path / "flow.py")]
    assert main([*argv, *out, "--json"]) == code
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert doc["held_out"] == held and doc["recommendation"] == decision
    e = doc["evidence"]
    assert (e["cases"], e["worse"], e["references"]) == (held, 0, "agent")
    # the bound, by hand: 0 disagreements in n cases bound it below 1 - 0.1^(1/n)
    assert e["upper_bound"] == pytest.approx(1 - 0.1 ** (1 / held), abs=1e-6)
    assert e["upper_bound"] == pytest.approx(clopper_pearson_upper(0, held, 0.9), abs=1e-6)
    assert e["cases_needed"] == 45  # the least n with 0.95^n <= 0.1
    # never a degenerate "+0 to +0" interval: Newcombe's score interval around 0
    assert doc["paired"]["low"] < 0 < doc["paired"]["high"]
    if held == 11:
        assert doc["reason"] == (
            "not enough evidence: 0 disagreements in 11 cases bounds disagreement below 19% "
            "at 90%: about 45 agreeing cases would bound it under 5%"
        )
    if held == 60:
        assert doc["reason"].startswith(
            "graduate: 0 disagreements in 60 cases bounds disagreement below 3.8% at 90% "
            "(under 5%), with"
        )
    # the text says the same, and the exit code is the same
    assert main([*argv, "--out", str(tmp_path / "again.py")]) == code
    text = capsys.readouterr().out
    assert doc["reason"] in text
    if held == 3:
        assert "about 45 agreeing cases would bound it under 5%" in text
        assert "0 disagreements in 3 cases bounds disagreement below 54% at 90%" in text
