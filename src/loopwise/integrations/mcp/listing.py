"""Reading an MCP server's ``tools/list``: one page as the server sent it, and which of
its tools loopwise can use (:mod:`loopwise.integrations.mcp.servers` builds tools from those).

A tool is left out, with why, when its listing is not an MCP tool (an input schema that is
not an object), its name is not one a model can call (1-64 letters, digits, ``_``, ``-``:
no path, control character or 5,000-character name), the server lists it twice, or its
name is one loopwise gives meaning to (:data:`RESERVED_NAMES`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from loopwise.architectures.agent import FINAL_ANSWER
from loopwise.core.jsontypes import JSONObject, JSONValue, json_object

if TYPE_CHECKING:
    from mcp import Client
    from mcp.shared.dispatcher import CallOptions
    from mcp.types import Tool as ListedTool

__all__ = ["RESERVED_NAMES", "bad_name", "checked", "shown", "tools_page"]

_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""A name a model API takes for a function (OpenAI's rule), and no path or control text."""
RESERVED_NAMES = frozenset({FINAL_ANSWER})
"""Tool names loopwise gives meaning to: a server's tool of that name is left out."""


def bad_name(name: object, taken: set[str]) -> str | None:
    """Why a listed tool's name cannot be used (``None``: it can)."""
    if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
        return "its name is not 1-64 letters, digits, '_' or '-' (a name a model can call)"
    if name in RESERVED_NAMES:
        return f"{name!r} is a name loopwise reserves; a server's tool may not take it"
    if name in taken:
        return "the server lists a tool of that name twice"
    return None


def shown(name: object) -> str:
    """A listed tool's name as messages show it: as is when usable, else quoted, clipped."""
    if isinstance(name, str) and _TOOL_NAME.fullmatch(name):
        return name
    text = repr(name)
    return text if len(text) <= 40 else f"{text[:40]}… ({len(text):,} characters)"


async def tools_page(client: Client, cursor: str | None) -> JSONObject:
    """One page of ``tools/list``, as the server sent it.

    The SDK's ``list_tools`` validates the whole page as one: a single tool with a schema
    that is not an object would refuse the server's others. This sends the request the
    way ``ClientSession.send_request`` does (its protocol stamp, its dispatcher) and leaves
    each tool to :func:`checked`.
    """
    method = "tools/list"
    data: JSONObject = {"method": method, "params": {"cursor": cursor} if cursor else {}}
    opts: CallOptions = {}
    session = client.session
    session._stamp(data, opts)  # stamps the request's _meta into its params
    params = json_object(data["params"])
    raw = await session._dispatcher.send_raw_request(method, params, opts)
    return raw if isinstance(raw, dict) else {}


def checked(listed: list[JSONValue], skipped: dict[str, str]) -> list[ListedTool]:
    """The listed tools whose name and listing loopwise can use; the others go to
    ``skipped`` (shown name: why): one bad tool never refuses the server's others."""
    from mcp.types import Tool as Listed
    from pydantic import ValidationError

    kept: list[ListedTool] = []
    for raw in listed:
        name = raw.get("name") if isinstance(raw, dict) else None
        why = bad_name(name, {t.name for t in kept})
        if why is None:
            try:
                kept.append(Listed.model_validate(raw))
                continue
            except ValidationError as e:
                first = e.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                why = f"its listing is not an MCP tool ({where}: {first['msg']})"
        skipped[shown(name)] = why
    return kept
