"""`make demo` offline: the canonical examples and the eval, through the real CLI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loopwise.cli import demo
from tests.support import ROOT


@pytest.mark.slow
def test_demo_runs_offline_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.html"
    code = demo.main(
        ["--root", str(ROOT), "--store", str(tmp_path / "demo.db"), "--report", str(report)]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "OFFLINE with `--model scripted`" in out
    assert "demo passed (offline, scripted model)" in out
    # The hybrid paused at its human gates, was approved, resumed, and refunded once.
    assert "awaiting_approval" in out
    assert "$ loopwise approve" in out
    # The inbox: the command that serves it, and its page rendered once to a file.
    assert "$ loopwise serve --store" in out and "http://127.0.0.1:8765" in out
    inbox = (tmp_path / "inbox.html").read_text()
    assert "issue_refund" in inbox and "a person approves every refund" in inbox
    assert "issue_refund ×1" in out
    # The follow-up in the investigation's conversation rests on the first answer.
    assert "used the earlier findings: cites O-1031 from the first answer, with 0 new" in out
    assert "→ recommendation:" in out
    assert report.is_file() and "<html" in report.read_text().lower()
    assert "FAILED" not in out and "skipped" not in out


def test_demo_uses_a_configured_model_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPWISE_MODEL", "my-model")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    args, scripted, line = demo.model_choice(dict(os.environ))
    assert args == [] and not scripted and "my-model" in line
