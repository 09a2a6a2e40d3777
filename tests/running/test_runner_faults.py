"""Fault injection: a failing model server, failing tools, a killed process, a crowded store.

Every case ends with a clear status, loses no event (seqs gap-free, the run's last event
says how it ended, the store holds exactly what the run emitted) and repeats no effect.
The model faults go through the real ``openai`` client against :class:`FakeChatServer`,
with SDK retries few and their waits tiny (``retry-after-ms: 1``), so the suite stays fast.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import loopwise
from loopwise import Agent, SQLiteStore, Structured
from loopwise.testing import FakeChatServer, Fault, ScriptedModel, call, reply

RETRY_NOW = {"retry-after-ms": "1"}


class Ticket(BaseModel):
    """A triage answer."""

    category: str
    urgency: int


TRIAGE = Structured("triage", Ticket, "Classify the ticket.")


def _consistent(result: loopwise.RunResult, store: Path | None = None) -> list[loopwise.Event]:
    """No lost event: gap-free seqs, a last event that states the status, the store in step."""
    events = result.events
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[0].type == "run_started"
    assert events[-1].type in {"run_finished", "run_paused"}
    assert events[-1].data["status"] == result.status
    if store is not None:
        with SQLiteStore(store) as db:
            stored = db.events(result.run_id)
            assert [e.to_dict() for e in stored] == [e.to_dict() for e in events]
            assert db.get_run(result.run_id).status == result.status
    return events


def _run(step: loopwise.Step, input: Any, model: Any, **options: Any) -> loopwise.RunResult:
    """``loopwise.run`` that closes the model's connections in the loop that opened them."""

    async def go() -> loopwise.RunResult:
        try:
            return await loopwise.arun(step, input, model=model, **options)
        finally:
            await model.aclose()

    return asyncio.run(go())


def _of(events: list[loopwise.Event], kind: str) -> list[loopwise.Event]:
    return [e for e in events if e.type == kind]


# --- the model server fails ---------------------------------------------------------------


def test_a_429_within_the_retries_is_invisible(tmp_path: Path) -> None:
    script = [Fault(status=429, headers=RETRY_NOW), reply({"category": "billing", "urgency": 2})]
    with FakeChatServer(script) as server:
        result = _run(TRIAGE, "charged twice", server.model(max_retries=2), store=tmp_path / "r.db")
    assert result.status == "completed" and result.output == Ticket(category="billing", urgency=2)
    assert len(server.requests) == 2  # the SDK retried once
    events = _consistent(result, tmp_path / "r.db")
    assert len(_of(events, "model_call")) == 1 and result.usage.model_calls == 1


@pytest.mark.parametrize("status", [429, 500, 503])
def test_a_server_error_past_the_retries_ends_error(tmp_path: Path, status: int) -> None:
    script = [Fault(status=status, headers=RETRY_NOW)] * 3
    with FakeChatServer(script) as server:
        result = _run(TRIAGE, "charged twice", server.model(max_retries=2), store=tmp_path / "r.db")
    assert result.status == "error"
    assert str(status) in (result.detail or "")
    assert len(server.requests) == 3  # one call and two retries, then it gave up
    events = _consistent(result, tmp_path / "r.db")
    assert _of(events, "model_call") == [] and result.usage.model_calls == 0


def test_a_model_that_does_not_answer_in_time_ends_error(tmp_path: Path) -> None:
    with FakeChatServer([Fault(delay=5.0)]) as server:
        model = server.model(max_retries=0, timeout=0.2)
        result = _run(TRIAGE, "charged twice", model, store=tmp_path / "r.db")
    assert result.status == "error" and "timed out" in (result.detail or "")
    _consistent(result, tmp_path / "r.db")


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        (Fault(truncated_json=True), "malformed JSON"),
        (Fault(empty_choices=True), "no choices"),
        (Fault(body="<html>502 Bad Gateway</html>"), "malformed JSON"),
        (Fault(disconnect=True), "unreachable"),
        (Fault(status=401), "401"),  # not retried by the SDK, and not hidden either
    ],
)
def test_a_broken_completion_ends_error(tmp_path: Path, fault: Fault, says: str) -> None:
    with FakeChatServer([fault]) as server:
        result = _run(TRIAGE, "charged twice", server.model(), store=tmp_path / "r.db")
    assert result.status == "error" and says in (result.detail or ""), result.detail
    _consistent(result, tmp_path / "r.db")


