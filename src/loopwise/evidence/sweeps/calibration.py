"""Is a decision's confidence worth a threshold? :func:`calibration` measures it on a
dataset; two drawings of :mod:`loopwise.evidence.charts` show it:
:func:`~loopwise.evidence.charts.reliability_svg` (accuracy per confidence bin against the
diagonal) and :func:`~loopwise.evidence.charts.frontier_svg` (accuracy against cost, one
dot per threshold beside the pure workflow and the pure agent).

Pure functions of numbers: no model calls, no store. A confidence is the probability the
decision gave its own answer; ``correct`` says whether that answer was right. The
confidences are cut into ``bins`` equal bins over [0, 1] (the last one closed), and the
**expected calibration error** is

    ECE = Σ over bins of count / n × |accuracy − mean confidence|

over the ``n`` cases whose confidence is known. A case whose confidence is ``None``
(a structured call with no probabilities) is counted in ``unknown`` and never binned:
an unknown confidence is not a guess of 0 or 1.

A confidence of 0.9 means "right nine times in ten"; an ECE of 0.1 means the confidence
is off by ten points on average, which moves a threshold's meaning by as much. Few cases
cannot tell: :func:`calibration_warning` says so rather than trusting a small sample.

Every text in the drawings is escaped (labels are user text), and the labels of the
frontier never overlap: one that would is left out of the drawing (its dot keeps a
tooltip), the chosen threshold and the two endpoints first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from loopwise.core.jsontypes import JSONObject
from loopwise.errors import ConfigError

__all__ = [
    "ECE_LIMIT",
    "MAX_BINS",
    "MIN_CASES",
    "Calibration",
    "CalibrationBin",
    "calibration",
    "calibration_verdict",
    "calibration_warning",
]

MIN_CASES = 20
"""Fewer cases with a known confidence than this are too few to judge calibration by."""

ECE_LIMIT = 0.1
"""An expected calibration error above this is large: the confidence is off by more than
ten points on average, which moves a threshold's meaning by as much. ``loopwise eval
--sweep`` and ``loopwise check`` judge by it (:func:`calibration_verdict`)."""

MAX_BINS = 1_000
"""The most bins :func:`calibration` cuts [0, 1] into: finer than a thousandth says nothing
a confidence can mean, and each bin costs memory and a drawing's width."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CalibrationBin:
    """One bin of a reliability diagram: the cases whose confidence fell in [low, high)."""

    low: float
    """The bin's lower edge (included)."""
    high: float
    """The bin's upper edge (excluded, except 1.0 in the last bin)."""
    count: int
    """Cases in the bin."""
    mean_confidence: float | None
    """Their mean confidence (``None`` for an empty bin)."""
    accuracy: float | None
    """The share of them that were right (``None`` for an empty bin)."""

    def to_dict(self) -> JSONObject:
        """A JSON-ready dict."""
        return {
            "low": _round(self.low),
            "high": _round(self.high),
            "count": self.count,
            "mean_confidence": _round(self.mean_confidence),
            "accuracy": _round(self.accuracy),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Calibration:
    """How well a decision's confidence matched its accuracy on a dataset."""

    n: int
    """Cases with a known confidence (the ones binned)."""
    unknown: int
    """Cases whose confidence was unknown (``None``): counted, not binned."""
    ece: float | None
    """The expected calibration error over the ``n`` cases (``None`` when ``n`` is 0)."""
    bins: list[CalibrationBin]
    """Every bin in order, the empty ones included."""

    @property
    def mean_confidence(self) -> float | None:
        """The mean confidence over the ``n`` cases (``None`` when there are none)."""
        return _weighted(self.bins, "mean_confidence", self.n)

    @property
    def accuracy(self) -> float | None:
        """The share of the ``n`` cases that were right (``None`` when there are none)."""
        return _weighted(self.bins, "accuracy", self.n)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Calibration:
        """The calibration :meth:`to_dict` wrote (as an eval stores it); other keys ignored."""
        bins = [
            CalibrationBin(
                low=b["low"],
                high=b["high"],
                count=b["count"],
                mean_confidence=b["mean_confidence"],
                accuracy=b["accuracy"],
            )
            for b in doc["bins"]
        ]
        return cls(n=doc["n"], unknown=doc["unknown"], ece=doc["ece"], bins=bins)

    def to_dict(self) -> JSONObject:
        """A JSON-ready dict."""
        return {
            "n": self.n,
            "unknown": self.unknown,
            "ece": _round(self.ece),
            "mean_confidence": _round(self.mean_confidence),
            "accuracy": _round(self.accuracy),
            "bins": [b.to_dict() for b in self.bins],
        }


def _weighted(bins: Sequence[CalibrationBin], field: str, n: int) -> float | None:
    if n == 0:
        return None
    # getattr: one of a bin's own fields, named by the caller (the two weighted means).
    return sum(b.count * (getattr(b, field) or 0.0) for b in bins) / n


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def calibration(
    confidences: Sequence[float | None], correct: Sequence[bool], bins: int = 10
) -> Calibration:
    """The reliability bins and the expected calibration error of ``confidences`` (each
    case's confidence in its own answer, ``None`` when unknown) against ``correct``
    (whether that answer was right).

    Raises :class:`~loopwise.errors.ConfigError` naming the argument (``.name``) when the
    two differ in length, a confidence is outside [0, 1] or not a number, a ``correct``
    value is not a bool, or ``bins`` is below 1.
    """
    if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= MAX_BINS:
        raise ConfigError(
            f"calibration: bins must be a whole number from 1 to {MAX_BINS:,}, not {bins!r}",
            name="bins",
        )
    if len(confidences) != len(correct):
        raise ConfigError(
            f"calibration: {len(confidences)} confidences but {len(correct)} correct values; "
            "give one of each per case",
            name="correct",
        )
    counts = [0] * bins
    sums = [0.0] * bins
    rights = [0] * bins
    unknown = 0
    for i, (conf, right) in enumerate(zip(confidences, correct, strict=True)):
        if not isinstance(right, bool):
            raise ConfigError(
                f"calibration: correct[{i}] is {right!r}; each must be True or False",
                name="correct",
            )
        if conf is None:
            unknown += 1
            continue
        k = _bin_of(_checked(conf, i), bins)
        counts[k] += 1
        sums[k] += float(conf)
        rights[k] += right
    n = sum(counts)
    out = [
        CalibrationBin(
            low=k / bins,
            high=(k + 1) / bins,
            count=counts[k],
            mean_confidence=sums[k] / counts[k] if counts[k] else None,
            accuracy=rights[k] / counts[k] if counts[k] else None,
        )
        for k in range(bins)
    ]
    ece = (
        sum(abs(rights[k] - sums[k]) for k in range(bins)) / n  # Σ count/n × |acc − conf|
        if n
        else None
    )
    return Calibration(n=n, unknown=unknown, ece=ece, bins=out)


def _checked(conf: object, index: int) -> float:
    if isinstance(conf, bool) or not isinstance(conf, int | float) or not 0.0 <= conf <= 1.0:
        raise ConfigError(
            f"calibration: confidences[{index}] is {conf!r}; a confidence is a number in [0, 1] "
            "(or None when unknown)",
            name="confidences",
        )
    return float(conf)


def _bin_of(conf: float, bins: int) -> int:
    return min(int(conf * bins), bins - 1)


Verdict = Literal["unknown", "uncertain", "large"]
"""Why a calibration gives a threshold little meaning (:func:`calibration_verdict`)."""


def calibration_verdict(
    cal: Calibration, limit: float = ECE_LIMIT, *, min_cases: int = MIN_CASES
) -> tuple[Verdict, str] | None:
    """Why ``cal`` gives a threshold on the confidence little meaning, and the line saying
    so: ``unknown`` (no case had a known confidence), ``uncertain`` (fewer than
    ``min_cases`` had) or ``large`` (its ECE is above ``limit``, :data:`ECE_LIMIT` unless
    told). ``None`` when the calibration looks sound."""
    if not 0.0 <= limit <= 1.0 or math.isnan(limit):
        raise ConfigError(
            f"calibration_warning: limit must be in [0, 1], not {limit!r}", name="limit"
        )
    unknown = f"; {cal.unknown} unknown confidence(s) not counted" if cal.unknown else ""
    if cal.ece is None:
        return "unknown", (
            f"calibration unknown: none of {cal.unknown} case(s) has a known confidence, "
            "so a threshold on it cannot be judged"
        )
    if cal.n < min_cases:
        return "uncertain", (
            f"calibration uncertain: ECE {cal.ece:.3f} from only {cal.n} case(s) with a "
            f"confidence, too few to say (need {min_cases}){unknown}"
        )
    if round(cal.ece, 6) > limit:  # as shown and stored: an ECE at the limit is not above it
        side = "over" if (cal.mean_confidence or 0.0) > (cal.accuracy or 0.0) else "under"
        return "large", (
            f"calibration error is large: ECE {cal.ece:.3f} > {limit:g} on {cal.n} cases "
            f"({side}confident: mean confidence {cal.mean_confidence:.0%}, accuracy "
            f"{cal.accuracy:.0%}), so a confidence threshold means less than it says{unknown}"
        )
    return None


def calibration_warning(
    cal: Calibration, limit: float = ECE_LIMIT, *, min_cases: int = MIN_CASES
) -> str | None:
    """One line when ``cal`` gives a threshold on the confidence little meaning (the text
    of :func:`calibration_verdict`); ``None`` when the calibration looks sound."""
    verdict = calibration_verdict(cal, limit, min_cases=min_cases)
    return None if verdict is None else verdict[1]
