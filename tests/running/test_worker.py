"""Workers: queued runs, approvals that wake them, leases that let one take over another's.

Each test starts real ``loopwise worker`` processes on one store (PostgreSQL, and SQLite
where polling is enough) and decides approvals from other processes, as a team would.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise import open_store
from loopwise.cli.main import main

LOOPWISE = str(Path(sys.executable).with_name("loopwise"))

_PAYER = """
from pathlib import Path

import loopwise
from loopwise import gates
from loopwise.testing import ScriptedModel, call, reply

HERE = Path(__file__).parent


@loopwise.tool(effect="irreversible", gate=gates.human())
def refund(amount: int, ctx) -> str:
    \"\"\"Refund (every attempt is logged, so a double would show).\"\"\"
    with (HERE / "ledger.txt").open("a") as f:
        f.write(ctx.idempotency_key + "\\n")
    return f"refunded {amount}"


@loopwise.tool(effect="write")
def slow_note(text: str, ctx) -> str:
    \"\"\"A write that, on its first attempt, hangs until the test kills its worker.\"\"\"
    with (HERE / "attempts.txt").open("a") as f:
        f.write(ctx.idempotency_key + "\\n")
    if len((HERE / "attempts.txt").read_text().split()) == 1:
        (HERE / "started").touch()
        while True:
            pass
    with (HERE / "notes.txt").open("a") as f:
        f.write(ctx.idempotency_key + "\\n")
    return "noted"


def _refunds(request):
    done = [m["content"] for m in request.messages if m["role"] == "tool"]
    return reply(done[-1]) if done else call("refund", {"amount": 9}, id="c1")


def _notes(request):
    done = [m["content"] for m in request.messages if m["role"] == "tool"]
    return reply(done[-1]) if done else call("slow_note", {"text": "hi"}, id="n1")


refunder = loopwise.Agent(name="refunder", tools=[refund])
noter = loopwise.Agent(name="noter", tools=[slow_note])


def _respond(request):
    return (_notes if "slow_note" in str(request.tools) else _refunds)(request)


def offline_model():
    return ScriptedModel(_respond)
