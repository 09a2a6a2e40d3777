"""`loopwise.analyze` and `graduate(runs=[...])` take runs as a user holds them: the docs say
each run is a mapping ``{"run_id", "status", "events"}``, so a list of plain dicts (read
from JSON, or built in code and annotated ``dict[str, Any]``) type-checks under
``mypy --strict`` as it did before the named shapes (issue 46), and mines the same."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import MappingProxyType

import pytest

import loopwise
from tests.support import ROOT

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
    path = tmp_path / "mine_runs.py"
    path.write_text(USER_CODE, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert not errors, "\n".join(errors)


def test_runs_given_as_any_mapping_are_mined_like_dicts() -> None:
    def run(i: int) -> dict[str, object]:
        calls = [{"type": "tool_call", "step": "a", "data": {"tool": "look", "call_id": "c"}}]
        return {"run_id": f"r{i}", "status": "completed", "events": calls}

    as_dicts = loopwise.analyze([run(i) for i in range(6)])
    as_views = loopwise.analyze([MappingProxyType(run(i)) for i in range(6)])
    assert as_dicts.verdict == as_views.verdict == "steps_known"
    assert [p.runs for p in as_views.paths] == [p.runs for p in as_dicts.paths] == [6]