def _recorder(effects: Counter[str]) -> Agent:
    @loopwise.tool(effect="write")
    def record(n: int, ctx: Any) -> str:
        """Record n; call it for every number you are asked to keep."""
        effects[ctx.idempotency_key] += 1
        return f"recorded {n}"

    return Agent(name="recorder", tools=[record], max_steps=6)


def test_the_model_failing_mid_run_keeps_what_was_done(tmp_path: Path) -> None:
    effects: Counter[str] = Counter()
    script = [call("record", {"n": 1}, id="c1"), *[Fault(status=500, headers=RETRY_NOW)] * 2]
    with FakeChatServer(script) as server:
        result = _run(
            _recorder(effects), "keep 1", server.model(max_retries=1), store=tmp_path / "r.db"
        )
    assert result.status == "error"
    events = _consistent(result, tmp_path / "r.db")
    assert [e.data["call_id"] for e in _of(events, "tool_result")] == ["c1"]
    assert effects == Counter({f"{result.run_id}:c1": 1})


# --- tools fail -----------------------------------------------------------------------------


def test_a_tool_that_keeps_raising_ends_tool_failed() -> None:
    attempts: list[int] = []

    @loopwise.tool
    def lookup(order: int) -> str:
        """Look up an order; call it for each order you are asked about."""
        attempts.append(order)
        raise ConnectionError("orders database is down")

    script = [call("lookup", {"order": n}) for n in range(1, 4)] + [reply("unreachable")]
    agent = Agent(name="looker", tools=[lookup], max_steps=6, failure_cap=3)
    result = loopwise.run(agent, "look up 1, 2, 3", model=ScriptedModel(script), store=None)
    assert result.status == "tool_failed"
    assert attempts == [1, 2, 3]  # each call ran once; nothing was retried behind the model
    results = _of(_consistent(result), "tool_result")
    assert all(e.data["is_error"] for e in results)
    assert "ConnectionError: orders database is down" in results[0].data["content"]


def test_a_tool_that_hangs_past_its_timeout_is_cancelled_and_reported() -> None:
    finished: list[bool] = []

    @loopwise.tool(timeout=0.05)
    async def slow_search(query: str) -> str:
        """Search the archive; call it when the answer may be in old tickets."""
        await asyncio.sleep(30)
        finished.append(True)
        return "found"

    script = [call("slow_search", {"query": "refund"}), reply("The archive did not answer.")]
    agent = Agent(name="searcher", tools=[slow_search], max_steps=4)
    result = loopwise.run(agent, "search", model=ScriptedModel(script), store=None)
    assert result.status == "completed"
    (outcome,) = _of(_consistent(result), "tool_result")
    assert outcome.data["is_error"] and "timed out" in outcome.data["content"]
    assert finished == []  # cancelled, not left running


def test_a_sync_tool_that_hangs_past_its_timeout_does_not_hold_up_the_run() -> None:
    release, finished = threading.Event(), threading.Event()

    @loopwise.tool(timeout=0.05)
    def legacy_lookup(order: int) -> str:
        """Look an order up in the legacy system; call it for orders before 2020."""
        release.wait(30)  # hangs, and no thread can be killed
        finished.set()
        return "found"

    script = [call("legacy_lookup", {"order": 7}), reply("The legacy system did not answer.")]
    agent = Agent(name="legacy", tools=[legacy_lookup], max_steps=4)
    result = loopwise.run(agent, "order 7?", model=ScriptedModel(script), store=None)
    # run() returned while the call still hangs: its thread does not hold up the loop.
    assert not finished.is_set()
    assert result.status == "completed"
    (outcome,) = _of(_consistent(result), "tool_result")
    assert outcome.data["is_error"] and "timed out" in outcome.data["content"]
    release.set()
    assert finished.wait(5)  # its late result went nowhere


def test_a_huge_tool_output_is_truncated_before_the_model_sees_it(tmp_path: Path) -> None:
    @loopwise.tool
    def dump_logs(service: str) -> str:
        """Dump a service's logs; call it when you need raw log lines."""
        return "x" * 5_000_000

    agent = Agent(name="logs", tools=[dump_logs], max_steps=4, max_tool_output_chars=2000)
    script = [call("dump_logs", {"service": "api"}), reply("too long to read")]
    with FakeChatServer(script) as server:
        result = _run(agent, "why?", server.model(), store=tmp_path / "r.db")
    assert result.status == "completed"
    sent = next(m for m in server.requests[1]["messages"] if m["role"] == "tool")["content"]
    assert len(sent) < 2200 and "truncated: showing 2000 of 5000000 characters" in sent
    (stored,) = _of(_consistent(result, tmp_path / "r.db"), "tool_result")
    assert len(stored.data["content"]) < 2200  # the store is not bloated either


