"""A run store of any size, filled fast with rows as the store writes them.

Three real runs are made first, through loopwise, in a scratch SQLite store: a refund that
paused on two approvals, the same refund paid after both were approved (16 events), and a
lookup that needed nobody (8 events). Their rows — ``runs``, ``events``, ``approvals``,
exactly as the store wrote them — are the templates; run *i* of the generated store is a
copy of one template with its own id and its own times (one second apart, so the order is
the order of creation). The mix, per 1,000 runs: 20 paused on two undecided approvals
(real runs), 10 paused runs of an eval, 680 paid after two decided approvals, 290 lookups:
~13.5 events a run, ~40 undecided approvals per 1,000 runs. Nothing is queued.

SQLite rows go in with ``executemany`` in large transactions (``synchronous=OFF`` while
filling), PostgreSQL rows with ``COPY`` and a ``VACUUM ANALYZE`` after (what autovacuum would do);
the schema is the store's own (opened once through loopwise first). 1M runs take minutes.

``python benchmarks/storegen.py SIZE LOCATION`` fills a new store (a ``.db`` path or a
``postgresql://`` URL of an empty database).
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import loopwise
from loopwise import gates
from loopwise.store.open import open_store
from loopwise.testing import ScriptedModel, calls, reply

_TABLES = ("runs", "events", "approvals")
_TIMES = ("created_at", "updated_at", "at", "requested_at", "decided_at")
_START = datetime(2026, 1, 1, tzinfo=UTC)
_CHUNK = 5_000
"""Runs written per transaction (SQLite) or per COPY batch (PostgreSQL)."""

PAUSED, EVAL, PAID, LOOKED = "paused", "eval", "paid", "looked"


def kind_of(i: int) -> str:
    """Which template run *i* copies (the mix in the module docs)."""
    k = i % 1000
    if k % 50 == 3:
        return PAUSED
    if k % 100 == 27:
        return EVAL
    return LOOKED if k % 100 >= 71 else PAID


def run_id(i: int) -> str:
    return f"b{i:08d}"


@dataclass
class _Template:
    rows: dict[str, list[dict[str, Any]]]
    """Each table's rows of the template run, column by column."""
    run_id: str
    created: datetime


def _desk() -> tuple[loopwise.Agent, ScriptedModel]:
    @loopwise.tool(effect="irreversible", gate=gates.human())
    def refund(order: str, amount_cents: int) -> str:
        """Refund an order; a person approves each refund first."""
        return f"refunded {amount_cents} on {order}"

    @loopwise.tool
    def lookup(order: str) -> str:
        """Look an order up: its status, payment and shipment."""
        return f"{order}: paid by card, shipped, delivered damaged"

    def respond(request: loopwise.ModelRequest) -> Any:
        if request.tool_results():
            return reply("Refunded the damaged item and the shipping; the customer is told.")
        if "look" in request.user_text():
            return calls(("lookup", {"order": "O-1003"}, "l1"))
        return calls(
            ("refund", {"order": "O-1003", "amount_cents": 4200}, "c1"),
            ("refund", {"order": "O-1003", "amount_cents": 499}, "c2"),
        )

    return loopwise.Agent(name="desk", tools=[refund, lookup]), ScriptedModel(respond)


def templates() -> dict[str, _Template]:
    """The template runs, made through loopwise and read back as stored rows."""
    agent, model = _desk()
    where = Path(tempfile.mkdtemp(prefix="loopwise-storegen-")) / "templates.db"
    spec = "desk.py:desk"
    complaint = "Order O-1003 arrived broken and I want my money back."
    with open_store(str(where)) as st:
        made = {
            PAUSED: loopwise.run(agent, complaint, model=model, store=st, spec=spec).run_id,
            PAID: loopwise.run(agent, complaint, model=model, store=st, spec=spec).run_id,
            LOOKED: loopwise.run(agent, "look O-1003", model=model, store=st, spec=spec).run_id,
        }
        for approval in ("c1", "c2"):
            st.decide(made[PAID], approval, decision="approved", by="lead")
        loopwise.resume(made[PAID], step=agent, model=model, store=st)
    with sqlite3.connect(where) as conn:
        conn.row_factory = sqlite3.Row
        out = {kind: _read(conn, rid) for kind, rid in made.items()}
    # An eval's paused run: the paused one, marked as the eval marks its runs.
    marked = {t: [dict(r) for r in rows] for t, rows in out[PAUSED].rows.items()}
    for row in marked["runs"]:
        row["options"] = row["options"][:-1] + ', "eval": "bench-eval"}'
        row["eval_id"] = "bench-eval"
    for row in marked["approvals"]:
        row["eval_id"] = "bench-eval"
    out[EVAL] = _Template(marked, out[PAUSED].run_id, out[PAUSED].created)
    return out


