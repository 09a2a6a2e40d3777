"""The approvals inbox (``loopwise serve``): the HTTP app (``app``) and its pages (``pages``).
A face: it may import every layer below.

Its paths are internal: users import from ``loopwise`` and ``loopwise.testing``.
"""
