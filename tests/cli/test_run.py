"""`loopwise run` on a structured step against the local Chat Completions server (issue 2)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loopwise.cli.main import main
from loopwise.testing import FakeChatServer, Fault, refuse, reply

TARGET = '''
from typing import Literal

import pydantic

from loopwise import Structured


class Ticket(pydantic.BaseModel):
    """A triaged support ticket."""

    summary: str
    category: Literal["billing", "technical", "other"]
    urgency: int = pydantic.Field(ge=1, le=5)


triage = Structured("triage", Ticket, "Summarise the ticket, pick a category, rate urgency 1-5.")
'''
GOOD = {"summary": "card charged twice", "category": "billing", "urgency": 4}
TICKET = json.dumps({"subject": "Refund", "body": "I was charged twice"})


@pytest.fixture
def target(tmp_path: Path) -> str:
    path = tmp_path / "triage_target.py"
    path.write_text(TARGET)
    return f"{path}:triage"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    """Run the CLI in-process; returns (exit code, the parsed JSON stdout, stderr)."""
    code = main(["run", *argv, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Start a server for ``script`` and point OPENAI_BASE_URL at it."""
    servers: list[FakeChatServer] = []

    def start(script: Any = None, **kw: Any) -> FakeChatServer:
        server = FakeChatServer(script, **kw).start()
        servers.append(server)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        return server

    yield start
    for server in servers:
        server.stop()


