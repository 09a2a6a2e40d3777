"""A store of thousands of runs: the claim and the listings are served by their indexes.

The plans are checked, not timed: a worker's claim asks the primary key of ``approvals``
whether a paused run still waits for somebody (led by an index on the status, it read
every pending approval of the store for each paused run: 5.8 s per claim at 1M runs), and
the undecided approvals of real runs are listed a page at a time, newest first, from the
partial index on exactly them. The runs are written by the store itself (``create_run``,
``record_many``) from the events of real runs.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise import Event, SQLiteStore, gates, open_store
from loopwise.testing import ScriptedModel, calls, reply

_RUNS = 3000


def _desk() -> tuple[loopwise.Agent, ScriptedModel]:
    @loopwise.tool(effect="irreversible", gate=gates.human())
    def pay(amount: int) -> str:
        """Pay an amount."""
        return f"paid {amount}"

    @loopwise.tool
    def look(order: str) -> str:
        """Look an order up."""
        return f"{order}: shipped"

    def respond(request: loopwise.ModelRequest) -> Any:
        if request.tool_results():
            return reply("done")
        if "look" in request.user_text():
            return calls(("look", {"order": "A-1"}, "l1"))
        return calls(("pay", {"amount": 1}, "c1"), ("pay", {"amount": 2}, "c2"))

    return loopwise.Agent(name="desk", tools=[pay, look]), ScriptedModel(respond)


def _at(i: int) -> str:
    return (datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i)).isoformat()


def _copy(store: Any, template: list[Event], i: int, *, eval_id: str | None = None) -> str:
    """Run ``i``, like the template's run, written as the store writes one."""
    run_id = f"r{i:06d}"
    store.create_run(
        run_id,
        target="desk",
        spec="desk.py:desk",
        input="go",
        model="scripted",
        options={} if eval_id is None else {"eval": eval_id},
        owner="w:1",
    )
    store.record_many(run_id, [replace(e, at=_at(i)) for e in template])
    return run_id


def _fill(store: Any, n: int) -> dict[str, list[str]]:
    """``n`` runs: most completed, a tenth paused on two approvals, some of an eval paused
    alike, a few queued; the ids of each kind."""
    agent, model = _desk()
    asks = loopwise.run(agent, "pay", model=model, store=store, spec="desk.py:desk")
    paid = loopwise.run(agent, "pay", model=model, store=store, spec="desk.py:desk")
    for approval in ("c1", "c2"):
        store.decide(paid.run_id, approval, decision="approved", by="ann")
    paid = loopwise.resume(paid.run_id, step=agent, model=model, store=store)
    looks = loopwise.run(agent, "look", model=model, store=store, spec="desk.py:desk")
    assert (asks.status, paid.status, looks.status) == ("awaiting_approval", *["completed"] * 2)
    paused, completed = store.events(asks.run_id), store.events(paid.run_id)
    looked = store.events(looks.run_id)
    kinds = {"paused": [asks.run_id], "eval": [], "queued": [], "completed": [looks.run_id]}
    kinds["completed"].append(paid.run_id)
    for i in range(n):
        if i % 10 == 3:
            kinds["paused"].append(_copy(store, paused, i))
        elif i % 50 == 7:
            kinds["eval"].append(_copy(store, paused, i, eval_id="e1"))
        elif i % 100 == 9:
            run_id = f"r{i:06d}"
            store.create_run(
                run_id, target="desk", spec="desk.py:desk", input="go", model="scripted",
                options={}, queued=True,
            )  # fmt: skip
            kinds["queued"].append(run_id)
        else:  # most runs paid after two approvals, some only looked
            kinds["completed"].append(_copy(store, completed if i % 7 else looked, i))
    return kinds


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, list[str]]]]:
    path = tmp_path_factory.mktemp("scale") / "runs.db"
    with SQLiteStore(path) as store:
        kinds = _fill(store, _RUNS)
    yield path, kinds


