"""A person's edit of an approval works on every path: the CLI's ``approve --args``, the
terminal's ``[e]dit``, the inbox's "Approve edited" and an in-process handler; SQLite and
PostgreSQL; an agent's call, a workflow's tool node and a hybrid's action. The edited call
runs once, with exactly the edited arguments; a policy reading ``ctx.deps`` judges the edit
with the run's deps; a hybrid step that depends on an edited one asks a person again.
"""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise import Approved, Denied, Edited, gates
from loopwise.cli.main import main
from loopwise.errors import DecisionError
from loopwise.store.open import open_store
from loopwise.testing import ScriptedModel, calls, reply
from tests.support import edit_desk as desk

MODULE = str(Path(desk.__file__))
TARGETS = ["refund_agent", "refund_flow", "refund_desk"]
FIRST = {"refund_agent": "c1", "refund_flow": "refund_flow/refund", "refund_desk": "execute.s1"}


@pytest.fixture
def books(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    path = str(tmp_path / "books.db")
    monkeypatch.setenv("EDIT_DESK_DB", path)
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def _paused(capsys: pytest.CaptureFixture[str], target: str, store: str) -> str:
    code, paused = _run(capsys, "run", f"{MODULE}:{target}", "--model", "scripted",
                        "--input", '"O-1"', "--store", store)  # fmt: skip
    assert code == 1 and paused["status"] == "awaiting_approval", paused
    return str(paused["run_id"])


def _events(run_id: str, store: str, kind: str) -> list[dict[str, Any]]:
    with open_store(store) as st:
        return [e.data for e in st.events(run_id) if e.type.value == kind]


def _finish_desk(capsys: pytest.CaptureFixture[str], run_id: str, store: str) -> dict[str, Any]:
    """Approve the mail, resume; approve the steps asked again as they are; resume."""
    assert main(["approve", run_id, "--approval", "execute.s2", "--store", store]) == 0
    code, again = _run(capsys, "resume", run_id, "--store", store)
    assert again["status"] == "awaiting_approval", again
    asked = {p["approval_id"]: p for p in again["pending"]}
    assert set(asked) == {"execute.s2.recheck"}  # s3 waits for s2; s4 only reads
    assert (
        "step s1 (refund) was edited by lead (amount: 300 → 120)"
        in asked["execute.s2.recheck"]["reason"]
    )
    body = json.dumps({"order_id": "O-1", "body": "we refunded 120"})
    assert main(["approve", run_id, "--approval", "execute.s2.recheck", "--by", "lead",
                 "--args", body, "--store", store]) == 0  # fmt: skip
    code, again = _run(capsys, "resume", run_id, "--store", store)
    assert [p["approval_id"] for p in again["pending"]] == ["execute.s3.recheck"]
    assert main(["approve", run_id, "--approval", "execute.s3.recheck", "--store", store]) == 0
    code, done = _run(capsys, "resume", run_id, "--store", store)
    assert code == 0, done
    return done


@pytest.mark.parametrize("target", TARGETS)
def test_an_edit_made_with_the_cli_runs_once_with_the_edited_arguments(
    target: str, store_at: str, books: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused(capsys, target, store_at)
    assert main(["approve", run_id, "--approval", FIRST[target], "--by", "lead",
                 "--args", desk.EDIT_TEXT, "--store", store_at]) == 0  # fmt: skip
    if target == "refund_desk":
        done = _finish_desk(capsys, run_id, store_at)
    else:
        code, done = _run(capsys, "resume", run_id, "--store", store_at)
        assert code == 0, done
    assert done["status"] == "completed"
    assert [t for k, t in desk.effects(books) if k == "refund"] == ["O-1:120"]
    code, _again = _run(capsys, "resume", run_id, "--store", store_at)
    assert [t for k, t in desk.effects(books) if k == "refund"] == ["O-1:120"]  # once
    decided = [d for d in _events(run_id, store_at, "gate_decided") if d["tool"] == "refund"]
    assert [(d["decision"], d["by"]) for d in decided] == [("edited", "lead")]
    assert decided[0]["changed"] == {"amount": {"from": 300, "to": 120}}
    ran = [d for d in _events(run_id, store_at, "tool_result") if d["tool"] == "refund"]
    assert [(r["edited_by"], r["ran_with"]) for r in ran] == [("lead", desk.EDIT)]


def test_the_desk_mails_and_notes_what_the_person_approved_after_the_edit(
    store_at: str, books: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused(capsys, "refund_desk", store_at)
    assert main(["approve", run_id, "--approval", "execute.s1", "--by", "lead",
                 "--args", desk.EDIT_TEXT, "--store", store_at]) == 0  # fmt: skip
    done = _finish_desk(capsys, run_id, store_at)
    assert desk.effects(books) == [
        ("refund", "O-1:120"), ("mail", "we refunded 120"), ("note", "refunded 300"),
    ]  # fmt: skip
    results = done["output"]["results"]
    assert {k: r["status"] for k, r in results.items()} == dict.fromkeys(
        ["s1", "s2", "s3", "s4"], "done"
    )


def test_a_dependant_denied_after_the_edit_does_not_run(
    books: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "runs.db")
    run_id = _paused(capsys, "refund_desk", store)
    main(["approve", run_id, "--approval", "execute.s1", "--by", "lead", "--args",
          desk.EDIT_TEXT, "--store", store])  # fmt: skip
    main(["approve", run_id, "--approval", "execute.s2", "--store", store])
    _run(capsys, "resume", run_id, "--store", store)
    main(["deny", run_id, "--approval", "execute.s2.recheck", "--by", "lead",
          "--reason", "the mail says 300", "--store", store])  # fmt: skip
    _code, done = _run(capsys, "resume", run_id, "--store", store)
    assert done["status"] == "denied"
    assert desk.effects(books) == [("refund", "O-1:120")]  # no stale mail, no stale note
    denied = [d for d in _events(run_id, store, "gate_decided") if d["decision"] == "denied"]
    assert [(d["approval_id"], d["by"]) for d in denied] == [("execute.s2.recheck", "lead")]


def _editor(request: loopwise.ApprovalRequest) -> Any:
    if request.tool == "refund":
        return Edited(dict(desk.EDIT), by="ann")
    if request.approval_id.endswith(".recheck") and request.tool == "mail":
        return Edited({"order_id": "O-1", "body": "we refunded 120"}, by="ann")
    return Approved(by="ann")


@pytest.mark.parametrize("target", TARGETS)
def test_an_in_process_handler_edits_with_a_store_on(
    target: str, store_at: str, books: str
) -> None:
    step = loopwise.running.targets.load_target(f"{MODULE}:{target}").step
    with open_store(store_at) as st:
        done = loopwise.run(step, "O-1", model=desk.offline_model(), store=st,
                            approvals=_editor, deps=desk.make_deps())  # fmt: skip
        assert done.status == "completed", done.detail
    assert [t for k, t in desk.effects(books) if k == "refund"] == ["O-1:120"]
    if target == "refund_desk":
        assert ("mail", "we refunded 120") in desk.effects(books)


def test_the_terminal_edit_runs_the_edited_call(
    books: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    step = loopwise.running.targets.load_target(f"{MODULE}:refund_desk").step
    answers = "e\n" + desk.EDIT_TEXT + "\ny\n" + 'e\n{"order_id": "O-1", "body": "120 back"}\ny\n'
    terminal = gates.TerminalApprovals(by="tess", stdin=io.StringIO(answers), stdout=io.StringIO())
    done = loopwise.run(step, "O-1", model=desk.offline_model(), store=tmp_path / "t.db",
                        approvals=terminal, deps=desk.make_deps())  # fmt: skip
    assert done.status == "completed", done.detail
    assert desk.effects(books) == [
        ("refund", "O-1:120"), ("mail", "120 back"), ("note", "refunded 300"),
    ]  # fmt: skip


def test_a_policy_reading_deps_judges_the_edit_when_it_is_made(
    books: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "runs.db")
    run_id = _paused(capsys, "refund_agent", store)
    too_much = json.dumps({"order_id": "O-1", "amount": 20_000})
    capsys.readouterr()
    # make_deps() of the target's module: its limit of 10,000 refuses this edit.
    assert main(["approve", run_id, "--args", too_much, "--store", store]) == 2
    assert "rejected by the policy: over the limit of 10000" in capsys.readouterr().err
    with open_store(store) as st:
        decide = loopwise.approvals.decide
        with pytest.raises(DecisionError, match="over the limit of 50"):
            decide(st, run_id, "c1", decision="approved", by="x", edited_args=desk.EDIT,
                   deps=desk.Ledger(books, 50))  # fmt: skip
        done = decide(st, run_id, "c1", decision="approved", by="x", edited_args=desk.EDIT,
                      deps=desk.Ledger(books, 500))  # fmt: skip
    assert done.status == "edited"


def test_an_edit_judged_without_deps_says_how_to_give_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bare.py").write_text(
        "import loopwise\nfrom tests.support.edit_desk import refund, refund_agent, offline_model\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("EDIT_DESK_DB", str(tmp_path / "b.db"))
    store = str(tmp_path / "runs.db")
    _code, paused = _run(capsys, "run", f"{tmp_path / 'bare.py'}:refund_agent", "--model",
                        "scripted", "--input", '"O-1"', "--store", store, "--deps",
                        f"{MODULE}:make_deps")  # fmt: skip
    run_id = paused["run_id"]
    capsys.readouterr()
    assert main(["approve", run_id, "--args", desk.EDIT_TEXT, "--store", store]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "AttributeError" not in err
    assert "could not be judged now" in err and "--deps module:function" in err
    assert main(["approve", run_id, "--args", desk.EDIT_TEXT, "--store", store,
                 "--deps", f"{MODULE}:make_deps"]) == 0  # fmt: skip


def test_an_in_process_approve_judges_the_edit_with_the_deps_it_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A target module without make_deps(): only deps= gives the policy the run's books.
    (tmp_path / "bare.py").write_text(
        "import loopwise\nfrom tests.support.edit_desk import refund, refund_agent, offline_model\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    books = str(tmp_path / "b.db")
    monkeypatch.setenv("EDIT_DESK_DB", books)
    store = str(tmp_path / "runs.db")
    _code, paused = _run(capsys, "run", f"{tmp_path / 'bare.py'}:refund_agent", "--model",
                        "scripted", "--input", '"O-1"', "--store", store, "--deps",
                        f"{MODULE}:make_deps")  # fmt: skip
    run_id = paused["run_id"]
    with pytest.raises(DecisionError, match=r"deps= to loopwise\.approve ") as unjudged:
        loopwise.approve(run_id, args=desk.EDIT, store=store)
    assert unjudged.value.code == "cannot-judge"
    with pytest.raises(DecisionError, match="over the limit of 50") as refused:
        loopwise.approve(run_id, args=desk.EDIT, store=store, deps=desk.Ledger(books, 50))
    assert refused.value.code == "policy-denied"
    (done,) = loopwise.approve(run_id, args=desk.EDIT, store=store, deps=desk.Ledger(books))
    assert done.status == "edited" and done.edited_args == desk.EDIT
    result = loopwise.resume(run_id, step=desk.refund_agent, store=store,
                             deps=desk.Ledger(books))  # fmt: skip
    assert result.status == "completed"
    assert desk.effects(books) == [("refund", "O-1:120")]


def test_a_policy_taking_ctx_outside_any_run_denies_saying_why() -> None:
    import asyncio

    from loopwise.tools.edits import judge_edit

    judged = asyncio.run(judge_edit(desk.refund, desk.EDIT))
    assert isinstance(judged, Denied) and judged.reason == gates.NO_CONTEXT


def test_the_inbox_approves_an_edit_that_then_runs_once(
    books: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from loopwise.serve.app import ServeSettings, make_server
    from tests.serve.test_app import Client

    monkeypatch.setenv("LOOPWISE_STORE", str(tmp_path / "runs.db"))
    run_id = _paused(capsys, "refund_desk", str(tmp_path / "runs.db"))
    server, _ = make_server(ServeSettings(port=0, by="lead"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = Client(port=server.server_address[1])
        answer = client.decide(run_id=run_id, approval_id="execute.s1", decision="approve",
                               args=desk.EDIT_TEXT, by="lead")  # fmt: skip
        assert answer.status in (200, 303), answer.body
        client.decide(run_id=run_id, approval_id="execute.s2", decision="approve", by="lead")
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
        server.app.store.close()
    _code, again = _run(capsys, "resume", run_id)
    assert [p["approval_id"] for p in again["pending"]] == ["execute.s2.recheck"]
    assert [t for k, t in desk.effects(books) if k == "refund"] == ["O-1:120"]


@pytest.mark.parametrize(("deps", "said"), [("", "name a function"), (":make_deps", "name a")])
def test_an_empty_deps_for_an_edit_is_refused_as_run_refuses_it(
    books: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], deps: str, said: str
) -> None:
    store = str(tmp_path / "runs.db")
    run_id = _paused(capsys, "refund_agent", store)
    capsys.readouterr()
    edit = ["approve", run_id, "--args", desk.EDIT_TEXT, "--store", store, "--deps", deps]
    assert main(edit) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err
    with open_store(store) as st:
        assert [a.approval_id for a in st.pending(run_id)] == ["c1"]  # nothing recorded


def test_deps_naming_what_the_module_lacks_says_it_does_not_define_it(
    books: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "runs.db")
    run_id = _paused(capsys, "refund_agent", store)
    capsys.readouterr()
    edit = ["approve", run_id, "--args", desk.EDIT_TEXT, "--store", store]
    assert main([*edit, "--deps", f"{MODULE}:nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "defines no 'nope'" in err, err


def test_an_edited_call_is_logged_again_as_it_runs_saying_who_edited_it_from_what() -> None:
    @loopwise.tool(effect="write", gate=gates.human())
    def pay(amount: int, note: str = "") -> str:
        """Pay an amount."""
        return f"paid {amount}"

    def decide(request: gates.ApprovalRequest) -> Edited:
        # c1's edit validates (logged as it runs, its default filled in); c2's does not
        # ("70" is no integer, read strictly): logged as typed, and refused when judged.
        amount: Any = 40 if request.approval_id == "c1" else "70"
        return Edited({"amount": amount}, by="ana")

    model = ScriptedModel(
        [
            calls(("pay", {"amount": 50}, "c1"), ("pay", {"amount": 60}, "c2")),
            reply("done"),
        ]
    )
    agent = loopwise.Agent(name="desk", tools=[pay])
    result = loopwise.run(agent, "go", model=model, approvals=decide, store=None)
    assert result.status == loopwise.Status.COMPLETED
    logged = [e.data for e in result.events if e.type == "tool_call"]
    assert logged[2:] == [
        {
            "tool": "pay", "call_id": "c1", "args": {"amount": 40, "note": ""}, "effect": "write",
            "key": "desk:edited_call:c1", "edited_by": "ana", "edited_from": {"amount": 50},
            "edit_of": "desk:tool:1:c1:call",
        },
        {
            "tool": "pay", "call_id": "c2", "args": {"amount": "70"}, "effect": "write",
            "key": "desk:edited_call:c2", "edited_by": "ana", "edited_from": {"amount": 60},
            "edit_of": "desk:tool:1:c2:call",
        },
    ]  # fmt: skip
