"""Tests of loopwise.architectures: agent, workflow, hybrid, cascade, judge, structured, planner."""