def _plan(path: Path, sql: str, params: tuple[Any, ...]) -> list[str]:
    with closing(sqlite3.connect(path)) as conn:
        return [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]


def _asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    """Every statement a store opened from now on sends, with its parameters."""
    said: list[tuple[str, tuple[Any, ...]]] = []

    class Recording(sqlite3.Connection):
        def execute(self, sql: str, params: Any = (), /) -> sqlite3.Cursor:
            said.append((sql, tuple(params)))
            return super().execute(sql, params)

    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: connect(*a, **k, factory=Recording))
    return said


def _claim(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, tuple[Any, ...]]:
    """The SELECT a worker's claim sends, with its parameters."""
    said = _asked(monkeypatch)
    with SQLiteStore(path) as store:
        store.claim_next("w:2")
    monkeypatch.undo()
    (select,) = [(q, p) for q, p in said if q.startswith("SELECT") and "FROM runs" in q]
    return select


def test_the_claim_reads_runs_by_index_and_asks_the_primary_key_about_approvals(
    filled: tuple[Path, dict[str, list[str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = filled
    for analyzed in (False, True):
        if analyzed:  # the planner with statistics, as after a user's ANALYZE
            with closing(sqlite3.connect(path)) as conn:
                conn.execute("ANALYZE")
        plan = _plan(path, *_claim(path, monkeypatch))
        waits = [line for line in plan if line.startswith(("SEARCH a ", "SCAN a "))]
        assert set(waits) == {"SEARCH a USING INDEX sqlite_autoindex_approvals_1 (run_id=?)"}
        reads = [line for line in plan if " runs " in line]
        # Only the paused runs nobody waits for any more are read whole: a small index.
        scans = [line for line in reads if line.startswith("SCAN")]
        assert scans == ["SCAN runs USING INDEX runs_answered"], plan
        assert "SEARCH runs USING INDEX sqlite_autoindex_runs_1 (id=?)" in reads, plan
        assert reads.count("SEARCH runs USING INDEX runs_status (status=?)") == 2, plan


def test_pending_pages_list_real_runs_newest_first_each_approval_once(
    filled: tuple[Path, dict[str, list[str]]],
) -> None:
    path, kinds = filled
    with SQLiteStore(path) as store:
        everything = store.pending()
        first = store.pending_page(limit=70)
        seen, page = list(first.approvals), first
        while page.next is not None:
            page = store.pending_page(limit=70, after=page.next)
            assert page.total == first.total
            seen += page.approvals
    assert first.total == len(everything) == 2 * len(kinds["paused"])
    assert len(first.approvals) == 70 and page.next is None
    keys = [(a.requested_at, a.run_id, a.approval_id) for a in seen]
    assert keys == sorted(keys, reverse=True) and len(set(keys)) == len(keys)
    assert {a.run_id for a in seen} == set(kinds["paused"])  # never an eval's


def test_every_listing_query_is_served_by_an_index(
    filled: tuple[Path, dict[str, list[str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = filled
    said = _asked(monkeypatch)
    with SQLiteStore(path) as store:
        page = store.pending_page(limit=5)
        store.pending_page(limit=5, after=page.next)
        store.pending()
    monkeypatch.undo()
    listings = [(q, p) for q, p in said if q.startswith("SELECT") and "FROM approvals" in q]
    assert len(listings) == 5
    for sql, params in listings:
        plan = _plan(path, sql, params)
        # The page comes from the index; each row's run is checked by its primary key
        # (an approval of a run that ended otherwise is closed).
        driven = [line for line in plan if "approvals" in line]
        assert driven and all("USING INDEX approvals_waiting" in line for line in driven), plan
        others = [line for line in plan if "approvals" not in line]
        assert all(
            "SUBQUERY" in line or "USING INDEX sqlite_autoindex_runs_1 (id=?)" in line
            for line in others
        ), plan


@pytest.mark.parametrize("after", ["nope", "W10", "WyJhIiwgImIiXQ", ""])
def test_a_page_cursor_that_is_none_is_refused_naming_it(tmp_path: Path, after: str) -> None:
    with SQLiteStore(tmp_path / "runs.db") as store:
        with pytest.raises(loopwise.ConfigError, match="not a page cursor") as refused:
            store.pending_page(after=after)
        assert refused.value.name == "after"
        with pytest.raises(loopwise.ConfigError, match="at least 1"):
            store.pending_page(limit=0)


def test_pages_are_the_same_on_postgresql(store_at: str) -> None:
    with open_store(store_at) as store:
        kinds = _fill(store, 60)
        first = store.pending_page(limit=4)
        seen, page = list(first.approvals), first
        while page.next is not None:
            page = store.pending_page(limit=4, after=page.next)
            seen += page.approvals
    assert first.total == len(seen) == 2 * len(kinds["paused"])
    keys = [(a.requested_at, a.run_id, a.approval_id) for a in seen]
    assert keys == sorted(keys, reverse=True)
    assert {a.run_id for a in seen} == set(kinds["paused"])


def test_a_store_from_before_the_eval_column_is_migrated(tmp_path: Path) -> None:
    from loopwise.store.sqlite import _SQLITE_MIGRATIONS  # the schema as version 6 had it

    path = tmp_path / "v6.db"
    with closing(sqlite3.connect(path)) as conn:
        for script in _SQLITE_MIGRATIONS[:6]:
            conn.executescript(script)
        for run_id, options in (("real", "{}"), ("measured", '{"eval": "e1"}')):
            conn.execute(
                "INSERT INTO runs (id, target, spec, status, options, created_at, updated_at) "
                "VALUES (?, 't', 'm.py:t', 'awaiting_approval', ?, 'a', 'a')",
                (run_id, options),
            )
            conn.execute(
                "INSERT INTO approvals (run_id, approval_id, step, tool, args, args_hash, "
                "requested_at) VALUES (?, 'c1', 't', 'pay', '{}', 'h', ?)",
                (run_id, f"2026-01-01T00:00:0{len(run_id)}"),
            )
        conn.execute(  # paused, and its one approval decided: a worker's to resume
            "INSERT INTO runs (id, target, spec, status, options, created_at, updated_at) "
            "VALUES ('ready', 't', 'm.py:t', 'awaiting_approval', '{}', 'a', 'a')"
        )
        conn.execute(
            "INSERT INTO approvals (run_id, approval_id, step, tool, args, args_hash, "
            "requested_at, status) VALUES ('ready', 'c1', 't', 'pay', '{}', 'h', 'a', 'approved')"
        )
        conn.execute("PRAGMA user_version = 6")
        conn.commit()
    with SQLiteStore(path) as store:
        taken = store.claim_next("w:1")
        assert taken is not None and taken.run_id == "ready"
        assert store.claim_next("w:1") is None
        page = store.pending_page()
        assert [(a.run_id, page.total) for a in page.approvals] == [("real", 1)]
        assert store.get_run("measured").eval_id == "e1"
        assert [a.run_id for a in store.pending()] == ["real"]
    with closing(sqlite3.connect(path)) as conn:
        marks = conn.execute("SELECT id, eval_id FROM runs ORDER BY id").fetchall()
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert marks == [("measured", "e1"), ("ready", None), ("real", None)]
    assert "approvals_waiting" in indexes and "approvals_status" not in indexes


def test_a_postgresql_store_from_before_the_eval_column_is_migrated(pg_url: str) -> None:
    import psycopg

    from loopwise.store.postgres import _MIGRATIONS  # the schema before the eval column

    before = next(i for i, script in enumerate(_MIGRATIONS) if "ADD COLUMN eval_id" in script)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for script in _MIGRATIONS[:before]:
            conn.execute(script.encode())
        conn.execute("CREATE TABLE loopwise_schema (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO loopwise_schema VALUES (%s)", (before,))
        for run_id, options in (("real", "{}"), ("measured", '{"eval": "e1"}')):
            conn.execute(
                "INSERT INTO runs (id, target, spec, status, options, created_at, updated_at) "
                "VALUES (%s, 't', 'm.py:t', 'awaiting_approval', %s, 'a', 'a')",
                (run_id, options),
            )
            conn.execute(
                "INSERT INTO approvals (run_id, approval_id, step, tool, args, args_hash, "
                "requested_at) VALUES (%s, 'c1', 't', 'pay', '{}', 'h', 'b')",
                (run_id,),
            )
    with open_store(pg_url) as store:
        page = store.pending_page()
        assert [(a.run_id, page.total) for a in page.approvals] == [("real", 1)]
        assert [a.run_id for a in store.pending()] == ["real"]
        assert store.claim_next("w:1") is None  # both wait for a person
    with psycopg.connect(pg_url) as conn:
        marks = conn.execute("SELECT id, eval_id FROM runs ORDER BY id").fetchall()
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes")}
    assert marks == [("measured", "e1"), ("real", None)]
    assert "approvals_waiting" in indexes and "approvals_status" not in indexes


def test_loopwise_pending_lists_a_page_and_says_how_to_ask_for_the_next(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopwise.cli.main import main

    at = str(tmp_path / "runs.db")
    with SQLiteStore(at) as store:
        kinds = _fill(store, 40)  # 5 paused runs: 10 undecided approvals of real runs
        newest = sorted(store.pending(), key=_place, reverse=True)
    capsys.readouterr()
    shown: list[tuple[str, ...]] = []
    argv = ["pending", "--store", at, "--limit", "4"]
    while True:
        assert main(argv) == 0
        out = capsys.readouterr().out.splitlines()
        shown += [tuple(line.split()[:2]) for line in out if line.split()[1] in {"c1", "c2"}]
        if "of 10 pending approvals shown, newest first" not in out[-1]:
            break
        assert out[-1].startswith("4 of 10")
        # the next page's command runs as printed: the cursor, the page size, the store
        asked = out[-1].split(": ", 1)[1].split()
        assert asked[:3] == ["loopwise", "pending", "--after"] and "--store" in asked
        assert asked[asked.index("--limit") + 1] == "4"
        argv = asked[1:]
    assert shown == [(a.run_id, a.approval_id) for a in newest]
    assert {run for run, _ in shown} == set(kinds["paused"]) and len(shown) == 10


def _place(a: Any) -> tuple[str, str, str]:
    return a.requested_at, a.run_id, a.approval_id


def test_pending_json_stays_a_list_with_a_cursor_per_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopwise.cli.main import main

    at = str(tmp_path / "runs.db")
    with SQLiteStore(at) as store:
        _fill(store, 40)
    capsys.readouterr()
    assert main(["pending", "--store", at, "--json", "--limit", "3"]) == 0
    said = capsys.readouterr()
    first = json.loads(said.out)
    assert isinstance(first, list) and len(first) == 3
    assert said.err.startswith("3 of 10 pending approvals shown, newest first")
    assert main(["pending", "--store", at, "--json", "--after", first[-1]["cursor"]]) == 0
    said = capsys.readouterr()
    rest = json.loads(said.out)
    assert len(rest) == 7 and said.err == ""  # the last page says nothing more
    keys = [(a["run_id"], a["approval_id"]) for a in first + rest]
    assert len(set(keys)) == 10


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--limit", "0"], "--limit: '0' is not a whole number from 1 to 1,000,000,000"),
        (["--after", "garbage"], "is not a page cursor"),
        (["r000003", "--limit", "2"], "--limit and --after page every run's approvals"),
    ],
)
def test_pending_paging_mistakes_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    from loopwise.cli.main import main

    at = str(tmp_path / "runs.db")
    with SQLiteStore(at) as store:
        _fill(store, 5)
    capsys.readouterr()
    assert main(["pending", "--store", at, *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_the_inbox_shows_a_page_the_total_and_a_link_to_older_ones(tmp_path: Path) -> None:
    import http.client
    import re
    import threading

    from loopwise.serve.app import ServeSettings, make_server

    at = str(tmp_path / "inbox.db")
    with SQLiteStore(at) as store:
        kinds = _fill(store, 300)  # 31 paused runs: 62 approvals, more than a page (50)
    server, _ = make_server(ServeSettings(port=0, store=at))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def get(path: str) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=30)
        conn.request("GET", path)
        answer = conn.getresponse()
        body = answer.read().decode()
        conn.close()
        return answer.status, body

    try:
        status, first = get("/")
        cards = re.findall(r"<article class='approval' id='a-(\w+)-(\w+)'", first)
        assert status == 200 and len(cards) == 50
        assert "62 pending approvals · 50 shown" in first and "← Newest" not in first
        older = re.search(r"<a href='(/\?after=[^']+)' rel='next'>Older approvals", first)
        assert older is not None
        status, second = get(older.group(1))
        cards += re.findall(r"<article class='approval' id='a-(\w+)-(\w+)'", second)
        assert status == 200 and len(cards) == 62 == len(set(cards))
        assert "rel='next'" not in second and "<a href='/'>← Newest</a>" in second
        assert {run for run, _ in cards} == set(kinds["paused"])
        status, refused = get("/?after=nope")
        assert status == 400 and "not a page cursor" in refused
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
        server.app.store.close()


def test_a_page_of_approvals_reads_its_runs_logs_together(
    filled: tuple[Path, dict[str, list[str]]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `loopwise pending` shows a page of approvals with their runs' logs: it asked the
    # store twice per run (on PostgreSQL each a round trip), now twice a page.
    from loopwise.cli.main import main
    from loopwise.running.approvals import view, views

    path, _ = filled
    said = _asked(monkeypatch)
    assert main(["pending", "--store", str(path), "--limit", "40"]) == 0
    monkeypatch.undo()
    shown = capsys.readouterr().out
    logs = [q for q, _ in said if "FROM events" in q]
    approvals = [q for q, _ in said if "FROM approvals" in q and "count(" not in q]
    assert len(logs) == 1 and len(approvals) == 2, said  # the page, then the runs' rows
    with SQLiteStore(path) as store:
        page = store.pending_page(limit=40).approvals
        one_by_one = [view(a, store.events(a.run_id), store.approvals(a.run_id)) for a in page]
        assert views(store, page) == one_by_one
    assert len({a.run_id for a in page}) == 20 and all(a.run_id in shown for a in page)


def test_the_pending_total_on_postgresql_is_counted_from_indexes(pg_url: str) -> None:
    # The total asks of every undecided approval whether its run is still paused or
    # running: from a partial index on those runs, not from each run's row.
    import psycopg

    with open_store(pg_url) as store:
        kinds = _fill(store, 200)
        asked: list[tuple[str, tuple[Any, ...]]] = []
        rows = store._rows

        def recording(sql: str, params: tuple[Any, ...]) -> Any:
            asked.append((sql, params))
            return rows(sql, params)

        store._rows = recording  # type: ignore[method-assign]
        assert store.pending_page(limit=5).total == 2 * len(kinds["paused"])
    count, params = next((q, p) for q, p in asked if "count(" in q)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ANALYZE")
        conn.execute("SET enable_seqscan = off")  # a small table would be read whole
        plan = "\n".join(r[0] for r in conn.execute(f"EXPLAIN {count.replace('?', '%s')}", params))
    assert "Index Only Scan using runs_open on runs" in plan, plan
    assert "approvals_waiting" in plan, plan
