"""The fake servers' HTTP/1.1: a request's head and body read, a response written.

Just enough of the protocol for ``openai.AsyncOpenAI`` (keep-alive, ``Content-Length`` and
chunked bodies); :func:`error` writes OpenAI's error body. Both fake APIs
(:mod:`loopwise.testing._fakeserver`, :mod:`loopwise.testing._fakeresponses`) answer
through it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping

from loopwise.core.jsontypes import JSONObject, JSONValue

__all__ = ["error", "http", "json_body", "media", "objects", "parse_head", "read_body"]

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests"}
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit"}


def parse_head(head: bytes) -> tuple[bytes, bytes, dict[bytes, bytes]]:
    """A request's method, path and headers (names lowercased)."""
    lines = head.split(b"\r\n")
    method, path, _version = lines[0].split(b" ", 2)
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
    return method, path, headers


async def read_body(reader: asyncio.StreamReader, headers: dict[bytes, bytes]) -> bytes:
    """A request's body, ``Content-Length`` or chunked."""
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        chunks: list[bytes] = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            data = await reader.readexactly(size + 2)
            if size == 0:
                return b"".join(chunks)
            chunks.append(data[:-2])
    length = int(headers.get(b"content-length", b"0"))
    return await reader.readexactly(length) if length else b""


def http(
    status: int,
    body: bytes,
    headers: Mapping[str, str] | None = None,
    *,
    media: str = "application/json",
) -> bytes:
    """A whole keep-alive response."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error' if status >= 400 else 'OK')}\r\n"
        f"content-type: {media}\r\ncontent-length: {len(body)}\r\n"
        f"connection: keep-alive\r\n{extra}\r\n"
    )
    return head.encode() + body


def json_body(body: bytes) -> JSONObject | str:
    """A request's body as the JSON object every fake endpoint takes, or why it is not one
    (what the 400 says: a client sent no JSON, or JSON that is no object)."""
    try:
        payload = json.loads(body)
    except ValueError:
        return "the request body is not JSON"
    if not isinstance(payload, dict):
        return "the request body is not a JSON object"
    return payload


def objects(value: JSONValue) -> list[JSONObject]:
    """The objects of a JSON array (an input item or a message is one; nothing else in the
    array is), ``[]`` for anything but an array."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def media(payload: Mapping[str, object]) -> str:
    """The content type of the answer to ``payload`` (server-sent events when it streams)."""
    return "text/event-stream" if payload.get("stream") else "application/json"


def error(
    status: int,
    message: str,
    *,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> bytes:
    """An OpenAI-style error response."""
    error = {
        "message": message,
        "type": _ERROR_TYPES.get(
            status, "server_error" if status >= 500 else "invalid_request_error"
        ),
        "param": param,
        "code": None,
    }
    return http(status, json.dumps({"error": error}).encode(), headers)
