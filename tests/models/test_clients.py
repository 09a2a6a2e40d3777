"""One HTTP client per process: a run builds one, a worker builds one for all its runs.

Building a client loads the CA bundle into a new SSL context (~28 ms of CPU): a worker that
built two per run (``aclose()`` used to build a fresh one right after closing) spent most of
each run on TLS setup it never used. These tests count the HTTP clients the ``openai`` SDK
constructs under loopwise, through the public API and a real worker over the fake server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

import loopwise
from loopwise import ModelRequest, open_store
from loopwise.running.worker import awork
from loopwise.testing import FakeChatServer, call, reply

_TARGET = """
import loopwise


@loopwise.tool
def lookup(key: str) -> str:
    \"\"\"Look a key up; call it once before answering.\"\"\"
    return f"found {key}"


looker = loopwise.Agent(name="looker", tools=[lookup])
"""


@loopwise.tool
def lookup(key: str) -> str:
    """Look a key up; call it once before answering."""
    return f"found {key}"


def _looks_then_answers(request: ModelRequest) -> Any:
    return reply("done") if request.tool_results() else call("lookup", {"key": "k"}, id="c1")


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[httpx2.AsyncClient]]:
    """Every HTTP client constructed while the test runs."""
    built: list[httpx2.AsyncClient] = []
    init = httpx2.AsyncClient.__init__

    def counted(self: httpx2.AsyncClient, *args: Any, **kwargs: Any) -> None:
        built.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(httpx2.AsyncClient, "__init__", counted)
    yield built


@pytest.fixture
def looker(tmp_path: Path) -> str:
    (tmp_path / "looker.py").write_text(_TARGET)
    return f"{tmp_path / 'looker.py'}:looker"


def test_a_run_builds_one_http_client_and_closes_it(
    fake_chat_server: Callable[..., FakeChatServer],
    clients: list[httpx2.AsyncClient],
    tmp_path: Path,
) -> None:
    fake_chat_server(_looks_then_answers)
    agent = loopwise.Agent(name="looker", tools=[lookup])
    result = loopwise.run(agent, "go", model="gpt-test", store=str(tmp_path / "runs.db"))
    assert result.status == "completed", result
    assert len(clients) == 1, f"{len(clients)} HTTP clients for one run of 2 model calls"
    assert clients[0].is_closed


def test_a_worker_builds_one_http_client_for_all_its_runs(
    fake_chat_server: Callable[..., FakeChatServer],
    clients: list[httpx2.AsyncClient],
    looker: str,
    tmp_path: Path,
) -> None:
    fake_chat_server(_looks_then_answers)
    with open_store(str(tmp_path / "runs.db")) as st:
        queued = [loopwise.enqueue(looker, n, model="gpt-test", store=st) for n in range(5)]
        finished: list[str] = []

        async def serve() -> None:
            stop = asyncio.Event()

            def told(row: Any, outcome: Any) -> None:
                finished.append(row.run_id)
                if len(finished) == len(queued):
                    stop.set()

            await awork(st, concurrency=2, poll_seconds=0.05, stop=stop, on_finished=told)

        asyncio.run(serve())
        assert {st.get_run(r).status for r in queued} == {"completed"}
    assert len(clients) == 1, f"{len(clients)} HTTP clients for {len(queued)} runs"
    assert clients[0].is_closed  # closed when the worker returned


def test_a_worker_starts_without_what_serving_runs_does_not_need() -> None:
    # The worker verb loads the runner; the model SDK loads with the first run that needs
    # it, the PostgreSQL driver with a postgresql:// store, and never the eval or the inbox.
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "import loopwise.cli.main, loopwise.cli.worker, loopwise.running.worker\n"
        "heavy = ('openai', 'httpx2', 'psycopg', 'jsonschema', 'mcp', 'temporalio',\n"
        "         'loopwise.evidence', 'loopwise.serve', 'loopwise.integrations')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
