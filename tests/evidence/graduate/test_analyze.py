"""`loopwise.analyze` and `graduate(runs=[...])` take runs as a user holds them: the docs say
each run is a mapping ``{"run_id", "status", "events"}``, so a list of plain dicts (read
from JSON, or built in code and annotated ``dict[str, Any]``) type-checks under
``mypy --strict`` as it did before the named shapes (issue 46), and mines the same."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

import pytest

import loopwise
from tests.support import strict_mypy_errors

USER_CODE = """
from collections.abc import Mapping
from typing import Any

import loopwise

event = {"type": "tool_call", "data": {"tool": "look", "call_id": "c1", "args": {}}}
runs: list[dict[str, Any]] = [{"run_id": "r1", "status": "completed", "events": [event]}]
seen: list[Mapping[str, object]] = list(runs)
print(loopwise.analyze(runs).verdict, loopwise.analyze(seen).runs)
loopwise.graduate("agent.py:agent", runs=runs)
loopwise.graduate("agent.py:agent", runs=seen)
"""


@pytest.mark.slow  # mypy in a subprocess
def test_runs_held_as_plain_mappings_type_check_for_analyze_and_graduate(
    tmp_path: Path,
) -> None:
    errors = strict_mypy_errors(USER_CODE, tmp_path / "mine_runs.py")
    assert not errors, "\n".join(errors)


def _run(i: int, frozen: bool) -> Mapping[str, object]:
    data = {"tool": "look", "call_id": "c", "args": {"q": i}}
    event = {"type": "tool_call", "step": "a", "data": MappingProxyType(data) if frozen else data}
    run = {"run_id": f"r{i}", "status": "completed", "events": [event]}
    return MappingProxyType(run) if frozen else run


def test_runs_and_events_given_as_any_mapping_are_mined_like_dicts() -> None:
    # An event's data read only when it was a dict (json_object) lost its tool: the path
    # came out "?" and was called known.
    as_dicts = loopwise.analyze([_run(i, frozen=False) for i in range(6)])
    as_views = loopwise.analyze([_run(i, frozen=True) for i in range(6)])
    assert as_dicts.verdict == as_views.verdict == "steps_known"
    assert [(p.path, p.runs) for p in as_views.paths] == [((("look",),), 6)]
    assert [(p.path, p.runs) for p in as_dicts.paths] == [((("look",),), 6)]
