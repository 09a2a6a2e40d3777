"""What a person's edit of one plan step means for the steps that depend on it.

A plan is written as a whole: a mail that says "we have refunded 189.00" was planned
beside the refund of 189.00. When a person edits the refund to 50.00, that mail is stale.
loopwise never runs it silently: every ``write``/``irreversible`` step that depends on an
edited step (directly or through other steps) is asked of a person **again**, after the
edited step ran, whatever was decided for it before and whatever its policy says (a
policy may still deny). The request's reason names the edit and what it changed; the
person approves the step as it is, edits it (the mail's text) or denies it. ``read``
steps run as planned.

The new request is a separate approval, ``{approval id}.recheck`` (a plan step's id has
no dot, so it names no other step); it binds its own decision and idempotency key.

The hybrid's output shows the plan as it ran (:func:`as_ran`): an edited step with the
arguments it ran with, and the planner's proposal beside it (``HybridOutput.proposed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypedDict

from loopwise.architectures.plans import ActionCatalog, Plan, PlanStep, dependency_graph
from loopwise.core.events import jsonable
from loopwise.core.jsontypes import JSONValue
from loopwise.tools.arguments import ToolArgumentsError
from loopwise.tools.audit import changed_fields, changes_text
from loopwise.tools.tool import Arguments
from loopwise.tools.verdicts import Denied, Edited, Verdict

__all__ = ["RECHECK_SUFFIX", "AsRan", "CallOf", "as_ran", "call_of", "rechecks"]

RECHECK_SUFFIX = ".recheck"
"""Added to a plan step's approval id when a person must decide it again."""


def rechecks(plan: Plan, catalog: ActionCatalog, verdicts: Mapping[str, Verdict]) -> dict[str, str]:
    """Per step id that a person must decide again, why (see the module docstring)."""
    edits = _edits(plan, catalog, verdicts)
    if not edits:
        return {}
    graph = dependency_graph(plan)
    out: dict[str, str] = {}
    for s in plan.steps:
        if catalog[s.action].effect == "read" or isinstance(verdicts.get(s.id), Denied):
            continue
        above = [u.id for u in plan.steps if u.id != s.id and s.id in graph.reachable(u.id)]
        hit = [edits[u] for u in above if u in edits]
        if hit:
            out[s.id] = (
                f"{'; '.join(hit)}; this step depends on it and was planned before the "
                "edit, so a person decides it again: approve it as it is, edit it, or deny it"
            )
    return out


class CallOf(TypedDict):
    """What a plan step's call is made with (fields of its
    :class:`~loopwise.tools.call_values.Call`)."""

    arguments: Arguments
    call_id: str
    bind_id: str
    edited_by: str | None
    edited_from: object


def call_of(
    planned: PlanStep, call_id: str, verdict: Verdict | None, recheck: str | None
) -> CallOf:
    """The arguments and the approval id a plan step's call is made with.

    As planned, under the approval that decided it: the executor recalls a person's edit
    from it and runs the edited arguments (judged again). A step a person must decide
    again asks under its own approval (``.recheck``), with the arguments as last decided:
    when that was an edit, the call says so (read strictly, recorded as edited).
    """
    edited = verdict if isinstance(verdict, Edited) and recheck is not None else None
    return CallOf(
        arguments=edited.args if edited else planned.args_dict(),
        call_id=call_id + RECHECK_SUFFIX if recheck is not None else call_id,
        bind_id=call_id + RECHECK_SUFFIX if recheck is not None else call_id,
        edited_by=edited.by if edited else None,
        edited_from=planned.args_dict() if edited else None,
    )


class _Ran(Protocol):
    @property
    def ran_with(self) -> object:
        """The arguments a step ran with when a person edited them, else ``None``."""
        ...


class AsRan(TypedDict):
    """A plan as it ran and the planner's proposal, when a person edited a step."""

    plan: Plan
    proposed: Plan | None


def as_ran(plan: Plan, results: Mapping[str, _Ran]) -> AsRan:
    """``plan`` as it ran (``plan``: each step a person edited with the arguments it ran
    with) and, when a step was edited, the planner's proposal (``proposed``)."""
    edited = {sid: r.ran_with for sid, r in results.items() if r.ran_with is not None}
    if not edited:
        return {"plan": plan, "proposed": None}
    data = plan.model_dump(mode="json")
    for s in data["steps"]:
        s["args"] = edited.get(s["id"], s["args"])
    return {"plan": type(plan).model_validate(data), "proposed": plan}


def _edits(plan: Plan, catalog: ActionCatalog, verdicts: Mapping[str, Verdict]) -> dict[str, str]:
    """Per step a person edited (so that its arguments changed), what the edit was."""
    found = {}
    for s in plan.steps:
        verdict = verdicts.get(s.id)
        if not isinstance(verdict, Edited):
            continue
        tool = catalog[s.action].tool
        planned = s.parsed_args(tool).model_dump(mode="json")
        try:
            edited: JSONValue = tool.parse(verdict.args, strict=True).model_dump(mode="json")
        except ToolArgumentsError:
            edited = jsonable(verdict.args)  # refused when it runs; its dependants still ask
        changed = changed_fields(planned, edited)
        if changed:
            what = changes_text(changed)
            found[s.id] = f"step {s.id} ({s.action}) was edited by {verdict.by} ({what})"
    return found
