"""Tests of loopwise.tools: tools, gates, edits and the one tool-call executor."""
