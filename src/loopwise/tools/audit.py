"""Small, dependency-free helpers of the audit log: one line per event, and who is deciding.

Light on purpose: ``loopwise runs show`` and the approvals inbox both print events with
:func:`event_summary`, the terminal prompt and ``loopwise pending`` both show what an
approval is about with :func:`asked_lines`, an edit's change is said one way everywhere
(:func:`changed_fields`, :func:`changes_text`), and the CLI's decisions name the person
with :func:`os_user`, without loading pydantic or the model port.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Mapping

from loopwise.core.jsontypes import JSONMapping, JSONObject

__all__ = [
    "asked_lines",
    "changed_fields",
    "changes_text",
    "event_summary",
    "os_user",
    "stake_text",
]

_CLIP = 60


def event_summary(kind: str, d: JSONMapping) -> str:
    """One line about an event of the audit log (plain text): its ``type`` and ``data``."""
    if kind == "tool_call":
        edited = f" edited by {d['edited_by']}" if d.get("edited_by") else ""
        return f"{d.get('tool')}({json.dumps(d.get('args'), default=str)}){edited}"
    if kind == "tool_result":
        return str(d.get("content", ""))
    if kind == "model_call":
        return f"{d.get('model')} in={d.get('input_tokens')} out={d.get('output_tokens')}"
    if kind in {"gate_requested", "gate_decided"}:
        what = d.get("decision") or d.get("reason")
        by = f" by {d['by']}" if d.get("by") else ""
        why = f": {d['reason']}" if kind == "gate_decided" and d.get("reason") else ""
        return f"{d.get('tool')} [{d.get('approval_id')}] {what}{by}{why}"
    if kind in {"run_finished", "run_paused"}:
        return str(d.get("status"))
    return ""


def changed_fields(before: object, after: object) -> JSONObject:
    """What an edit changed, field by field: ``{name: {"from": old, "to": new}}`` (a
    field the edit left out is ``"to": null``)."""
    old = before if isinstance(before, dict) else {}
    new = after if isinstance(after, dict) else {}
    return {
        k: {"from": old.get(k), "to": new.get(k)}
        for k in sorted({*old, *new})
        if old.get(k) != new.get(k)
    }


def changes_text(changed: JSONMapping) -> str:
    """:func:`changed_fields`'s answer as one line a person reads:
    ``amount_cents: 25000 → 4000, reason: "late" → "broken"`` (each value as JSON,
    shortened)."""
    return ", ".join(
        f"{k}: {_clip(v.get('from'))} → {_clip(v.get('to'))}"
        for k, v in changed.items()
        if isinstance(v, Mapping)
    )


def _clip(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _CLIP else text[: _CLIP - 1] + "…"


def stake_text(at_stake: float, unit: str | None) -> str:
    """An amount at stake with what it is in: ``250.00 EUR (the action's estimate)``, or,
    when the action declares no unit, ``250.00 (the action's estimate; it declares no
    currency or unit)`` — never a bare number a person might read as their own currency."""
    if unit:
        return f"{at_stake:,.2f} {unit} (the action's estimate)"
    return f"{at_stake:,.2f} (the action's estimate; it declares no currency or unit)"


def asked_lines(
    why: str | None, at_stake: float | None, note: str | None, unit: str | None = None
) -> list[str]:
    """What a person reads on a terminal under an approval's call, one indented line each
    when said: the planner's reason, the money at stake (the action's estimate, with its
    ``unit``: :func:`stake_text`), the note."""
    lines = []
    if why:
        lines.append(f"    planner's reason: {why}")
    if at_stake is not None:
        lines.append(f"    at stake: {stake_text(at_stake, unit)}")
    if note:
        lines.append(f"    note: {note}")
    return lines


def os_user() -> str:
    """The operating system's name for the person at this terminal (``terminal`` when
    it has none)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "terminal"
