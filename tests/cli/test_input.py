"""For the user who installs loopwise (issue 18): text input, runs started from Python that
resume from the CLI, and evals that say when their offline model is schema filler."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise.cli.main import main

ECHO = '''
import loopwise


@loopwise.step
async def echo(text: str) -> dict[str, object]:
    """Say what came in, and its type."""
    return {"type": type(text).__name__, "text": text}
'''

DESK = '''
import loopwise
from loopwise import gates
from loopwise.testing import ScriptedModel, call, reply


@loopwise.tool(effect="irreversible", gate=gates.human())
def pay(amount: int) -> str:
    """Pay an amount. Use it when the customer is owed money."""
    return f"paid {amount}"


def _respond(request):
    done = [m["content"] for m in request.messages if m["role"] == "tool"]
    return reply(done[-1]) if done else call("pay", {"amount": 9}, id="c9")


desk = loopwise.Agent(name="desk", tools=[pay])


def offline_model():
    return ScriptedModel(_respond)
'''


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() and "--json" in argv else out, err


@pytest.fixture
def echo(tmp_path: Path) -> str:
    path = tmp_path / "echo.py"
    path.write_text(ECHO)
    return f"{path}:echo"


def test_input_text_is_a_string_as_written(echo: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, _ = _cli(capsys, "run", echo, "--input-text", 'He said "hi" {not json}', "--json")
    assert code == 0 and doc["output"] == {"type": "str", "text": 'He said "hi" {not json}'}
    code, doc, _ = _cli(capsys, "run", echo, "--input-text", "42", "--json")
    assert doc["output"] == {"type": "str", "text": "42"}  # text, not the number


def test_input_text_dash_reads_raw_stdin(
    echo: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    document = "Invoice 17\n\nTotal: 40 EUR\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(document))
    code, doc, _ = _cli(capsys, "run", echo, "--input-text", "-", "--json")
    assert code == 0 and doc["output"]["text"] == document
    monkeypatch.setattr("sys.stdin", io.StringIO("  \n"))
    code, out, err = _cli(capsys, "run", echo, "--input-text", "-", "--json")
    assert code == 2 and out == "" and "--input-text: stdin is empty" in err


def test_binary_stdin_is_refused_as_a_binary_file_is(
    echo: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # What Python's stdin makes of bytes that are not UTF-8 (surrogateescape).
    raw = b"\xff\xfe\x00PNG".decode("utf-8", "surrogateescape")
    for flag in ("--input-text", "--input"):
        monkeypatch.setattr("sys.stdin", io.StringIO(raw))
        code, out, err = _cli(capsys, "run", echo, flag, "-", "--json")
        assert code == 2 and out == "" and "not UTF-8 text" in err and err.count("\n") == 1


def test_input_at_a_text_file_is_its_text_and_at_a_json_file_its_value(
    echo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    note = tmp_path / "note.txt"
    note.write_text('["not", "parsed"]\n', encoding="utf-8")
    code, doc, _ = _cli(capsys, "run", echo, "--input", f"@{note}", "--json")
    assert code == 0 and doc["output"] == {"type": "str", "text": '["not", "parsed"]\n'}
    value = tmp_path / "value.json"
    value.write_text('"from json"')
    code, doc, _ = _cli(capsys, "run", echo, "--input", f"@{value}", "--json")
    assert doc["output"] == {"type": "str", "text": "from json"}
    value.write_text("plain words")
    code, out, err = _cli(capsys, "run", echo, "--input", f"@{value}", "--json")
    assert code == 2 and out == "" and "--input is not valid JSON" in err
    assert "--input-text" in err and err.count("\n") == 1


def test_input_and_input_text_exclude_each_other(
    echo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(capsys, "run", echo, "--input", '"a"', "--input-text", "b")
    assert code == 2 and out == "" and "not allowed with argument" in err


def test_a_run_started_from_python_records_its_import_spec_and_resumes_from_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    package = tmp_path / "deskapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "flows.py").write_text(DESK)
    monkeypatch.syspath_prepend(str(tmp_path))
    from deskapp.flows import desk, offline_model  # type: ignore[import-not-found]

    paused = loopwise.run(desk, "refund please", model=offline_model())
    assert paused.status == "awaiting_approval"
    code, shown, _ = _cli(capsys, "runs", "show", paused.run_id, "--json")
    assert shown["spec"] == "deskapp.flows:desk"
    code, out, _ = _cli(capsys, "approve", paused.run_id)
    assert code == 0 and f"with none running: loopwise resume {paused.run_id}" in out
    assert "a `loopwise worker`" in out  # a worker on the store may be continuing it already
    # Another process, started in the project's folder: the `loopwise` command finds the
    # package there, as `python -m` would.
    done = subprocess.run(
        [str(Path(sys.executable).with_name("loopwise")), "resume", paused.run_id, "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "completed" and result["output"] == "paid 9"


def test_a_run_of_a_step_made_in_a_function_says_how_to_resume_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from loopwise import gates
    from loopwise.testing import ScriptedModel, call, reply

    @loopwise.tool(effect="irreversible", gate=gates.human())
    def pay(amount: int) -> str:
        """Pay an amount. Use it when the customer is owed money."""
        return f"paid {amount}"

    local = loopwise.Agent(name="local", tools=[pay])
    model = ScriptedModel([call("pay", {"amount": 3}, id="c1"), reply("done")])
    paused = loopwise.run(local, "go", model=model)
    code, shown, _ = _cli(capsys, "runs", "show", paused.run_id, "--json")
    assert shown["spec"] is None
    code, out, _ = _cli(capsys, "approve", paused.run_id)
    assert code == 0 and "with none running" not in out
    assert f"loopwise.resume({paused.run_id!r}, step=YOUR_STEP)" in out
    assert loopwise.resume(paused.run_id, step=local, model=model).status == "completed"


def test_eval_says_when_scripted_is_schema_filler(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare = tmp_path / "bare.py"
    bare.write_text(
        "from typing import Literal\nimport pydantic\nfrom loopwise import Structured\n\n"
        "class Mood(pydantic.BaseModel):\n    mood: Literal['happy', 'sad']\n\n"
        "mood = Structured('mood', Mood, 'Say the mood.')\n"
    )
    own = tmp_path / "own.py"
    own.write_text(
        bare.read_text().replace("mood = ", "moody = ")
        + "\nfrom loopwise.testing import ScriptedModel\n"
        "offline_model = ScriptedModel(lambda request: {'mood': 'happy'})\n"
    )
    data = tmp_path / "cases.jsonl"
    data.write_text('{"input": "yay", "expected": {"mood": "happy"}}\n')
    argv = ["eval", f"{bare}:mood", f"{own}:moody", "--dataset", str(data), "--model", "scripted"]
    code, doc, err = _cli(capsys, *argv, "--json")
    assert code == 0 and len(doc["targets"]) == 2
    notes = [line for line in err.splitlines() if "schema filler" in line]
    assert len(notes) == 1 and f"{bare}:mood" in notes[0] and "offline_model" in notes[0]


SWAP = '''
import loopwise
from loopwise import gates

NOTES = []


@loopwise.tool(effect="irreversible", gate=gates.human())
def pay(amount: int) -> str:
    """Pay an amount. Use it when the customer is owed money."""
    return f"paid {amount}"


@loopwise.tool(effect="write")
def note(text: str) -> str:
    """Add a note to the file."""
    NOTES.append(text)
    return "noted"


def make(name):
    return loopwise.Agent(name=name, tools=[pay, note])


desk = make("desk")
'''


def test_a_spec_that_now_loads_another_step_is_refused_on_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopwise.testing import ScriptedModel, call, reply

    (tmp_path / "swapapp.py").write_text(SWAP)
    monkeypatch.syspath_prepend(str(tmp_path))
    import swapapp  # type: ignore[import-not-found]

    # A step bound to the module's name only at run time (a test's monkeypatch, a
    # notebook): its recorded spec loads another step in any later import.
    other = swapapp.make("other")
    with monkeypatch.context() as patched:
        patched.setattr(swapapp, "desk", other)
        model = ScriptedModel([call("pay", {"amount": 3}, id="c1"), reply("done")])
        paused = loopwise.run(other, "go", model=model)
    assert paused.status == "awaiting_approval"
    assert loopwise.open_store(None).get_run(paused.run_id).spec == "swapapp:desk"
    store = loopwise.open_store(None)
    store.decide(paused.run_id, paused.pending[0]["approval_id"], decision="approved", by="ana")
    stranger = ScriptedModel([call("note", {"text": "x"}), reply("done")])
    with pytest.raises(loopwise.TargetError, match=r"step 'other', but .* now loads 'desk'"):
        loopwise.resume(paused.run_id, model=stranger)
    assert swapapp.NOTES == []  # the other step never ran in this run
    assert store.get_run(paused.run_id).status == "awaiting_approval"


NIGHTLY = '''
import pathlib

import loopwise
from loopwise import gates
from loopwise.testing import ScriptedModel, call, reply


@loopwise.tool(effect="irreversible", gate=gates.human())
def pay(amount: int) -> str:
    """Pay an amount. Use it when the customer is owed money."""
    return f"paid {amount}"


desk = loopwise.Agent(name="desk", tools=[pay])

# A job run as `python -m jobapp.nightly`: its top level is the job, not a library.
STARTS = pathlib.Path(__file__).with_name("starts.txt")
STARTS.write_text(STARTS.read_text() + "x" if STARTS.exists() else "x")
model = ScriptedModel([call("pay", {"amount": 5}, id="c1"), reply("done")])
print(loopwise.run(desk, "go", model=model).run_id)
'''


@pytest.mark.slow
def test_a_step_of_a_module_run_with_python_m_records_no_spec(tmp_path: Path) -> None:
    package = tmp_path / "jobapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "nightly.py").write_text(NIGHTLY)
    started = subprocess.run(
        [sys.executable, "-m", "jobapp.nightly"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**__import__("os").environ, "LOOPWISE_STORE": str(tmp_path / "runs.db")},
    )
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.split()[-1]
    # Importing `jobapp.nightly` to resume would run the job again (a second run, a
    # second payment asked for): like `python script.py`, its __main__ is no spec.
    with loopwise.open_store(str(tmp_path / "runs.db")) as st:
        assert st.get_run(run_id).spec is None
    assert (package / "starts.txt").read_text() == "x"
