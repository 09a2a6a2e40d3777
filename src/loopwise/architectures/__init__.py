"""Which calls to make: the structured call, the workflow (nodes, wiring, the plain-dict
graph), the agent and its history, plans and the hybrid. Tool calls go through
:mod:`loopwise.tools.calls`. Imports ``core``, ``models`` and ``tools``.

Its paths are internal: users import from ``loopwise`` and ``loopwise.testing``.
"""
