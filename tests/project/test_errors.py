"""The error tree: drawn once in ``loopwise.errors``' docstring, its codes typed, so a
misspelt code is a type error where it is raised or compared (issue 46)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

import loopwise
from loopwise import errors
from loopwise.tools.arguments import ToolArgumentsError
from tests.support import ROOT

DRAWN = re.compile(r"(?:├──|└──)\s+(\w+)\s+([a-z][a-z-]*)")


def _drawn() -> dict[str, str]:
    """Each class the tree draws, with the code drawn beside it."""
    assert errors.__doc__ is not None
    return dict(DRAWN.findall(errors.__doc__))


def test_every_error_is_drawn_with_its_own_code() -> None:
    drawn = _drawn()
    raised = {
        name: kind
        for name in errors.__all__
        if isinstance(kind := getattr(errors, name), type)
        and issubclass(kind, errors.LoopwiseError)
        and kind is not errors.LoopwiseError
    }
    raised["ToolArgumentsError"] = ToolArgumentsError
    assert loopwise.ToolArgumentsError is ToolArgumentsError
    assert set(drawn) == set(raised)
    assert {name: cls.code for name, cls in raised.items()} == drawn


def test_every_typed_code_is_documented_in_the_tree() -> None:
    assert errors.__doc__ is not None
    codes = set(get_args(errors.ErrorCode))
    missing = {c for c in codes if not re.search(rf"(?<![\w-]){c}(?![\w-])", errors.__doc__)}
    assert not missing, f"codes no one can read about in the tree: {sorted(missing)}"
    per_class = [
        errors.ConfigCode,
        errors.ToolCode,
        errors.ConversationCode,
        errors.DecisionCode,
        errors.JudgeCode,
        errors.GraphCode,
        errors.ModelAPICode,
        errors.StoreCode,
    ]
    assert set().union(*(get_args(kind) for kind in per_class)) <= codes


def test_a_code_raised_with_is_kept_and_the_class_default_otherwise() -> None:
    assert errors.StoreError("x", code="lease-lost").code == "lease-lost"
    assert errors.StoreError("x").code == "store"
    assert errors.GraphError("x", node="n", code="cycle").code == "cycle"
    assert errors.DecisionError("x", code="stale").code == "stale"
    assert errors.JudgeError("x", name="j", code="no-labels").code == "no-labels"
    assert errors.ToolError("x", tool="t", code="unknown-option").code == "unknown-option"
    assert errors.DirectEffectError("x", tool="t").code == "direct-effect"
    assert errors.ConversationError("x", conversation="c", code="busy").code == "busy"


@pytest.mark.slow
def test_a_misspelt_code_is_a_type_error(tmp_path: Path) -> None:
    source = tmp_path / "codes.py"
    source.write_text(
        "from loopwise.errors import GraphError, StoreError\n"
        "\n"
        "\n"
        "def lost(e: StoreError) -> bool:\n"
        "    return e.code == 'lease-lots'\n"
        "\n"
        "\n"
        "def cycle() -> GraphError:\n"
        "    return GraphError('x', code='cylce')\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(source)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert "codes.py:5: error: Non-overlapping equality check" in done.stdout, done.stdout
    assert 'codes.py:9: error: Argument "code" to "GraphError"' in done.stdout, done.stdout
