"""A PostgreSQL server restarted under a run: the run waits it out, nothing is dropped.

The tests start a throwaway server of their own (``.ci/postgres start``) and restart it
(``.ci/postgres restart``, same port and data) while a run writes: once from inside a
tool, so every pooled connection is dead when the run goes on, and once in the
background with the server down for two seconds while the run commits its effects, and
under a ``loopwise worker`` process whose run waits in a tool meanwhile; and a store a
process keeps answers every call after a restart. Each run ends
``completed``, each effect taken once, and its stored log is the whole log, gap-free (a
server away past the retries: nothing dropped, the run resumes). Without the binaries the
tests skip, except under ``CI=true``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise import Status, open_store
from loopwise.testing import ScriptedModel, call, reply
from tests.support import ROOT

POSTGRES = ROOT / ".ci" / "postgres"


def _has_binaries() -> bool:
    probe = "command -v pg_ctl || ls /usr/lib/postgresql/*/bin/pg_ctl"
    return subprocess.run(["sh", "-c", probe], check=False, capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def own_server() -> Iterator[tuple[str, str]]:
    """A PostgreSQL server of these tests' own (restarted by them): its URL and folder."""
    if not _has_binaries() and os.environ.get("CI", "").lower() not in {"1", "true", "yes"}:
        pytest.skip("no PostgreSQL binaries to start a throwaway server (.ci/postgres)")
    # Not under pytest's tmp_path: as root the server runs as another user, who must
    # reach its folder.
    where = tempfile.mkdtemp(prefix="lw_restart_")
    try:
        url = subprocess.run(
            [str(POSTGRES), "start", where], capture_output=True, text=True, check=True
        ).stdout.strip()
        yield url, where
    finally:
        subprocess.run([str(POSTGRES), "stop", where], check=False)
        shutil.rmtree(where, ignore_errors=True)


def _pays(count: int) -> ScriptedModel:
    def respond(request: loopwise.ModelRequest) -> Any:
        done = sum(1 for m in request.messages if m["role"] == "tool")
        return call("pay", {"n": done + 1}, id=f"p{done + 1}") if done < count else reply("ok")

    return ScriptedModel(respond)


@pytest.mark.slow
@pytest.mark.parametrize("down_seconds", [0, 2])
def test_a_run_goes_on_across_a_server_restart_and_its_log_is_whole(
    own_server: tuple[str, str], down_seconds: int
) -> None:
    url, where = own_server
    paid: list[int] = []
    restarting: list[subprocess.Popen[bytes]] = []

    @loopwise.tool(effect="write")
    def pay(n: int) -> str:
        """Pay."""
        paid.append(n)
        if n == 2:
            restart = [str(POSTGRES), "restart", where, str(down_seconds)]
            if down_seconds:
                restarting.append(subprocess.Popen(restart))  # down while the run writes
            else:
                subprocess.run(restart, check=True)  # every pooled connection now dead
        return f"paid {n}"

    agent = loopwise.Agent(name="payer", tools=[pay], max_steps=10)
    run_id = f"across{down_seconds}"
    with open_store(url) as st:
        st.list_runs()  # the pool's connections are made before the restart
        result = loopwise.run(agent, "go", model=_pays(5), store=st, run_id=run_id)
        for p in restarting:
            assert p.wait(60) == 0
        assert result.status == Status.COMPLETED, result.detail
        assert paid == [1, 2, 3, 4, 5]
        stored = st.events(run_id)
        assert [e.to_dict() for e in stored] == [e.to_dict() for e in result.events]
        assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
        results = [e.data["content"] for e in stored if e.type == "tool_result"]
        assert results == [f"paid {n}" for n in range(1, 6)]
        assert st.get_run(run_id).status == Status.COMPLETED


def _until_down(url: str) -> None:
    import time

    import psycopg

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            psycopg.connect(url, connect_timeout=1).close()
        except psycopg.OperationalError:
            return
        time.sleep(0.05)
    raise AssertionError("the server did not go down")


@pytest.mark.slow
def test_a_store_down_past_its_retries_drops_nothing_and_the_run_resumes(
    own_server: tuple[str, str],
) -> None:
    url, where = own_server
    paid: list[int] = []
    restarting: list[subprocess.Popen[bytes]] = []

    @loopwise.tool(effect="write")
    def pay(n: int) -> str:
        """Pay."""
        paid.append(n)
        if n == 2 and not restarting:
            restarting.append(subprocess.Popen([str(POSTGRES), "restart", where, "3"]))
            _until_down(url)  # this effect's result is written while the server is away
        return f"paid {n}"

    agent = loopwise.Agent(name="payer", tools=[pay], max_steps=10)
    with loopwise.PostgresStore(url, connect_timeout=1) as st:
        st.retry_seconds = 0.3  # gives up long before the server is back
        with pytest.raises(loopwise.StoreError) as failed:
            loopwise.run(agent, "go", model=_pays(4), store=st, run_id="down")
        assert failed.value.code == "unreachable"
        assert restarting[0].wait(60) == 0
        st.retry_seconds = 15
        st.flush()  # the server is back: what could not be written is written now
        stored = st.events("down")
        assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
        results = [e.data["content"] for e in stored if e.type == "tool_result"]
        assert results == ["paid 1", "paid 2"]  # the result written while down is kept
        assert st.get_run("down").status == Status.ERROR  # resumable, as a run that raised
        resumed = loopwise.resume("down", step=agent, model=_pays(4), store=st)
    assert resumed.status == Status.COMPLETED, resumed.detail
    assert paid == [1, 2, 3, 4]  # nothing paid twice


