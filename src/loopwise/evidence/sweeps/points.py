"""What a sweep found: one threshold over every case (:class:`SweepPoint`) and the
frontier with its choice for one cascade (:class:`Sweep`). Plain results, so the report
reads them without importing the sweep runner or an architecture."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from loopwise.core.jsontypes import JSONObject
from loopwise.evidence.evals.certify import Certification
from loopwise.evidence.evals.harness import Effects
from loopwise.evidence.evals.paired import PairedDifference
from loopwise.evidence.evals.stats import CaseRun
from loopwise.evidence.sweeps.calibration import Calibration

__all__ = ["PersonModel", "Sweep", "SweepPoint"]


class PersonModel(TypedDict):
    """The person a sweep models deciding escalated cases
    (:class:`~loopwise.evidence.sweeps.person.Person`, as a sweep keeps it)."""

    accuracy: float
    """The chance the person picks the right answer."""
    cost_usd: float
    """What one case the person decides costs, USD."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SweepPoint:
    """One threshold of a sweep, over every case."""

    threshold: float
    """The threshold (a case is sure when its confidence is above it)."""
    accuracy: float | None
    """The mean score of the scored cases (``None`` when none is scored)."""
    low: float
    """The accuracy's 95% Wilson interval, lower bound."""
    high: float
    """Its upper bound."""
    cases: int
    """Runs counted (cases × repeats)."""
    escalated: int
    """How many went to the unsure side."""
    cost: float | None
    """Mean USD per case (``None``: some run's cost is unknown)."""
    tokens: float
    """Mean tokens per case."""
    latency: float
    """p95 wall seconds per case."""
    model_calls: float
    """Mean model calls per case."""
    runs: tuple[CaseRun, ...] = field(default=(), repr=False, compare=False)
    """Each case's outcome at this threshold (for paired comparisons; costs as run)."""

    @property
    def share_escalated(self) -> float:
        """The share of cases sent to the unsure side."""
        return self.escalated / self.cases if self.cases else 0.0

    def to_dict(self) -> JSONObject:
        """``{"threshold", "accuracy", "accuracy_low", "accuracy_high", "share_escalated",
        "escalated", "cases", "cost", "tokens", "latency", "model_calls"}``; latency is the
        p95 in seconds."""
        return {
            "threshold": self.threshold,
            "accuracy": _r(self.accuracy),
            "accuracy_low": _r(self.low),
            "accuracy_high": _r(self.high),
            "share_escalated": _r(self.share_escalated),
            "escalated": self.escalated,
            "cases": self.cases,
            "cost": None if self.cost is None else round(self.cost, 9),
            "tokens": round(self.tokens, 2),
            "latency": round(self.latency, 6),
            "model_calls": round(self.model_calls, 4),
        }


def _no_effects() -> Effects:
    """A sweep's effects before its passes are merged in (none)."""
    return Effects(performed={}, into="no deps", discarded=False, gates={})


def _person_json(person: PersonModel) -> JSONObject:
    return {"accuracy": person["accuracy"], "cost_usd": person["cost_usd"]}


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


@dataclass(frozen=True, kw_only=True, slots=True)
class Sweep:
    """What a sweep found for one cascade: the frontier, the choice, the calibration."""

    target: str
    """The cascade's target name."""
    name: str
    """The threshold swept (``threshold``)."""
    declared: float
    """The threshold the cascade declares."""
    points: list[SweepPoint]
    """One per threshold of the grid, in grid order."""
    best: SweepPoint | None
    """The most accurate (the cheapest of those tied)."""
    recommended: SweepPoint | None
    """The cheapest shown within the margin (5 points, or ``max_error``) of :attr:`best`
    (:mod:`loopwise.evidence.sweeps.choice`); :attr:`best` itself when none is."""
    versus_best: PairedDifference | None
    """``best`` minus ``recommended``, paired on the same cases."""
    reason: str
    """Why the recommendation, citing the numbers."""
    cost_basis: str
    """``USD`` (the runs' own prices) or ``gpt-4o-mini prices`` (the model had none)."""
    calibration: Calibration
    """The judge's confidence against whether its side was right, over the cases."""
    warning: str | None
    """:func:`~loopwise.evidence.sweeps.calibration.calibration_warning` of it."""
    unknown: str
    """How the cascade counts an unknown confidence (``sure`` or ``unsure``)."""
    confidences: list[JSONObject] = field(default_factory=list)
    """Per run ``{"case_id", "repeat", "confidence", "sure_correct"}``."""
    effects: Effects = field(default_factory=_no_effects)
    """The effects the sweep's runs took (the eval's ``effects`` entry for the target)."""
    person: PersonModel | None = None
    """The model of the person who decides escalated cases (``{"accuracy", "cost_usd"}``),
    ``None`` when the unsure side is not a person."""
    certification: Certification | None = None
    """The certified threshold or why there is none (``None``: no ``max_error`` asked)."""

    def to_dict(self) -> JSONObject:
        """The JSON ``loopwise eval --sweep --json`` prints under ``sweeps``."""
        return {
            "target": self.target,
            "threshold": self.name,
            "declared": self.declared,
            "unknown_counts_as": self.unknown,
            "cost_basis": self.cost_basis,
            "frontier": [p.to_dict() for p in self.points],
            "best": None if self.best is None else self.best.to_dict(),
            "recommended": None if self.recommended is None else self.recommended.to_dict(),
            "recommended_threshold": None
            if self.recommended is None
            else self.recommended.threshold,
            "versus_best": None if self.versus_best is None else self.versus_best.to_dict(),
            "reason": self.reason,
            "calibration": self.calibration.to_dict(),
            "calibration_warning": self.warning,
            "confidences": list(self.confidences),
            "person": None if self.person is None else _person_json(self.person),
            **({} if self.certification is None else self.certification.to_dict()),
        }
