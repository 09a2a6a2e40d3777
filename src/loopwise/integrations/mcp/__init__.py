"""Tools from MCP servers (the optional extra ``loopwise[mcp]``): the servers' tools as
loopwise tools (``servers``: ``loopwise.mcp.stdio``/``http``), one connection per server
(``connection``), the listing and its limits (``listing``, ``schema``, ``wire``,
``wire_http``), annotations mapped to effects and gates (``mapping``) and a server's
questions as durable pauses (``elicit``). Users reach it as ``loopwise.mcp``; its paths
are internal."""
