"""Tests of loopwise.evidence.graduate: from an agent's runs to a workflow."""
