"""``loopwise eval`` cannot touch the real world by accident: a target whose tools take
effect runs against the sandbox it declares (``make_eval_deps()``) or is refused in one
line; every gate is answered by the eval's rule, never left in ``pending``; the eval's
runs go to a store of their own; the report says what effects happened and where.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from loopwise.cli.main import main
from tests.support import ROOT

DESK = f"{ROOT / 'workflows' / 'refund_desk.py'}:refund_desk"


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _pending(capsys: pytest.CaptureFixture[str]) -> list[Any]:
    code, out, _ = _cli(capsys, "pending", "--json")
    assert code == 0
    return list(json.loads(out))


def _shop(sql: str) -> list[Any]:
    with sqlite3.connect(os.environ["LOOPWISE_SHOP_DB"]) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        return db.execute(sql).fetchall() if "refunds" in tables else []


def test_the_hybrid_starter_evaluates_against_its_sandbox_with_no_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert _cli(capsys, "init", "hybrid", ".")[0] == 0
    code, out, err = _cli(capsys, "eval", "refunds.py:refund_desk", "--dataset",
                          "refunds_cases.jsonl", "--model", "scripted", "--scorer",
                          "refunds.py:refund_matches")  # fmt: skip
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("effects of "))
    assert "issue_refund x" in line and "make_eval_deps() (the target's sandbox)" in line
    assert "denied" in line  # the refunds a person would decide were answered by the eval
    if Path("refunds.db").exists():  # the real ledger: never written by the eval
        with sqlite3.connect("refunds.db") as db:
            assert db.execute("SELECT COUNT(*) FROM effects").fetchone() == (0,)
    assert _pending(capsys) == []  # nothing waits in the real store, nor in the eval's
    eval_db = str(Path(os.environ["LOOPWISE_STORE"]).with_name("eval.db"))
    code, out, _ = _cli(capsys, "pending", "--json", "--store", eval_db)
    assert json.loads(out) == []
    code, out, _ = _cli(capsys, "runs", "list", "--json")
    assert json.loads(out) == [] or all("refund_desk" not in str(r) for r in json.loads(out))


def test_the_canonical_refund_desk_pays_nobody_in_an_eval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = tmp_path / "cases.jsonl"
    cases.write_text(
        json.dumps({"input": "Order O-1003 arrived broken and I want my money back."})
        + "\n"
        + json.dumps({"input": "Order O-1001 never arrived, refund please."})
        + "\n"
    )
    code, out, err = _cli(capsys, "eval", DESK, "--dataset", str(cases), "--model", "scripted")
    assert code == 0, err
    assert "effects of" in out and ": none (into" in out and "gates: 4 denied" in out
    assert _shop("SELECT * FROM refunds") == [] and _pending(capsys) == []
    # Opted in: the approved path runs, in the sandbox, and the report says so.
    code, out, err = _cli(capsys, "eval", DESK, "--dataset", str(cases), "--model", "scripted",
                          "--gates", "approve", "--json")  # fmt: skip
    assert code == 0, err
    effects = next(iter(json.loads(out)["effects"].values()))
    assert effects["performed"]["issue_refund"] == 2 and "sandbox" in effects["into"]
    assert _shop("SELECT * FROM refunds") == [] and _shop("SELECT * FROM emails") == []


def test_an_agent_with_a_write_tool_and_no_sandbox_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    books = tmp_path / "books.txt"
    module = tmp_path / "writer.py"
    module.write_text(
        "import loopwise\n"
        "from loopwise.testing import ScriptedModel, call, reply\n"
        f"BOOKS = {str(books)!r}\n"
        "@loopwise.tool(effect='write')\n"
        "def save(text: str) -> str:\n"
        "    '''Save a line to the books. Use it to record the answer.'''\n"
        "    with open(BOOKS, 'a') as f:\n        f.write(text + '\\n')\n"
        "    return 'saved'\n"
        "writer = loopwise.Agent(name='writer', tools=[save])\n"
        "def make_deps():\n    return 'real'\n"
        "def real():\n    return 'real'\n"
        "def offline_model():\n"
        "    def respond(request):\n"
        "        done = [m for m in request.messages if m['role'] == 'tool']\n"
        "        return reply('ok') if done else call('save', {'text': 'x'})\n"
        "    return ScriptedModel(respond)\n"
    )
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"input": "go"}\n{"input": "again"}\n')
    target = f"{module}:writer"
    code, out, err = _cli(capsys, "eval", target, "--dataset", str(cases), "--model", "scripted")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "(save)" in err and "make_eval_deps()" in err and "--deps" in err
    assert not books.exists()
    code, out, err = _cli(capsys, "eval", target, "--dataset", str(cases), "--model", "scripted",
                          "--deps", f"{module}:real")  # fmt: skip
    assert code == 0, err
    assert f"effects of {target}: save x2 (into --deps {module}:real)" in out
    assert books.read_text() == "x\nx\n"


ANNOUNCE = f"{ROOT / 'workflows' / 'announce.py'}:announce"


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where this test's temporary folders go, to see what an eval leaves behind."""
    import tempfile

    where = tmp_path / "tmp"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


