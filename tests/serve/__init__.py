"""Tests of loopwise.serve: the approvals inbox over HTTP and in a browser."""