"""


@pytest.fixture
def payer(tmp_path: Path) -> Path:
    target = tmp_path / "payer.py"
    target.write_text(_PAYER)
    return target


def _worker(store: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [LOOPWISE, "worker", "--store", store, "--poll", "0.2", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for w in started:
        if w.poll() is None:
            w.kill()
        w.communicate()


def _until(done: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Wait for a condition other processes bring about (failing after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _statuses(store: str, run_ids: list[str]) -> set[str]:
    with open_store(store) as st:
        return {st.get_run(r).status for r in run_ids}


def _queue(capsys: pytest.CaptureFixture[str], store: str, spec: str) -> str:
    capsys.readouterr()
    code = main(["run", spec, "--model", "scripted", "--input", '"go"', "--queue", "--json",
                 "--store", store])  # fmt: skip
    queued = json.loads(capsys.readouterr().out)
    assert code == 0 and queued["status"] == "queued"
    return str(queued["run_id"])


def test_two_workers_and_an_approver_refund_each_approved_run_once(
    payer: Path,
    store_at: str,
    workers: list[subprocess.Popen[str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    workers.extend(_worker(store_at, "--concurrency", "2") for _ in range(2))
    run_ids = [_queue(capsys, store_at, f"{payer}:refunder") for _ in range(6)]
    _until(lambda: _statuses(store_at, run_ids) == {"awaiting_approval"}, "every run to pause")
    assert not (payer.parent / "ledger.txt").exists()  # nothing refunded before approval

    approver = subprocess.run(
        [sys.executable, "-c", "import sys; from loopwise.cli.main import main; "
         "sys.exit(max(main(['approve', r, '--by', 'alice', '--store', sys.argv[1]]) "
         "for r in sys.argv[2:]))", store_at, *run_ids],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert approver.returncode == 0, approver.stderr
    _until(lambda: _statuses(store_at, run_ids) == {"completed"}, "the workers to finish")

    ledger = (payer.parent / "ledger.txt").read_text().split()
    assert sorted(ledger) == sorted(f"{r}:c1" for r in run_ids)  # each once, none twice
    for w in workers:
        w.send_signal(signal.SIGTERM)
    outs = [w.communicate(timeout=30) for w in workers]
    assert [w.returncode for w in workers] == [0, 0], [err for _, err in outs]
    finished = [line.split() for out, _ in outs for line in out.splitlines()]
    # Each run was started by one worker and resumed by one (possibly the other).
    assert sorted(r for r, _ in finished) == sorted(run_ids * 2)
    with open_store(store_at) as st:
        for r in run_ids:
            types = [e.type for e in st.events(r)]
            assert types.count("run_started") == 1 and types.count("run_resumed") == 1


def test_a_killed_workers_run_is_taken_over_after_its_lease_and_effects_once(
    payer: Path,
    store_at: str,
    workers: list[subprocess.Popen[str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    first = _worker(store_at, "--lease", "1")
    workers.append(first)
    run_id = _queue(capsys, store_at, f"{payer}:noter")
    _until((payer.parent / "started").exists, "the first worker to be inside the write")
    with open_store(store_at) as st:
        assert st.get_run(run_id).status == "running"
    first.send_signal(signal.SIGKILL)
    first.communicate()

    second = _worker(store_at, "--lease", "1")
    workers.append(second)
    _until(lambda: _statuses(store_at, [run_id]) == {"completed"}, "the takeover")
    key = f"{run_id}:n1"
    assert (payer.parent / "attempts.txt").read_text().split() == [key, key]  # same key
    assert (payer.parent / "notes.txt").read_text().split() == [key]
    with open_store(store_at) as st:
        run = st.get_run(run_id)
        types = [e.type for e in st.events(run_id)]
    assert run.owner is not None and run.owner.endswith(f":{second.pid}")
    assert types.count("tool_call") == 1 and types.count("tool_result") == 1
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=30) == 0


def test_a_running_run_is_not_taken_over_while_its_lease_is_renewed(
    store_at: str, tmp_path: Path
) -> None:
    with open_store(store_at, lease_seconds=1.0) as st:
        st.create_run("r1", target="t", spec="x.py:t", input=None, model=None, options={},
                      owner="elsewhere:1")  # fmt: skip
        with st.hold("r1", "elsewhere:1"):
            deadline = time.monotonic() + 2.5  # past two lease lengths
            while time.monotonic() < deadline:
                assert st.claim_next("other:2") is None
                time.sleep(0.05)
        _until(lambda: st.claim_next("other:2") is not None, "the lease to lapse", 5)
        assert st.get_run("r1").owner == "other:2"


def test_a_process_never_takes_over_its_own_run_when_its_lease_lapses(store_at: str) -> None:
    # A worker loading a slow target can let its fresh claim's lease lapse before the run
    # starts renewing it; claiming it again would run it twice beside itself.
    with open_store(store_at, lease_seconds=0.2) as st:
        st.create_run("r1", target="t", spec="x.py:t", input=None, model=None, options={},
                      owner="me:1")  # fmt: skip
        _until(lambda: st.claim_next("other:2") is not None, "the lease to lapse", 5)
        assert st.get_run("r1").owner == "other:2"
        time.sleep(0.3)  # the new owner's lease lapses too
        assert st.claim_next("other:2") is None
        assert st.claim_next("me:1") is not None  # another process may take it over


def test_enqueue_in_python_records_a_queued_run(payer: Path, store_at: str) -> None:
    run_id = loopwise.enqueue(f"{payer}:refunder", "go", model="scripted", store=store_at)
    with open_store(store_at) as st:
        row = st.get_run(run_id)
    assert (row.status, row.spec, row.model, row.input) == (
        "queued",
        f"{payer}:refunder",
        "scripted",
        "go",
    )
    with pytest.raises(loopwise.ConfigError, match="already in the store"):
        loopwise.enqueue(f"{payer}:refunder", "go", store=store_at, run_id=run_id)


def test_a_claim_the_store_fails_is_tried_again_and_the_run_in_hand_goes_on(
    payer: Path, store_at: str
) -> None:
    from loopwise.running.worker import awork

    with open_store(store_at) as st:
        first = loopwise.enqueue(f"{payer}:refunder", "go", model="scripted", store=st)
        claims, troubles = [0], []
        claim_next = st.claim_next

        def flaky(owner: str) -> Any:
            claims[0] += 1
            if claims[0] == 2:  # the claim right after the first run was taken
                raise loopwise.StoreError("database is locked (a passing failure)")
            return claim_next(owner)

        st.claim_next = flaky  # type: ignore[method-assign]

        async def work() -> None:
            stop = asyncio.Event()
            worker = asyncio.create_task(
                awork(st, concurrency=2, poll_seconds=0.05, stop=stop, on_trouble=troubles.append)
            )
            while st.get_run(first).status not in {"completed", "awaiting_approval"}:
                await asyncio.sleep(0.02)
            stop.set()
            await worker

        asyncio.run(work())
        assert [str(e) for e in troubles] == ["database is locked (a passing failure)"]
        assert st.get_run(first).status != "cancelled"


def test_workers_take_queued_runs_in_arrival_order(payer: Path, store_at: str) -> None:
    with open_store(store_at) as st:
        queued = [
            loopwise.enqueue(f"{payer}:refunder", n, model="scripted", store=st) for n in range(30)
        ]
        taken = []
        while (row := st.claim_next("w:1")) is not None:
            taken.append(row.run_id)
    assert taken == queued


def test_worker_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # A directory is no store: refused before the worker says it is up (one line).
    for argv in (["worker", "--concurrency", "0"], ["worker", "--lease", "-1"],
                 ["worker", "--store", "redis://x"], ["worker", "--store", str(tmp_path)],
                 ["worker", "--store", f"sqlite:///{tmp_path}"]):  # fmt: skip
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert "up to" not in err, err


_HOLDER = """
import asyncio
from pathlib import Path

