"""A plan policy as the hybrids guide writes it, under ``mypy --strict``: a policy with a
second parameter gets a ``PlanContext`` and sums the plan's other refunds,
``plan.others("issue_refund")`` and each step's ``args_dict()["amount_cents"]`` — the
refund desk example (``loopwise init examples``, workflows/refund_desk.py) does exactly
this. While ``args_dict()`` returned a ``JSONObject`` the value was a ``JSONValue`` a user
had to narrow or cast before adding it (issue 46 review 2): it reads as ``Event.data``
does, a plain ``dict[str, Any]`` of JSON."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

USER_CODE = """
from typing import Any

import loopwise


def within_total(
    args: dict[str, Any], plan: loopwise.PlanContext | None = None
) -> loopwise.Denied | None:
    planned = sum(
        other.args_dict()["amount_cents"]
        for other in (plan.others("issue_refund") if plan is not None else ())
    )
    also = sum(int(o.args_dict()["amount_cents"]) for o in (plan.others() if plan else ()))
    if args["amount_cents"] + planned + also > 5000:
        return loopwise.Denied("more than the order's total")
    return None
"""


@pytest.mark.slow  # mypy in a subprocess
def test_a_plan_policy_sums_the_other_steps_arguments_as_the_guide_does(
    tmp_path: Path,
) -> None:
    path = tmp_path / "plan_policy.py"
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
