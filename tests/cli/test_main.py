"""The ``loopwise`` command's start: a store verb's process loads what the verb needs.

``loopwise pending``, ``runs list``, ``runs show``, ``approve`` and ``deny`` are fresh
processes a person waits for: at a million runs their store work is milliseconds, and the
rest is the interpreter, the modules they import and opening the store. These tests run
each verb as its own process, as a person does, and list what it imported (not how long it
took). Opening the store itself is tests/store/test_postgres.py's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import loopwise
from loopwise import gates, open_store
from loopwise.testing import ScriptedModel, calls, reply

# What no store verb needs: the model stack, the run kernel's runner and flags' helpers,
# the eval and the inbox; a connection pool.
_NEVER = (
    "pydantic",
    "openai",
    "httpx2",
    "networkx",
    "psycopg_pool",
    "loopwise.models",
    "loopwise.core.usage",
    "loopwise.core.result",
    "loopwise.architectures",
    "loopwise.running.runner",
    "loopwise.running.targets",
    "loopwise.evidence",
    "loopwise.serve",
    "loopwise.integrations",
)
# On SQLite, no event loop, no package metadata and no PostgreSQL driver either (psycopg
# imports the first two itself).
_NEVER_ON_SQLITE = (*_NEVER, "asyncio", "importlib.metadata", "psycopg")

_PROBE = """
import contextlib, io, json, sys
from loopwise.cli.main import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[2:])
never = tuple(sys.argv[1].split(","))
print(json.dumps([code, sorted(m for m in sys.modules if m.startswith(never))]))
"""


def _paused_runs(store: str, n: int) -> list[str]:
    @loopwise.tool(effect="irreversible", gate=gates.human())
    def pay(amount: int) -> str:
        """Pay an amount."""
        return f"paid {amount}"

    model = ScriptedModel(
        lambda r: reply("done") if r.tool_results() else calls(("pay", {"amount": 1}, "c1"))
    )
    desk = loopwise.Agent(name="desk", tools=[pay])
    with open_store(store) as st:
        ran = [loopwise.run(desk, "pay", model=model, store=st) for _ in range(n)]
    assert {r.status for r in ran} == {"awaiting_approval"}
    return [r.run_id for r in ran]


def _imported(never: tuple[str, ...], *argv: str) -> tuple[int, list[str]]:
    """The exit code of ``loopwise ARGV`` run in a fresh process, and which modules of
    ``never`` (or under them) it imported."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, ",".join(never), *argv],
        capture_output=True,
        text=True,
        check=True,
    )
    code, listed = json.loads(done.stdout)
    return code, listed


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_store_verbs_start_without_the_model_stack_the_runner_or_a_pool(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = str(tmp_path / "runs.db") if kind == "sqlite" else request.getfixturevalue("pg_url")
    never = _NEVER_ON_SQLITE if kind == "sqlite" else _NEVER
    first, second = _paused_runs(store, 2)
    for argv in (
        ["pending"],
        ["runs", "list"],
        ["runs", "show", first],
        ["approve", first, "--approval", "c1", "--by", "ann"],
        ["deny", second, "--approval", "c1", "--reason", "no"],
    ):
        assert _imported(never, *argv, "--store", store) == (0, []), argv
    with open_store(store) as st:  # the verbs did their work
        assert [a.status for a in st.approvals(first)] == ["approved"]
        assert [a.status for a in st.approvals(second)] == ["denied"]


def test_version_is_read_when_asked() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loopwise.cli.main", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.startswith("loopwise "), done
    assert done.stderr == ""
