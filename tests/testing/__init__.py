"""Tests of loopwise.testing: the kit a user's own tests are written with."""
