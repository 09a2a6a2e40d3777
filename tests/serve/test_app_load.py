"""The approvals inbox under hostile use, over real HTTP on 127.0.0.1: foreign ``Host``
names (DNS rebinding) on every bind, many people deciding at once, ``--resume`` of many
runs at once, and inputs that would kill a request's thread.

Every loop here is bounded (a fixed number of threads, each one request).
"""

from __future__ import annotations

import http.client
import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

import loopwise
from loopwise.cli.main import main
from loopwise.serve.app import ServeSettings, make_server
from loopwise.store.open import open_store

PAYER = '''\
import loopwise
from pathlib import Path
from loopwise.tools.gates import human
from loopwise.testing import ScriptedModel, call, reply

LEDGER = Path(__file__).with_name("ledger.txt")


@loopwise.tool(effect="irreversible", gate=human())
def pay(amount: int) -> str:
    """Pay an amount."""
    with LEDGER.open("a") as ledger:
        ledger.write(f"{amount}\\n")
    return "paid"


def _respond(request):
    done = any(m["role"] == "tool" for m in request.messages)
    return reply("paid it") if done else call("pay", {"amount": 5}, id="c1")


payer = loopwise.Agent(name="payer", tools=[pay])


def offline_model():
    return ScriptedModel(_respond)
'''


def _post(
    port: int, fields: dict[str, str], cookie: str, host: str = "127.0.0.1"
) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(
            "POST",
            "/decide",
            body=urlencode(fields),
            headers={
                "Host": host,
                "Cookie": f"loopwise_csrf={cookie}",
                "Content-Type": "application/x-www-form-urlencoded",
            },
        )
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def _get(port: int, path: str, host: str, cookie: str | None = None) -> tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Host": host} | ({"Cookie": f"loopwise_csrf={cookie}"} if cookie else {})
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read().decode(), response.getheader("Set-Cookie") or ""
    finally:
        conn.close()


class Inbox:
    """A served inbox and a browser's cookie and CSRF token for it."""

    def __init__(self, **settings: Any) -> None:
        self.server, _ = make_server(ServeSettings(port=0, by="lead", **settings))
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        _, page, cookie = _get(self.port, "/", "127.0.0.1")
        self.cookie = cookie.split("=", 1)[1].split(";", 1)[0]
        found = re.search(r"name='csrf' value='([0-9a-f]+)'", page)
        assert found, page
        self.csrf = found.group(1)

    def form(self, run_id: str, approval_id: str = "c1", **fields: str) -> dict[str, str]:
        with open_store(None) as st:
            asked = st.approval(run_id, approval_id)
        assert asked is not None
        return {
            "csrf": self.csrf,
            "run_id": run_id,
            "approval_id": approval_id,
            "args_hash": asked.args_hash,
            "decision": "approve",
            **fields,
        }

    def post(self, fields: dict[str, str]) -> int:
        return _post(self.port, fields, self.cookie)[0]

    def answer(self, fields: dict[str, str]) -> tuple[int, str]:
        return _post(self.port, fields, self.cookie)

    def close(self) -> None:
        self.server.shutdown()
        self.thread.join()
        self.server.app.wait_for_resumes()
        self.server.server_close()
        self.server.app.store.close()


@pytest.fixture
def inbox() -> Iterator[Callable[..., Inbox]]:
    opened: list[Inbox] = []

    def start(**settings: Any) -> Inbox:
        opened.append(Inbox(**settings))
        return opened[-1]

    yield start
    for each in opened:
        each.close()


def _paused_runs(tmp_path: Path, count: int, module: str = PAYER) -> list[str]:
    path = tmp_path / "payer.py"
    path.write_text(module)
    spec = f"{path}:payer"
    from loopwise.running.targets import load_target, model_for

    target = load_target(spec)
    ids = []
    for _ in range(count):
        paused = loopwise.run(target.step, "pay", model=model_for(target, "scripted"), spec=spec)
        assert paused.status == "awaiting_approval", paused
        ids.append(paused.run_id)
    return ids


def _forget_loaded() -> None:
    """Forget the loaded target, so the server loads it as `serve` in its own process."""
    for name in [n for n in sys.modules if n.startswith("_loopwise_target_payer")]:
        del sys.modules[name]


