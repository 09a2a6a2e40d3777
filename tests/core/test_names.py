"""Text a person or a model gives cannot rewrite what the next person reads (issue 27).

Who decides (``approve``/``deny --by``, the inbox's name field or proxy header,
``loopwise.approve(by=)``) is refused with a control character, line separator or
bidirectional control in it, and nothing is recorded; ``/`` is fine (``team/lead``).
A reason is free text: it is kept as given, and wherever the CLI prints it (``runs show``,
``pending``, ``resume``) or the inbox shows it, an ESC, CR, LF or bidi override is shown
as an escape; ``--json`` has it exactly.
"""

from __future__ import annotations

import html
import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

import loopwise
from loopwise import gates
from loopwise.cli.main import main
from loopwise.errors import AnswerError, ConfigError, DecisionError
from loopwise.serve.app import ServeSettings, make_server
from loopwise.store.open import open_store
from loopwise.testing import ScriptedModel, call, reply
from tests.serve.test_app import Client
from tests.support import ROOT

DESK = f"{ROOT / 'workflows' / 'refund_desk.py'}:refund_desk"
COMPLAINT = '"Order O-1003 arrived broken and I want my money back."'
HOSTILE_NAME = "le\x1bad\nevil"
HOSTILE_REASON = "no\x1b[31m...\rX\u202eabc\nline2 é 中文 🙂"
SHOWN_REASON = "no\\x1b[31m...\\rX\\u202eabc\\nline2 é 中文 🙂"
RAW = ("\x1b", "\r", "\u202e")


@pytest.fixture
def serve() -> Iterator[Any]:
    """``serve(**settings)``: a running inbox over the test's store, and its client."""
    started: list[Any] = []

    def start(**settings: Any) -> Client:
        server, _ = make_server(ServeSettings(port=0, **settings))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return Client(port=server.server_address[1])

    yield start
    for server in started:
        server.shutdown()
        server.server_close()
        server.app.store.close()


