"""Agents over the test MCP server (tests/integrations/mcp/_server.py), loaded as CLI targets.

Importing this module declares the server's tools (a real subprocess is started to list
them), as a user's target module would; ``$MCP_CALL_LOG`` is handed to the server.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from loopwise import Agent, ModelRequest, Turn, mcp
from loopwise.testing import ScriptedModel, call, reply

SERVER = Path(__file__).resolve().with_name("_server.py")


def shop_server(**options: object) -> mcp.MCPTools:
    """The test server's tools (``options`` as for :func:`loopwise.integrations.mcp.stdio`)."""
    env = {"MCP_CALL_LOG": os.environ.get("MCP_CALL_LOG", "")}
    return mcp.stdio(sys.executable, str(SERVER), env=env, name="test-shop", **options)  # type: ignore[arg-type]


SHOP = shop_server(trust_annotations=True)

refunder = Agent(
    name="refunder",
    instructions="Look the order up, then refund it if its payment failed.",
    tools=[SHOP.get("get_order"), SHOP.get("refund")],
    max_steps=5,
)


def _respond(request: ModelRequest) -> Turn:
    """Look up O-1001, refund it, then say so."""
    done = [m for m in request.messages if m["role"] == "tool"]
    if not done:
        return call("get_order", {"order_id": "O-1001"}, id="look")
    if len(done) == 1:
        return call("refund", {"order_id": "O-1001", "amount_cents": 4200}, id="pay")
    return reply(f"done: {done[-1]['content']}")


def offline_model() -> ScriptedModel:
    """The model ``--model scripted`` uses for these agents."""
    return ScriptedModel(_respond)