import loopwise
from loopwise.testing import ScriptedModel, call, reply

HERE = Path(__file__).parent


@loopwise.tool
async def hold() -> str:
    \"\"\"Hold the run until the test lets it go (the first run only).\"\"\"
    if not (HERE / "started").exists():
        (HERE / "started").touch()
        while not (HERE / "go").exists():
            await asyncio.sleep(0.01)
    return "held"


def _respond(request):
    return reply("done") if request.tool_results() else call("hold", {}, id="h1")


holder = loopwise.Agent(name="holder", tools=[hold])


def offline_model():
    return ScriptedModel(_respond)
"""


def test_a_busy_worker_is_not_woken_by_runs_it_cannot_take(tmp_path: Path, store_at: str) -> None:
    # Every NOTIFY (a queued run) wakes every listening worker; one at its concurrency
    # cannot take the run, and eight woken per queued run spent more CPU on the news than
    # on their runs. A busy worker waits for its own runs; the news waits for it.
    from loopwise.running.worker import awork

    (tmp_path / "holder.py").write_text(_HOLDER)
    spec = f"{tmp_path / 'holder.py'}:holder"
    with open_store(store_at) as st:
        looks = [0]
        wait_for_work = st.wait_for_work

        def counted(timeout: float) -> None:
            looks[0] += 1
            wait_for_work(timeout)

        st.wait_for_work = counted  # type: ignore[method-assign]
        first = loopwise.enqueue(spec, "go", model="scripted", store=st)

        async def work() -> tuple[int, int, list[str]]:
            stop = asyncio.Event()
            worker = asyncio.create_task(awork(st, concurrency=1, poll_seconds=0.02, stop=stop))
            while not (tmp_path / "started").exists():
                await asyncio.sleep(0.01)
            busy = looks[0]
            later = []
            for n in range(5):  # five notices, apart, while the worker's hands are full
                later.append(loopwise.enqueue(spec, n, model="scripted", store=st))
                await asyncio.sleep(0.05)
            woken = looks[0] - busy
            (tmp_path / "go").touch()
            while {st.get_run(r).status for r in [first, *later]} != {"completed"}:
                await asyncio.sleep(0.02)
            stop.set()
            await worker
            return woken, looks[0], later

        woken, total, later = asyncio.run(work())
    assert woken <= 1, f"a busy worker looked for work {woken} times"
    assert len(later) == 5 and total >= 1
