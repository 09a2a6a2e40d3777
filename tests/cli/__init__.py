"""Tests of loopwise.cli: each verb's module, through the `loopwise` command."""
