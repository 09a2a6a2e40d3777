"""A tool (``tool``), its allow-lists, gates, verdicts, approval handlers and audit text,
and ``calls``: the one executor every tool call takes. Imports ``core`` and ``models``.

Its paths are internal: users import from ``loopwise`` and ``loopwise.testing``.
"""
