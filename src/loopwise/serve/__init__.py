"""The approvals inbox (``loopwise serve``): the HTTP app (``app``), its pages (``pages``), the
checks and headers every transport shares (``guards``) and the inbox as an ASGI/WSGI
application a team mounts in its own app (``mounted``). A face: it may import every layer
below.

Its paths are internal: users import from ``loopwise`` and ``loopwise.testing``.
"""