def _paused(capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    code = main(["run", DESK, "--model", "scripted", "--input", COMPLAINT, "--json"])
    paused = json.loads(capsys.readouterr().out)
    assert code == 1 and paused["status"] == "awaiting_approval", paused
    return str(paused["run_id"])


def _statuses(run_id: str) -> dict[str, tuple[str, str | None]]:
    with open_store(None) as st:
        return {a.approval_id: (a.status, a.decided_by) for a in st.approvals(run_id)}


UNDECIDED = {"execute.s1": ("pending", None), "execute.s2": ("pending", None)}


@pytest.mark.parametrize(
    "by",
    [HOSTILE_NAME, "ann\u202eevil", "a\u2028b", "bell\x07", "x\x9b",
     # Names that show nobody: spaces, a zero-width space, tag characters; and too long.
     " ", "\u00a0\u3000", "\u200b", "\U000e0041\U000e0042\u00ad", "a" * 201],
)  # fmt: skip
def test_the_cli_refuses_a_decider_name_with_control_characters(
    capsys: pytest.CaptureFixture[str], by: str
) -> None:
    run_id = _paused(capsys)
    with open_store(None) as st:
        logged = len(st.events(run_id))
    for verb in (["deny", "--reason", "no"], ["approve"]):
        argv = [verb[0], run_id, "--approval", "execute.s2", "--by", by, *verb[1:]]
        assert main(argv) == 2
        _, err = capsys.readouterr()
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert "the decider's name" in err and "nothing was decided" in err
        assert not any(c in err for c in (*RAW, "\x07", "\x9b", "\u2028", "\x1b"))
    assert _statuses(run_id) == UNDECIDED
    with open_store(None) as st:
        assert len(st.events(run_id)) == logged


def test_a_decider_name_may_hold_a_slash_and_any_printable_unicode(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_id = _paused(capsys)
    deny = ["deny", run_id, "--approval", "execute.s2", "--reason", "no"]
    assert main([*deny, "--by", "team/lead"]) == 0
    assert main(["approve", run_id, "--approval", "execute.s1", "--by", "José 中文 🙂"]) == 0
    assert _statuses(run_id) == {
        "execute.s1": ("approved", "José 中文 🙂"),
        "execute.s2": ("denied", "team/lead"),
    }


def test_spaces_around_a_decider_name_are_no_part_of_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_id = _paused(capsys)
    assert main(["approve", run_id, "--approval", "execute.s1", "--by", "  ann  "]) == 0
    loopwise.deny(run_id, approval="execute.s2", reason="no", by="\tbo\u200db ")
    assert _statuses(run_id) == {
        "execute.s1": ("approved", "ann"),
        "execute.s2": ("denied", "bo\u200db"),  # a joiner inside a name is fine
    }


def test_in_process_decisions_refuse_such_a_name_with_a_typed_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_id = _paused(capsys)
    with pytest.raises(DecisionError) as refused:
        loopwise.approve(run_id, approval="execute.s1", by=HOSTILE_NAME)
    assert (refused.value.name, refused.value.code) == ("by", "bad-name")
    with pytest.raises(DecisionError, match="decider's name") as refused:
        loopwise.deny(run_id, approval="execute.s2", reason="no", by="x\ry")
    assert refused.value.name == "by"
    with open_store(None) as st, pytest.raises(DecisionError) as refused:
        loopwise.approvals.decide(st, run_id, "execute.s1", decision="approved", by="a\x1b")
    assert refused.value.code == "bad-name"
    assert _statuses(run_id) == UNDECIDED
    loopwise.approve(run_id, approval="execute.s1", by="team/lead")
    assert _statuses(run_id)["execute.s1"] == ("approved", "team/lead")


def test_a_reason_is_kept_as_given_and_printed_escaped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_id = _paused(capsys)
    argv = ["--by", "team/lead", "--reason", HOSTILE_REASON]
    assert main(["deny", run_id, "--approval", "execute.s2", *argv]) == 0
    capsys.readouterr()
    assert main(["pending", run_id]) == 0
    listed = capsys.readouterr().out
    assert f"execute.s2 email_customer was denied by team/lead: {SHOWN_REASON}" in listed
    assert main(["deny", run_id, "--approval", "execute.s1", *argv]) == 0
    capsys.readouterr()
    assert main(["resume", run_id]) == 1
    resumed = capsys.readouterr().out
    assert f"was denied: denied by team/lead: {SHOWN_REASON}" in resumed.splitlines()[0]
    assert main(["runs", "show", run_id]) == 0
    shown = capsys.readouterr().out
    assert f"[execute.s1] denied by team/lead: {SHOWN_REASON}" in shown
    for printed in (listed, resumed, shown):
        assert not any(c in printed for c in RAW), printed
    assert main(["runs", "show", run_id, "--json"]) == 0
    log = json.loads(capsys.readouterr().out)  # --json: exactly what was said
    decided = [e["data"] for e in log["events"] if e["type"] == "gate_decided"]
    assert [d["reason"] for d in decided if d["by"] == "team/lead"] == [HOSTILE_REASON] * 2
    with open_store(None) as st:
        assert {a.decision_reason for a in st.approvals(run_id)} == {HOSTILE_REASON}


def test_the_inbox_refuses_such_a_name_with_400_and_records_nothing(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused(capsys)
    client = serve(by="lead")
    form = {"run_id": run_id, "approval_id": "execute.s2", "decision": "deny", "reason": "no"}
    refused = client.decide(**form, by=HOSTILE_NAME)
    assert refused.status == 400 and "the decider&#x27;s name" in refused.body
    assert "\x1b" not in refused.body
    assert client.decide(**form, by="ann\u202e").status == 400
    assert _statuses(run_id) == UNDECIDED
    assert client.decide(**form, by="team/lead").status == 303
    assert _statuses(run_id)["execute.s2"] == ("denied", "team/lead")


def test_the_proxy_users_header_is_checked_too(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused(capsys)
    client = serve(trust_proxy_user="X-Forwarded-User")

    def post(user: str, approval: str) -> Any:
        with open_store(None) as st:
            found = st.approval(run_id, approval)
        assert found is not None
        form = {"run_id": run_id, "approval_id": approval, "decision": "deny", "reason": "no",
                "args_hash": found.args_hash, "csrf": client.token()}  # fmt: skip
        return client.request("POST", "/decide", urlencode(form), X_Forwarded_User=user)

    refused = post("dana\x1b[2J", "execute.s2")
    assert refused.status == 400 and "X-Forwarded-User header" in refused.body
    assert _statuses(run_id) == UNDECIDED
    # A proxy sends a name as UTF-8: read so, its bytes are no control characters.
    assert post("Zoë €".encode().decode("latin-1"), "execute.s2").status == 303
    assert _statuses(run_id)["execute.s2"] == ("denied", "Zoë €")


def test_serve_by_with_control_characters_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(ConfigError) as refused:
        make_server(ServeSettings(port=0, by="lead\x1b"))
    assert refused.value.code == "bad-name"
    capsys.readouterr()
    assert main(["serve", "--port", "0", "--by", HOSTILE_NAME]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "--by" in err and "\x1b" not in err


def test_the_inbox_shows_a_bidi_override_in_a_reason_as_an_escape(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused(capsys)
    deny = ["deny", run_id, "--approval", "execute.s2", "--by", "lead"]
    assert main([*deny, "--reason", HOSTILE_REASON]) == 0
    client = serve()
    for page in (client.get("/").body, client.get(f"/runs/{run_id}").body):
        assert "\u202e" not in page and "\x1b" not in page
        # Line breaks stay (a textarea sends CR LF; HTML reads CR as one).
        assert "no\\x1b[31m...\rX\\u202eabc\nline2 é 中文 🙂" in page


def test_the_terminal_prompt_shows_escape_sequences_escaped() -> None:
    def ask(args: dict[str, Any]) -> Any:
        return gates.Escalate(f"mail to {args['to']}\x1b[2J\rall clear: approve")

    @loopwise.tool(effect="irreversible", gate=gates.policy_then_human(ask))
    def send(to: str) -> str:
        """Send a mail."""
        return "sent"

    model = ScriptedModel([call("send", {"to": "ann"}, id="c1"), reply("done")])
    out = io.StringIO()
    handler = gates.TerminalApprovals(stdin=io.StringIO(""), stdout=out, by="ann")
    agent = loopwise.Agent(name="mailer", tools=[send])
    paused = loopwise.run(agent, "go", model=model, approvals=handler)
    assert paused.status == "awaiting_approval"
    prompt = out.getvalue()
    assert "needs approval: mail to ann\\x1b[2J\\rall clear: approve" in prompt
    assert "\x1b" not in prompt and "\r" not in prompt


def test_one_rule_says_what_a_terminal_prints_as_it_is() -> None:
    from loopwise.core.names import name_problem, printable, shown_name_problem

    assert shown_name_problem("team/lead") is None and name_problem("team/lead") is not None
    assert shown_name_problem("Zoë 中文 👩\u200d💻") is None
    assert "'\\x1b' at position 2" in str(shown_name_problem(HOSTILE_NAME))
    assert shown_name_problem("") == "must be non-empty"
    assert printable(HOSTILE_REASON) == SHOWN_REASON
    assert printable("\u2028\u2029\u200f\x00\x7f\ud800") == "\\u2028\\u2029\\u200f\\x00\\x7f\\ud800"
    assert printable("a\tb\nc", keep="\n") == "a\\tb\nc"


def test_a_label_pick_refused_in_the_inbox_says_what_to_do_on_the_page(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.architectures.test_cascade import _model, _person_flow

    paused = loopwise.run(_person_flow(), "It is broken, or is it?", model=_model())
    (asked,) = paused.pending
    assert "--args" in asked["note"] and "Edit arguments" in asked["note"]
    client = serve(by="lead")
    form = {"run_id": paused.run_id, "approval_id": asked["approval_id"], "decision": "approve"}
    refused = client.decide(**form, args='{"kind": "billing"}')
    assert refused.status == 400 and "&#x27;billing&#x27; is not one of" in refused.body
    error = refused.body.split("class='error' role='alert'>", 1)[1].split("</p>", 1)[0]
    assert "--args" not in error and "Edit arguments" in error and "Approve edited" in error
    assert main(["approve", paused.run_id, "--args", '{"kind": "billing"}']) == 2
    err = capsys.readouterr().err  # the CLI's message is the CLI's
    assert "'billing' is not one of" in err and "(answer with --args, a JSON object" in err
    with pytest.raises(AnswerError) as e:
        loopwise.approve(paused.run_id, args={"kind": "spam"})
    assert e.value.code == "invalid-args" and e.value.schema["required"] == ["kind"]
    with open_store(None) as st:
        assert [a.status for a in st.approvals(paused.run_id)] == ["pending"]


def test_a_terminal_edit_the_schema_refuses_asks_again_instead_of_denying() -> None:
    paid: list[int] = []

    @loopwise.tool(effect="irreversible", gate=gates.human())
    def pay(amount: int) -> str:
        """Pay an amount."""
        paid.append(amount)
        return "paid"

    model = ScriptedModel([call("pay", {"amount": 500}, id="c1"), reply("done")])
    typed = 'e\n{"amount": "lots"}\ne\n{"amount": "7"}\ne\n{"amount": 7}\n'
    out = io.StringIO()
    handler = gates.TerminalApprovals(stdin=io.StringIO(typed), stdout=out, by="ann")
    done = loopwise.run(loopwise.Agent(name="payer", tools=[pay]), "go", model=model,
                        approvals=handler)  # fmt: skip
    assert done.status == "completed" and paid == [7]
    said = out.getvalue()
    assert said.count("the edited arguments were rejected") == 2 and "try again" in said
    # It says why, in the executor's words, naming the field and what was typed.
    assert "rejected: invalid arguments for 'pay': amount: Input should be a valid integer" in said
    assert "(got 'lots'); try again" in said
    assert said.count("approve? [y]es / [n]o / [e]dit: ") == 3


def test_a_streamed_answer_shows_escape_sequences_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The model's text may carry what a web page or a tool result put in it.
    module = tmp_path / "talker.py"
    module.write_text(
        "import loopwise\n"
        "from loopwise.testing import ScriptedModel, reply\n"
        "talker = loopwise.Agent(name='talker')\n"
        "offline_model = ScriptedModel([reply('one\\ttab\\ntwo \\x1b[2J\\rthree \\u202eevil')])\n"
    )
    assert main(["run", f"{module}:talker", "--input-text", "hi", "--model", "scripted",
                 "--stream"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "one\ttab\ntwo \\x1b[2J\\rthree \\u202eevil\n" in out
    assert "\x1b" not in out and "\r" not in out and "\u202e" not in out


HOSTILE_ARG = "A\x1b[2J\u202eC\u2028D"
SHOWN_ARG = "A\\x1b[2J\\u202eC\\u2028D"


def test_the_inbox_shows_a_tool_calls_arguments_escaped_and_decides_on_them_exactly(
    serve: Any,
) -> None:
    sent: list[str] = []

    @loopwise.tool(effect="irreversible", gate=gates.human())
    def refund(order: str) -> str:
        """Refund an order."""
        sent.append(order)
        return "refunded"

    model = ScriptedModel([call("refund", {"order": HOSTILE_ARG}, id="c1"), reply("done")])
    paused = loopwise.run(loopwise.Agent(name="desk", tools=[refund]), "go", model=model)
    (asked,) = paused.pending
    client = serve(by="lead")
    inbox = client.get("/").body
    run = client.get(f"/runs/{paused.run_id}").body
    for page in (inbox, run):
        assert not any(ch in page for ch in ("\x1b", "\u202e", "\u2028")), page
    arguments = inbox.split("<h3>Arguments</h3>", 1)[1].split("</dl>", 1)[0]
    assert SHOWN_ARG in arguments
    # The edit box shows JSON escapes, which read back as exactly the arguments.
    box = inbox.split("name='args' rows='6'>", 1)[1].split("</textarea>", 1)[0]
    assert "\\u001b[2J\\u202eC\\u2028D" in box
    assert json.loads(html.unescape(box)) == {"order": HOSTILE_ARG}
    form = {"run_id": paused.run_id, "approval_id": asked["approval_id"], "decision": "approve"}
    assert client.decide(**form, args=html.unescape(box)).status == 303
    with open_store(None) as st:
        (decided,) = st.approvals(paused.run_id)
    assert decided.status == "approved" and decided.args == {"order": HOSTILE_ARG}


def test_the_run_pages_plan_table_shows_arguments_escaped() -> None:
    from loopwise.running.approvals import PlanItem
    from loopwise.serve.pages import _plan_table

    item = PlanItem(id="s1", action="refund", args={"order": HOSTILE_ARG}, depends_on=(),
                    reason="asked", effect="irreversible", state="pending")  # fmt: skip
    table = _plan_table([item])
    assert SHOWN_ARG in table and not any(ch in table for ch in ("\x1b", "\u202e", "\u2028"))


def test_a_proxy_users_header_that_is_not_utf8_is_refused_not_read_as_latin1(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused(capsys)
    client = serve(trust_proxy_user="X-Forwarded-User")

    def post(user: str) -> Any:
        with open_store(None) as st:
            found = st.approval(run_id, "execute.s2")
        assert found is not None
        form = {"run_id": run_id, "approval_id": "execute.s2", "decision": "deny", "reason": "no",
                "args_hash": found.args_hash, "csrf": client.token()}  # fmt: skip
        return client.request("POST", "/decide", urlencode(form), X_Forwarded_User=user)

    # http.client sends a header's text as Latin-1: these are the bytes 0xff 0xfe.
    refused = post("\xff\xfe")
    assert refused.status == 400 and "is not UTF-8" in refused.body
    assert "ÿþ" not in refused.body
    page = client.request("GET", "/", X_Forwarded_User="\xff\xfe").body
    assert "header is not UTF-8: decisions are refused" in page and "ÿþ" not in page
    too_long = post("z" * 201)
    assert too_long.status == 400
    assert "is 201 characters long; a name holds at most 200" in too_long.body
    assert _statuses(run_id) == UNDECIDED
    assert post("z" * 200).status == 303
    assert _statuses(run_id)["execute.s2"] == ("denied", "z" * 200)


def test_the_inbox_refuses_a_name_over_200_characters_instead_of_cutting_it(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused(capsys)
    client = serve()
    form = {"run_id": run_id, "approval_id": "execute.s2", "decision": "deny", "reason": "no"}
    # Cut at 200 characters, the emoji's ZWJ sequence would end in half of it.
    typed = "x" * 199 + "👩\u200d💻"
    refused = client.decide(**form, by=typed)
    assert refused.status == 400
    assert "is 202 characters long; a name holds at most 200" in refused.body
    assert typed not in refused.body  # not prefilled again
    assert _statuses(run_id) == UNDECIDED
    assert client.decide(**form, by="x" * 200).status == 303
    assert _statuses(run_id)["execute.s2"] == ("denied", "x" * 200)


HOSTILE_STEPS = """
import loopwise


@loopwise.step
def label(x: dict) -> dict:
    if x["n"] == 3:
        raise RuntimeError("bad \\x1b[2J \\u202eevil\\u2028x")
    return {"label": "odd\\u202e\\u2028" if x["n"] == 2 else "odd"}


@loopwise.step
def other(x: dict) -> dict:
    return {"label": "odd"}
"""


def test_eval_prints_run_details_outputs_and_case_ids_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = tmp_path / "hostile_steps.py"
    steps.write_text(HOSTILE_STEPS)
    rows = [
        {"id": "c\u202e1", "input": {"n": 2}, "expected": {"label": "odd"}},
        {"id": "three", "input": {"n": 3}, "expected": {"label": "odd"}},
    ]
    cases = tmp_path / "cases.jsonl"
    cases.write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = tmp_path / "report.html"
    argv = ["eval", f"{steps}:label", f"{steps}:other", "--dataset", str(cases)]
    capsys.readouterr()
    assert main([*argv, "--report", str(page)]) == 0
    text = capsys.readouterr().out
    assert not any(ch in text for ch in ("\x1b", "\u202e", "\u2028")), text
    assert "label case three: ended error: " in text
    assert "bad \\x1b[2J \\u202eevil\\u2028x" in text
    assert 'label case c\\u202e1: label: expected "odd", got "odd\\u202e\\u2028"' in text
    assert "cases the targets score differently: 2 (c\\u202e1, three)" in text
    html_page = page.read_text()
    assert not any(ch in html_page for ch in ("\x1b", "\u202e", "\u2028"))
    assert "bad \\x1b[2J \\u202eevil\\u2028x" in html_page and "c\\u202e1" in html_page
    # --json has them exactly.
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    runs = {r["case_id"]: r for r in doc["targets"][0]["runs"]}
    assert "bad \x1b[2J \u202eevil\u2028x" in runs["three"]["detail"]
    assert runs["c\u202e1"]["output"] == {"label": "odd\u202e\u2028"}
