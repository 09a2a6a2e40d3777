"""Optional extras (OpenTelemetry, MCP), imported only by faces and by users who installed
the extra; no module below imports them.

Its paths are internal: users import from ``loopwise`` and ``loopwise.testing``.
"""
