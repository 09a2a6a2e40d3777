"""What an MCP tool call returned, as a loopwise tool returns it: the server's structured
content (unwrapped when its output schema wraps a plain value), else its text; a result the
server marked as an error raises :class:`MCPToolError`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopwise.core.jsontypes import JSONValue

if TYPE_CHECKING:
    from mcp.types import CallToolResult

__all__ = ["MCPToolError", "value_of"]


def value_of(result: CallToolResult, tool: str, unwrap: bool) -> JSONValue:
    """What a tool call returned: its structured content, or its text."""
    if result.is_error:
        raise MCPToolError(_text(result) or f"tool {tool!r} reported an error")
    structured: JSONValue = result.structured_content  # the server's JSON
    if structured is not None:
        if unwrap and isinstance(structured, dict) and set(structured) == {"result"}:
            return structured["result"]
        return structured
    return _text(result)


def _text(result: CallToolResult) -> str:
    parts = []
    for block in result.content:
        # getattr: the MCP SDK's content blocks are a union; only some have text or a mime type.
        text, mime = getattr(block, "text", None), getattr(block, "mime_type", None)
        parts.append(text if isinstance(text, str) else f"[{block.type} content: {mime or '?'}]")
    return "\n".join(parts)


class MCPToolError(Exception):
    """A tool call the server answered with an error (becomes an ``ERROR:`` result)."""
