"""Tests of loopwise.evidence.sweeps: thresholds, calibration, the person in a sweep."""
