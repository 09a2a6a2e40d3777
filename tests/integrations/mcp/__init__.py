"""Tests of loopwise.integrations.mcp against real MCP servers started here (_server.py, ...)."""
