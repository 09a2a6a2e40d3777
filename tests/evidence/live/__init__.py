"""Tests of loopwise.evidence.live: shadows, live cases and their verdict."""
