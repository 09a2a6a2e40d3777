"""`loopwise.approve(..., args=...)` as a user calls it, under ``mypy --strict``: edited
arguments built in code before the call (``{"order_id": "O-1", "amount": 40.0}`` is a
``dict[str, object]`` to a checker, ``{"amount": 40.0}`` a ``dict[str, float]``) type-check,
as they did when ``args`` was ``dict[str, Any]`` (before issue 46's named shapes)."""

from __future__ import annotations

from pathlib import Path

import pytest

import loopwise
from loopwise.testing import ScriptedModel, call, reply
from tests.support import strict_mypy_errors

USER_CODE = """
import loopwise

edit = {"order_id": "O-1", "amount": 40.0}
loopwise.approve("run-1", args=edit, by="lead")
amounts: dict[str, float] = {"amount": 40.0}
loopwise.approve("run-1", args=amounts, by="lead")
"""


@pytest.mark.slow  # mypy in a subprocess
def test_edited_arguments_built_before_the_call_type_check(tmp_path: Path) -> None:
    errors = strict_mypy_errors(USER_CODE, tmp_path / "approve_edit.py")
    assert not errors, "\n".join(errors)


def test_an_edit_in_any_mapping_is_recorded_as_a_copy_of_what_was_approved(
    tmp_path: Path,
) -> None:
    from types import MappingProxyType

    paid: list[int] = []

    @loopwise.tool(effect="irreversible", gate=loopwise.gates.human())
    def pay(amount: int) -> str:
        """Pay an amount."""
        paid.append(amount)
        return f"paid {amount}"

    agent = loopwise.Agent(name="payer", tools=[pay])
    db = str(tmp_path / "runs.db")
    paused = loopwise.run(
        agent, "pay", model=ScriptedModel([call("pay", {"amount": 500})]), store=db
    )
    edit: dict[str, object] = {"amount": 40}
    (decided,) = loopwise.approve(
        paused.run_id, args=MappingProxyType(edit), by="ann", store=db, step=agent
    )
    edit["amount"] = 400_000  # the caller's dict changes after the decision: not the record
    assert decided.status == "edited" and decided.edited_args == {"amount": 40}
    done = loopwise.resume(
        paused.run_id, step=agent, model=ScriptedModel([reply("paid")]), store=db
    )
    assert done.status == loopwise.Status.COMPLETED and paid == [40]
