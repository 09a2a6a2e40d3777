"""What `loopwise run/resume/eval` show while runs go: progress lines on a terminal, and
OpenTelemetry spans with --otel or the OTEL_* environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopwise.cli.main import main
from tests.support import ROOT

AGENT = "agents/order_investigation.py:investigate"
QUESTION = json.dumps("Why did customer C-1004's last three orders fail?")


@pytest.fixture(autouse=True)
def _in_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def _terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)


def test_run_on_a_terminal_prints_one_line_per_model_and_tool_call(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _terminal(monkeypatch)
    assert main(["run", AGENT, "--input", QUESTION, "--model", "scripted"]) == 0
    err = capsys.readouterr().err.splitlines()
    models = [line for line in err if "investigate: model scripted" in line]
    tools = [line for line in err if "investigate: tool " in line]
    assert models and tools
    assert any("lookup_customer" in line for line in tools)


def test_json_keeps_progress_quiet(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _terminal(monkeypatch)
    assert main(["run", AGENT, "--input", QUESTION, "--model", "scripted", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["status"] == "completed"
    assert "model scripted" not in err


def test_otel_exports_the_runs_spans(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    code = main(["run", AGENT, "--input", QUESTION, "--model", "scripted", "--otel", "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["status"] == "completed"  # stdout: one document
    assert '"name": "chat scripted"' in err and '"name": "execute_tool lookup_customer"' in err
    assert '"service.name": "loopwise"' in err


def test_the_otel_environment_alone_turns_export_on_for_eval(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "triage-eval")
    dataset = tmp_path / "cases.jsonl"
    dataset.write_text(
        json.dumps({"input": {"subject": "Refund", "body": "charged twice"}, "expected": {}})
    )
    target = "workflows/ticket_triage.py:triage"
    assert main(["eval", target, "--dataset", str(dataset), "--model", "scripted"]) == 0
    err = capsys.readouterr().err
    assert '"name": "chat scripted"' in err and '"service.name": "triage-eval"' in err


def test_an_unknown_exporter_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    assert main(["run", AGENT, "--input", QUESTION, "--model", "scripted"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "OTEL_TRACES_EXPORTER='zipkin'" in err[0]


def test_stream_prints_the_answer_as_it_arrives_then_the_result(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", AGENT, "--input", QUESTION, "--model", "scripted", "--stream"]) == 0
    out = capsys.readouterr().out
    streamed, _, rest = out.partition("\nrun ")
    assert streamed.startswith("Dana Whitfield (C-1004)") and "3 of 3 failed." in streamed
    assert rest.split(":", 1)[1].startswith(" completed")


def test_stream_with_json_keeps_stdout_one_document(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", AGENT, "--input", QUESTION, "--model", "scripted", "--stream", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["status"] == "completed"


def test_otel_with_the_extra_alone_exports_over_otlp_to_the_collector(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `pip install loopwise[otel]` must be enough for the default exporter (otlp).
    import threading
    import tomllib
    from http.server import BaseHTTPRequestHandler, HTTPServer

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    otel = " ".join(extra["optional-dependencies"]["otel"])
    assert "opentelemetry-sdk" in otel and "opentelemetry-exporter-otlp-proto-http" in otel
    received: list[tuple[str, bytes]] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    collector = HTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=collector.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{collector.server_address[1]}"
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        code = main(["run", AGENT, "--input", QUESTION, "--model", "scripted", "--json"])
    finally:
        collector.shutdown()
        thread.join()
        collector.server_close()
    assert code == 0 and json.loads(capsys.readouterr().out)["status"] == "completed"
    assert received and {path for path, _ in received} == {"/v1/traces"}
    assert b"execute_tool lookup_customer" in b"".join(body for _, body in received)


def test_a_call_that_ran_says_so_and_a_call_waiting_for_a_person_does_not(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A call is logged before its gate is asked: the progress line "tool X {...}" alone
    # read as if it ran. Only a call that ran gets its "done X:" line.
    _terminal(monkeypatch)
    store = str(tmp_path / "runs.db")
    assert main(["run", AGENT, "--input", QUESTION, "--model", "scripted", "--store", store]) == 0
    err = capsys.readouterr().err
    assert "investigate: done lookup_customer:" in err
    desk = "workflows/refund_desk.py:refund_desk"
    complaint = json.dumps("Order O-1003 arrived broken. Please refund it.")
    assert main(["run", desk, "--input", complaint, "--model", "scripted", "--store", store]) == 1
    err = capsys.readouterr().err
    assert "waiting for approval" in err and "done issue_refund" not in err


GATED_AGENT = '''
from loopwise import Agent, gates, tool
from loopwise.testing import ScriptedAgent


@tool
def look(order_id: str) -> str:
    """Look an order up."""
    return "broken"


@tool(effect="irreversible", gate=gates.human())
def refund(order_id: str) -> str:
    """Refund an order (a person decides)."""
    return "refunded"


desk = Agent(name="desk", instructions="Help.", tools=[look, refund], max_steps=4)
offline_model = ScriptedAgent(
    ("look", {"order_id": "O-1"}), ("refund", {"order_id": "O-1"}), answer="done"
)
'''


def test_runs_show_marks_a_logged_call_that_has_not_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A call is logged before its gate is asked: `runs show` says it has not run.
    (tmp_path / "desk.py").write_text(GATED_AGENT)
    store = str(tmp_path / "runs.db")
    target = f"{tmp_path / 'desk.py'}:desk"
    argv = ["run", target, "--input-text", "O-1 broke", "--model", "scripted", "--store", store]
    assert main(argv) == 1
    run_id = capsys.readouterr().out.split()[1].rstrip(":")
    assert main(["runs", "show", run_id, "--store", store]) == 0
    calls = [line for line in capsys.readouterr().out.splitlines() if " tool_call " in line]
    [waiting] = [line for line in calls if "refund(" in line]
    [ran] = [line for line in calls if "look(" in line]
    assert waiting.endswith("(not run)") and not ran.endswith("(not run)")
