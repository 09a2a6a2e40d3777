"""Deciding on evidence: evals and their statistics, failure mining, recommendations, the
report, decide, check, analyze and the scaffold they print. Imports the layers below the
services (and the store and running modules beside it).

Its paths are internal: users import from ``loopwise`` and ``loopwise.testing``.
"""
