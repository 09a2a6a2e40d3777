"""The run store: recording by default, concurrency, schema versions, exactly-once resume.

The crash test forks a child per kill point; the child runs an agent and SIGKILLs itself
from an event sink at event N (before the store records it, so every point between two
recorded events is covered, including "effect done, result not yet recorded"). The
parent resumes each run and compares its effects with an uninterrupted run's.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sqlite3
import time
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise import Event, SQLiteStore, StoreError, gates, open_store
from loopwise.cli.main import main
from loopwise.testing import ScriptedModel, call, calls, reply
from tests.support.crash import KillAt, drive, effects, fork, record_effect, wait

_V1 = """
CREATE TABLE runs (id TEXT PRIMARY KEY, target TEXT NOT NULL, spec TEXT, status TEXT NOT NULL,
    input TEXT, output TEXT, usage TEXT, model TEXT, options TEXT NOT NULL DEFAULT '{}',
    detail TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL,
    step TEXT NOT NULL, at TEXT NOT NULL, key TEXT, data TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)) WITHOUT ROWID;
CREATE TABLE approvals (run_id TEXT NOT NULL, approval_id TEXT NOT NULL, step TEXT NOT NULL,
    tool TEXT NOT NULL, call_id TEXT, args TEXT NOT NULL, effect TEXT, reason TEXT,
    tainted_by TEXT, args_hash TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'pending',
    requested_at TEXT NOT NULL, decided_by TEXT, decided_at TEXT, decision_reason TEXT,
    edited_args TEXT, PRIMARY KEY (run_id, approval_id));
