"""An edited approval at resume, on an agent's call, a workflow's tool node and a hybrid's
action: only the arguments that run are judged again (a denial of the arguments the edit
replaced does not deny it), an edit is validated strictly when it is made (a boolean or a
text is no number), and the audit log, the progress lines and a hybrid's output show the
call as it ran, with who edited it.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise import Edited, Escalate, Hybrid, SQLiteStore, Status, Workflow, gates
from loopwise.cli.main import main
from loopwise.errors import DecisionError
from loopwise.store.open import open_store
from loopwise.testing import ScriptedModel, call, reply
from tests.support import edit_desk as desk
from tests.tools.test_edits import FIRST, MODULE, TARGETS, _events, _paused, _run, books

__all__ = ["books"]  # the fixture, used by name

PLANNED = {"order_id": "O-1", "amount": 300}


def _approve_edit(run_id: str, target: str, store: str, edit: str = desk.EDIT_TEXT) -> int:
    code = main(["approve", run_id, "--approval", FIRST[target], "--by", "lead",
                 "--args", edit, "--store", store])  # fmt: skip
    if code == 0 and target == "refund_desk":  # the mail's human gate, asked beside it
        assert main(["approve", run_id, "--approval", "execute.s2", "--store", store]) == 0
    return code


def _refunds(books: str) -> list[str]:
    return [t for k, t in desk.effects(books) if k == "refund"]


def _refund_events(run_id: str, store: str, kind: str) -> list[dict[str, Any]]:
    return [d for d in _events(run_id, store, kind) if d["tool"] == "refund"]


@pytest.mark.parametrize("target", TARGETS)
def test_at_resume_the_policy_judges_the_edit_not_the_arguments_it_replaced(
    target: str, store_at: str, books: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    run_id = _paused(capsys, target, store_at)
    assert _approve_edit(run_id, target, store_at) == 0
    # Before the resume the limit falls to 200: the planned 300 is over it, the edited 120 not.
    monkeypatch.setenv("EDIT_DESK_LIMIT", "200")
    _code, done = _run(capsys, "resume", run_id, "--store", store_at)
    assert _refunds(books) == ["O-1:120"], done
    decided = _refund_events(run_id, store_at, "gate_decided")
    assert [(d["decision"], d["by"]) for d in decided] == [("edited", "lead")]  # no denial of 300
    if target != "refund_agent":  # (an agent answers; its run completes either way)
        assert done["status"] == ("awaiting_approval" if target == "refund_desk" else "completed")


@pytest.mark.parametrize("target", TARGETS)
def test_a_policy_denying_the_edit_at_resume_is_named_in_the_log(
    target: str, books: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    store = str(tmp_path / "runs.db")
    run_id = _paused(capsys, target, store)
    assert _approve_edit(run_id, target, store) == 0
    monkeypatch.setenv("EDIT_DESK_LIMIT", "100")  # now the edited 120 is over it too
    _code, done = _run(capsys, "resume", run_id, "--store", store)
    assert _refunds(books) == []
    decided = _refund_events(run_id, store, "gate_decided")
    assert [(d["decision"], d["by"]) for d in decided] == [("edited", "lead")]
    (result,) = _refund_events(run_id, store, "tool_result")
    assert result["status"] == "denied"
    assert result["reason"] == (
        "denied by policy: over the limit of 100 (judging the arguments lead edited)"
    )
    assert result["content"] == (
        "ERROR: the edited arguments were rejected by the policy: over the limit of 100"
    )
    if target != "refund_agent":
        assert done["status"] == "denied"
        assert "over the limit of 100 (judging the arguments lead edited)" in done["detail"]


def _pay_step(arch: str, judged: list[int], world: dict[str, int], paid: list[int]) -> Any:
    def under_the_limit(args: dict[str, Any]) -> Any:
        judged.append(args["v"])
        if args["v"] > world["limit"]:
            return f"over the limit {world['limit']}"
        return Escalate("a person decides every payment")

    @loopwise.tool(effect="irreversible", gate=gates.policy_then_human(under_the_limit))
    def pay(v: int) -> str:
        """Pay v. Use it when told to pay."""
        paid.append(v)
        return f"paid {v}"

    if arch == "agent":
        return loopwise.Agent(name="payer", tools=[pay]), "c1"
    if arch == "workflow":

        @loopwise.step
        def amount(text: str) -> dict[str, Any]:
            return {"v": 5}

        return Workflow("flow").then(amount).then(pay), "flow/pay"
    return Hybrid("desk", actions=[pay]), "execute.s1"


def _pay_model() -> ScriptedModel:
    def respond(request: loopwise.ModelRequest) -> Any:
        if not request.tools:  # the hybrid's planner: one structured call
            plan = [{"id": "s1", "action": "pay", "args": {"v": 5}, "reason": "owed"}]
            return reply(json.dumps({"steps": plan}))
        done = [m for m in request.messages if m["role"] == "tool"]
        return reply(str(done[-1]["content"])) if done else call("pay", {"v": 5}, id="c1")

    return ScriptedModel(respond)


@pytest.mark.parametrize("arch", ["agent", "workflow", "hybrid"])
def test_at_resume_only_the_edited_arguments_are_judged(arch: str) -> None:
    judged: list[int] = []
    paid: list[int] = []
    world = {"limit": 10}
    step, approval = _pay_step(arch, judged, world, paid)
    store = SQLiteStore()
    paused = loopwise.run(step, "pay", model=_pay_model(), store=store)
    assert paused.status == Status.AWAITING_APPROVAL and set(judged) == {5}
    store.decide(paused.run_id, approval, decision="edited", by="lead", edited_args={"v": 3})
    world["limit"] = 4  # the planned 5 is over it now; the edited 3 is not
    judged.clear()
    done = loopwise.resume(paused.run_id, step=step, model=_pay_model(), store=store)
    assert paid == [3], done.detail
    assert judged == [3]  # the 5 it replaced is judged no more


BAD_AMOUNTS = ["true", '"120"', '" 120 "', "120.0"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("amount", BAD_AMOUNTS)
def test_an_edit_giving_a_number_as_a_boolean_or_text_is_refused_when_made(
    target: str, amount: str, tmp_path: Path, books: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "runs.db")
    run_id = _paused(capsys, target, store)
    capsys.readouterr()
    edit = f'{{"order_id": "O-1", "amount": {amount}}}'
    assert main(["approve", run_id, "--approval", FIRST[target], "--by", "lead",
                 "--args", edit, "--store", store]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "the edited arguments were rejected" in err and "amount: Input should be" in err
    with open_store(store) as st:
        assert st.approval(run_id, FIRST[target]).status == "pending"  # nothing decided
        decide = loopwise.approvals.decide
        with pytest.raises(DecisionError) as refused:
            decide(st, run_id, FIRST[target], decision="approved", by="x",
                   edited_args=json.loads(edit), deps=desk.make_deps())  # fmt: skip
        assert refused.value.code == "invalid-args"


@pytest.mark.parametrize("target", TARGETS)
def test_an_in_process_edit_with_a_boolean_for_a_number_never_runs(
    target: str, tmp_path: Path, books: str
) -> None:
    step = loopwise.running.targets.load_target(f"{MODULE}:{target}").step

    def editor(request: loopwise.ApprovalRequest) -> Any:
        if request.tool == "refund":
            return Edited({"order_id": "O-1", "amount": True}, by="ann")
        return loopwise.Approved(by="ann")

    done = loopwise.run(step, "O-1", model=desk.offline_model(), store=tmp_path / "r.db",
                        approvals=editor, deps=desk.make_deps())  # fmt: skip
    assert _refunds(books) == []  # not the 1 that True would be read as
    refused = [e.data for e in done.events if e.type == "tool_result"]
    (result,) = [d for d in refused if d["tool"] == "refund"]
    assert result["status"] == "denied"
    assert (
        "the edited arguments were rejected: invalid arguments for 'refund': amount"
        in (result["content"])
    )


def test_the_inbox_refuses_an_edit_giving_a_number_as_text_with_a_400(
    books: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from loopwise.serve.app import ServeSettings, make_server
    from tests.serve.test_app import Client

    monkeypatch.setenv("LOOPWISE_STORE", str(tmp_path / "runs.db"))
    run_id = _paused(capsys, "refund_agent", str(tmp_path / "runs.db"))
    server, _ = make_server(ServeSettings(port=0, by="lead"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = Client(port=server.server_address[1])
        answer = client.decide(run_id=run_id, approval_id="c1", decision="approve",
                               args='{"order_id": "O-1", "amount": "120"}', by="lead")  # fmt: skip
        assert answer.status == 400, answer.body
        assert "amount: Input should be a valid integer" in answer.body
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
        server.app.store.close()
    with open_store(str(tmp_path / "runs.db")) as st:
        assert st.approval(run_id, "c1").status == "pending"


def _terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)


@pytest.mark.parametrize("target", TARGETS)
def test_the_log_and_the_progress_lines_show_the_edited_call_as_it_ran(
    target: str, store_at: str, books: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    run_id = _paused(capsys, target, store_at)
    assert _approve_edit(run_id, target, store_at) == 0
    _terminal(monkeypatch)
    capsys.readouterr()
    main(["resume", run_id, "--store", store_at])
    progress = [ln for ln in capsys.readouterr().err.splitlines() if ": tool refund " in ln]
    assert [ln.split(": tool ", 1)[1] for ln in progress] == [
        'refund {"order_id": "O-1", "amount": 120} (edited by lead)'
    ]
    logged = _refund_events(run_id, store_at, "tool_call")
    edited = logged[-1]
    assert (edited["args"], edited["edited_by"], edited["edited_from"]) == (
        desk.EDIT, "lead", PLANNED,
    )  # fmt: skip
    if target == "refund_desk":  # asked and edited before it was first logged: logged once
        assert len(logged) == 1 and "edit_of" not in edited
    else:  # logged as the model or the code asked it, then again as it ran
        assert [c["args"] for c in logged] == [PLANNED, desk.EDIT]
        assert "edited_by" not in logged[0] and edited["edit_of"] == logged[0]["key"]
    (decided,) = _refund_events(run_id, store_at, "gate_decided")
    (result,) = _refund_events(run_id, store_at, "tool_result")
    assert decided["args"] == result["ran_with"] == edited["args"] == desk.EDIT
    capsys.readouterr()
    assert main(["runs", "show", run_id, "--store", store_at]) in (0, 1)
    shown = capsys.readouterr().out
    assert 'refund({"order_id": "O-1", "amount": 120}) edited by lead' in shown


def test_a_hybrids_output_shows_the_plan_as_it_ran_and_as_proposed(
    books: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "runs.db")
    run_id = _paused(capsys, "refund_desk", store)
    assert _approve_edit(run_id, "refund_desk", store) == 0
    _run(capsys, "resume", run_id, "--store", store)
    body = json.dumps({"order_id": "O-1", "body": "we refunded 120"})
    assert main(["approve", run_id, "--approval", "execute.s2.recheck", "--by", "ann",
                 "--args", body, "--store", store]) == 0  # fmt: skip
    _run(capsys, "resume", run_id, "--store", store)  # s3 is asked again now
    assert main(["approve", run_id, "--approval", "execute.s3.recheck", "--store", store]) == 0
    code, done = _run(capsys, "resume", run_id, "--store", store)
    assert code == 0, done
    output = done["output"]
    ran = {s["id"]: s["args"] for s in output["plan"]["steps"]}
    proposed = {s["id"]: s["args"] for s in output["proposed"]["steps"]}
    assert ran["s1"] == desk.EDIT and proposed["s1"] == PLANNED
    assert ran["s2"] == json.loads(body) and proposed["s2"]["body"] == "we refunded 300"
    assert ran["s3"] == proposed["s3"]  # approved as it was
    results = output["results"]
    assert (results["s1"]["edited_by"], results["s1"]["ran_with"]) == ("lead", desk.EDIT)
    assert (results["s2"]["edited_by"], results["s3"]["edited_by"]) == ("ann", None)


def test_a_hybrid_run_without_edits_has_no_proposed_plan(tmp_path: Path, books: str) -> None:
    step = loopwise.running.targets.load_target(f"{MODULE}:refund_desk").step
    done = loopwise.run(step, "O-1", model=desk.offline_model(), store=tmp_path / "r.db",
                        approvals=lambda r: loopwise.Approved(by="ann"),
                        deps=desk.make_deps())  # fmt: skip
    assert done.status == Status.COMPLETED
    assert done.output.proposed is None
    assert done.output.plan.steps[0].args.model_dump() == PLANNED


def test_the_inbox_draws_an_edited_call_once(
    books: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from loopwise.serve.app import ServeSettings, make_server
    from tests.serve.test_app import Client

    store = str(tmp_path / "runs.db")
    monkeypatch.setenv("LOOPWISE_STORE", store)
    run_id = _paused(capsys, "refund_agent", store)
    assert _approve_edit(run_id, "refund_agent", store) == 0
    _code, done = _run(capsys, "resume", run_id, "--store", store)
    assert _refunds(books) == ["O-1:120"], done
    server, _ = make_server(ServeSettings(port=0, by="lead"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        page = Client(port=server.server_address[1]).get(f"/runs/{run_id}").body
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
        server.app.store.close()
    assert ">refund<" in page and "×2" not in page  # one call, logged as asked and as it ran


def test_an_edited_call_is_one_span_with_the_arguments_it_ran_with() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from loopwise.integrations.otel import OTelSink

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    paid: list[int] = []
    step, _ = _pay_step("agent", [], {"limit": 10}, paid)
    loopwise.run(step, "pay", model=_pay_model(), store=None,
                 approvals=lambda r: Edited({"v": 3}, by="lead"),
                 sinks=(OTelSink(provider, capture_content=True),))  # fmt: skip
    assert paid == [3]
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "execute_tool pay"]
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.tool.call.arguments"] == '{"v": 3}'
    assert attributes["loopwise.tool.edited_by"] == "lead"


def test_a_step_edited_with_the_plan_and_asked_again_is_recorded_as_edited(
    tmp_path: Path, books: str
) -> None:
    step = loopwise.running.targets.load_target(f"{MODULE}:refund_desk").step
    mail = {"order_id": "O-1", "body": "we refund 120"}

    def editor(request: loopwise.ApprovalRequest) -> Any:
        if request.approval_id == "execute.s1":
            return Edited(dict(desk.EDIT), by="ann")
        if request.approval_id == "execute.s2":  # edited beside the refund, asked again after
            return Edited(dict(mail), by="ann")
        return loopwise.Approved(by="bo")

    done = loopwise.run(step, "O-1", model=desk.offline_model(), store=tmp_path / "r.db",
                        approvals=editor, deps=desk.make_deps())  # fmt: skip
    assert done.status == Status.COMPLETED, done.detail
    assert ("mail", "we refund 120") in desk.effects(books)
    s2 = done.output.results["s2"]
    assert (s2.edited_by, s2.ran_with) == ("ann", mail)
    assert done.output.plan.steps[1].args.model_dump() == mail
    (logged,) = [e.data for e in done.events if e.type == "tool_call" and e.data["tool"] == "mail"]
    assert (logged["args"], logged["edited_by"]) == (mail, "ann")
    assert logged["edited_from"]["body"] == "we refunded 300"