def test_run_prints_one_json_document(
    target: str, serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    server = serve([reply(GOOD)])
    code, doc, err = _run(capsys, target, "--input", TICKET, "--model", "fake-model")
    assert (code, err) == (0, "")
    assert {"run_id", "status", "output", "usage"} <= set(doc)
    assert doc["status"] == "completed" and doc["output"] == GOOD
    assert doc["usage"]["model_calls"] == 1 and doc["usage"]["input_tokens"] > 0
    assert server.requests[0]["model"] == "fake-model"
    assert json.loads(server.requests[0]["messages"][1]["content"])["subject"] == "Refund"


def test_broken_json_is_re_asked_and_two_calls_are_counted(
    target: str, serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    serve([reply('{"summary": "card'), reply(GOOD)])
    code, doc, _ = _run(capsys, target, "--input", TICKET, "--model", "fake-model")
    assert code == 0 and doc["status"] == "completed" and doc["output"] == GOOD
    assert doc["usage"]["model_calls"] == 2


def test_never_valid_ends_invalid_output_with_exit_1(
    target: str, serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    server = serve(lambda request: reply({"summary": "x", "urgency": 99}))
    code, doc, _ = _run(capsys, target, "--input", TICKET, "--model", "fake-model")
    assert code == 1 and doc["status"] == "invalid_output"
    assert doc["usage"]["model_calls"] == 3 and len(server.requests) == 3


def test_a_server_rejecting_json_schema_still_yields_a_validated_result(
    target: str, serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    server = serve([reply(GOOD)], reject={"json_schema"})
    code, doc, _ = _run(capsys, target, "--input", TICKET, "--model", "fake-model")
    assert code == 0 and doc["output"] == GOOD and doc["usage"]["model_calls"] == 1
    formats = [body["response_format"]["type"] for body in server.requests]
    assert formats == ["json_schema", "json_object"]


def test_refusal_ends_refused(target: str, serve: Any, capsys: pytest.CaptureFixture[str]) -> None:
    serve([refuse("I can't help with that.")])
    code, doc, _ = _run(capsys, target, "--input", TICKET, "--model", "fake-model")
    assert code == 1 and doc["status"] == "refused"
    assert "can't help" in doc["detail"]


def test_a_500_after_the_sdk_retries_ends_error(
    target: str, serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # The CLI's client keeps the SDK's default retries (2); retry-after-ms keeps them quick.
    server = serve([Fault(status=500, headers={"retry-after-ms": "1"})] * 3)
    code, doc, _ = _run(capsys, target, "--input", TICKET, "--model", "fake-model")
    assert code == 1 and doc["status"] == "error" and "500" in doc["detail"]
    assert len(server.requests) == 3


def test_model_from_the_environment(
    target: str, serve: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server = serve([reply(GOOD)])
    monkeypatch.setenv("LOOPWISE_MODEL", "env-model")
    code, doc, _ = _run(capsys, target, "--input", TICKET)
    assert code == 0 and doc["status"] == "completed"
    assert server.requests[0]["model"] == "env-model"


def test_scripted_model_runs_offline(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, _ = _run(capsys, target, "--input", TICKET, "--model", "scripted")
    assert code == 0 and doc["status"] == "completed"
    assert set(doc["output"]) == {"summary", "category", "urgency"}


def test_human_output_without_json(
    target: str, serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    serve([reply(GOOD)])
    code = main(["run", target, "--input", TICKET, "--model", "fake-model"])
    out = capsys.readouterr().out
    assert code == 0 and ": completed" in out and '"urgency": 4' in out
    assert "usage: 1 model call, 0 tool calls," in out


def _usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(["run", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("loopwise: ") and err.count("\n") == 1 and "Traceback" not in err
    return err


def test_missing_and_malformed_targets_exit_2(
    tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("def oops(:\n")
    module = target.rpartition(":")[0]
    assert "no such file" in _usage_error(
        capsys, str(tmp_path / "nope.py:x"), "--model", "scripted"
    )
    assert "no attribute" in _usage_error(capsys, f"{module}:nothing", "--model", "scripted")
    assert "not a step" in _usage_error(capsys, f"{module}:Ticket", "--model", "scripted")
    assert "SyntaxError" in _usage_error(capsys, f"{broken}:oops", "--model", "scripted")
    assert "names no module" in _usage_error(capsys, ":triage", "--model", "scripted")


def test_bad_input_json_exits_2(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = _usage_error(capsys, target, "--input", "{not json", "--model", "scripted")
    assert "--input is not valid JSON" in err and "JSON string" not in err
    err = _usage_error(capsys, target, "--input", "why did it fail?", "--model", "scripted")
    assert "pass text as a JSON string" in err


def test_missing_model_configuration_exits_2(
    target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _usage_error(capsys, target, "--input", TICKET)
    assert "no model configured" in err and "--model scripted" in err
    err = _usage_error(capsys, target, "--input", TICKET, "--model", "gpt-4o-mini")
    assert "OPENAI_API_KEY" in err


@pytest.mark.slow
def test_the_console_script_end_to_end(target: str, serve: Any) -> None:
    """The installed `loopwise` command, as a user runs it: stdout is one JSON document."""
    server = serve([reply('{"oops'), reply(GOOD)])
    exe = str(Path(sys.executable).with_name("loopwise"))
    argv = [exe, "run", target, "--input", TICKET, "--model", "fake-model", "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["status"] == "completed" and doc["usage"]["model_calls"] == 2
    assert len(server.requests) == 2

    done = subprocess.run(
        [exe, "run", target, "--input", "{bad"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


_INTERRUPTED = """
import asyncio
import os
import signal

import loopwise


@loopwise.step
async def waits(x: str) -> str:
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, as a person at the terminal presses it
    await asyncio.Event().wait()
    return x
"""


@pytest.mark.slow
def test_ctrl_c_in_run_prints_one_line_and_exits_130(tmp_path: Path) -> None:
    (tmp_path / "waits.py").write_text(_INTERRUPTED)
    exe = str(Path(sys.executable).with_name("loopwise"))
    store = str(tmp_path / "runs.db")
    argv = [exe, "run", f"{tmp_path / 'waits.py'}:waits", "--input", '"x"', "--store", store]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 130, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    listed = subprocess.run(
        [exe, "runs", "list", "--store", store, "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    (run,) = json.loads(listed.stdout)["runs"]
    assert run["status"] == "cancelled"
    assert f"run {run['run_id']} is recorded cancelled" in done.stderr


def test_input_not_matching_the_declared_model_exits_2_before_any_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    triage = "workflows/ticket_triage.py:triage"
    code = main(["run", triage, "--model", "scripted", "--input", '{"subject": "hi"}', "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "body: Field required" in err
    assert main(["runs", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == []


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--max-steps", "0"),
        ("--max-steps", "-1"),
        ("--max-steps", "2.5"),
        ("--max-tokens", "-5"),
        ("--max-cost", "nan"),
        ("--max-cost", "-0.5"),
    ],
)
def test_limit_flags_out_of_range_exit_2_naming_the_flag(
    target: str, flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _usage_error(capsys, target, "--input", TICKET, "--model", "scripted", flag, value)
    assert flag in err and repr(value) in err
    code = main(["eval", target, "--dataset", "x.jsonl", flag, value])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and flag in err and err.count("\n") == 1


def test_empty_stdin_for_input_dash_exits_2(
    target: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert "stdin is empty" in _usage_error(capsys, target, "--input", "-", "--model", "scripted")


def test_a_store_that_cannot_be_opened_exits_2(
    target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [target, "--input", TICKET, "--model", "scripted", "--store", str(tmp_path)]
    assert "cannot open run store" in _usage_error(capsys, *argv)


def test_json_stdout_stays_one_document_when_user_code_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    noisy = tmp_path / "noisy.py"
    noisy.write_text(
        "import loopwise\n"
        "print('loading noisy')\n"
        "@loopwise.step\n"
        "def shout(x: str) -> str:\n"
        "    print('shouting', x)\n"
        "    return x.upper()\n"
    )
    data = tmp_path / "cases.jsonl"
    data.write_text('{"input": "a", "expected": "A"}\n')
    for argv in (
        ["run", f"{noisy}:shout", "--input", '"hi"', "--json"],
        ["eval", f"{noisy}:shout", "--dataset", str(data), "--json"],
        ["check", f"{noisy}:shout", "--json"],
    ):
        assert main(argv) == 0, argv
        out, err = capsys.readouterr()
        json.loads(out)  # one document, nothing else
        assert "shouting" in err or "loading noisy" in err or argv[0] == "check"


@pytest.mark.slow
def test_a_reader_that_leaves_early_gets_no_traceback(target: str) -> None:
    """`loopwise run ... --json | head -c 1`: the pipe closes before the document is out."""
    exe = str(Path(sys.executable).with_name("loopwise"))
    argv = [exe, "run", target, "--input", TICKET, "--model", "scripted", "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_an_invalid_workflow_exits_2_before_any_run_is_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = tmp_path / "gappy.py"
    module.write_text(
        "from typing import Literal\n"
        "from pydantic import BaseModel\n"
        "import loopwise\n"
        "class Kind(BaseModel):\n"
        "    kind: Literal['a', 'b']\n"
        "@loopwise.step\n"
        "def classify(x: str) -> Kind:\n"
        "    return Kind(kind='a')\n"
        "@loopwise.step\n"
        "def handle_a(k: Kind) -> str:\n"
        "    return 'a'\n"
        "flow = loopwise.Workflow('flow', input_type=str)\n"
        "flow.add('classify', classify)\n"
        "flow.add_route('by_kind', 'kind', {'a': 'handle_a'}, after=['classify'])\n"
        "flow.add('handle_a', handle_a)\n"
    )
    data = tmp_path / "cases.jsonl"
    data.write_text('{"input": "x"}\n')
    for argv in (
        ["run", f"{module}:flow", "--input", '"x"', "--json"],
        ["eval", f"{module}:flow", "--dataset", str(data), "--json"],
    ):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and "does not cover 'b'" in err and err.count("\n") == 1
    assert main(["runs", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == []


def test_input_json_too_deep_or_with_a_too_long_number_exits_2_in_one_line(
    target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = "[" * 100_000 + "]" * 100_000  # past the JSON parser's recursion limit
    for levels in (101, 900):  # json reads these; recording the run would not
        parsable_but_deep = "[" * levels + '"why?"' + "]" * levels
        err = _usage_error(capsys, target, "--input", parsable_but_deep, "--model", "scripted")
        assert "--input nests arrays/objects deeper than 100 levels" in err
    err = _usage_error(capsys, target, "--input", deep, "--model", "scripted")
    assert "--input nests arrays/objects deeper than 100 levels" in err
    for number in ("1" * 5000, '{"subject": ' + "9" * 5000 + ', "body": "b"}'):
        err = _usage_error(capsys, target, "--input", number, "--model", "scripted")
        assert "--input holds a number too long to read" in err
    hundred = "[" * 100 + "]" * 100
    big = tmp_path / "deep.json"
    big.write_text(deep)
    exe = str(Path(sys.executable).with_name("loopwise"))
    done = subprocess.run(
        [exe, "run", target, "--input", f"@{big}", "--model", "scripted"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    code, doc, _ = _run(capsys, target, "--input", hundred, "--model", "scripted")
    assert code == 0 and doc["status"] == "completed"  # 100 levels are read and recorded


def test_counts_read_as_english(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # "1 model calls, 1 tool calls" read as a machine wrote it (issue 47).
    from loopwise.core.names import counted

    assert [counted(n, "model call") for n in (0, 1, 2)] == [
        "0 model calls",
        "1 model call",
        "2 model calls",
    ]
    assert counted(1, "policy", "policies") == "1 policy"
    assert counted(3, "policy", "policies") == "3 policies"


STR_STEP = """
import loopwise

@loopwise.step
def shout(text: str) -> str:
    return text.upper()
"""


def test_a_str_input_is_checked_like_a_typed_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "shout.py").write_text(STR_STEP)
    target = str(tmp_path / "shout.py")
    assert main(["run", target, "--input", '{"a": 1}', "--store", str(tmp_path / "r.db")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("loopwise: --input does not match str of") and "\n" not in err
    assert "--input-text TEXT" in err
    assert main(["run", target, "--input-text", "hi", "--store", str(tmp_path / "r.db")]) == 0
    assert '"HI"' in capsys.readouterr().out


def test_input_text_for_a_typed_input_names_input_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = "workflows/ticket_triage.py:triage"
    code = main(["run", target, "--input-text", "hello", "--model", "scripted", "--store",
                 str(tmp_path / "r.db")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("loopwise: --input-text does not match")
    assert "pass JSON with --input" in err


def test_a_mistyped_target_gets_a_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "workflows/ticket_triage.py:triag"]) == 2
    err = capsys.readouterr().err
    assert "has no attribute 'triag'; did you mean 'triage'?" in err


def test_runs_list_filters_by_status_target_and_since(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import loopwise

    @loopwise.step
    def shout(text: str) -> str:
        return text.upper()

    @loopwise.step
    def whisper(text: str) -> str:
        return text.lower()

    store = str(tmp_path / "runs.db")
    for step_ in (shout, whisper, shout):
        loopwise.run(step_, "Hi", store=store)
    at = ["--store", store, "--json"]
    assert main(["runs", "list", "--target", "shout", *at]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["target"] for r in runs] == ["shout", "shout"]
    assert main(["runs", "list", "--status", "completed", "--since", "1h", *at]) == 0
    assert len(json.loads(capsys.readouterr().out)["runs"]) == 3
    assert main(["runs", "list", "--since", "2999-01-01", *at]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == []
    assert main(["runs", "list", "--since", "yesterday", "--store", store]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--since 'yesterday'" in err
    assert main(["runs", "list", "--status", "done", "--store", store]) == 2
    assert "--status: 'done': one of" in capsys.readouterr().err


def test_limits_past_a_billion_and_an_empty_decider_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "runs.db")
    for argv in (
        ["pending", "--limit", "9223372036854775807", "--store", store],
        ["runs", "list", "--limit", "100000000000000000000000", "--store", store],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "from 1 to 1,000,000,000" in err
    assert main(["approve", "nope", "--by", "", "--store", store]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "no run" not in err  # refused before the store
