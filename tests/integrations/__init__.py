"""Tests of loopwise.integrations: OpenTelemetry, MCP, Temporal."""
