"""Tool sources: tools that come from elsewhere (an MCP server), given whole.

A :class:`ToolSource` goes where a ``@tool`` goes — an agent's ``tools=[...]``, a hybrid's
planner ``tools=`` and ``actions=`` — beside other tools, as peers take theirs
(``toolsets=[server]``, ``mcp_servers=[server]``); spreading its tools (``[*source]``)
works too. :func:`spread` is how those places read such a list. An agent asks its sources
to :meth:`~ToolSource.refresh` when a run starts, so a source whose list changed (an MCP
server that said so) is listed again for that run.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Sequence
from typing import Any

from loopwise.tools.tool import Tool

__all__ = ["ToolSource", "spread"]


class ToolSource(abc.ABC):
    """Where some tools come from; :meth:`tools` are the ones it holds now."""

    @abc.abstractmethod
    def tools(self) -> Sequence[Tool]:
        """The source's tools, as last listed."""

    async def refresh(self) -> bool:
        """List the tools again if the source said they changed; whether they did.

        Called when a run of an agent holding the source starts. The default: a source
        whose tools never change.
        """
        return False


def spread(items: Iterable[Any]) -> list[Any]:
    """``items`` with each :class:`ToolSource` replaced by its tools, in place and order."""
    spread_out: list[Any] = []
    for item in items:
        if isinstance(item, ToolSource):
            spread_out.extend(item.tools())
        else:
            spread_out.append(item)
    return spread_out
