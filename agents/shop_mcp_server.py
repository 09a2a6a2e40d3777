"""The shop's read-only tools (``shop.py``) served as an MCP server, over stdio.

    python agents/shop_mcp_server.py

Written with the ``mcp`` package (``pip install 'loopwise[mcp]'``). Each tool is
annotated read-only and closed-world (it reads the local shop database, nothing on the
open web); ``order_investigation_mcp.py`` uses it. The database is the one ``shop.py``
finds (``$LOOPWISE_SHOP_DB`` or ``agents/data/shop.db``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from shop import READ_TOOLS

server = MCPServer("shop")

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def _telling(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a missing row reported to the client in words (``no order O-9999``);
    the server hides the message of any other exception."""

    @functools.wraps(fn)
    def serve(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LookupError as e:
            raise ToolError(str(e)) from e

    return serve


for shop_tool in READ_TOOLS:
    server.add_tool(
        _telling(shop_tool.fn),
        name=shop_tool.name,
        description=shop_tool.description,
        annotations=READ_ONLY,
    )


if __name__ == "__main__":
    server.run()
