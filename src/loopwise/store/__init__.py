"""The run store: its roles (``base``), opening one from a URL (``open``), the SQL shared
by both engines (``sql``, ``rows``, ``conversations``), SQLite (``sqlite``) and PostgreSQL
(``postgres``). Imports the layers below the services.

Its paths are internal: users import from ``loopwise`` and ``loopwise.testing``.
"""
