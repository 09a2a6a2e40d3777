"""Tests of loopwise.evidence.evals: the harness, its statistics and its sandbox."""
