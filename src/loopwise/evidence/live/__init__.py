"""Live evidence: a decision that keeps checking itself on live traffic. The
:class:`~loopwise.evidence.live.shadow.Shadow` step (a shadow run beside the primary, in the
eval's sandbox), and what ``loopwise check`` and a re-certification read from the live
cases it and people's decisions leave in the store. May import ``evals`` and the layers
below ``evidence``; its paths are internal."""
