"""TEMPORARY minimal Chat Completions server for the benchmarks, until FakeChatServer lands."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from bench_script import respond


def _completion(body: dict[str, Any]) -> dict[str, Any]:
    message = respond(body)
    calls = message.get("tool_calls")
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "bench"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", **message},
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }


async def _handle(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, latency: float
) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            body = json.loads(await reader.readexactly(length)) if length else {}
            if latency:
                await asyncio.sleep(latency)
            out = json.dumps(_completion(body)).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(out)}\r\n\r\n".encode()
                + out
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _main(latency: float) -> None:
    server = await asyncio.start_server(
        lambda r, w: _handle(r, w, latency), "127.0.0.1", 0, backlog=4096
    )
    port = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}/v1", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_main(float(sys.argv[1]) if len(sys.argv) > 1 else 0.0))
