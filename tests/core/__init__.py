"""Tests of loopwise.core: steps, results, the journal, names, replay, the engine seam."""
