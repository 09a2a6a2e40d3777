"""A plan policy as the hybrids guide writes it, under ``mypy --strict``: a policy with a
second parameter gets a ``PlanContext`` and sums the plan's other refunds,
``plan.others("issue_refund")`` and each step's ``args_dict()["amount_cents"]`` — the
refund desk example (``loopwise init examples``, workflows/refund_desk.py) does exactly
this. While ``args_dict()`` returned a ``JSONObject`` the value was a ``JSONValue`` a user
had to narrow or cast before adding it (issue 46 review 2): it reads as ``Event.data``
does, a plain ``dict[str, Any]`` of JSON."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import strict_mypy_errors

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
    errors = strict_mypy_errors(USER_CODE, tmp_path / "plan_policy.py")
    assert not errors, "\n".join(errors)
