"""The eval history's names: :func:`history_key` and :func:`last_eval`.

``loopwise eval`` keeps each target's summary in the eval store under the target's and
the dataset's names, and later reads it back: the next eval compares with it, and
``loopwise check`` reads a cascade's last sweep from it. A name a person types can be
spelled several ways (``flow.py:triage``, ``./flow.py:triage``, an absolute path), so the
history keys a file by its resolved path. Imports nothing heavy: ``check`` of a plain
workflow stays light.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loopwise.store.base import EvalHistory

__all__ = ["gate_mark", "history_key", "last_eval"]


def history_key(spec: str) -> str:
    """How the eval history names a target or a dataset: a file's path made absolute, its
    links resolved, so ``flow.py:triage``, ``./flow.py:triage`` and
    ``/home/me/flow.py:triage`` share one history (``loopwise check`` finds the sweep
    ``loopwise eval`` ran, however either was spelled); a module's dotted name
    (``pkg.flows:triage``) or a path that does not exist stays as given."""
    whole = _file(spec)
    if whole is not None:
        return whole
    path, sep, name = spec.partition(":")
    file = _file(path) if sep and path else None
    return spec if file is None else f"{file}:{name}"


def gate_mark(rule: str | None) -> str:
    """The key an eval's summary holds to say which gate rule its runs were answered by
    (``deny``, ``approve``; ``None``: gates answered as any run's). The rule is part of an
    eval's identity: a target whose gates were denied and the same target whose gates were
    approved are two experiments, never "was 50%, now 90%". One of a fixed set of rules,
    so the key is never spelled by a user."""
    return f"gate_rule:{rule or 'as_run'}"


def _file(text: str) -> str | None:
    """``text`` as an existing file's resolved path, or ``None`` (no such file — a
    directory is none: ``pkg:flow`` names a module even beside a folder ``pkg`` — or no
    path at all: a NUL, a name too long)."""
    try:
        path = Path(text)
        return str(path.resolve()) if path.is_file() else None
    except (OSError, ValueError):
        return None


def last_eval(
    store: EvalHistory,
    target: str,
    *,
    dataset: str | None,
    before: str,
    model: str | None = None,
    having: str | None = None,
) -> dict[str, Any] | None:
    """``store.last_eval`` of ``target`` (and ``dataset``) by their :func:`history_key`,
    else as spelled (an eval kept before the history was keyed so)."""
    keyed = None if dataset is None else history_key(dataset)
    found = store.last_eval(
        history_key(target), dataset=keyed, before=before, model=model, having=having
    )
    if found is None and (history_key(target), keyed) != (target, dataset):
        found = store.last_eval(target, dataset=dataset, before=before, model=model, having=having)
    return found
