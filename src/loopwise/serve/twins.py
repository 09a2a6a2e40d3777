"""Two runs asking for the same irreversible action on the same object, found for the inbox.

The rule: a pending approval of an ``irreversible`` call has a twin in a pending approval
of *another* run that names the same tool and either

* names the same object: its top-level arguments called ``id`` or ``…_id``
  (``order_id``, ``customer_id``) that are not null are the same names with the same
  values, and there is at least one — a refund of 40 and one of 250 on order O-1003
  are two refunds of one order, which a person wants to see side by side; or
* has no such argument, and its arguments are identical (canonical JSON, keys sorted).

Cheap with the paged inbox: the front page compares the approvals it shows (one page,
:data:`loopwise.store.base.PAGE` of them) with each other, and a run page compares its
own pending approvals with the newest page of pending approvals — one indexed query. A
twin further back than that page is not flagged.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from loopwise.core.jsontypes import JSONMapping, JSONObject
from loopwise.core.svg import shorten
from loopwise.store.base import StoredApproval

__all__ = ["Twin", "object_of", "twins"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Twin:
    """Another run's pending approval that asks for the same action."""

    run_id: str
    """The other run."""
    approval_id: str
    """Its approval that asks the same."""


_SHOWN = 60
"""An id longer than this many characters is shown cut (the arguments below have it)."""


def _shown(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return shorten(text, _SHOWN)


def _ids(args: JSONMapping) -> JSONObject:
    return {k: v for k, v in args.items() if (k == "id" or k.endswith("_id")) and v is not None}


def object_of(approval: StoredApproval) -> str:
    """What the call acts on, as the hint says it: ``on order O-1003`` (from
    ``order_id``), or ``with the same arguments`` when it names no object."""
    ids = _ids(approval.args) if isinstance(approval.args, dict) else {}
    if not ids:
        return "with the same arguments"
    return "on " + ", ".join(
        f"{(k.removesuffix('_id') or k).replace('_', ' ')} {_shown(v)}" for k, v in ids.items()
    )


def _key(a: StoredApproval) -> tuple[str, str, str] | None:
    """The action an approval asks for (tool, how matched, what), or ``None`` when it is
    not a pending irreversible call."""
    if a.status != "pending" or a.effect != "irreversible" or not isinstance(a.args, dict):
        return None
    ids = _ids(a.args)
    if ids:
        return a.tool, "ids", json.dumps(ids, sort_keys=True, default=str)
    return a.tool, "args", json.dumps(a.args, sort_keys=True, default=str)


def twins(
    mine: Sequence[StoredApproval], others: Sequence[StoredApproval]
) -> dict[tuple[str, str], list[Twin]]:
    """For each approval of ``mine`` (by ``(run_id, approval_id)``) that has any, the
    approvals of ``others`` of another run asking for the same action (the rule above),
    in ``others``' order; one pass over each."""
    asked: dict[tuple[str, str, str], list[StoredApproval]] = {}
    for o in others:
        key = _key(o)
        if key is not None:
            asked.setdefault(key, []).append(o)
    found: dict[tuple[str, str], list[Twin]] = {}
    for a in mine:
        key = _key(a)
        same = [
            Twin(run_id=o.run_id, approval_id=o.approval_id)
            for o in (asked.get(key, []) if key is not None else [])
            if o.run_id != a.run_id
        ]
        if same:
            found[(a.run_id, a.approval_id)] = same
    return found
