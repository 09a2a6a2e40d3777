"""Live cases as an eval's dataset: :func:`live_dataset` (``loopwise eval --from-store``).

People's decisions are labels: a cascade's :class:`~loopwise.architectures.cascade.AskPerson`
keeps each pick (the labels as approved, or as a person edited them) as a live case of the
run's target, ``kind="person"``; a :class:`~loopwise.evidence.live.shadow.Shadow` keeps each
pair, ``kind="shadow"``, whose reference is the shadow's output. Either becomes a
:class:`~loopwise.evidence.evals.dataset.Case`: the case's input, and its reference as what
a correct output contains, so a sweep re-certifies a threshold on live traffic. What the
claim then means follows the reference: judged by people's labels, or agreement with the
shadow (when the references are an agent's answers).
"""

from __future__ import annotations

from collections.abc import Sequence

from loopwise.errors import ConfigError
from loopwise.evidence.evals.dataset import Case
from loopwise.evidence.live.verdict import spellings
from loopwise.store.base import LiveEvidence

__all__ = ["KINDS", "live_dataset"]

KINDS = ("person", "shadow")
"""The kinds of live case: a person's decision, a shadow's pair."""


def live_dataset(
    live: LiveEvidence,
    specs: Sequence[str],
    *,
    since: str | None = None,
    kinds: Sequence[str] = KINDS,
) -> list[Case]:
    """The labelled live cases of the targets ``specs`` (oldest first): a person's pick,
    and a shadow's completed pair, each with its reference as ``expected``. Raises
    :class:`ConfigError` (``name="from-store"``) when there is none, naming the targets."""
    found = []
    for kind in kinds:
        names = [name for spec in specs for name in spellings(live, spec)]
        found += [
            c for c in live.live_cases(names, since=since, kind=kind) if c.reference is not None
        ]
    found.sort(key=lambda c: (c.created_at, c.run_id, c.key))
    if not found:
        raise ConfigError(
            f"--from-store: no labelled live case of {', '.join(specs)} in the run store (a "
            "Shadow keeps one per shadowed run, a cascade's AskPerson one per pick)",
            name="from-store",
        )
    return [Case(id=f"{c.run_id}/{c.key}", input=c.input, expected=c.reference) for c in found]
