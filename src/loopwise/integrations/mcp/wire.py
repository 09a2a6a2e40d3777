"""Reading an MCP server's messages that nest too deeply for the SDK's JSON reader.

The SDK reads each message with pydantic-core's JSON reader, which refuses nesting past
about 200 levels: a listing with one tool whose schema nests that deeply (300 levels)
was dropped whole, so the listing waited out its timeout and every tool of the server was
lost. Here such a message is read again with every value nested deeper than
:data:`MAX_NESTING` levels replaced by :data:`TOO_DEEP` (a string; a message the SDK can
read is never changed): the listing arrives, the deep tool is left out by
:func:`~loopwise.integrations.mcp.schema.check_limits` (it nests past its limit), and the
server's other tools are kept. A tool's result that deep arrives with its too-deep parts
so replaced, instead of never.

:func:`rereading` wraps a transport whose reader hands on what it could not read as the
error, holding the message (stdio's); over Streamable HTTP, where the SDK answers such a
message with a parse error instead, :mod:`loopwise.integrations.mcp.wire_http` makes each
answer shallow before the SDK reads it. The work is linear in the message's length (one
scan of its strings and brackets, none with too few brackets to nest that deep), so a
hostile message costs no more than reading it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp.client._transport import ReadStream, Transport, TransportStreams
    from mcp.shared.message import SessionMessage

__all__ = ["MAX_NESTING", "SDK_NESTING", "TOO_DEEP", "rereading", "shallow"]

MAX_NESTING = 100
"""JSON levels of a message too deep for the SDK kept as sent; deeper values become
:data:`TOO_DEEP`."""
SDK_NESTING = 200
"""The JSON levels the SDK's reader takes (pydantic-core's limit): a message nesting no
deeper is passed on as sent, whatever the transport."""
TOO_DEEP = f"(nested deeper than {MAX_NESTING} levels: left out by loopwise)"
"""What stands in for a value nested deeper than :data:`MAX_NESTING` levels."""

_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
"""A JSON string (skipped whole: brackets inside it do not count) or a bracket."""
_STAND_IN = '"' + TOO_DEEP + '"'


def shallow(text: str, *, past: int = SDK_NESTING) -> str:
    """``text`` (JSON), when it nests deeper than ``past`` levels (by default, deeper than
    the SDK reads), with each value nested deeper than :data:`MAX_NESTING` levels replaced
    by :data:`TOO_DEEP`; else ``text`` itself (malformed JSON stays malformed)."""
    if text.count("[") + text.count("{") <= past:
        return text  # too few brackets to nest that deep (most messages: no scan)
    parts: list[str] = []
    depth, deepest, kept, cut = 0, 0, 0, -1
    for token in _TOKENS.finditer(text):
        mark = token.group()[0]
        if mark in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if depth == MAX_NESTING + 1:
                cut = token.start()
        elif mark in "]}":
            if depth == MAX_NESTING + 1 and cut >= 0:
                parts += [text[kept:cut], _STAND_IN]
                kept, cut = token.end(), -1
            depth -= 1
    if deepest <= past or not parts:
        return text
    parts.append(text[kept:])
    return "".join(parts)


def _reread(item: SessionMessage | Exception) -> SessionMessage | Exception:
    """A message the transport could not read, read again pruned; else ``item`` as is.

    Only an error of pydantic's JSON reader (type ``json_invalid``) that holds the whole
    message is read again: the stdio transport's, which hands it on in place of the line.
    """
    from mcp.shared.message import SessionMessage
    from mcp.types import jsonrpc_message_adapter
    from pydantic import ValidationError

    if not isinstance(item, ValidationError):
        return item
    errors = item.errors()
    line = errors[0].get("input") if errors and errors[0]["type"] == "json_invalid" else None
    # The SDK could not read it: cut it whatever its depth (its limit may be another).
    if not isinstance(line, str) or (pruned := shallow(line, past=MAX_NESTING)) is line:
        return item
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(pruned, by_name=False))
    except ValidationError:
        return item


class _Rereading:
    """The transport's read stream, with each message it could not read read again."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception]) -> None:
        self._inner = inner

    @property
    def last_context(self) -> object:
        # getattr: the SDK's own duck-typing (ReadStream's optional last_context).
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        return _reread(await self._inner.receive())

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _Rereading:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        return _reread(await self._inner.__anext__())

    async def __aenter__(self) -> _Rereading:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc_val, exc_tb)


@contextlib.asynccontextmanager
async def rereading(transport: Transport) -> AsyncIterator[TransportStreams]:
    """``transport``, its messages too deep for the SDK read again (see the module docs)."""
    async with transport as (read, write):
        yield _Rereading(read), write
