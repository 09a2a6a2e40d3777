"""A misbehaving MCP server for tests/test_mcp_limits.py: JSON-RPC over stdio written by
hand, so it can list what a well-behaved SDK server would refuse to send.

    python tests/_mcp_hostile.py TOOLS.json    # lists the tools in TOOLS.json, as spelled
    python tests/_mcp_hostile.py hang          # never answers tools/list

Every listed tool answers a call with the arguments it got, as JSON text; ``grow`` also
adds a tool ``grown`` to the file and says the list changed.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

MODE = sys.argv[1]


def _send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _answer(request: dict[str, Any]) -> dict[str, Any] | None:
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion"),
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "hostile", "version": "0"},
        }
    if method == "tools/list":  # MODE == "hang": the others are _send_listing's
        time.sleep(3600)
    if method == "tools/call" and params.get("name") == "grow":
        # A tool that adds a tool, and says so: the client should list the tools again.
        with open(MODE, encoding="utf-8") as f:
            tools = json.load(f)
        tools.append({"name": "grown", "inputSchema": {"type": "object"}})
        with open(MODE, "w", encoding="utf-8") as f:
            json.dump(tools, f)
        _send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    if method == "tools/call":
        said = json.dumps({"tool": params.get("name"), "arguments": params.get("arguments")})
        return {"content": [{"type": "text", "text": said}], "isError": False}
    return {}


def _send_listing(request_id: Any) -> None:
    """The tools as the file spells them, never read here: nesting too deep for any JSON
    reader reaches the client as written."""
    with open(MODE, encoding="utf-8") as f:
        tools = f.read().strip()
    head = json.dumps({"jsonrpc": "2.0", "id": request_id})[:-1]
    sys.stdout.write(f'{head}, "result": {{"tools": {tools}}}}}\n')
    sys.stdout.flush()


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request:
            continue  # a notification
        if request.get("method") == "tools/list" and MODE != "hang":
            _send_listing(request["id"])
            continue
        _send({"jsonrpc": "2.0", "id": request["id"], "result": _answer(request)})


if __name__ == "__main__":
    main()