def test_the_announce_example_publishes_nothing_real_in_an_eval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    scratch: Path,
) -> None:  # fmt: skip
    real = tmp_path / "outbox.jsonl"
    monkeypatch.setenv("LOOPWISE_OUTBOX", str(real))
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"input": {"topic": "Maintenance", "notes": "Sunday."}}) + "\n")
    base = ["eval", ANNOUNCE, "--dataset", str(cases), "--model", "scripted", "--gates", "approve"]
    code, out, err = _cli(capsys, *base)
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("effects of "))
    assert "publish x1" in line and "make_eval_deps() (the target's sandbox)" in line
    assert "a throwaway sandbox per run, discarded when the run ended" in line
    assert not real.exists() and list(scratch.iterdir()) == []
    # --deps names where effects go: deps it cannot publish to are refused, not replaced
    # by the real outbox; its own Outbox gets the announcement.
    sandbox = tmp_path / "sandbox.jsonl"
    (tmp_path / "sbx.py").write_text(
        "from loopwise.running.targets import load_target\n"
        f"announce = load_target({ANNOUNCE!r}).module\n"
        "def wrong():\n    return {'outbox': 'elsewhere'}\n"
        f"def sandbox():\n    return announce.Outbox(announce.Path({str(sandbox)!r}))\n"
    )
    code, out, err = _cli(capsys, *base, "--deps", f"{tmp_path / 'sbx.py'}:wrong", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert next(iter(doc["effects"].values()))["performed"] == {}
    assert "this run's deps are a builtins.dict" in doc["targets"][0]["runs"][0]["detail"]
    assert not real.exists()
    code, out, err = _cli(capsys, *base, "--deps", f"{tmp_path / 'sbx.py'}:sandbox")
    assert code == 0, err
    assert "publish x1 (into --deps" in out and "throwaway" not in out
    assert not real.exists() and len(sandbox.read_text().splitlines()) == 1


def test_the_refund_desks_eval_leaves_no_sandbox_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], scratch: Path
) -> None:
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"input": "Order O-1003 arrived broken, refund me."}) + "\n")
    code, out, err = _cli(capsys, "eval", DESK, "--dataset", str(cases), "--model", "scripted",
                          "--gates", "approve", "--json")  # fmt: skip
    assert code == 0, err
    effects = next(iter(json.loads(out)["effects"].values()))
    assert effects["performed"]["issue_refund"] == 1 and effects["discarded"] is True
    assert list(scratch.iterdir()) == []  # was: a refund-desk-eval-*/shop.db per run
    assert _shop("SELECT * FROM refunds") == []


HIDDEN = '''
from pathlib import Path

import loopwise
from loopwise import Context, Workflow, call_tools, tool

LEDGER = Path(__file__).with_name("ledger.txt")


class Books:
    def __init__(self, path: Path) -> None:
        self.path = path


@tool(effect="write")
def add_note(text: str, ctx: Context[Books]) -> str:
    """Add a note to the customer's file."""
    with ctx.deps.path.open("a") as f:
        f.write(text + "\\n")
    return "noted"


@loopwise.step
async def note_it(question: str, ctx: Context[Books]) -> str:
    # A function node calling the executor: the static review cannot see add_note here.
    [out] = await call_tools(ctx, [(add_note, {"text": question})])
    return str(out)


flow = Workflow("flow", input_type=str).then(note_it)


def make_deps() -> Books:
    return Books(LEDGER)
'''


def test_an_eval_never_takes_a_hidden_effect_on_the_real_deps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A step that reaches a write tool through code (as a graduated workflow's nodes do)
    # has no tool the review sees: its eval runs on make_deps(), so the effect is stopped.
    (tmp_path / "hidden.py").write_text(HIDDEN)
    (tmp_path / "cases.jsonl").write_text('{"input": "C-1002 called", "expected": "noted"}\n')
    for rule in ("deny", "approve"):
        code, out, err = _cli(
            capsys, "eval", f"{tmp_path / 'hidden.py'}:flow", "--dataset",
            str(tmp_path / "cases.jsonl"), "--gates", rule, "--json",
            "--store", str(tmp_path / "evals.db"),
        )  # fmt: skip
        assert code in (0, 1), err
        assert not (tmp_path / "ledger.txt").exists()  # the real books are untouched
        doc = json.loads(out)
        statuses = doc["targets"][0]["status_counts"]
        assert statuses == {"denied": 1}, statuses


def test_a_module_with_a_sandbox_evaluates_in_it_whatever_the_review_sees(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sandboxed = (
        HIDDEN
        + """

def make_eval_deps() -> Books:
    return Books(LEDGER.with_name("sandbox.txt"))
"""
    )
    (tmp_path / "hidden.py").write_text(sandboxed)
    (tmp_path / "cases.jsonl").write_text('{"input": "C-1002 called", "expected": "noted"}\n')
    code, out, err = _cli(
        capsys, "eval", f"{tmp_path / 'hidden.py'}:flow", "--dataset",
        str(tmp_path / "cases.jsonl"), "--json", "--store", str(tmp_path / "evals.db"),
    )  # fmt: skip
    assert code in (0, 1), err
    assert not (tmp_path / "ledger.txt").exists()
    assert (tmp_path / "sandbox.txt").read_text() == "C-1002 called\n"
    assert "make_eval_deps" in json.dumps(json.loads(out)["effects"])
