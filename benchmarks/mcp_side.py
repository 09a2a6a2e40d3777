"""An MCP tool call against a local ``@tool`` doing the same work (``make bench``).

The server is a real ``mcp`` stdio subprocess (this file run as a script) with one
read-only tool; the local tool is the same function. Both are called through
``Tool.invoke`` inside one run, so what differs is only the MCP round trip: JSON-RPC over
the pipe, the server's own validation, and loopwise's schema check of the arguments.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import loopwise
from loopwise import tool
from loopwise.core.step import Context


def lookup(order_id: str) -> dict[str, Any]:
    """Look an order up (a dict built in memory). Call it for any order id."""
    return {"order_id": order_id, "status": "payment_failed", "total_cents": 4200}


local = tool(lookup)


def remote() -> Any:
    """The same tool, listed from the MCP server started as a subprocess."""
    from loopwise import mcp

    return mcp.stdio(sys.executable, str(Path(__file__).resolve()), trust_annotations=True)


async def paired(
    measure: Callable[[Callable[[], Awaitable[object]], Callable[[], Awaitable[object]]], Any],
) -> tuple[Any, float]:
    """``measure(local_call, mcp_call)`` inside one run (one connection, opened first), and
    the median seconds a run takes to start the server and make one call."""
    source = remote()
    mcp_tool = source.get("lookup")
    args = {"order_id": "O-1001"}
    out: dict[str, Any] = {}

    @loopwise.step
    async def bench(_: None, ctx: Context) -> None:
        await mcp_tool.invoke(args, ctx)  # connects

        async def via_mcp() -> object:
            return await mcp_tool.invoke(args, ctx)

        async def via_local() -> object:
            return await local.invoke(args, ctx)

        out["timing"] = await measure(via_local, via_mcp)

    result = await loopwise.arun(bench)
    if result.status != "completed":
        raise RuntimeError(f"MCP benchmark run ended {result.status}: {result.detail}")

    @loopwise.step
    async def one_call(_: None, ctx: Context) -> None:
        await mcp_tool.invoke(args, ctx)

    starts = []
    for _ in range(3):
        started = time.perf_counter()
        await loopwise.arun(one_call)
        starts.append(time.perf_counter() - started)
    return out["timing"], sorted(starts)[1]


def _serve() -> None:
    from mcp.server import MCPServer
    from mcp.types import ToolAnnotations

    server = MCPServer("bench")
    server.add_tool(lookup, annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    server.run()


if __name__ == "__main__":
    _serve()
