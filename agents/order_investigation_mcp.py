"""The order investigation with its tools from an MCP server (``shop_mcp_server.py``).

    loopwise run agents/order_investigation_mcp.py:investigate_mcp \\
        --input '"Why did customer C-1004's last three orders fail?"' --model scripted

The same agent as ``order_investigation.py`` — same instructions, limits and offline
model — but its six read-only tools are listed by an MCP server that a run starts as a
subprocess when it first needs it and stops when it ends. The server is ours, so its
annotations are trusted: ``readOnlyHint`` and ``openWorldHint: false`` make every tool a
``read`` whose output does not taint. A server you did not write would be declared
without ``trust_annotations`` and every tool would wait for a person.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from order_investigation import investigate, offline_model
from shop import db_path, ensure_db

from loopwise import mcp

__all__ = ["SHOP", "investigate_mcp", "offline_model"]

SHOP = mcp.stdio(
    sys.executable,
    str(Path(__file__).resolve().with_name("shop_mcp_server.py")),
    # A subprocess gets a minimal environment: say which database it serves (built now,
    # so concurrent server starts never race to build it).
    env={"LOOPWISE_SHOP_DB": str(ensure_db(db_path()))},
    name="shop",
    trust_annotations=True,
)

investigate_mcp = dataclasses.replace(investigate, tools=SHOP)
"""The investigation agent, its tools served over MCP (same name, instructions, limits)."""
