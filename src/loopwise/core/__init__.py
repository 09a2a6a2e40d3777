"""The run kernel: Step, Context, statuses, the journal (the only place keys are built),
budgets, a step's description of itself and its one drawing. No store, no SQL, no SDK;
imports only ``loopwise.errors`` and its own modules.

Its paths are internal: users import from ``loopwise`` and ``loopwise.testing``.
"""
