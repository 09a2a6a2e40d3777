"""An MCP server whose tool asks a question mid-call (elicitation), for
test_elicit.py beside it, written with the ``mcp`` package's resolvers: on the 2026-07-28
protocol the question comes back as an ``InputRequiredResult`` and the call is retried
with the answer. Each deletion is appended to ``$ASKER_LOG``.
"""

from __future__ import annotations

import os
from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.types import ToolAnnotations
from pydantic import BaseModel

server = MCPServer("asker")


class Confirmation(BaseModel):
    reason: str
    notify: bool


def confirm(user: str) -> Elicit[Confirmation]:
    return Elicit(f"Why should the account of {user} be deleted?", Confirmation)


@server.tool(
    annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
)
def delete_account(user: str, why: Annotated[Confirmation, Resolve(confirm)]) -> str:
    """Delete a user's account. Call it when asked to delete one."""
    with open(os.environ["ASKER_LOG"], "a", encoding="utf-8") as log:
        log.write(f"deleted {user}: {why.reason} (notify={why.notify})\n")
    return f"deleted {user}"


if __name__ == "__main__":
    server.run()
