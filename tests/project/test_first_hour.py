"""The papercuts of a new user's first hour, each pinned: the version, a mistyped store,
what happens after a decision, output that leads with the status, streamed text printed
once, a progress bar only on a terminal, a misspelt tool option."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise.cli.main import main
from loopwise.evidence.evals.harness import StderrProgress
from loopwise.evidence.evals.stats import CaseRun
from loopwise.evidence.scaffold import init_project


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_loopwise_version_prints_the_installed_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loopwise.cli.main", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, f"loopwise {loopwise.__version__}")


def test_a_misspelt_tool_option_names_the_keyword_not_a_tool_called_tool() -> None:
    with pytest.raises(loopwise.ToolError) as caught:

        @loopwise.tool(efect="read")  # type: ignore[call-overload]
        def lookup(order_id: str) -> str:
            """Look up an order."""
            return order_id

    message = str(caught.value)
    assert message.startswith("@tool(efect=...): unknown option 'efect'")
    assert "did you mean 'effect'?" in message and "tool 'tool'" not in message
    assert caught.value.code == "unknown-option"


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "list"],
        ["runs", "show", "abc"],
        ["pending"],
        ["approve", "abc"],
        ["deny", "abc", "--reason", "no"],
        ["resume", "abc"],
        ["analyze"],
    ],
)
def test_a_store_in_a_folder_that_does_not_exist_is_an_error_for_readers(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "tpyo" / "runs.db"
    code, out, err = _cli(capsys, *argv, "--store", str(missing))
    assert code == 2 and out == ""
    assert err == (
        f"loopwise: no store at {missing}: the folder {missing.parent} does not exist (a "
        "mistyped --store or LOOPWISE_STORE? `loopwise run` makes a store where it records)\n"
    )
    assert not missing.parent.exists()


def test_python_decisions_refuse_a_missing_store_folder_too(tmp_path: Path) -> None:
    with pytest.raises(loopwise.StoreError) as caught:
        loopwise.approve("abc", store=tmp_path / "tpyo" / "runs.db")
    assert caught.value.code == "missing" and not (tmp_path / "tpyo").exists()


def test_run_says_when_it_makes_the_store_folder_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    init_project("workflow")
    store = tmp_path / "new" / "runs.db"
    argv = ["run", "triage.py:triage", "--model", "scripted", "--input-text", "refund please"]
    code, _, err = _cli(capsys, *argv, "--store", str(store))
    assert code == 0 and f"loopwise: new store folder {store.parent}" in err
    code, _, err = _cli(capsys, *argv, "--store", str(store))
    assert code == 0 and "new store folder" not in err  # only when it makes one
    monkeypatch.delenv("LOOPWISE_STORE")
    code, _, err = _cli(capsys, *argv)  # the default .loopwise/ is made silently
    assert code == 0 and "new store folder" not in err and (tmp_path / ".loopwise").is_dir()


def test_a_hybrids_run_leads_with_its_status_and_keeps_the_long_output_behind_v(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    init_project("hybrid")
    argv = ["run", "refunds.py:refund_desk", "--model", "scripted", "--input-text"]
    code, out, _ = _cli(capsys, *argv, "Order O-3001 arrived broken.")
    lines = out.splitlines()
    assert code == 0 and lines[0].endswith(": completed")
    assert lines[-2].startswith("… ") and lines[-2].endswith(
        " more line(s): -v prints them, --json all"
    )
    assert lines[-1].startswith("usage: ") and len(lines) == 23
    code, out, _ = _cli(capsys, *argv, "Order O-3002 arrived broken.", "-v")
    whole = out.splitlines()
    assert code == 0 and len(whole) > 23 and not any(line.startswith("… ") for line in whole)
    assert json.loads("\n".join(whole[1:-1]))["plan"]["steps"][0]["action"] == "issue_refund"
    code, out, _ = _cli(capsys, *argv, "Order O-3004 never came.")
    lines = out.splitlines()
    assert code == 1 and lines[0].endswith("awaiting_approval — 1 call(s) await approval: "
                                           "issue_refund (execute.s1)")  # fmt: skip
    assert lines[1].startswith("waiting for approval execute.s1: issue_refund(")


AGENT = """
import loopwise
from loopwise.testing import ScriptedModel, reply

greeter = loopwise.Agent(name="greeter", instructions="Greet.")
offline_model = ScriptedModel(lambda request: reply("Hello there, streamed once."))
"""


def test_a_streamed_answer_is_printed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "greet.py").write_text(textwrap.dedent(AGENT))
    argv = ["run", "greet.py:greeter", "--model", "scripted", "--input-text", "hi"]
    code, out, _ = _cli(capsys, *argv, "--stream")
    assert code == 0 and out.count("Hello there, streamed once.") == 1
    assert out.splitlines()[0] == "Hello there, streamed once."  # its own line
    code, out, _ = _cli(capsys, *argv)
    assert code == 0 and out.count("Hello there, streamed once.") == 1  # not streamed: printed


def test_the_streamed_line_ends_before_a_progress_line_about_the_same_call() -> None:
    from loopwise.cli.watch import Progress, TextPrinter, watch_sinks

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    args: Any = type("Args", (), {"json": False, "stream": True, "otel": False})()
    screen = Terminal()
    monkey = pytest.MonkeyPatch()
    monkey.setattr(sys, "stderr", screen)
    monkey.setattr(sys, "stdout", screen)
    try:
        with watch_sinks(args) as sinks:
            assert [type(s) for s in sinks] == [TextPrinter, Progress]
            result = loopwise.run(
                loopwise.Agent(name="a", instructions="Greet."),
                "hi",
                model=loopwise.testing.ScriptedModel([loopwise.testing.reply("Hello")]),
                store=None,
                stream=True,
                sinks=sinks,
            )
    finally:
        monkey.undo()
    assert result.status == "completed"
    first, second = screen.getvalue().splitlines()[:2]
    assert first == "Hello" and second.startswith("  a: model scripted → stop")


def _run(status: str = "completed") -> CaseRun:
    return CaseRun(
        target="t",
        case_id="c",
        repeat=0,
        run_id="r",
        status=loopwise.Status(status),
        score=True,
        steps=1,
        model_calls=1,
        tool_calls=0,
        tokens=1,
        input_tokens=1,
        output_tokens=0,
        cost_usd=None,
        latency_s=0.0,
        output=None,
        detail=None,
        expected=None,
    )


def test_the_eval_progress_bar_is_drawn_on_a_terminal_only() -> None:
    piped = io.StringIO()
    bar = StderrProgress(piped)
    for done in range(1, 9):
        bar(done, 8, _run())
    assert piped.getvalue() == ""

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    bar = StderrProgress(screen, width=4)
    bar(1, 2, _run("step_limit"))
    bar(2, 2, _run())
    assert screen.getvalue() == (
        "\reval [██··] 1/2 runs, 1 not completed\reval [████] 2/2 runs, 1 not completed\n"
    )
