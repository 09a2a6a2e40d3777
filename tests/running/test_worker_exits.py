"""A run whose own code calls ``sys.exit()`` ends that run, never the worker running it.

One ``loopwise worker`` process on SQLite and on PostgreSQL takes runs whose step, whose
tool (beside another tool of the same turn) or whose module's ``make_deps()`` calls
``sys.exit()``, then a good run: each bad run ends ``error`` with the exit in its detail,
the worker stays up and completes the good one.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import loopwise
from loopwise import open_store

LOOPWISE = str(Path(sys.executable).with_name("loopwise"))

_EXITS = """
import sys

import loopwise
from loopwise.testing import ScriptedModel, calls, reply


@loopwise.step
def quits(text: str) -> str:
    sys.exit(3)


@loopwise.step
def shout(text: str) -> str:
    return text.upper()


@loopwise.tool
def bail(n: int) -> str:
    \"\"\"Bail out.\"\"\"
    sys.exit(4)


@loopwise.tool
def look(n: int) -> str:
    \"\"\"Look.\"\"\"
    return "seen"


def _two(request):
    if any(m["role"] == "tool" for m in request.messages):
        return reply("done")
    return calls(("look", {"n": 1}, "c1"), ("bail", {"n": 2}, "c2"))


pair = loopwise.Agent(name="pair", tools=[look, bail])


def offline_model():
    return ScriptedModel(_two)
"""

_NO_DEPS = """
import sys

import loopwise


def make_deps():
    sys.exit(5)


@loopwise.step
def needy(text: str) -> str:
    return text
"""


@pytest.fixture
def worker() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for w in started:
        if w.poll() is None:
            w.kill()
        w.communicate()


def _until(done: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _worker_through(
    store_at: str, good: str, started: list[subprocess.Popen[str]]
) -> subprocess.Popen[str]:
    """One ``loopwise worker`` on the store, once it has completed run ``good`` and is
    still up (the bad runs queued before it were taken first)."""
    w = subprocess.Popen(
        [LOOPWISE, "worker", "--store", store_at, "--poll", "0.2", "--concurrency", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started.append(w)
    with open_store(store_at) as st:
        _until(lambda: w.poll() is not None or st.get_run(good).status == "completed", "good")
    assert w.poll() is None, w.communicate()  # the worker is still up
    return w


def test_a_run_that_calls_sys_exit_ends_error_and_the_worker_goes_on(
    tmp_path: Path, store_at: str, worker: list[subprocess.Popen[str]]
) -> None:
    exits, no_deps = tmp_path / "exits.py", tmp_path / "no_deps.py"
    exits.write_text(_EXITS)
    no_deps.write_text(_NO_DEPS)
    with open_store(store_at) as st:
        bad = {
            loopwise.enqueue(f"{exits}:quits", "x", store=st): "SystemExit: 3",
            loopwise.enqueue(f"{exits}:pair", "go", model="scripted", store=st): "SystemExit: 4",
            loopwise.enqueue(f"{no_deps}:needy", "x", store=st): "SystemExit: 5",
        }
        good = loopwise.enqueue(f"{exits}:shout", "hi", store=st)
    w = _worker_through(store_at, good, worker)
    with open_store(store_at) as st:
        assert st.get_run(good).output == "HI"
        for run_id, why in bad.items():
            row = st.get_run(run_id)
            assert row.status == "error" and why in (row.detail or ""), (run_id, row)
            if not why.endswith("5"):  # make_deps() exits before the run's first event
                assert st.events(run_id)[-1].type == "run_finished"
    w.send_signal(signal.SIGTERM)
    _, err = w.communicate(timeout=30)
    assert w.returncode == 0, err


_TIMED_EXITS = """
import sys

import loopwise
from loopwise.testing import ScriptedModel, call, reply


@loopwise.tool(timeout=5)
def look(n: int) -> str:
    \"\"\"Look.\"\"\"
    sys.exit(6)


@loopwise.tool(effect="write", timeout=5)
def pay(n: int) -> str:
    \"\"\"Pay.\"\"\"
    sys.exit(7)


@loopwise.tool(timeout=5)
async def fetch(n: int) -> str:
    \"\"\"Fetch.\"\"\"
    sys.exit(8)


class Abort(BaseException):
    pass


@loopwise.step
def aborts(text: str) -> str:
    raise Abort("from a library")


@loopwise.step
def shout(text: str) -> str:
    return text.upper()


def _one(request):
    if any(m["role"] == "tool" for m in request.messages):
        return reply("done")
    return call(request.tools[0]["function"]["name"], {"n": 1}, id="c1")


looks = loopwise.Agent(name="looks", tools=[look])
pays = loopwise.Agent(name="pays", tools=[pay])
fetches = loopwise.Agent(name="fetches", tools=[fetch])


def offline_model():
    return ScriptedModel(_one)
"""


def test_a_timed_tool_that_exits_or_a_foreign_base_exception_ends_only_its_run(
    tmp_path: Path, store_at: str, worker: list[subprocess.Popen[str]]
) -> None:
    # A tool with a timeout runs in a task of its own (asyncio.wait_for on 3.11, and a
    # sync effect's seen-through call): an exit there must not leave the event loop.
    module = tmp_path / "timed.py"
    module.write_text(_TIMED_EXITS)
    with open_store(store_at) as st:
        bad = {
            loopwise.enqueue(f"{module}:{name}", "go", model="scripted", store=st): why
            for name, why in [
                ("looks", "SystemExit: 6"),
                ("pays", "SystemExit: 7"),
                ("fetches", "SystemExit: 8"),
                ("aborts", "Abort: from a library"),
            ]
        }
        good = loopwise.enqueue(f"{module}:shout", "hi", store=st)
    w = _worker_through(store_at, good, worker)
    with open_store(store_at) as st:
        for run_id, why in bad.items():
            row = st.get_run(run_id)
            assert row.status == "error" and why in (row.detail or ""), (run_id, row)
            assert st.events(run_id)[-1].type == "run_finished", run_id
    w.send_signal(signal.SIGTERM)
    _, err = w.communicate(timeout=30)
    assert w.returncode == 0, err
