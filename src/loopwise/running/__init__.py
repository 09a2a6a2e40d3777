"""Starting, resuming, queueing, working, watching and deciding runs: the runner, streams,
workers, target loading and approval decisions. Imports the layers below the services.

Its paths are internal: users import from ``loopwise`` and ``loopwise.testing``.
"""
