"""The inbox and the CLI say what is true (issue 45), on SQLite and PostgreSQL: a plan
step a person edited shows the arguments it ran with beside the planner's proposal, and
the approvals table says what the edit changed and who changed it; ``serve --resume``
continues every decided run of its store, wherever it was decided, once even beside a
worker; a decision is recorded even when the run's target cannot be loaded, the page
says why, and ``loopwise resume`` finishes the run once the target is fixed.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise.cli.main import main
from loopwise.running.targets import load_target, model_for
from loopwise.running.worker import awork
from loopwise.store.open import open_store
from loopwise.testing import ScriptedModel, call, reply
from tests.serve.test_app import COMPLAINT, DESK, serve
from tests.serve.test_app_load import PAYER, _forget_loaded

__all__ = ["serve"]  # the fixture, used by name (after `store_at`: the server stops first)

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
    store_at: str, serve: Any, capsys: pytest.CaptureFixture[str]
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


# `loopwise serve --resume` continues every decided run of its store, as a worker does,
# and a decision is never lost to a target that cannot be loaded now.


def _paused_payers(tmp_path: Path, store: str, count: int = 1) -> list[str]:
    path = tmp_path / "payer.py"
    path.write_text(PAYER)
    spec = f"{path}:payer"
    target = load_target(spec)
    model = model_for(target, "scripted")
    ids = []
    for _ in range(count):
        paused = loopwise.run(target.step, "pay", model=model, spec=spec, store=store)
        assert paused.status == "awaiting_approval", paused
        ids.append(paused.run_id)
    _forget_loaded()  # the server loads the target itself, as `serve` in its own process
    return ids


def _ledger(tmp_path: Path) -> list[str]:
    ledger = tmp_path / "ledger.txt"
    return ledger.read_text().split() if ledger.exists() else []


def _run(store: str, run_id: str) -> Any:
    with open_store(store) as st:
        return st.get_run(run_id), st.approvals(run_id), st.events(run_id)


@pytest.mark.parametrize("where", ["cli", "python", "another inbox"])
def test_serve_resume_continues_a_run_decided_anywhere(
    where: str, store_at: str, serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (run_id,) = _paused_payers(tmp_path, store_at)
    app, _ = serve(store=store_at, resume=True)
    if where == "cli":
        assert main(["approve", run_id, "--by", "ann", "--store", store_at]) == 0
        said = capsys.readouterr().out
        assert "`loopwise serve --resume`) on this store continues it" in said
    elif where == "python":
        loopwise.approve(run_id, by="ann", store=store_at)
    else:
        _, other = serve(store=store_at, by="ann")  # records decisions only
        with open_store(store_at) as st:
            seen = st.approvals(run_id)[0].args_hash
        answer = other.decide(run_id=run_id, approval_id="c1", decision="approve", args_hash=seen)
        assert answer.status == 303, answer.body
        assert (
            "a `loopwise worker` on this store continues it"
            in other.get(answer.headers["location"]).body
        )
    assert app.wait_for_resumes(timeout=120)
    run, _, events = _run(store_at, run_id)
    assert run.status == "completed", run.detail
    assert _ledger(tmp_path) == ["5"]
    assert [e.type.value for e in events].count("run_resumed") == 1


def test_a_run_is_resumed_once_when_a_worker_and_serve_resume_both_watch(
    store_at: str, serve: Any, tmp_path: Path
) -> None:
    run_ids = _paused_payers(tmp_path, store_at, 8)
    app, _ = serve(store=store_at, resume=True)
    stop: list[Any] = []
    worker_store = open_store(store_at)

    async def work() -> None:
        stop.append((asyncio.get_running_loop(), asyncio.Event()))
        await awork(worker_store, concurrency=4, poll_seconds=0.05, stop=stop[0][1])

    worker = threading.Thread(target=asyncio.run, args=(work(),))
    worker.start()
    try:
        for run_id in run_ids:
            loopwise.approve(run_id, by="ann", store=store_at)
        assert app.wait_for_resumes(timeout=120)
        for _ in range(1200):  # what the worker took it finishes on its own time
            with open_store(store_at) as st:
                if all(st.get_run(r).status == "completed" for r in run_ids):
                    break
            threading.Event().wait(0.1)
    finally:
        while not stop:
            threading.Event().wait(0.01)
        loop, event = stop[0]
        loop.call_soon_threadsafe(event.set)
        worker.join()
        worker_store.close()
    assert _ledger(tmp_path) == ["5"] * 8
    for run_id in run_ids:
        run, _, events = _run(store_at, run_id)
        assert run.status == "completed"
        assert [e.type.value for e in events].count("run_resumed") == 1


BREAKS = {
    "raises at import": lambda path: path.write_text(PAYER + "\nraise RuntimeError('boom')\n"),
    "syntax error": lambda path: path.write_text(PAYER + "\ndef broken(:\n"),
    "sys.exit() at import": lambda path: path.write_text(
        PAYER + "\nimport sys\nsys.exit('not today')\n"
    ),
    "deleted": lambda path: path.unlink(),
}
WHY = {
    "raises at import": "RuntimeError while loading: boom",
    "syntax error": "SyntaxError while loading",
    "sys.exit() at import": "SystemExit while loading: not today",
    "deleted": "no such file",
}


@pytest.mark.parametrize("broken", list(BREAKS))
def test_a_decision_is_kept_when_the_target_cannot_be_loaded_and_finishes_once(
    broken: str, store_at: str, serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (run_id,) = _paused_payers(tmp_path, store_at)
    BREAKS[broken](tmp_path / "payer.py")
    app, client = serve(store=store_at, resume=True, by="ann")
    with open_store(store_at) as st:
        seen = st.approvals(run_id)[0].args_hash
    answer = client.decide(run_id=run_id, approval_id="c1", decision="approve", args_hash=seen)
    assert answer.status == 303, answer.body
    assert app.wait_for_resumes(timeout=120)
    run, (decided,), _ = _run(store_at, run_id)
    assert (decided.status, decided.decided_by) == ("approved", "ann")  # recorded
    assert run.status == "error" and WHY[broken] in (run.detail or "")
    notice = client.get(answer.headers["location"])
    assert notice.status == 200 and "The run could not be resumed: " in notice.body
    page = client.get(f"/runs/{run_id}")
    assert page.status == 200
    line = html.unescape(page.body.split("<p class='detail error' role='alert'>")[1])
    assert line.startswith("The run could not be resumed: ") and WHY[broken] in line
    assert f"run: loopwise resume {run_id}" in line
    assert _ledger(tmp_path) == []
    # Fixed, the run is finished once by `loopwise resume`; the server leaves it be.
    (tmp_path / "payer.py").write_text(PAYER)
    capsys.readouterr()
    assert main(["resume", run_id, "--store", store_at]) == 0
    assert app.wait_for_resumes(timeout=120)
    assert main(["resume", run_id, "--store", store_at]) == 0  # done already: nothing again
    assert _ledger(tmp_path) == ["5"]
    run, _, events = _run(store_at, run_id)
    assert run.status == "completed"
    assert [e.type.value for e in events].count("tool_result") == 1


# Deeply nested or hostile edits: refused with the reason, the approval stays decidable.


def _nested(levels: int, kind: str) -> str:
    if kind == "arrays":
        return '{"amount": ' + "[" * (levels - 1) + "]" * (levels - 1) + "}"
    return '{"a": ' * levels + "5" + "}" * levels


TOO_DEEP = "nest objects and arrays deeper than 32 levels; nothing was decided"
HOSTILE = {
    **{f"{kind} {n} deep": (_nested(n, kind), TOO_DEEP) for kind in ("arrays", "objects")
       for n in (33, 40, 300, 900)},
    "1,000 deep": ("[" * 1000 + "]" * 1000, "not valid JSON"),
    "a 5,000-digit number": ('{"amount": ' + "9" * 5000 + "}", "not valid JSON"),
    "NaN": ('{"amount": NaN}', "not valid JSON"),
    "a list": ("[5]", "must be a JSON object"),
}  # fmt: skip


def test_a_deep_or_hostile_edit_gets_a_400_naming_it_and_the_approval_stays_decidable(
    store_at: str, serve: Any, tmp_path: Path
) -> None:
    (run_id,) = _paused_payers(tmp_path, store_at)
    app, client = serve(store=store_at, resume=True, by="ann")
    with open_store(store_at) as st:
        seen = st.approvals(run_id)[0].args_hash
    form = {"run_id": run_id, "approval_id": "c1", "decision": "approve", "args_hash": seen}
    for name, (edit, why) in HOSTILE.items():
        answer = client.decide(**form, args=edit)
        assert answer.status == 400, (name, answer.body[:300])
        assert why in html.unescape(answer.body), name
    wide = json.dumps({"amount": 3, **{f"k{i}": i for i in range(9000)}})
    answer = client.decide(**form, args=wide)  # each of 9,000 fields refused: said briefly
    assert answer.status == 400 and "k0: unknown argument" in html.unescape(answer.body)
    assert len(answer.body) < 50_000
    _, (asked,), _ = _run(store_at, run_id)
    assert asked.status == "pending"
    assert client.get("/").status == 200  # every request was answered, none killed
    assert client.decide(**form, args='{"amount": 3}').status == 303
    assert app.wait_for_resumes(timeout=120)
    assert _ledger(tmp_path) == ["3"]


def test_a_deep_edit_is_refused_by_the_cli_and_in_python_with_the_reason(
    store_at: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (run_id,) = _paused_payers(tmp_path, store_at)
    capsys.readouterr()
    approve = ["approve", run_id, "--approval", "c1", "--store", store_at, "--args"]
    assert main([*approve, _nested(40, "objects")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and TOO_DEEP in err
    deep: Any = 5
    for _ in range(5000):
        deep = {"a": deep}
    for edit in ({"amount": deep}, {"amount": 10**5000}, {"amount": float("nan")}):
        with pytest.raises(loopwise.DecisionError) as refused:
            loopwise.approve(run_id, args=edit, store=store_at)
        assert refused.value.code == "invalid-args"
        assert "nothing was decided" in str(refused.value)
    _, (asked,), _ = _run(store_at, run_id)
    assert asked.status == "pending"
    assert main([*approve, '{"amount": 4}']) == 0


# loopwise.approve(run, args=...) in a script whose agent is defined in its `__main__`.

SCRIPT = '''\
import json, sys
import loopwise
from loopwise.testing import ScriptedModel, call, reply

paid = []


@loopwise.tool(effect="irreversible", gate=loopwise.gates.human())
def pay(amount: int) -> str:
    """Pay an amount. Use it when told to pay."""
    paid.append(amount)
    return f"paid {amount}"


def respond(request):
    done = [m for m in request.messages if m["role"] == "tool"]
    return reply(str(done[-1]["content"])) if done else call("pay", {"amount": 500}, id="c1")


payer = loopwise.Agent(name="payer", tools=[pay])
store, how = sys.argv[1], sys.argv[2]
paused = loopwise.run(payer, "pay", model=ScriptedModel(respond), store=store)
given = {"step": payer} if how == "step" else {}
try:
    loopwise.approve(paused.run_id, args={"amount": 40}, by="ann", store=store, **given)
except loopwise.DecisionError as e:
    print(json.dumps({"refused": str(e), "code": e.code}))
    sys.exit(0)
done = loopwise.resume(paused.run_id, step=payer, model=ScriptedModel(respond), store=store)
print(json.dumps({"status": str(done.status), "paid": paid}))
'''


@pytest.mark.parametrize("how", ["found in __main__", "step"])
def test_an_in_process_edit_works_when_the_agent_is_defined_in_the_script(
    how: str, store_at: str, tmp_path: Path
) -> None:
    import os
    import subprocess

    script = tmp_path / "pay_script.py"
    script.write_text(SCRIPT)
    src = str(Path(loopwise.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": src}
    ran = subprocess.run(
        [sys.executable, str(script), store_at, how],
        check=False, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout.splitlines()[-1]) == {"status": "completed", "paid": [40]}


def test_an_edit_checked_against_a_step_of_another_name_is_refused(tmp_path: Path) -> None:
    (run_id,) = _paused_payers(tmp_path, str(tmp_path / "r.db"))
    other = loopwise.Agent(name="someone_else", tools=[])
    with pytest.raises(loopwise.DecisionError, match="is of step 'payer'") as refused:
        loopwise.approve(run_id, args={"amount": 4}, store=tmp_path / "r.db", step=other)
    assert refused.value.code == "no-target"


def test_serve_resume_leaves_queued_runs_to_workers(
    store_at: str, serve: Any, tmp_path: Path
) -> None:
    (run_id,) = _paused_payers(tmp_path, store_at)
    queued = loopwise.enqueue(f"{tmp_path / 'payer.py'}:payer", "pay", model="scripted",
                              store=store_at)  # fmt: skip
    loopwise.approve(run_id, by="ann", store=store_at)
    app, _ = serve(store=store_at, resume=True)
    assert app.wait_for_resumes(timeout=120)
    with open_store(store_at) as st:
        assert (st.get_run(run_id).status, st.get_run(queued).status) == ("completed", "queued")


def test_a_run_without_a_spec_is_not_said_to_be_resumed_by_the_inbox(
    store_at: str, serve: Any
) -> None:
    @loopwise.tool(effect="irreversible", gate=loopwise.gates.human())
    def pay(amount: int) -> str:
        """Pay an amount."""
        return "paid"

    def respond(request: loopwise.ModelRequest) -> Any:
        done = any(m["role"] == "tool" for m in request.messages)
        return reply("ok") if done else call("pay", {"amount": 5}, id="c1")

    made_here = loopwise.Agent(name="made_here", tools=[pay])  # in a function: no spec
    paused = loopwise.run(made_here, "go", model=ScriptedModel(respond), store=store_at)
    app, client = serve(store=store_at, resume=True, by="ann")
    with open_store(store_at) as st:
        assert st.get_run(paused.run_id).spec is None
        seen = st.approvals(paused.run_id)[0].args_hash
    form = {"run_id": paused.run_id, "approval_id": "c1", "args_hash": seen}
    answer = client.decide(**form, decision="approve")
    assert app.wait_for_resumes(timeout=120)
    how = f"loopwise.resume({paused.run_id!r}, step=YOUR_STEP)"
    notice = html.unescape(client.get(answer.headers["location"]).body)
    assert how in notice and "resuming" not in notice
    page = html.unescape(client.get(f"/runs/{paused.run_id}").body)
    assert how in page and "this inbox is resuming" not in page
    done = loopwise.resume(paused.run_id, step=made_here, model=ScriptedModel(respond),
                           store=store_at)  # fmt: skip
    assert done.status == "completed"
