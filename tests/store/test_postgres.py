"""Opening a PostgreSQL store: one query on the connection it keeps when the schema is
current; the migration (under its advisory lock) only when it is not, in the current schema.

A fresh ``loopwise pending`` opens a store every time: it used to take the migration lock
and write the version on every open. These tests check that a current store neither waits
for that lock nor writes, and that the cheap check does not mistake a store elsewhere on the
search path for the current schema's own.
"""

from __future__ import annotations

import loopwise
from loopwise import gates, open_store
from loopwise.testing import ScriptedModel, calls, reply


def _paused_run(store: str) -> str:
    @loopwise.tool(effect="irreversible", gate=gates.human())
    def pay(amount: int) -> str:
        """Pay an amount."""
        return f"paid {amount}"

    model = ScriptedModel(
        lambda r: reply("done") if r.tool_results() else calls(("pay", {"amount": 1}, "c1"))
    )
    ran = loopwise.run(loopwise.Agent(name="desk", tools=[pay]), "pay", model=model, store=store)
    assert ran.status == "awaiting_approval"
    return ran.run_id


def _with_options(url: str, options: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}options={options}"


def test_a_current_postgresql_store_opens_without_the_migration_lock(pg_url: str) -> None:
    import psycopg

    from loopwise.store.postgres import _LOCK_KEY

    _paused_run(pg_url)  # the schema made
    with psycopg.connect(pg_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
        # Another process migrating holds the lock: a store whose schema is current
        # neither waits for it (the lock timeout would fail the open) nor writes.
        with psycopg.connect(pg_url, autocommit=True) as watch:
            (before,) = watch.execute("SELECT version FROM loopwise_schema").fetchone() or (0,)
            xmin = watch.execute("SELECT xmin::text FROM loopwise_schema").fetchone()
        with open_store(_with_options(pg_url, "-clock_timeout%3D1000")) as st:
            assert len(st.pending()) == 1
        with psycopg.connect(pg_url, autocommit=True) as watch:
            assert watch.execute("SELECT xmin::text FROM loopwise_schema").fetchone() == xmin
        holder.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
    assert before > 0


def test_a_store_on_the_search_path_behind_an_empty_schema_is_not_taken_for_its_own(
    pg_url: str,
) -> None:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("CREATE SCHEMA elsewhere")
        admin.execute("CREATE SCHEMA mine")
    elsewhere = _with_options(pg_url, "-csearch_path%3Delsewhere")
    with open_store(elsewhere) as st:
        assert st.list_runs() == []
    # `mine` comes first and is empty: the store is made there (as before), not read
    # from `elsewhere` because its loopwise_schema is on the path too.
    both = _with_options(pg_url, "-csearch_path%3Dmine,elsewhere")
    _paused_run(both)
    with psycopg.connect(pg_url, autocommit=True) as admin:
        made = admin.execute("SELECT to_regclass('mine.loopwise_schema')::text").fetchone()
        runs = admin.execute("SELECT count(*) FROM elsewhere.runs").fetchone()
    assert made == ("mine.loopwise_schema",) and runs == (0,)


def test_threads_sharing_one_kept_store_take_turns_on_its_one_connection(pg_url: str) -> None:
    """A store holds one connection (issue 43): threads that use it at once (the inbox's
    requests, a worker's lease renewer) take turns, each call whole. Eight threads decide,
    read and claim through it together: no call fails, each approval is decided once."""
    import threading

    from loopwise import ConfigError, DecisionError

    runs = [_paused_run(pg_url) for _ in range(4)]
    start = threading.Barrier(8)
    outcomes: list[str] = []

    with open_store(pg_url) as kept:

        def deciding(run_id: str, by: str) -> None:
            start.wait()
            try:
                loopwise.approve(run_id, store=kept, by=by)
                outcomes.append(f"{run_id}:approved")
            except DecisionError:
                outcomes.append(f"{run_id}:already")
            except ConfigError as e:
                # The other thread decided before this one looked for the run's pending
                # approval (an approve that names none): decided once, as well.
                said = "already" if "has no pending approval" in str(e) else repr(e)
                outcomes.append(f"{run_id}:{said}")
            except Exception as e:  # a call that failed: the test says which
                outcomes.append(f"{run_id}:{e!r}")
            try:
                for _ in range(20):
                    if run_id not in {r.run_id for r in kept.list_runs(limit=10)}:
                        outcomes.append(f"{run_id}: not listed")
                    kept.events(run_id)
                    kept.pending()
            except Exception as e:
                outcomes.append(f"{run_id}:{e!r}")

        threads = [
            threading.Thread(target=deciding, args=(run_id, by))
            for run_id in runs
            for by in ("ann", "bob")
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == sorted(
            [f"{r}:approved" for r in runs] + [f"{r}:already" for r in runs]
        )
        assert [a.status for r in runs for a in kept.approvals(r)] == ["approved"] * 4


def test_a_store_nobody_closed_ends_its_session_quietly(pg_url: str) -> None:
    import gc
    import time
    import warnings

    import psycopg

    def sessions() -> int:
        with psycopg.connect(pg_url, autocommit=True) as watch:
            row = watch.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        return int(row[0]) if row else 0

    before = sessions()
    store = open_store(pg_url)
    assert store.list_runs() == [] and sessions() == before + 1
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        del store
        gc.collect()
    assert [str(w.message) for w in said if issubclass(w.category, ResourceWarning)] == []
    deadline = time.monotonic() + 30  # the server ends the session once it reads the goodbye
    while sessions() != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sessions() == before
