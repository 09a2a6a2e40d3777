"""A misbehaving MCP server for test_listing.py beside it: JSON-RPC over stdio written by
hand, so it can list what a well-behaved SDK server would refuse to send.

    python tests/integrations/mcp/_hostile.py TOOLS.json    # lists TOOLS.json's tools, as spelled
    python tests/integrations/mcp/_hostile.py hang          # never answers tools/list
    python tests/integrations/mcp/_hostile.py TOOLS.json http PORT json|sse   # the same over HTTP

Every listed tool answers a call with the arguments it got, as JSON text; ``grow`` also
adds a tool ``grown`` to the file and says the list changed.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

MODE = sys.argv[1]
HTTP = sys.argv[2:3] == ["http"]


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
    if method == "tools/list":  # MODE == "hang": the others are _reply's
        time.sleep(3600)
    if method == "tools/call" and params.get("name") == "grow":
        # A tool that adds a tool, and says so: the client should list the tools again.
        with open(MODE, encoding="utf-8") as f:
            tools = json.load(f)
        tools.append({"name": "grown", "inputSchema": {"type": "object"}})
        with open(MODE, "w", encoding="utf-8") as f:
            json.dump(tools, f)
        if not HTTP:
            _send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    if method == "tools/call":
        said = json.dumps({"tool": params.get("name"), "arguments": params.get("arguments")})
        return {"content": [{"type": "text", "text": said}], "isError": False}
    return {}


def _reply(request: dict[str, Any]) -> str:
    """The answer to ``request`` as a line of JSON; a listing as the tools file spells it,
    never read here: nesting too deep for any JSON reader reaches the client as written."""
    if request.get("method") == "tools/list" and MODE != "hang":
        with open(MODE, encoding="utf-8") as f:
            tools = f.read().strip()
        head = json.dumps({"jsonrpc": "2.0", "id": request["id"]})[:-1]
        return f'{head}, "result": {{"tools": {tools}}}}}'
    return json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": _answer(request)})


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request:
            continue  # a notification
        sys.stdout.write(_reply(request) + "\n")
        sys.stdout.flush()


def serve_http(port: int, body: str) -> None:
    """Streamable HTTP by hand: each request answered in a JSON body or an event stream."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if "id" not in request:
                self.send_response(202)
                self.end_headers()
                return
            answer = _reply(request)
            if body == "sse":
                data, kind = f"event: message\ndata: {answer}\n\n", "text/event-stream"
            else:
                data, kind = answer, "application/json"
            encoded = data.encode()
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(encoded)))
            self.end_headers()
            self.wfile.write(encoded)

        def do_GET(self) -> None:
            self.send_response(405)  # no stream of the server's own messages
            self.end_headers()

        do_DELETE = do_GET

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print("listening", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    if HTTP:
        serve_http(int(sys.argv[3]), sys.argv[4])
    else:
        main()