def _all_at_once(calls: list[Callable[[], int]]) -> list[int | BaseException]:
    """Each call in its own thread, released together; what each returned or raised."""
    start = threading.Barrier(len(calls))
    got: list[int | BaseException] = [0] * len(calls)

    def one(i: int) -> None:
        start.wait()
        try:
            got[i] = calls[i]()
        except Exception as e:  # a reset connection must show as what it is
            got[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


def _statuses(run_ids: list[str]) -> dict[str, str]:
    with open_store(None) as st:
        return {r: st.get_run(r).status for r in run_ids}


def _decisions(run_ids: list[str]) -> list[str]:
    with open_store(None) as st:
        return [st.approvals(r)[0].status for r in run_ids]


def test_a_foreign_host_is_refused_whatever_the_bind(
    inbox: Callable[..., Inbox], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (run_id,) = _paused_runs(tmp_path, 1)
    served = inbox(allowed_hosts=("inbox.example.com",))
    for host in ("inbox.example.com", "INBOX.example.com:8765", "localhost", "[::1]:1", "[::1]"):
        assert _get(served.port, "/", host)[0] == 200, host
    for host in ("attacker.example", "inbox.example.com.attacker.example", "", "0.0.0.0"):
        assert _get(served.port, "/", host)[0] == 421, host
    assert _post(served.port, served.form(run_id), served.cookie, "attacker.example")[0] == 421
    assert _decisions([run_id]) == ["pending"]
    # A wildcard bind has no name of its own to default to: the allow-list is required,
    # refused before anything listens.
    capsys.readouterr()
    assert main(["serve", "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "--allowed-host" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(loopwise.ConfigError, match="allowed-host"):
        make_server(ServeSettings(host="::", port=0))


def test_a_specific_address_is_its_own_allowed_host() -> None:
    from loopwise.serve.app import allowed_hosts

    assert "192.0.2.7" in allowed_hosts(ServeSettings(host="192.0.2.7"))
    assert "localhost" in allowed_hosts(ServeSettings(host="192.0.2.7"))
    assert "evil.example" not in allowed_hosts(ServeSettings(host="192.0.2.7"))
    given = allowed_hosts(ServeSettings(host="0.0.0.0", allowed_hosts=("Desk.Example",)))
    assert "desk.example" in given and "0.0.0.0" not in given


def test_thirty_people_deciding_one_approval_get_one_decision_and_clear_refusals(
    store_at: str, inbox: Callable[..., Inbox], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPWISE_STORE", store_at)
    (run_id,) = _paused_runs(tmp_path, 1)
    served = inbox()
    forms = [
        served.form(run_id, decision=("approve", "deny")[i % 2], reason="r") for i in range(30)
    ]
    got = _all_at_once([lambda f=f: served.post(f) for f in forms])  # type: ignore[misc]
    assert sorted(got, key=str) == [303] + [409] * 29, got
    assert _decisions([run_id]) in (["approved"], ["denied"])


def test_twenty_five_approvals_decided_at_once_are_all_recorded(
    store_at: str, inbox: Callable[..., Inbox], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPWISE_STORE", store_at)
    run_ids = _paused_runs(tmp_path, 25)
    served = inbox()
    forms = [served.form(r) for r in run_ids]
    got = _all_at_once([lambda f=f: served.post(f) for f in forms])  # type: ignore[misc]
    assert got == [303] * 25
    assert _decisions(run_ids) == ["approved"] * 25


def test_twelve_runs_resumed_at_once_each_end_as_their_own_run(
    store_at: str, inbox: Callable[..., Inbox], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPWISE_STORE", store_at)
    # A target that takes its time to load (as real ones, importing their clients) widens
    # the window in which twelve resumes load it at once.
    run_ids = _paused_runs(tmp_path, 12, "import time\ntime.sleep(0.2)\n" + PAYER)
    _forget_loaded()  # the server loads the target itself, twelve times at once
    served = inbox(resume=True)
    forms = [served.form(r) for r in run_ids]
    got = _all_at_once([lambda f=f: served.post(f) for f in forms])  # type: ignore[misc]
    served.server.app.wait_for_resumes()
    assert got == [303] * 12
    assert set(_statuses(run_ids).values()) == {"completed"}, _statuses(run_ids)
    assert (tmp_path / "ledger.txt").read_text().split() == ["5"] * 12


def test_a_huge_integer_in_an_edit_is_answered_in_the_page(
    inbox: Callable[..., Inbox], tmp_path: Path
) -> None:
    (run_id,) = _paused_runs(tmp_path, 1)
    served = inbox()
    edit = '{"amount": ' + "9" * 5_000 + "}"
    status, page = served.answer(served.form(run_id, args=edit))
    assert status == 400 and "not valid JSON" in page and "digits" in page
    assert _decisions([run_id]) == ["pending"]
    assert served.post(served.form(run_id)) == 303  # still decidable
