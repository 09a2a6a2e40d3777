"""A Streamable HTTP server's answers made readable before the SDK reads them.

Over HTTP the SDK answers a message nested too deeply for its JSON reader with a parse
error, so one tool's schema nested 300 levels refused the server's whole listing. The
response hook :func:`shallow_answers` (on the client loopwise gives the SDK) passes each
JSON body, and each ``data:`` line of an event stream, through
:func:`~loopwise.integrations.mcp.wire.shallow` as it is read: values nested past
:data:`~loopwise.integrations.mcp.wire.MAX_NESTING` levels arrive as a placeholder, and
the tool they belong to is left out by the listing's limits, not the server. A compressed
body (``Content-Encoding``) is left as it is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2

from loopwise.integrations.mcp.wire import shallow

__all__ = ["shallow_answers"]


async def shallow_answers(response: httpx2.Response) -> None:
    """An ``httpx2`` response hook: read the body of a JSON-RPC answer made shallow."""
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if response.headers.get("content-encoding") or not isinstance(
        response.stream, httpx2.AsyncByteStream
    ):
        return
    if kind == "application/json":
        response.stream = _Shallow(response.stream, lines=False)
    elif kind == "text/event-stream":
        response.stream = _Shallow(response.stream, lines=True)


class _Shallow(httpx2.AsyncByteStream):
    """A body made shallow whole (``lines=False``) or line by line (an event stream)."""

    def __init__(self, inner: httpx2.AsyncByteStream, *, lines: bool) -> None:
        self._inner = inner
        self._lines = lines

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if not self._lines:
            yield _shallow_bytes(b"".join([chunk async for chunk in self._inner]))
            return
        held: list[bytes] = []
        async for chunk in self._inner:
            if b"\n" not in chunk:
                held.append(chunk)
                continue
            *done, rest = b"".join([*held, chunk]).split(b"\n")
            held = [rest]
            yield b"".join(_data_line(line) + b"\n" for line in done)
        if any(held):
            yield _data_line(b"".join(held))

    async def aclose(self) -> None:
        await self._inner.aclose()


def _data_line(line: bytes) -> bytes:
    """An event stream's line, its ``data:`` made shallow (other fields as they are)."""
    return b"data:" + _shallow_bytes(line[5:]) if line.startswith(b"data:") else line


def _shallow_bytes(data: bytes) -> bytes:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data  # not JSON: the SDK says so
    pruned = shallow(text)
    return data if pruned is text else pruned.encode("utf-8")