_WORKED = """
from pathlib import Path

import loopwise
from loopwise.testing import ScriptedModel, call, reply

HERE = Path(__file__).parent


@loopwise.tool(effect="write")
def note(n: int, ctx) -> str:
    \"\"\"Note (every attempt is logged, so a double would show).\"\"\"
    with (HERE / "ledger.txt").open("a") as f:
        f.write(ctx.idempotency_key + "\\n")
    if n == 1 and not (HERE / "go").exists():
        (HERE / "started").touch()
        while not (HERE / "go").exists():  # the test restarts the server meanwhile
            pass
    return f"noted {n}"


def _notes(request):
    done = sum(1 for m in request.messages if m["role"] == "tool")
    return call("note", {"n": done + 1}, id=f"n{done + 1}") if done < 3 else reply("ok")


noter = loopwise.Agent(name="noter", tools=[note])


def offline_model():
    return ScriptedModel(_notes)
"""


@pytest.mark.slow
def test_a_worker_goes_on_across_a_server_restart(
    own_server: tuple[str, str], tmp_path: Path
) -> None:
    import sys
    import time

    url, where = own_server
    target = tmp_path / "noter.py"
    target.write_text(_WORKED)
    with open_store(url) as st:
        runs = [
            loopwise.enqueue(f"{target}:noter", "go", model="scripted", store=st, run_id=f"w{i}")
            for i in range(2)
        ]
    loopwise_cli = str(Path(sys.executable).with_name("loopwise"))
    worker = subprocess.Popen(
        [loopwise_cli, "worker", "--store", url, "--poll", "0.2", "--concurrency", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists():
            assert worker.poll() is None and time.monotonic() < deadline, "no run started"
            time.sleep(0.05)
        subprocess.run([str(POSTGRES), "restart", where, "1"], check=True)
        (tmp_path / "go").touch()
        with open_store(url) as st:
            while {st.get_run(r).status for r in runs} != {"completed"}:
                statuses = {r: st.get_run(r).status for r in runs}
                assert worker.poll() is None and time.monotonic() < deadline + 60, statuses
                assert "error" not in statuses.values(), statuses
                time.sleep(0.1)
            for run_id in runs:
                stored = st.events(run_id)
                assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
                results = [e.data["content"] for e in stored if e.type == "tool_result"]
                assert results == ["noted 1", "noted 2", "noted 3"]
        ledger = (tmp_path / "ledger.txt").read_text().split()
        assert len(ledger) == len(set(ledger)) == 6  # every effect once
        assert worker.poll() is None  # still up after the restart
    finally:
        worker.terminate()
        worker.communicate(timeout=30)


def _gated_payer(paid: list[int]) -> loopwise.Agent:
    @loopwise.tool(effect="irreversible", gate=loopwise.gates.human())
    def pay(n: int) -> str:
        """Pay, once a person approves."""
        paid.append(n)
        return f"paid {n}"

    return loopwise.Agent(name="payer", tools=[pay], max_steps=6)


def _end_sessions(url: str, where: str, how: str) -> None:
    """Kill every session of the server as a restart does, or end them on a running server."""
    if how == "restart":
        subprocess.run([str(POSTGRES), "restart", where, "0"], check=True)
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        # With a timeout, each call returns once its session has ended.
        admin.execute(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )


@pytest.mark.slow
@pytest.mark.parametrize("how", ["restart", "sessions ended"])
def test_a_kept_store_answers_every_call_after_its_server_restarts(
    own_server: tuple[str, str], how: str
) -> None:
    """A long-lived process keeps its store (``store=url`` is kept per process, and one
    opened once): after a restart every call succeeds, the writes the store does not try
    again (a claim, a decision, a new run) too, and each takes effect once."""
    url, where = own_server
    paid: list[int] = []
    agent = _gated_payer(paid)
    model = _pays(1)
    tag = how.replace(" ", "-")
    paused = f"paused-{tag}"
    with open_store(url) as kept:
        first = loopwise.run(agent, "go", model=model, store=url, run_id=paused)
        assert first.status == Status.AWAITING_APPROVAL
        assert kept.claim_next("worker-1") is None  # every connection used before the end
        _end_sessions(url, where, how)
        assert kept.claim_next("worker-1") is None  # a claim: a write never tried again
        assert [a.status for a in loopwise.approve(paused, store=url, by="ann")] == ["approved"]
        fresh = loopwise.run(agent, "go", model=_pays(0), store=url, run_id=f"fresh-{tag}")
        assert fresh.status == Status.COMPLETED
        resumed = loopwise.resume(paused, step=agent, model=model, store=url)
        assert resumed.status == Status.COMPLETED, resumed.detail
        assert {paused, f"fresh-{tag}"} <= {r.run_id for r in kept.list_runs()}
        assert kept.pending(paused) == []
    assert paid == [1]  # approved once, paid once