def _read(conn: sqlite3.Connection, rid: str) -> _Template:
    rows = {
        "runs": [dict(r) for r in conn.execute("SELECT * FROM runs WHERE id = ?", (rid,))],
        "events": [dict(r) for r in conn.execute("SELECT * FROM events WHERE run_id = ?", (rid,))],
        "approvals": [
            dict(r) for r in conn.execute("SELECT * FROM approvals WHERE run_id = ?", (rid,))
        ],
    }
    created = datetime.fromisoformat(rows["runs"][0]["created_at"])
    return _Template(rows, rid, created)


class _Copier:
    """Rows of run *i* from a template: its id and times swapped in, the rest as stored."""

    def __init__(self, template: _Template) -> None:
        self.columns = {t: list(template.rows[t][0]) for t in _TABLES if template.rows[t]}
        self.columns["runs"] = [c for c in self.columns["runs"] if c != "rowid"]
        self._rows = []
        for table, columns in self.columns.items():
            for row in template.rows[table]:
                cells = []
                for c in columns:
                    value = row[c]
                    if c in _TIMES and value is not None and c != "lease_until":
                        delta = datetime.fromisoformat(value) - template.created
                        cells.append(("time", delta))
                    elif isinstance(value, str) and template.run_id in value:
                        cells.append(("id", value.split(template.run_id)))
                    else:
                        cells.append(("same", value))
                self._rows.append((table, cells))

    def rows(self, i: int) -> Iterator[tuple[str, tuple[Any, ...]]]:
        new_id, base = run_id(i), _START + timedelta(seconds=i)
        for table, cells in self._rows:
            out: list[Any] = []
            for how, value in cells:
                if how == "time":
                    out.append((base + value).isoformat())
                elif how == "id":
                    out.append(new_id.join(value))
                else:
                    out.append(value)
            yield table, tuple(out)


def fill(location: str, n: int, *, progress: bool = False) -> float:
    """Fill a new store at ``location`` with ``n`` runs; the seconds it took."""
    started = time.perf_counter()
    copiers = {kind: _Copier(t) for kind, t in templates().items()}
    columns = copiers[PAID].columns
    with open_store(location):
        pass  # the schema, made and migrated by loopwise itself
    write = _fill_postgres if location.startswith("postgres") else _fill_sqlite
    write(location, n, copiers, columns, progress)
    return time.perf_counter() - started


def _chunks(
    n: int, copiers: dict[str, _Copier], progress: bool
) -> Iterator[dict[str, list[tuple[Any, ...]]]]:
    for start in range(0, n, _CHUNK):
        batch: dict[str, list[tuple[Any, ...]]] = {t: [] for t in _TABLES}
        for i in range(start, min(n, start + _CHUNK)):
            for table, row in copiers[kind_of(i)].rows(i):
                batch[table].append(row)
        if progress and start % (_CHUNK * 20) == 0:
            print(f"  {start:,} of {n:,} runs", file=sys.stderr, flush=True)
        yield batch


def _fill_sqlite(
    path: str, n: int, copiers: dict[str, _Copier], columns: dict[str, list[str]], progress: bool
) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    inserts = {
        t: f"INSERT INTO {t} ({', '.join(columns[t])}) VALUES ({', '.join('?' * len(columns[t]))})"
        for t in _TABLES
    }
    for batch in _chunks(n, copiers, progress):
        conn.execute("BEGIN")
        for table, rows in batch.items():
            conn.executemany(inserts[table], rows)
        conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def _fill_postgres(
    url: str, n: int, copiers: dict[str, _Copier], columns: dict[str, list[str]], progress: bool
) -> None:
    import psycopg

    with psycopg.connect(url) as conn:
        for batch in _chunks(n, copiers, progress):
            with conn.cursor() as cur:
                for table, rows in batch.items():
                    with cur.copy(f"COPY {table} ({', '.join(columns[table])}) FROM STDIN") as c:
                        for row in rows:
                            c.write_row(row)
            conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        # What autovacuum would do to freshly loaded tables, done now rather than while the
        # verbs are timed (it found every page new: visibility map, statistics).
        conn.execute("VACUUM ANALYZE")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python benchmarks/storegen.py SIZE LOCATION", file=sys.stderr)
        return 2
    seconds = fill(argv[1], int(argv[0].replace("_", "")), progress=True)
    print(f"{int(argv[0]):,} runs in {argv[1]}: {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