# --- a process killed mid model call, resumed by another process -----------------------------

_TARGET = '''
import json, os, time
from pathlib import Path
import loopwise

EFFECTS = Path(os.environ["FAULT_EFFECTS"])

@loopwise.tool(effect="write")
def record(n: int, ctx) -> str:
    """Record n; call it for every number you are asked to keep."""
    with EFFECTS.open("a") as f:
        f.write(json.dumps({"key": ctx.idempotency_key, "n": n}) + "\\n")
    return f"recorded {n}"

recorder = loopwise.Agent(name="recorder", tools=[record], max_steps=8)
'''


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "loopwise.cli.main", *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _until(condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


@pytest.mark.slow
def test_a_process_killed_while_waiting_on_the_model_resumes_in_another(tmp_path: Path) -> None:
    """The store's own crash test kills at event boundaries from inside; this one kills a
    real ``loopwise run`` from outside while its model call is in flight over HTTP, then
    ``loopwise resume`` in a new process re-sends only that call and repeats no effect."""
    (tmp_path / "target.py").write_text(_TARGET)
    hang = {"on": True}

    def respond(request: loopwise.ModelRequest) -> Any:
        done = sum(1 for m in request.messages if m["role"] == "tool")
        if done < 2:
            return call("record", {"n": done}, id=f"c{done}")
        if hang["on"]:  # the third call: the first process is killed while it waits
            return Fault(delay=60.0)
        return reply("recorded 0 and 1")

    with FakeChatServer(respond) as server:
        env = {
            **os.environ,
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "fake",
            "LOOPWISE_STORE": str(tmp_path / "runs.db"),
            "FAULT_EFFECTS": str(tmp_path / "effects.jsonl"),
        }
        first = _cli("run", "target.py:recorder", "--input", '"keep 0 and 1"', "--model",
                     "fake-model", "--json", env=env, cwd=tmp_path)  # fmt: skip
        _until(lambda: len(server.requests) == 3 or first.poll() is not None)
        assert first.poll() is None, first.communicate()
        os.kill(first.pid, signal.SIGKILL)
        first.communicate()  # reaps it and closes its pipes
        hang["on"] = False
        with SQLiteStore(tmp_path / "runs.db") as store:
            (run,) = store.list_runs()
            assert run.status == "running"  # killed: nothing said how it ended
        second = _cli("resume", run.run_id, "--json", env=env, cwd=tmp_path)
        out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert json.loads(out)["status"] == "completed"
    assert len(server.requests) == 4  # only the call in flight was sent again
    lines = (tmp_path / "effects.jsonl").read_text().splitlines()
    keys = Counter(json.loads(line)["key"] for line in lines)
    assert keys == Counter({f"{run.run_id}:c0": 1, f"{run.run_id}:c1": 1})
    with SQLiteStore(tmp_path / "runs.db") as store:
        events = store.events(run.run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.type for e in events].count("model_call") == 3
    assert events[-1].type == "run_finished" and events[-1].data["status"] == "completed"


# --- 200 concurrent runs on one store file ---------------------------------------------------


@pytest.mark.slow
def test_200_concurrent_runs_on_one_store_lose_nothing_and_repeat_nothing(tmp_path: Path) -> None:
    effects: Counter[str] = Counter()
    agent = _recorder(effects)

    def respond(request: loopwise.ModelRequest) -> Any:
        done = sum(1 for m in request.messages if m["role"] == "tool")
        return call("record", {"n": done}, id=f"c{done}") if done < 2 else reply("kept")

    db = tmp_path / "shared.db"

    async def crowd(server: FakeChatServer) -> list[loopwise.RunResult]:
        model = server.model()
        with SQLiteStore(db) as store:
            runs = (loopwise.arun(agent, f"keep {i}", model=model, store=store) for i in range(200))
            try:
                return list(await asyncio.gather(*runs))
            finally:
                await model.aclose()

    with FakeChatServer(respond, latency=0.01) as server:  # a latency makes calls overlap
        results = asyncio.run(crowd(server))
    assert {r.status for r in results} == {"completed"}
    assert server.peak_in_flight > 1  # the runs really overlapped
    for result in results:
        events = _consistent(result, db)
        assert len(_of(events, "tool_result")) == 2
    assert len(effects) == 400 and set(effects.values()) == {1}
    with SQLiteStore(db) as store:
        assert len(store.list_runs(limit=500)) == 200
