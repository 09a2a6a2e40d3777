"""The approvals inbox through HTTP: pages, escaping, CSRF, the hash binding, decisions
checked when they are made, GET never changing anything, and ``--resume``.

Each test serves a real store on 127.0.0.1 (port 0) from a thread of this process and
talks to it with ``http.client``; the refund desk pauses through the CLI, as a user's
run would.
"""

from __future__ import annotations

import dataclasses
import http.client
import io
import json
import re
import socket
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

import loopwise
from loopwise import gates
from loopwise.cli.main import main
from loopwise.running.targets import load_target
from loopwise.serve.app import ServeSettings, make_server
from loopwise.serve.guards import CSP
from loopwise.store.open import open_store
from loopwise.testing import ScriptedModel, call, reply
from tests.support import ROOT

DESK = f"{ROOT / 'workflows' / 'refund_desk.py'}:refund_desk"
COMPLAINT = '"Order O-1003 arrived broken and I want my money back."'


@dataclass
class Answer:
    status: int
    body: str
    headers: dict[str, str]


@dataclass
class Client:
    """A browser without a browser: keeps the CSRF cookie, reads tokens from forms."""

    port: int
    cookie: str | None = None
    host: str | None = None
    sent: list[str] = field(default_factory=list)

    def request(self, method: str, path: str, body: str | None = None, **headers: str) -> Answer:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        hdrs = {k.replace("_", "-"): v for k, v in headers.items()}
        if self.host is not None:
            hdrs["Host"] = self.host
        if self.cookie:
            hdrs.setdefault("Cookie", f"loopwise_csrf={self.cookie}")
        if body is not None:
            hdrs["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        answer = Answer(r.status, r.read().decode(), {k.lower(): v for k, v in r.getheaders()})
        conn.close()
        got = re.match(r"loopwise_csrf=([^;]+)", answer.headers.get("set-cookie", ""))
        if got:
            self.cookie = got.group(1)
        return answer

    def get(self, path: str) -> Answer:
        return self.request("GET", path)

    def token(self) -> str:
        page = self.get("/").body
        found = re.search(r"name='csrf' value='([0-9a-f]+)'", page)
        assert found, page
        return found.group(1)

    def decide(self, **fields: str) -> Answer:
        """POST a decision as the inbox's form does: with the hash of the arguments seen."""
        if "csrf" not in fields:  # (setdefault would load the page even when given)
            fields["csrf"] = self.token()
        if "run_id" in fields and "approval_id" in fields and "args_hash" not in fields:
            with open_store(None) as st:
                found = st.approval(fields["run_id"], fields["approval_id"])
            fields["args_hash"] = found.args_hash if found is not None else ""
        return self.request("POST", "/decide", urlencode(fields))


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    """``serve(**settings)``: a running inbox over the test's store, and its client."""
    started: list[Any] = []

    def start(**settings: Any) -> tuple[Any, Client]:
        server, _ = make_server(ServeSettings(port=0, **settings))
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        started.append((server, thread))
        return server.app, Client(port=server.server_address[1])

    yield start
    for server, thread in started:
        server.shutdown()
        thread.join()
        server.app.wait_for_resumes()
        server.server_close()
        server.app.store.close()


def _paused_desk(capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    code = main(["run", DESK, "--model", "scripted", "--input", COMPLAINT, "--json"])
    paused = json.loads(capsys.readouterr().out)
    assert code == 1 and paused["status"] == "awaiting_approval", paused
    return str(paused["run_id"])


def _pending(run_id: str) -> dict[str, str]:
    with open_store(None) as st:
        return {a.approval_id: a.status for a in st.approvals(run_id)}


def _hash(run_id: str, approval_id: str) -> str:
    with open_store(None) as st:
        found = st.approval(run_id, approval_id)
        assert found is not None
        return found.args_hash


def _shop(sql: str) -> list[Any]:
    import os

    with sqlite3.connect(os.environ["LOOPWISE_SHOP_DB"]) as db:
        return db.execute(sql).fetchall()


def test_pages_answer_with_the_approvals_and_get_never_decides(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused_desk(capsys)
    _, client = serve(by="lead")
    inbox = client.get("/")
    assert inbox.status == 200 and inbox.headers["content-security-policy"] == CSP
    assert inbox.headers["x-content-type-options"] == "nosniff"
    assert "SameSite=Strict" in inbox.headers["set-cookie"]
    page = inbox.body
    # Both asks, what they are, why the gate asks and why the planner proposed them.
    assert page.count("<article class='approval'") == 2
    assert "a person approves every refund" in page
    assert "the customer asks for their money back; O-1003 totals 189.00 INR" in page
    assert "tell the order&#x27;s customer about the refund" in page
    assert "<dt>amount_cents</dt><dd><code>18900</code></dd>" in page  # readable, not JSON
    assert "value='lead'" in page  # --by prefills the approver's name
    assert f"run <a href='/runs/{run_id}'>{run_id}</a> of <strong>refund_desk</strong>" in page
    run_page = client.get(f"/runs/{run_id}")
    assert (
        run_page.status == 200 and "<svg" in run_page.body and "s1: issue_refund" in run_page.body
    )
    assert "mermaid" not in run_page.body.lower()
    assert "gate_requested" in run_page.body  # the audit log
    listed = client.get("/runs?status=awaiting_approval").body
    assert run_id in listed
    assert run_id not in client.get("/runs?status=completed").body
    assert client.get("/static/inbox.css").headers["content-type"].startswith("text/css")
    # A decision's fields on a GET decide nothing; other methods are refused.
    assert (
        client.get(f"/decide?run_id={run_id}&approval_id=execute.s1&decision=approve").status == 404
    )
    assert client.get("/runs/nope").status == 404
    assert client.request("PUT", "/decide").status == 405
    assert _pending(run_id) == {"execute.s1": "pending", "execute.s2": "pending"}


def test_hostile_arguments_and_tool_output_are_escaped(serve: Any) -> None:
    hostile = "<script>alert('x')</script><img src=x onerror=alert(1)>"

    @loopwise.tool(effect="read", untrusted_output=True)
    def fetch_page(url: str) -> str:
        """Fetch a web page."""
        return f"page text {hostile}"

    @loopwise.tool(effect="irreversible", gate=gates.human())
    def send(to: str, body: dict[str, list[str]]) -> str:
        """Send a mail."""
        return "sent"

    script = [call("fetch_page", {"url": "http://x"}, id="c1"),
              call("send", {"to": hostile, "body": {"nested": [hostile]}}, id="c2")]  # fmt: skip

    def respond(request: loopwise.ModelRequest) -> Any:
        done = sum(1 for m in request.messages if m["role"] == "tool")
        return script[done] if done < len(script) else reply("done")

    agent = loopwise.Agent(name="mailer", tools=[fetch_page, send])
    paused = loopwise.run(agent, "go", model=ScriptedModel(respond))
    assert paused.status == "awaiting_approval"
    _, client = serve()
    for page in (client.get("/").body, client.get(f"/runs/{paused.run_id}").body):
        assert "<script" not in page and "<img" not in page
        assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    inbox = client.get("/").body
    assert "tainted by fetch_page (c1)" in inbox  # taint forced the ask, and it says so


def test_a_decision_without_the_pages_csrf_token_is_refused(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused_desk(capsys)
    _, client = serve(by="lead")
    form = {"run_id": run_id, "approval_id": "execute.s1", "decision": "approve"}
    assert client.request("POST", "/decide", urlencode(form)).status == 403  # no cookie
    client.token()
    assert client.decide(csrf="0" * 64, **form).status == 403
    stranger = Client(port=client.port)
    assert stranger.decide(csrf=client.token(), **form).status == 403  # another browser's
    evil = client.request("POST", "/decide", urlencode({**form, "csrf": client.token()}),
                          Origin="http://evil.example")  # fmt: skip
    assert evil.status == 403
    assert _pending(run_id)["execute.s1"] == "pending"
    done = client.decide(**form)
    assert done.status == 303 and done.headers["location"].startswith("/?decided=")
    notice = client.get(done.headers["location"]).body
    assert "execute.s1 of run" in notice
    assert "The run goes on when its 1 other pending approval(s) are decided" in notice
    assert _pending(run_id)["execute.s1"] == "approved"
    last = client.decide(**{**form, "approval_id": "execute.s2", "decision": "approve"})
    notice = client.get(last.headers["location"]).body
    assert "The run is not resumed here" in notice and f"loopwise resume {run_id}" in notice


def test_a_page_opened_before_the_arguments_changed_decides_nothing(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused_desk(capsys)
    _, client = serve(by="lead")
    answer = client.decide(
        run_id=run_id, approval_id="execute.s1", decision="approve", args_hash="f" * 64
    )
    assert answer.status == 409
    assert "now asks about other arguments" in answer.body
    assert _pending(run_id)["execute.s1"] == "pending"
    twice = {"run_id": run_id, "approval_id": "execute.s1", "decision": "approve",
             "args_hash": _hash(run_id, "execute.s1")}  # fmt: skip
    assert client.decide(**twice).status == 303
    again = client.decide(**twice)
    assert again.status == 409 and "is already approved" in again.body


def test_edits_and_denials_are_checked_when_they_are_made(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused_desk(capsys)
    _, client = serve(by="lead")
    base = {"run_id": run_id, "approval_id": "execute.s1", "decision": "approve"}
    too_much = json.dumps({"order_id": "O-1003", "amount_cents": 10**6, "reason": "r"})
    refused = client.decide(**base, args=too_much)
    assert refused.status == 400 and "rejected by the policy" in refused.body
    assert "exceeds what is left to refund" in refused.body
    bad = client.decide(**base, args=json.dumps({"order_id": "O-1003", "amount_cents": "lots"}))
    assert bad.status == 400 and "the edited arguments were rejected" in bad.body
    assert client.decide(**base, args="{not json").status == 400
    _, nameless = serve()  # no --by: who decides must be said
    assert nameless.decide(**base, by="").status == 400
    deny = client.decide(run_id=run_id, approval_id="execute.s2", decision="deny", reason="")
    assert deny.status == 400 and "a denial needs a reason" in deny.body
    assert _pending(run_id) == {"execute.s1": "pending", "execute.s2": "pending"}
    half = json.dumps({"order_id": "O-1003", "amount_cents": 9450, "reason": "half"})
    assert client.decide(**base, args=half, by="erin").status == 303
    with open_store(None) as st:
        edited = st.approval(run_id, "execute.s1")
    assert edited is not None and edited.status == "edited" and edited.decided_by == "erin"
    assert edited.edited_args["amount_cents"] == 9450


def test_the_proxy_user_header_names_the_approver(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused_desk(capsys)
    _, client = serve(trust_proxy_user="X-Forwarded-User")
    form = {"run_id": run_id, "approval_id": "execute.s2", "decision": "deny",
            "reason": "no mail", "by": "mallory",
            "args_hash": _hash(run_id, "execute.s2")}  # fmt: skip
    assert client.decide(**form).status == 400  # no header: no decision
    assert client.request("POST", "/decide", urlencode({**form, "csrf": client.token()}),
                          X_Forwarded_User="dana").status == 303  # fmt: skip
    with open_store(None) as st:
        denied = st.approval(run_id, "execute.s2")
    assert denied is not None and (denied.status, denied.decided_by) == ("denied", "dana")


def test_a_loopback_server_answers_loopback_names_only(serve: Any) -> None:
    _, client = serve()
    client.host = "attacker.example"
    assert client.get("/").status == 421
    client.host = "localhost"
    assert client.get("/").status == 200
    client.host = "LocalHost:8765"  # host names ignore case
    assert client.get("/").status == 200


def test_a_client_that_stalls_mid_request_is_let_go(serve: Any) -> None:
    _, client = serve(read_timeout=0.5)
    with socket.create_connection(("127.0.0.1", client.port), timeout=20) as raw:
        raw.sendall(b"POST /decide HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\nabc")
        assert raw.recv(64) == b""  # closed by the server, not held open
    assert client.get("/").status == 200


def test_with_resume_the_server_continues_a_run_once_nothing_is_pending(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused_desk(capsys)
    app, client = serve(by="lead", resume=True)
    client.decide(run_id=run_id, approval_id="execute.s1", decision="approve")
    app.wait_for_resumes()
    with open_store(None) as st:
        assert st.get_run(run_id).status == "awaiting_approval"  # the mail still waits
    last = client.decide(run_id=run_id, approval_id="execute.s2", decision="deny", reason="no mail")
    assert "This inbox is resuming the run now" in client.get(last.headers["location"]).body
    app.wait_for_resumes()
    with open_store(None) as st:
        run = st.get_run(run_id)
    assert run.status == "denied"  # a denied action ends a hybrid's run denied
    assert len(_shop("SELECT * FROM refunds WHERE order_id = 'O-1003'")) == 1
    assert _shop("SELECT * FROM emails") == []
    page = client.get(f"/runs/{run_id}").body
    assert "<td data-label='by'>lead</td>" in page and "no mail" in page


def _waiting_line(client: Client, run_id: str) -> str:
    found = re.search(r"<p class='detail'[^>]*>(.*?)</p>", client.get(f"/runs/{run_id}").body)
    assert found, "the run page has no status line"
    return found.group(1)


def test_the_run_pages_waiting_line_follows_the_decisions(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused_desk(capsys)
    _, client = serve(by="lead")
    both = "issue_refund (execute.s1), email_customer (execute.s2)"
    assert _waiting_line(client, run_id) == f"2 call(s) await approval: {both}"
    client.decide(run_id=run_id, approval_id="execute.s1", decision="approve")
    # Before, the line kept "2 call(s) await approval" above a table saying approved.
    assert _waiting_line(client, run_id) == (
        "1 call(s) await approval: email_customer (execute.s2)"
    )
    client.decide(run_id=run_id, approval_id="execute.s2", decision="deny", reason="no mail")
    line = _waiting_line(client, run_id)
    assert line.startswith("Every approval is decided") and f"loopwise resume {run_id}" in line


def test_with_resume_the_waiting_line_says_the_inbox_resumes(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopwise.serve.pages import run_page

    run_id = _paused_desk(capsys)
    with open_store(None) as st:
        run, rows = st.get_run(run_id), st.approvals(run_id)
    decided = [dataclasses.replace(a, status="approved", decided_by="lead") for a in rows]
    page = run_page(run, [], decided, [], resuming=True)
    assert "Every approval is decided: this inbox is resuming the run." in page
    assert "await approval" not in page


def test_a_store_that_cannot_be_opened_stops_serve_before_it_listens(tmp_path: Path) -> None:
    # A directory is no SQLite file: refused at once, not on the first page asked for.
    for store in (str(tmp_path), f"sqlite:///{tmp_path}"):
        with pytest.raises(loopwise.StoreError, match="cannot open run store"):
            make_server(ServeSettings(store=store, port=0))


def test_the_cli_checks_edits_when_they_are_made(capsys: pytest.CaptureFixture[str]) -> None:
    run_id = _paused_desk(capsys)
    capsys.readouterr()
    edit = json.dumps({"order_id": "O-1003", "amount_cents": 10**6, "reason": "r"})
    code = main(["approve", run_id, "--approval", "execute.s1", "--args", edit])
    assert code == 2
    assert "rejected by the policy" in capsys.readouterr().err
    assert _pending(run_id)["execute.s1"] == "pending"
    text = main(["pending", run_id])
    out = capsys.readouterr().out
    assert text == 0 and "planner's reason: the customer asks for their money back" in out
    assert "-> s1 issue_refund [pending]" in out and "s3 add_note [approved]" in out


def test_a_whole_plan_approval_cannot_be_edited(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = {"steps": [{"id": "s1", "action": "note", "args": {"text": "x"}, "reason": "why"}]}
    (tmp_path / "desk.py").write_text(
        "import json\nimport loopwise\n"
        "@loopwise.tool(effect='write')\n"
        "def note(text: str) -> str:\n    '''Write a note.'''\n    return 'noted'\n"
        "desk = loopwise.Hybrid('desk', actions=[note], approve_plan=True)\n"
    )
    model = ScriptedModel(lambda request: reply(json.dumps(plan)))
    paused = loopwise.run(
        load_target(f"{tmp_path / 'desk.py'}:desk").step, "x", model=model,
        spec=f"{tmp_path / 'desk.py'}:desk",
    )  # fmt: skip
    assert [p["approval_id"] for p in paused.pending] == ["plan"]
    capsys.readouterr()
    assert main(["approve", paused.run_id, "--args", '{"plan": []}']) == 2
    assert "approved or denied, not edited" in capsys.readouterr().err
    assert _pending(paused.run_id) == {"plan": "pending"}
    assert main(["approve", paused.run_id, "--by", "ann"]) == 0


def test_in_code_handlers_are_recorded_under_their_own_name() -> None:
    paid: list[int] = []

    @loopwise.tool(effect="irreversible", gate=gates.human())
    def pay(amount: int) -> str:
        """Pay an amount."""
        paid.append(amount)
        return "paid"

    def respond(request: loopwise.ModelRequest) -> Any:
        done = any(m["role"] == "tool" for m in request.messages)
        return reply("ok") if done else call("pay", {"amount": 3}, id="c1")

    def finance_bot(request: gates.ApprovalRequest) -> bool:
        return True

    agent = loopwise.Agent(name="a", tools=[pay])
    for handler, name in (
        (finance_bot, "finance_bot"),
        (lambda r: gates.Approved(), "approvals handler"),
    ):
        done = loopwise.run(agent, "go", model=ScriptedModel(respond), approvals=handler)
        with open_store(None) as st:
            (decided,) = st.approvals(done.run_id)
        assert (decided.status, decided.decided_by) == ("approved", name)


def test_a_post_must_name_its_decision_and_a_real_length(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused_desk(capsys)
    _, client = serve(by="lead")
    base = {"run_id": run_id, "approval_id": "execute.s1"}
    assert client.decide(**base).status == 400  # no button pressed: nothing approved
    assert client.decide(**base, decision="yes").status == 400
    # A form that does not say which arguments the person saw decides nothing.
    assert client.decide(**base, decision="approve", args_hash="").status == 400
    assert _pending(run_id) == {"execute.s1": "pending", "execute.s2": "pending"}
    for length in (b"-1", b"abc"):
        with socket.create_connection(("127.0.0.1", client.port), timeout=30) as raw:
            head = b"POST /decide HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: "
            raw.sendall(head + length + b"\r\n\r\n")
            assert raw.recv(64).split(b"\r\n")[0].endswith(b"400 Bad Request")


class _RacedByAWorker:
    """A store where a worker on another machine claims a run the moment its last
    approval is decided (before the server's own resume can)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def decide(self, run_id: str, approval_id: str, **decision: Any) -> Any:
        done = self._store.decide(run_id, approval_id, **decision)
        if not self._store.pending(run_id):
            assert self._store.claim(run_id, "elsewhere:1", alive=lambda owner: True)
        return done


def test_with_resume_a_run_a_worker_took_first_is_left_to_it(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused_desk(capsys)
    server, _ = make_server(
        ServeSettings(port=0, by="lead", resume=True), store=_RacedByAWorker(open_store(None))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = Client(port=server.server_address[1])
        client.decide(run_id=run_id, approval_id="execute.s1", decision="approve")
        client.decide(run_id=run_id, approval_id="execute.s2", decision="deny", reason="no")
        server.app.wait_for_resumes()
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
    with open_store(None) as st:
        run = st.get_run(run_id)
    assert (run.status, run.owner) == ("running", "elsewhere:1")  # not failed by the server


# What remained of issue 14: what every ask carries, a whole plan's approval and its steps'
# gates, the action's own policy at decision time, effects recorded with the plan, pages
# drawn from the log, and the CLI's argument hash.

DESK_MODULE = '''\
import json
from pathlib import Path

import loopwise
from loopwise.tools.gates import human, policy
from loopwise.architectures.hybrid import ActionCatalog, Hybrid
from loopwise.testing import ScriptedModel, reply

LEDGER = Path(__file__).with_name("ledger.txt")
PLAN = {"steps": [
    {"id": "s1", "action": "pay", "args": {"order_id": "O-1", "amount": 40.0},
     "depends_on": [], "reason": "the parcel arrived broken"},
    {"id": "s2", "action": "note", "args": {"text": "refunded"},
     "depends_on": ["s1"], "reason": "keep a record for the team"},
]}


@loopwise.tool(effect="irreversible", gate=human())
def pay(order_id: str, amount: float) -> str:
    """Pay money back for an order."""
    with LEDGER.open("a") as ledger:
        ledger.write(f"{order_id} {amount}\\n")
    return "paid"


@loopwise.tool(effect="write", gate=policy(lambda args: True))
def note(text: str) -> str:
    """Write a note."""
    return "noted"


def at_most_100(args):
    return None if args["amount"] <= 100 else f"{args['amount']} is above the limit of 100"


ACTIONS = ActionCatalog()
ACTIONS.add(pay, policy=at_most_100, estimate=lambda args: args.amount, unit="EUR")
ACTIONS.add(note)
desk = Hybrid("desk", actions=ACTIONS)
planned = Hybrid("planned", actions=ACTIONS, approve_plan=True)
trusting = Hybrid("trusting", actions=ACTIONS, approve_plan=True, plan_approval_covers_gates=True)


def offline_model():
    return ScriptedModel(lambda request: reply(json.dumps(PLAN)))
'''


def _desk(tmp_path: Path, name: str) -> str:
    path = tmp_path / "paydesk.py"
    if not path.exists():
        path.write_text(DESK_MODULE)
    return f"{path}:{name}"


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _paused(capsys: pytest.CaptureFixture[str], spec: str) -> str:
    code, out, _ = _cli(capsys, "run", spec, "--model", "scripted", "--input", '"x"', "--json")
    paused = json.loads(out)
    assert code == 1 and paused["status"] == "awaiting_approval", paused
    return str(paused["run_id"])


def _waiting(capsys: pytest.CaptureFixture[str], run_id: str) -> list[dict[str, Any]]:
    code, out, _ = _cli(capsys, "pending", run_id, "--json")
    assert code == 0
    return list(json.loads(out))


def test_every_ask_says_why_what_is_at_stake_and_why_it_asks_after_the_plan(
    serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused(capsys, _desk(tmp_path, "planned"))
    (whole,) = _waiting(capsys, run_id)
    assert whole["approval_id"] == "plan" and whole["at_stake"] == 40.0
    assert whole["at_stake_unit"] == "EUR"  # the action's declared currency
    assert "each step whose gate asks a person" in whole["note"]
    assert _cli(capsys, "approve", run_id, "--by", "ann")[0] == 0
    code, out, _ = _cli(capsys, "resume", run_id, "--model", "scripted")
    assert code == 1 and "awaiting_approval" in out  # the pay step asks again
    (step,) = _waiting(capsys, run_id)
    assert (step["approval_id"], step["why"], step["at_stake"]) == (
        "execute.s1", "the parcel arrived broken", 40.0,
    )  # fmt: skip
    assert step["note"].startswith("the plan was approved by ann; this irreversible step asks")
    code, text, _ = _cli(capsys, "pending", run_id)
    assert "planner's reason: the parcel arrived broken" in text
    assert "at stake: 40.00 EUR" in text and "note: the plan was approved by ann" in text
    _, client = serve(by="lead")
    page = client.get("/").body
    assert "the parcel arrived broken" in page and "40.00 EUR <span" in page
    assert "the plan was approved by ann; this irreversible step asks again" in page
    assert not (tmp_path / "ledger.txt").exists()
    # The terminal prompt shows the same (end of input: the run pauses).
    out_text = io.StringIO()
    step_obj = load_target(_desk(tmp_path, "desk")).step
    model = ScriptedModel(lambda request: reply(json.dumps(_plan_of(tmp_path))))
    handler = gates.TerminalApprovals(stdin=io.StringIO(""), stdout=out_text)
    paused = loopwise.run(step_obj, "x", model=model, approvals=handler)
    assert paused.status == "awaiting_approval"
    assert paused.pending[0]["why"] == "the parcel arrived broken"
    prompt = out_text.getvalue()
    assert "pay(" in prompt and "planner's reason: the parcel arrived broken" in prompt
    assert "at stake: 40.00 EUR (the action's estimate)" in prompt


def _plan_of(tmp_path: Path) -> Any:
    return load_target(_desk(tmp_path, "desk")).module.PLAN


def test_a_plan_approval_that_covers_gates_runs_its_exact_steps_and_says_who(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused(capsys, _desk(tmp_path, "trusting"))
    (whole,) = _waiting(capsys, run_id)
    assert "also answers its steps' human gates" in whole["note"]
    assert _cli(capsys, "approve", run_id, "--by", "ann")[0] == 0
    code, out, _ = _cli(capsys, "resume", run_id, "--model", "scripted")
    assert code == 0, out
    assert (tmp_path / "ledger.txt").read_text() == "O-1 40.0\n"
    _, shown, _ = _cli(capsys, "runs", "show", run_id, "--json")
    decided = [e["data"] for e in json.loads(shown)["events"] if e["type"] == "gate_decided"]
    pay_decision = next(d for d in decided if d["approval_id"] == "execute.s1")
    assert (pay_decision["decision"], pay_decision["by"]) == ("approved", "ann")
    assert pay_decision["reason"] == "approved by ann as part of the whole plan (plan)"
    with open_store(None) as st:
        assert [a.approval_id for a in st.approvals(run_id)] == ["plan"]  # asked once


def test_a_plan_approval_never_covers_arguments_it_did_not_show() -> None:
    from loopwise.architectures.plans import PlanApproval, PlanStep

    step = PlanStep(id="s1", action="pay", args={"amount": 40.0}, reason="r")
    shown = PlanApproval(
        verdict=gates.Approved(by="ann"), approval_id="plan", args={"s1": {"amount": 40.0}},
        covers_gates=True,
    )  # fmt: skip
    covered, _ = shown.covers(step, {"amount": 40.0}, "irreversible")
    assert covered is not None and covered.by == "ann"
    changed, note = shown.covers(step, {"amount": 400.0}, "irreversible")
    assert changed is None and "not the ones it showed" in note


def test_an_edit_the_actions_own_policy_refuses_is_refused_when_made(
    serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused(capsys, _desk(tmp_path, "desk"))
    too_much = json.dumps({"order_id": "O-1", "amount": 500.0})
    code, _, err = _cli(capsys, "approve", run_id, "--approval", "execute.s1", "--args", too_much)
    assert code == 2 and "rejected by the policy: 500.0 is above the limit of 100" in err
    _, client = serve(by="lead")
    form = {"run_id": run_id, "approval_id": "execute.s1", "decision": "approve"}
    refused = client.decide(**form, args=too_much)
    assert refused.status == 400 and "above the limit of 100" in refused.body
    assert _pending(run_id) == {"execute.s1": "pending"}
    fine = json.dumps({"order_id": "O-1", "amount": 30.0})
    assert client.decide(**form, args=fine).status == 303
    assert _pending(run_id) == {"execute.s1": "edited"}


def test_each_plan_step_shows_its_effect_before_it_runs(
    serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _paused(capsys, _desk(tmp_path, "desk"))
    (step,) = _waiting(capsys, run_id)
    # s2 (a note its policy passed) has neither asked a person nor run yet.
    assert [(p["id"], p["effect"], p["state"]) for p in step["plan"]] == [
        ("s1", "irreversible", "pending"), ("s2", "write", "approved"),
    ]  # fmt: skip
    _, client = serve(by="lead")
    for page in (client.get("/").body, client.get(f"/runs/{run_id}").body):
        assert "unknown" not in page and "effect write" in page


def test_a_whole_plan_is_read_step_by_step_on_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = io.StringIO()
    handler = gates.TerminalApprovals(stdin=io.StringIO(""), stdout=out)
    model = ScriptedModel(lambda request: reply(json.dumps(_plan_of(tmp_path))))
    step = load_target(_desk(tmp_path, "planned")).step
    paused = loopwise.run(step, "x", model=model, approvals=handler)
    assert paused.status == "awaiting_approval"
    prompt = out.getvalue()
    assert "the whole plan [irreversible] needs approval" in prompt
    assert "    s2 note" in prompt and "after s1: keep a record for the team" in prompt
    assert "at stake: 40.00" in prompt and "flowchart" not in prompt
    _, text, _ = _cli(capsys, "pending", paused.run_id)
    assert "flowchart" not in text and '"graph"' not in text
    assert "   s1 pay [planned]: the parcel arrived broken" in text


def test_a_run_page_draws_from_the_store_and_never_loads_the_targets_code(
    serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A module whose top level leaves a mark each time it is loaded (a hostile spec could
    # do anything there): the run is made in another process, the page is viewed here.
    marks = tmp_path / "loaded.txt"
    module = tmp_path / "marked.py"
    module.write_text(
        "from pathlib import Path\nimport loopwise\n"
        f"with Path({str(marks)!r}).open('a') as f:\n    f.write('x')\n"
        "@loopwise.tool(effect='read')\n"
        "def look(q: str) -> str:\n    '''Look something up.'''\n    return 'seen ' + q\n"
        "agent = loopwise.Agent(name='looker', tools=[look])\n"
    )
    import subprocess
    import sys

    made = subprocess.run(
        [sys.executable, "-m", "loopwise.cli.main", "run", f"{module}:agent", "--model", "scripted",
         "--input", '"go"', "--json"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    run_id = json.loads(made.stdout)["run_id"]
    assert marks.read_text() == "x"
    _, client = serve()
    page = client.get(f"/runs/{run_id}")
    assert page.status == 200 and "completed" in page.body
    assert marks.read_text() == "x"  # the GET ran none of the target's code
    # Without a plan, the picture is what the run did, read from its log.
    assert "What it ran" in page.body and "<svg" in page.body and ">look<" in page.body


PAYER_MODULE = '''\
import loopwise
from loopwise.tools.gates import human
from loopwise.testing import ScriptedModel, call, reply

PAID = []


@loopwise.tool(effect="irreversible", gate=human())
def pay(amount: int) -> str:
    """Pay an amount."""
    PAID.append(amount)
    return "paid"


def _respond(request):
    done = sum(1 for m in request.messages if m["role"] == "tool")
    script = [call("pay", {"amount": 3}, id="c1"), call("pay", {"amount": 300}, id="c2")]
    return script[done] if done < len(script) else reply("done")


payer = loopwise.Agent(name="payer", tools=[pay])


def offline_model():
    return ScriptedModel(_respond)
'''


def test_an_unnamed_cli_approval_never_reaches_an_ask_a_listing_did_not_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "payer.py").write_text(PAYER_MODULE)
    run_id = _paused(capsys, f"{tmp_path / 'payer.py'}:payer")
    code, listed, _ = _cli(capsys, "pending", run_id)
    assert 'pay({"amount": 3})' in listed and "--seen-hash" in listed
    assert _cli(capsys, "approve", run_id, "--by", "ann")[0] == 0  # the first pause: as shown
    code, out, _ = _cli(capsys, "resume", run_id)
    assert code == 1 and "awaiting_approval" in out  # it asks again, for 300
    # `approve RUN_ID` typed from the listing of 3 must not approve the 300 it never showed.
    code, _, err = _cli(capsys, "approve", run_id, "--by", "ann")
    assert code == 2 and "paused before and now asks again (c2: pay" in err
    code, _, err = _cli(capsys, "approve", run_id, "--all", "--by", "ann")
    assert code == 2 and "now asks again" in err
    assert _pending(run_id) == {"c1": "approved", "c2": "pending"}
    # Bound to the arguments seen: a stale or malformed hash decides nothing.
    old = _hash(run_id, "c1")
    code, _, err = _cli(capsys, "approve", run_id, "--approval", "c2", "--seen-hash", old[:12])
    assert code == 2 and "now asks about other arguments" in err
    code, _, err = _cli(capsys, "deny", run_id, "--seen-hash", "zz", "--reason", "no")
    assert code == 2 and "is not one" in err
    code, _, err = _cli(capsys, "approve", run_id, "--all", "--seen-hash", old)
    assert code == 2 and "drop --all" in err
    assert _pending(run_id) == {"c1": "approved", "c2": "pending"}
    shown = next(
        line for line in _cli(capsys, "pending", run_id)[1].splitlines() if "--seen" in line
    )
    seen = shown.split("--seen-hash ")[1].split()[0]
    assert seen == _hash(run_id, "c2")[:12]
    code, out, _ = _cli(capsys, "approve", run_id, "--seen-hash", seen, "--by", "ann")
    assert code == 0 and "approved c2" in out


def test_a_stored_approval_id_cannot_split_the_answer(serve: Any) -> None:
    # A server's call ids are renamed before they key anything, but a store written by an
    # older loopwise may hold one as the server sent it: here with CR/LF in it.
    sneaky = "x\r\nSet-Cookie: pwn=1\r\nX-A: #&?"
    with open_store(None) as st:
        st.create_run("old1", target="m", spec=None, input=None, model=None, options={})
        asked = gates.ApprovalRequest(
            run_id="old1", approval_id=sneaky, tool="send", args={"to": "a"},
            effect="irreversible", reason="r", args_hash=gates.args_hash("send", {"to": "a"}),
            call_id=sneaky, step="m",
        )  # fmt: skip
        event = loopwise.Event(seq=1, type=loopwise.EventType.GATE_REQUESTED, step="m",
                               at="now", data=asked.to_dict())  # fmt: skip
        st.record("old1", event)
        st.mark_paused("old1", "waiting for approval")
    _, client = serve(by="lead")
    token = client.token()
    seen = _hash("old1", sneaky)
    form = urlencode({"csrf": token, "run_id": "old1", "approval_id": sneaky,
                      "decision": "approve", "args_hash": seen})  # fmt: skip
    with socket.create_connection(("127.0.0.1", client.port), timeout=30) as raw:
        raw.sendall(
            f"POST /decide HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: loopwise_csrf={client.cookie}"
            "\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            f"Content-Length: {len(form)}\r\n\r\n{form}".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += raw.recv(4096)
    lines = head.split(b"\r\n\r\n")[0].decode().split("\r\n")
    assert lines[0].endswith("303 See Other")
    assert not any(line.lower().startswith(("set-cookie: pwn", "x-a:")) for line in lines)
    location = next(line for line in lines if line.startswith("Location: "))
    assert "approved by lead" in client.get(location.removeprefix("Location: ")).body


def test_a_megabyte_argument_keeps_the_inbox_small_and_decidable(serve: Any) -> None:
    @loopwise.tool(effect="irreversible", gate=gates.human())
    def send(to: str, body: str) -> str:
        """Send a mail."""
        return "sent"

    def respond(request: loopwise.ModelRequest) -> Any:
        done = any(m["role"] == "tool" for m in request.messages)
        return reply("done") if done else call("send", {"to": "a", "body": "x" * 10**6}, id="c1")

    paused = loopwise.run(
        loopwise.Agent(name="m", tools=[send]), "go", model=ScriptedModel(respond)
    )
    _, client = serve(by="lead")
    page = client.get("/").body
    # Shown in part, in a box of its own, and no edit box the form could not send back.
    assert len(page) < 100_000 and "980,000 more characters" in page
    assert "<div class='text long'>" in page and "name='args'" not in page
    assert f"loopwise approve {paused.run_id} --approval c1 --args @edited.json" in page
    assert client.decide(run_id=paused.run_id, approval_id="c1", decision="approve").status == 303


def test_the_runs_list_filters_in_the_store_over_every_status(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    waiting = _paused_desk(capsys)
    with open_store(None) as st:  # 600 newer runs (the page showed a filter of the last 500)
        for i in range(600):
            st.create_run(f"r{i:04d}", target="t", spec=None, input=None, model=None, options={})
    _, client = serve()
    listed = client.get("/runs?status=awaiting_approval").body
    assert waiting in listed and "r0599" not in listed
    everything = client.get("/runs").body
    assert "r0599" in everything and waiting not in everything  # the newest 200
    for status in ("step_limit", "budget_exceeded", "stuck", "cancelled", "queued"):
        assert f"/runs?status={status}'" in everything


def test_behind_the_proxy_the_page_shows_who_decides_and_asks_no_name(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _paused_desk(capsys)
    _, client = serve(trust_proxy_user="X-Forwarded-User", by="lead")
    page = client.request("GET", "/", X_Forwarded_User="dana").body
    # A name typed into the page would be ignored for the header's: so none is asked.
    assert "deciding as <strong>dana</strong>" in page and "name='by'" not in page
    bare = client.get("/").body
    assert "no user in the X-Forwarded-User header" in bare and "name='by'" not in bare


def test_every_loopback_address_counts_as_loopback() -> None:
    # --host 127.0.0.2 stays on this machine: the Host check (DNS rebinding) must hold.
    from loopwise.serve.guards import is_loopback

    assert all(map(is_loopback, ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "LocalHost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "192.0.2.7", "example.com", "127.1", ""]))


def test_one_decision_posted_many_times_at_once_is_made_once(
    serve: Any, store_at: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LOOPWISE_STORE", store_at)
    run_id = _paused_desk(capsys)
    _, client = serve(by="lead")
    token, seen = client.token(), _hash(run_id, "execute.s1")
    start = threading.Barrier(6)
    answers: list[tuple[str, int]] = []

    def post(decision: str) -> None:
        mine = Client(port=client.port, cookie=client.cookie)
        form = {"csrf": token, "run_id": run_id, "approval_id": "execute.s1",
                "decision": decision, "args_hash": seen, "reason": "r"}  # fmt: skip
        start.wait()
        answers.append((decision, mine.request("POST", "/decide", urlencode(form)).status))

    threads = [threading.Thread(target=post, args=(("approve", "deny")[i % 2],)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    made = [d for d, status in answers if status == 303]
    assert len(made) == 1 and sorted(s for _, s in answers) == [303] + [409] * 5
    assert _pending(run_id)["execute.s1"] == {"approve": "approved", "deny": "denied"}[made[0]]
    # Decided from a terminal while the page is open: the page's form decides nothing.
    assert main(["deny", run_id, "--approval", "execute.s2", "--reason", "no mail"]) == 0
    late = client.decide(csrf=token, run_id=run_id, approval_id="execute.s2", decision="approve")
    assert late.status == 409 and "is already denied" in late.body
    assert _pending(run_id)["execute.s2"] == "denied"


def test_a_long_runs_page_shows_its_first_and_latest_events(serve: Any) -> None:
    @loopwise.tool(effect="read")
    def look(q: str) -> str:
        """Look something up."""
        return "seen"

    def respond(request: loopwise.ModelRequest) -> Any:
        done = sum(1 for m in request.messages if m["role"] == "tool")
        return call("look", {"q": f"q{done}"}, id=f"c{done}") if done < 700 else reply("done")

    agent = loopwise.Agent(name="looker", tools=[look], max_steps=800)
    done = loopwise.run(agent, "go", model=ScriptedModel(respond))
    with open_store(None) as st:
        count = len(st.events(done.run_id))
    assert done.status == "completed" and count > 2_000
    _, client = serve()
    page = client.get(f"/runs/{done.run_id}").body
    assert f"{count - 2_000:,} events not shown here" in page and f"{count:,} events" in page
    assert page.count("<tr class=") == 2_000 and "run_finished" in page
