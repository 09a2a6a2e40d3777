"""Sweeps and calibration: choosing a cascade's threshold on evidence, how well a judge's
confidence means what it says, a target's cascades for ``check``, and the frontier for
people. May import ``evidence.evals``, ``evidence.charts`` and the layers below
``evidence``; never ``graduate``. Its paths are internal."""