"""


def _gap_free(store: SQLiteStore, run_id: str) -> list[Event]:
    events = store.events(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    return events


def _chatty(rounds: int) -> loopwise.Step:
    @loopwise.step
    async def inner(x: int) -> int:
        await asyncio.sleep(0)
        return x

    @loopwise.step
    async def chatty(x: int, ctx: loopwise.Context) -> int:
        for i in range(rounds):
            await ctx.run_step(inner, i)
        return x

    return chatty


def test_every_run_is_recorded_in_the_default_store(capsys: pytest.CaptureFixture[str]) -> None:
    result = loopwise.run(_chatty(2), 7)
    path = Path(os.environ["LOOPWISE_STORE"])
    with SQLiteStore() as store:
        assert store.path == path
        log = store.show(result.run_id)
    assert log["status"] == "completed" and log["output"] == 7 and log["input"] == 7
    assert [e["type"] for e in log["events"]] == [e.type for e in result.events]
    assert main(["runs", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["runs"]
    assert [r["run_id"] for r in listed] == [result.run_id]


def test_store_none_records_nothing(tmp_path: Path) -> None:
    result = loopwise.run(_chatty(1), 1, store=None)
    assert result.status == "completed"
    assert not Path(os.environ["LOOPWISE_STORE"]).exists()


def test_a_model_named_by_string_is_closed_with_its_stored_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closed: list[str] = []

    class Named(ScriptedModel):
        async def aclose(self) -> None:
            closed.append(self.name)

    monkeypatch.setattr("loopwise.models.openai.resolve_model", lambda name: Named([reply("hi")]))
    result = loopwise.run(_chatty(0), 1, model="some-model")
    assert result.status == "completed" and len(closed) == 1


async def _many(store: Any, runs: int, rounds: int) -> list[loopwise.RunResult]:
    step = _chatty(rounds)
    return list(await asyncio.gather(*(loopwise.arun(step, i, store=store) for i in range(runs))))


def test_concurrent_runs_in_one_process_lose_and_interleave_nothing(store_at: str) -> None:
    results = asyncio.run(_many(store_at, runs=40, rounds=10))
    with open_store(store_at) as store:
        for result in results:
            events = _gap_free(store, result.run_id)
            assert [e.to_dict() for e in events] == [e.to_dict() for e in result.events]
        assert len(store.list_runs(limit=100)) == 40


def test_several_processes_share_one_store(store_at: str) -> None:
    open_store(store_at).close()  # created (and migrated) before the children race
    pids = [fork(lambda: asyncio.run(_many(store_at, runs=15, rounds=5))) for _ in range(3)]
    assert all(os.waitstatus_to_exitcode(wait(pid)) == 0 for pid in pids)
    with open_store(store_at) as store:
        runs = store.list_runs(limit=100)
        assert len(runs) == 45 and {r.status for r in runs} == {"completed"}
        for r in runs:
            assert len(_gap_free(store, r.run_id)) == 2 + 2 * 5 + 2


def test_schema_is_versioned(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    with SQLiteStore(db) as store:
        assert store.list_runs() == []
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 8
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(StoreError, match="schema version 99"):
        SQLiteStore(db).list_runs()


def test_a_version_1_file_is_migrated(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.executescript(_V1)
    conn.execute("INSERT INTO runs (id, target, status, created_at, updated_at) "
                 "VALUES ('r0', 't', 'completed', 'a', 'a')")  # fmt: skip
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with SQLiteStore(db) as store:
        assert store.get_run("r0").owner is None
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == 8


def test_eval_history_made_before_it_was_the_stores_survives_the_migration(
    tmp_path: Path,
) -> None:
    # Before schema version 3, loopwise.evidence.evals.harness created eval_results in a
    # version-2 store.
    db = tmp_path / "evals.db"
    conn = sqlite3.connect(db)
    conn.executescript(_V1)
    conn.execute("ALTER TABLE runs ADD COLUMN owner TEXT")
    conn.execute("PRAGMA user_version = 2")
    conn.execute(
        "CREATE TABLE eval_results (eval_id TEXT NOT NULL, target TEXT NOT NULL, "
        "dataset TEXT NOT NULL, created_at TEXT NOT NULL, summary TEXT NOT NULL, "
        "PRIMARY KEY (eval_id, target))"
    )
    conn.execute(
        "INSERT INTO eval_results VALUES ('e1', 'triage', 'd.jsonl', '2026-01-01', "
        "'{\"correct_rate\": 0.9}')"
    )
    conn.commit()
    conn.close()
    with SQLiteStore(db) as store:
        old = store.last_eval("triage", dataset="d.jsonl", before="2026-02-01")
        assert old == {"created_at": "2026-01-01", "eval_id": "e1", "correct_rate": 0.9}
        store.save_eval(
            "e2", dataset="d.jsonl", created_at="2026-03-01", summaries={"triage": {"n": 4}}
        )
        assert store.last_eval("triage", dataset="d.jsonl", before="2026-02-01") == old
        newest = store.last_eval("triage", dataset="d.jsonl", before="2026-12-31")
        assert newest == {"created_at": "2026-03-01", "eval_id": "e2", "n": 4}
        assert store.last_eval("triage", dataset="other.jsonl", before="2026-12-31") is None


def test_eval_history_is_kept_in_either_store(store_at: str) -> None:
    with open_store(store_at) as store:
        assert store.last_eval("triage", dataset="d.jsonl", before="2026-12-31") is None
        for n, day in enumerate(("2026-01-01", "2026-03-01")):
            store.save_eval(f"e{n}", dataset="d.jsonl", created_at=day,
                            summaries={"triage": {"n": n}, "agent": {"n": -n}})  # fmt: skip
        assert store.last_eval("triage", dataset="d.jsonl", before="2026-02-01") == {
            "created_at": "2026-01-01", "eval_id": "e0", "n": 0}  # fmt: skip
        assert store.last_eval("agent", dataset="d.jsonl", before="2026-12-31") == {
            "created_at": "2026-03-01", "eval_id": "e1", "n": -1}  # fmt: skip


def test_a_run_is_resumed_by_one_process_at_a_time(store_at: str) -> None:
    db = store_at
    gate_open = asyncio.Event()
    running = asyncio.Event()

    @loopwise.step
    async def slow(x: int, ctx: loopwise.Context) -> int:
        running.set()
        await gate_open.wait()
        return x

    async def scenario() -> None:
        with open_store(db) as store:
            first = asyncio.create_task(loopwise.arun(slow, 1, store=store, run_id="r1"))
            await running.wait()  # the first run holds r1 now
            with pytest.raises(loopwise.ConfigError, match="still running"):
                await loopwise.aresume("r1", step=slow, store=store)
            gate_open.set()
            assert (await first).status == "completed"
            assert (await loopwise.aresume("r1", step=slow, store=store)).status == "completed"

    asyncio.run(scenario())
    with open_store(db) as store:  # a run left `running` by a live process elsewhere
        store.create_run("r2", target="slow", spec=None, input=2, model=None, options={},
                         owner=f"{socket.gethostname()}:{os.getppid()}")  # fmt: skip
        with pytest.raises(loopwise.ConfigError, match="still running"):
            loopwise.resume("r2", step=slow, store=store)
        assert loopwise.resume("r2", step=slow, store=store, force=True).output == 2


def test_a_duplicate_seq_is_refused_not_lost(store_at: str) -> None:
    with open_store(store_at) as store:
        event = Event(seq=1, type=loopwise.EventType.RUN_FINISHED, step="", at="now", data={})
        store.record("r1", event)
        with pytest.raises(StoreError, match=r"(?i)unique"):
            store.record("r1", event)


def test_a_run_taken_over_loses_its_own_grouped_events_not_another_runs(
    store_at: str,
) -> None:
    # Two runs of one process share the store's group of uncommitted events; when one of
    # them finds at its durability point that another process took it over, the other
    # run's events still reach its log.
    def event(seq: int, kind: loopwise.EventType, **data: Any) -> Event:
        return Event(seq=seq, type=kind, step="s", at="now", data=data)

    with open_store(store_at) as st, open_store(store_at) as elsewhere:
        for run_id in ("a", "b"):
            st.create_run(run_id, target="t", spec=None, input=None, model=None, options={},
                          owner="me:1")  # fmt: skip
        with st.hold("a", "me:1"), st.hold("b", "me:1"):
            st.record("b", event(1, loopwise.EventType.MODEL_CALL))  # grouped
            st.record("a", event(1, loopwise.EventType.MODEL_CALL))  # grouped
            assert elsewhere.claim("a", "other:2", alive=lambda owner: False)
            with pytest.raises(StoreError) as raised:
                st.record("a", event(2, loopwise.EventType.RUN_FINISHED, status="completed"))
            assert raised.value.code == "lease-lost"
            st.record("b", event(2, loopwise.EventType.RUN_FINISHED, status="completed"))
        assert [e.seq for e in _gap_free(st, "b")] == [1, 2]
        assert st.events("a") == [] and st.get_run("a").owner == "other:2"


def _effect_agent(workdir: dict[str, Path]) -> loopwise.Agent:
    @loopwise.tool(effect="write")
    def record(n: int, ctx: Any) -> str:
        """Record n durably (once per idempotency key)."""
        return record_effect(workdir["dir"], "record", n, ctx.idempotency_key)

    @loopwise.tool(effect="irreversible", gate=gates.human())
    def pay(n: int, ctx: Any) -> str:
        """Pay n (once per idempotency key), after a person approves."""
        return record_effect(workdir["dir"], "pay", n, ctx.idempotency_key)

    return loopwise.Agent(name="recorder", tools=[record, pay], max_steps=6)


def _respond(request: loopwise.ModelRequest) -> Any:
    done = sum(1 for m in request.messages if m["role"] == "tool")
    if done == 0:
        return call("record", {"n": 0}, id="c0")
    if done == 1:
        return calls(("record", {"n": 1}, "c1"), ("pay", {"n": 2}, "c2"))
    if done == 3:
        return call("record", {"n": 3}, id="c3")
    return reply(f"recorded {done}")


@pytest.mark.slow
def test_killed_at_any_event_resume_ends_with_the_same_effects(
    tmp_path: Path, store_at: str
) -> None:
    workdir = {"dir": tmp_path / "clean"}
    workdir["dir"].mkdir()
    agent = _effect_agent(workdir)
    drive(agent, store_at, "clean", KillAt(0, tmp_path / "never"), _respond)
    expected = effects(workdir["dir"], "clean")
    assert expected == [("c0", "record", 0), ("c1", "record", 1), ("c2", "pay", 2),
                        ("c3", "record", 3)]  # fmt: skip
    with open_store(store_at) as store:
        total = len(store.events("clean"))
        output = store.get_run("clean").output

    for n in range(1, total + 1):  # every event of both processes' segments
        workdir["dir"] = tmp_path / f"kill{n}"
        workdir["dir"].mkdir()
        db, run_id = store_at, f"kill{n}"
        drive(agent, db, run_id, KillAt(n, workdir["dir"] / "killed"), _respond)
        assert (workdir["dir"] / "killed").exists(), n
        assert effects(workdir["dir"], run_id) == expected, n
        attempts = Counter((workdir["dir"] / "attempts.txt").read_text().split())
        assert max(attempts.values()) <= 2, n  # only a call killed before its result was kept
        with open_store(db) as store:
            events = _gap_free(store, run_id)
            assert store.get_run(run_id).output == output
        results = [e.data["call_id"] for e in events if e.type == "tool_result"]
        assert sorted(results) == ["c0", "c1", "c2", "c3"], n
        # An effect whose result was recorded before the kill never ran again.
        before = {e.data["call_id"] for e in events[: n - 1] if e.type == "tool_result"}
        assert all(attempts[f"{run_id}:{c}"] == 1 for c in before), n
        again = loopwise.resume(run_id, step=agent, model=ScriptedModel(_respond), store=db)
        assert again.status == "completed" and len(again.events) == len(events)


def test_a_run_that_raises_is_not_left_running(tmp_path: Path) -> None:
    @loopwise.step
    async def needs_model(x: str, ctx: loopwise.Context) -> str:
        await ctx.call_model(loopwise.ModelRequest(messages=[{"role": "user", "content": x}]))
        return x

    with SQLiteStore(tmp_path / "f.db") as store:
        with pytest.raises(loopwise.ConfigError, match="has none"):
            loopwise.run(needs_model, "hi", store=store, run_id="f1")
        row = store.get_run("f1")
    assert row.status == "error" and "ConfigError" in row.detail


def test_a_reused_run_id_is_a_config_error_naming_it() -> None:
    first = loopwise.run(_chatty(1), 1, run_id="ticket-42")
    assert first.status == "completed"
    with pytest.raises(loopwise.ConfigError, match="'ticket-42' is already in the store"):
        loopwise.run(_chatty(1), 1, run_id="ticket-42")


def test_store_cli_mistakes_exit_2_and_logs_read_cleanly(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["pending", "no-such-run", "--json"]) == 2
    assert "no-such-run" in capsys.readouterr().err
    assert main(["runs", "list", "--limit", "-1"]) == 2
    assert "from 1 to 1,000,000,000" in capsys.readouterr().err

    @loopwise.step
    async def failing_tool_run(x: Any, ctx: loopwise.Context) -> None:
        ctx.emit(loopwise.EventType.TOOL_RESULT, {"is_error": True, "content": "ERROR: boom"})

    result = loopwise.run(failing_tool_run, None)
    assert main(["runs", "show", result.run_id]) == 0
    out = capsys.readouterr().out
    assert "ERROR: boom" in out and "ERROR ERROR" not in out


def test_a_store_that_cannot_be_used_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_text("this is not a database\n" * 100)
    newer = tmp_path / "newer.db"
    with closing(sqlite3.connect(newer)) as conn:
        conn.execute("PRAGMA user_version = 99")
    foreign = tmp_path / "shop.db"
    with closing(sqlite3.connect(foreign)) as conn:
        conn.execute("CREATE TABLE customers (id TEXT)")
        conn.commit()
    cases = [
        (corrupt, "file is not a database"),
        (newer, "schema version 99; this loopwise knows 8 (upgrade loopwise)"),
        (tmp_path, "unable to open database file"),  # a directory
        (foreign, "is not a loopwise run store (it holds other tables: customers)"),
    ]
    for path, says in cases:
        capsys.readouterr()
        assert main(["runs", "list", "--store", str(path)]) == 2, path
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1 and "Traceback" not in err, err
    # Another program's database was not touched (no tables of ours, no WAL switch).
    with closing(sqlite3.connect(foreign)) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["customers"]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    # A reader never makes a store in a folder that does not exist (a mistyped path);
    # `run` makes it and says so (tests/project/test_first_hour.py).
    assert main(["runs", "list", "--store", str(tmp_path / "new" / "dir" / "runs.db")]) == 2
    assert not (tmp_path / "new").exists()


def test_a_store_url_is_a_store_or_one_line_never_a_file_named_after_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # a port nobody listens on
    port = closed.getsockname()[1]
    cases = [
        ("mysql://u@h/db", "unknown store scheme 'mysql'"),
        ("postgresql:runs", "bad store URL 'postgresql:runs'"),
        ("sqlite://runs.db", "bad store URL 'sqlite://runs.db'"),
        (f"postgresql://nobody:secret@127.0.0.1:{port}/x", "cannot reach the PostgreSQL run"),
        # The password is never echoed: not in the query, not in a URL missing its //,
        # not where the driver quotes what it could not decode.
        (f"postgresql://127.0.0.1:{port}/x?password=secret", "cannot reach the PostgreSQL"),
        ("postgresql:nobody:secret@127.0.0.1/x", "bad store URL 'postgresql:nobody:***@"),
        (f"postgresql://nobody:se%zzcret@127.0.0.1:{port}/x", "cannot reach the PostgreSQL"),
    ]
    for url, says in cases:
        assert main(["runs", "list", "--store", url]) == 2, url
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, err
        assert "secret" not in err and "zzcret" not in err, err
        monkeypatch.setenv("LOOPWISE_STORE", url)
        with pytest.raises(StoreError) as raised:
            loopwise.run(_chatty(1), 1)
        assert raised.value.code in {"bad-url", "unreachable"}
        assert "secret" not in str(raised.value) and "zzcret" not in str(raised.value)
    closed.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing named after a URL
    result = loopwise.run(_chatty(1), 5, store="sqlite:///sub/runs.db")
    with open_store(tmp_path / "sub" / "runs.db") as store:
        assert store.get_run(result.run_id).output == 5


def test_a_postgresql_schema_loopwise_cannot_read_is_refused_in_one_line(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg

    # Another program's loopwise_schema table (the server's error spans three lines), then
    # ours emptied by hand (its version unknown: migrating it again would fail half-way).
    for table in ("(v TEXT); INSERT INTO loopwise_schema VALUES ('x')", "(version INTEGER)"):
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS loopwise_schema")
            conn.execute(f"CREATE TABLE loopwise_schema {table}".encode())
        for _ in range(2):  # and again: the first attempt changed nothing
            assert main(["runs", "list", "--store", pg_url]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "run store" in err, err
        with psycopg.connect(pg_url) as conn:
            tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            assert [r[0] for r in tables] == ["loopwise_schema"]


def _asks_twice(paid: list[Any]) -> tuple[loopwise.Agent, ScriptedModel]:
    def tool_of(name: str) -> loopwise.Tool:
        @loopwise.tool(effect="irreversible", gate=gates.human(), name=name)
        def pay(amount: int, ctx: Any) -> str:
            """Pay an amount."""
            paid.append((name, amount))
            return f"{name} {amount}"

        return pay

    def respond(request: loopwise.ModelRequest) -> Any:
        done = [str(m["content"]) for m in request.messages if m["role"] == "tool"]
        if done:
            return reply(" | ".join(done))
        return calls(("pay", {"amount": 1}, "c1"), ("send", {"amount": 2}, "c2"))

    agent = loopwise.Agent(name="desk", tools=[tool_of("pay"), tool_of("send")])
    return agent, ScriptedModel(respond)


def test_a_decision_is_recorded_once_as_the_person_made_it(store_at: str) -> None:
    paid: list[Any] = []
    agent, model = _asks_twice(paid)
    with open_store(store_at) as store:
        paused = loopwise.run(agent, "go", model=model, store=store)
        run_id = paused.run_id
        (asked,) = [a for a in store.approvals(run_id) if a.approval_id == "c1"]
        assert (asked.step, asked.tool, asked.call_id, asked.args) == (
            "desk",
            "pay",
            "c1",
            {"amount": 1},
        )
        assert (asked.effect, asked.reason, asked.tainted_by) == (
            "irreversible", "this tool is gated by a human", None,
        )  # fmt: skip
        assert asked.args_hash == gates.args_hash("pay", {"amount": 1})
        assert (asked.status, asked.decided_by, asked.decided_at, asked.edited_args) == (
            "pending", None, None, None,
        )  # fmt: skip
        assert store.approval(run_id, "c3") is None and store.approval("nope", "c1") is None
        decided = store.decide(
            run_id, "c1", decision="edited", by="alice", reason="less",
            edited_args={"amount": 0}, seen_hash=asked.args_hash,
        )  # fmt: skip
        assert decided == store.approval(run_id, "c1")
        assert (decided.status, decided.decided_by, decided.decision_reason) == (
            "edited", "alice", "less",
        )  # fmt: skip
        assert decided.edited_args == {"amount": 0} and decided.decided_at is not None
        assert decided.requested_at == asked.requested_at and decided.args == asked.args
        with pytest.raises(
            loopwise.DecisionError, match=f"of run '{run_id}' is already edited"
        ) as info:
            store.decide(run_id, "c1", decision="approved", by="bob")
        assert (info.value.code, info.value.name) == ("not-pending", "c1")
        with pytest.raises(loopwise.DecisionError, match="other arguments") as info:
            store.decide(run_id, "c2", decision="approved", by="bob", seen_hash="0" * 64)
        assert (info.value.code, info.value.name) == ("stale", "c2")
        assert store.approval(run_id, "c2").status == "pending"  # type: ignore[union-attr]
        with pytest.raises(loopwise.DecisionError, match="has no approval 'c9'") as info:
            store.decide(run_id, "c9", decision="approved", by="bob")
        assert (info.value.code, info.value.name) == ("unknown-approval", "c9")
        with pytest.raises(loopwise.ConfigError, match="unknown decision 'maybe'") as cfg:
            store.decide(run_id, "c2", decision="maybe", by="bob")
        assert cfg.value.name == "decision"
        with pytest.raises(loopwise.ConfigError, match="no run 'nope'"):
            store.decide("nope", "c2", decision="approved", by="bob")
        denied = store.decide(run_id, "c2", decision="denied", by="bob")
        done = loopwise.resume(run_id, step=agent, model=model, store=store)
    assert paid == [("pay", 0)]
    assert "denied by bob: denied" in str(done.output)
    decisions = {e.data["call_id"]: e.data for e in done.events if e.type == "gate_decided"}
    assert decisions["c1"]["decided_at"] == decided.decided_at
    assert (decisions["c1"]["by"], decisions["c1"]["reason"]) == ("alice", "less")
    assert decisions["c2"]["decided_at"] == denied.decided_at and decisions["c2"]["by"] == "bob"


def test_pending_lists_the_oldest_ask_first_and_no_evals(store_at: str) -> None:
    agent, model = _asks_twice([])
    with open_store(store_at) as store:
        first = loopwise.run(agent, "go", model=model, store=store).run_id
        measured = loopwise.run(agent, "go", model=model, store=store, eval_id="e1").run_id
        second = loopwise.run(agent, "go", model=model, store=store).run_id
        listed = [(a.run_id, a.approval_id) for a in store.pending()]
        assert sorted(listed[:2]) == [(first, "c1"), (first, "c2")]
        assert sorted(listed[2:]) == [(second, "c1"), (second, "c2")] and len(listed) == 4
        assert {a.run_id for a in store.pending(measured)} == {measured}
        store.decide(second, "c2", decision="approved", by="bob")
        assert [a.approval_id for a in store.pending(second)] == ["c1"]
        assert [a.status for a in store.approvals(second)] in (
            ["pending", "approved"], ["approved", "pending"],
        )  # fmt: skip
        assert store.approvals("nope") == []
        approved = store.decide(second, "c1", decision="approved", by="carol", reason="fine")
        done = loopwise.resume(second, step=agent, model=model, store=store)
    assert done.output == "pay 1 | send 2"
    decisions = {e.data["call_id"]: e.data for e in done.events if e.type == "gate_decided"}
    decision = decisions["c1"]
    assert (decision["by"], decision["reason"]) == ("carol", "fine")
    assert decision["decided_at"] == approved.decided_at


def test_a_worker_takes_the_oldest_run_it_may_and_leaves_the_rest(store_at: str) -> None:
    agent, model = _asks_twice([])
    run = {"target": "t", "input": 0, "model": None, "options": {}}
    with open_store(store_at, lease_seconds=0.01) as store:
        store.create_run("own", spec="m.py:t", owner="w1", **run)
        store.create_run("other", spec="m.py:t", owner="w2", **run)
        store.create_run("unloadable", spec=None, owner="w2", **run)
        store.create_run(
            "measured", spec="m.py:t", queued=True, **{**run, "options": {"eval": "e"}}
        )
        waiting = loopwise.run(agent, "go", model=model, store=store, spec="m.py:t").run_id
        store.create_run("queued", spec="m.py:t", queued=True, **run)
        decided = loopwise.run(agent, "go", model=model, store=store, spec="m.py:t").run_id
        for approval_id in ("c1", "c2"):
            store.decide(decided, approval_id, decision="approved", by="bob")
        time.sleep(0.1)  # every lease above has lapsed
        taken = [store.claim_next("w1") for _ in range(4)]
        assert [(t.run_id, t.status) for t in taken[:3]] == [  # type: ignore[union-attr]
            ("other", "running"), ("queued", "queued"), (decided, "awaiting_approval"),
        ]  # fmt: skip
        assert taken[3] is None
        for run_id in ("other", "queued", decided):
            now = store.get_run(run_id)
            assert (now.status, now.owner) == ("running", "w1")
        assert store.get_run(waiting).status == "awaiting_approval"
        assert store.get_run("measured").status == "queued"


def test_a_run_is_claimed_to_resume_only_when_nothing_else_may_go_on_with_it(
    store_at: str,
) -> None:
    run = {"target": "t", "spec": None, "input": 0, "model": None, "options": {}}
    alive = lambda owner: True  # noqa: E731 - every previous owner is still running
    dead = lambda owner: False  # noqa: E731
    with open_store(store_at, lease_seconds=0.01) as store:
        store.create_run("lapsed", owner="w2", **run)
        time.sleep(0.1)
    with open_store(store_at) as store:
        store.create_run("failed", owner="w2", **run)
        store.mark_failed("failed", "boom")
        store.create_run("ownerless", **run)
        store.create_run("held", owner="w2", **run)
        store.create_run("queued", queued=True, **{**run, "spec": "m.py:t"})
        assert store.claim("lapsed", "me", alive=alive) is True
        assert store.claim("failed", "me", alive=alive) is True
        assert store.claim("ownerless", "me", alive=alive) is True
        assert store.claim("queued", "me", alive=dead) is False  # a worker's to start
        assert store.claim("held", "me", alive=dead) is True  # its process is gone
        for run_id in ("lapsed", "failed", "ownerless", "held"):
            now = store.get_run(run_id)
            assert (now.status, now.owner) == ("running", "me")
        assert store.get_run("queued").status == "queued"
