"""Starting, resuming, queueing, working, watching and deciding runs: the runner (run and
resume), the durable approval handler, the registry of this process's live runs, the target
module conventions (``offline_model``, ``make_deps``), streams, workers, target loading and
approval decisions. Imports the layers below the services.

Its paths are internal: users import from ``loopwise`` and ``loopwise.testing``.
"""
