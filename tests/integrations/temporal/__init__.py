"""Tests of loopwise.integrations.temporal against a Temporal dev server started here."""
