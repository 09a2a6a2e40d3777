"""Tests of loopwise.evidence: deciding and checking on evidence; a folder per family."""
