"""The person in a sweep: a cascade whose unsure side asks a person (``AskPerson``) is swept
with an explicit model of that person (:class:`Person`: ``--person-accuracy``,
``--person-cost``), never by the eval's gate rule.

A sweep cannot ask a person a thousand questions, and answering their approvals by rule
measures nothing: ``--gates deny`` scores every escalated case 0 and ``--gates approve``
makes the "person" repeat the judge, so the sweep would always recommend never asking. So
each case a threshold escalates to the person is modelled: right with probability
``accuracy`` (its expected score, counted in the accuracy), costing the judge's call plus
``cost_usd`` (counted in the frontier's cost). Without a model the sweep refuses
(:func:`check_person`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from loopwise.architectures.cascade import AskPerson, Cascade
from loopwise.core.events import Status
from loopwise.core.usage import Usage
from loopwise.errors import ConfigError
from loopwise.evidence.evals.stats import CaseRun
from loopwise.evidence.sweeps.points import PersonModel

__all__ = ["Person", "check_person", "person_outcome"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Person:
    """How the sweep counts a person who decides an escalated case."""

    accuracy: float
    """The chance the person picks the right answer (1.0: an oracle)."""
    cost_usd: float = 0.0
    """What one case the person decides costs (their time), USD."""

    def to_dict(self) -> PersonModel:
        """``{"accuracy", "cost_usd"}``."""
        return {"accuracy": self.accuracy, "cost_usd": self.cost_usd}


def check_person(
    cascade: Cascade, target: str, accuracy: float | None, cost_usd: float | None
) -> Person | None:
    """The person model a sweep of ``cascade`` uses: ``None`` when its unsure side is not a
    person (and no model is given). :class:`ConfigError` (one line) when it asks a person
    and no ``accuracy`` is given, when a model is given for a cascade that asks none, or
    when a value is out of range."""
    asks = isinstance(cascade.unsure, AskPerson)
    if accuracy is None and cost_usd is None and not asks:
        return None
    if not asks:
        raise ConfigError(
            f"--person-accuracy: {target}'s unsure side is not a person (AskPerson); "
            "the sweep runs it as it is",
            name="person_accuracy",
        )
    if accuracy is None:
        raise ConfigError(
            f"--sweep: {target}'s unsure side asks a person, whom a sweep cannot ask: model "
            "them with --person-accuracy P (and --person-cost USD per case they decide)",
            name="person_accuracy",
        )
    if not (0.0 <= accuracy <= 1.0) or math.isnan(accuracy):
        raise ConfigError(
            f"--person-accuracy {accuracy}: a probability between 0 and 1",
            name="person_accuracy",
        )
    cost = 0.0 if cost_usd is None else cost_usd
    if not (math.isfinite(cost) and cost >= 0):
        raise ConfigError(f"--person-cost {cost_usd}: USD per case, 0 or more", name="person_cost")
    return Person(accuracy=accuracy, cost_usd=cost)


def person_outcome(first: CaseRun, judge: Usage, person: Person) -> CaseRun:
    """An escalated case decided by the modelled person: the judge's part of its run, then
    the person, right with probability :attr:`Person.accuracy` (its expected score). The
    person's cost is not in ``cost_usd`` (the sweep adds it per case on any cost basis)."""
    return replace(
        first,
        status=Status.COMPLETED,
        score=None if first.score is None else person.accuracy,
        model_calls=judge.model_calls,
        tokens=judge.total_tokens,
        input_tokens=judge.input_tokens,
        output_tokens=judge.output_tokens,
        cost_usd=judge.cost_usd,
        latency_s=judge.wall_seconds,
        output=None,
        detail=f"decided by the modelled person (right with probability {person.accuracy:g})",
        diff=[],
    )
