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
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from loopwise.architectures.plans import ActionCatalog, Plan, dependency_graph
from loopwise.core.events import jsonable
from loopwise.tools.gates import changed_fields
from loopwise.tools.tool import ToolArgumentsError
from loopwise.tools.verdicts import Denied, Edited

__all__ = ["RECHECK_SUFFIX", "rechecks"]

RECHECK_SUFFIX = ".recheck"
"""Added to a plan step's approval id when a person must decide it again."""

_CLIP = 60


def rechecks(plan: Plan, catalog: ActionCatalog, verdicts: Mapping[str, Any]) -> dict[str, str]:
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


def _edits(plan: Plan, catalog: ActionCatalog, verdicts: Mapping[str, Any]) -> dict[str, str]:
    """Per step a person edited (so that its arguments changed), what the edit was."""
    found = {}
    for s in plan.steps:
        verdict = verdicts.get(s.id)
        if not isinstance(verdict, Edited):
            continue
        tool = catalog[s.action].tool
        planned = tool.parse(s.args_dict()).model_dump(mode="json")
        try:
            edited: Any = tool.parse(verdict.args).model_dump(mode="json")
        except ToolArgumentsError:
            edited = jsonable(verdict.args)  # refused when it runs; its dependants still ask
        changed = changed_fields(planned, edited)
        if changed:
            what = ", ".join(
                f"{k}: {_clip(v['from'])} → {_clip(v['to'])}" for k, v in changed.items()
            )
            found[s.id] = f"step {s.id} ({s.action}) was edited by {verdict.by} ({what})"
    return found


def _clip(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _CLIP else text[: _CLIP - 1] + "…"
