"""Tests of loopwise.running: run/resume, streams, workers, deps."""
