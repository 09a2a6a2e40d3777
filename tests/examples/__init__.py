"""Tests of the canonical examples in workflows/ and agents/, through the CLI."""
