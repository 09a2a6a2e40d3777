"""Two targets run on the *same* cases, compared case by case: :func:`paired_difference`.

Two targets scored on the same cases are not two independent samples: a hard case is hard
for both. Comparing each case's values and putting an interval around the mean of those
per-case differences removes the case-to-case spread that an unpaired interval counts as
noise, so the paired interval is usually narrower when the targets agree on which cases are
hard (and wider when they disagree). Repeats of a case are one cluster: a case's repeats
are averaged first, so ten repeats of one case weigh as one case, not ten.

The interval: when every case's value is 0 or 1 on both sides (right or wrong), Newcombe's
hybrid score interval for paired proportions
(:func:`~loopwise.evidence.evals.bounds.newcombe_paired`), which never collapses to a point
— 3 cases both got right give about −56 to +56 points, not "+0 to +0". Otherwise Student's t
on the per-case differences (``n - 1`` degrees of freedom); with fewer than two paired
cases, or differences that do not vary (a zero-variance t-interval is degenerate, not
certain), there is none (the bounds are infinite).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from loopwise.core.events import Status
from loopwise.core.jsontypes import JSONObject
from loopwise.evidence.evals.bounds import newcombe_paired
from loopwise.evidence.evals.stats import CaseRun

__all__ = ["PairedDifference", "paired_difference", "run_quality", "t_quantile"]


@dataclass(frozen=True, kw_only=True, slots=True)
class PairedDifference:
    """The mean per-case difference ``a - b`` of a value over the cases both targets ran."""

    cases: int
    """Cases both targets ran (each case one cluster, its repeats averaged)."""
    a_mean: float
    """``a``'s mean over those cases."""
    b_mean: float
    """``b``'s mean over those cases."""
    mean: float
    """The mean per-case difference ``a - b`` (equals ``a_mean - b_mean``)."""
    low: float
    """The interval's lower bound (``-inf`` with fewer than two cases)."""
    high: float
    """The interval's upper bound (``inf`` with fewer than two cases)."""
    confidence: float = 0.95
    """The interval's confidence."""
    unpaired: int = 0
    """Cases only one of the two targets ran (left out of the comparison)."""
    sd: float = math.nan
    """The per-case differences' standard deviation (``n - 1``; NaN with one case)."""
    method: str = "t"
    """How the interval was got: ``newcombe`` (0/1 values), ``t`` (Student's t) or
    ``none`` (no interval: too few cases, or differences that do not vary)."""

    @property
    def half_width(self) -> float:
        """Half the interval's width (``inf`` when there is no interval)."""
        return (self.high - self.low) / 2

    def to_dict(self) -> JSONObject:
        """A JSON-ready dict (an infinite bound is ``None``)."""
        return {
            "cases": self.cases,
            "a_mean": _round(self.a_mean),
            "b_mean": _round(self.b_mean),
            "mean": _round(self.mean),
            "low": _round(self.low),
            "high": _round(self.high),
            "confidence": self.confidence,
            "unpaired": self.unpaired,
            "method": self.method,
        }


def _round(value: float) -> float | None:
    return round(value, 6) if math.isfinite(value) else None


def run_quality(run: CaseRun) -> float:
    """A run's quality: its score when the case is scored, else 1 if it completed, else 0."""
    if run.score is not None:
        return run.score
    return 1.0 if run.status is Status.COMPLETED else 0.0


def paired_difference(
    a: Sequence[CaseRun],
    b: Sequence[CaseRun],
    *,
    value: Callable[[CaseRun], float | None] = run_quality,
    confidence: float = 0.95,
) -> PairedDifference:
    """Compare ``a``'s runs with ``b``'s case by case (matched on ``case_id``).

    ``value`` is what is compared (the run's quality by default; any metric works, e.g.
    ``lambda r: r.cost_usd``); a run whose value is ``None`` is left out of its case's mean,
    and a case with no known value on one side counts as unpaired. Raises ``ValueError``
    when the two share no case (there is nothing to pair).
    """
    means_a, means_b = _case_means(a, value), _case_means(b, value)
    shared = [case for case in means_a if case in means_b]
    if not shared:
        raise ValueError("the two targets ran no case in common: nothing to pair")
    diffs = [means_a[c] - means_b[c] for c in shared]
    n = len(diffs)
    mean = sum(diffs) / n
    a_mean = sum(means_a[c] for c in shared) / n
    b_mean = sum(means_b[c] for c in shared) / n
    low, high, method = -math.inf, math.inf, "none"
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1)) if n >= 2 else math.nan
    if all(means_a[c] in (0.0, 1.0) and means_b[c] in (0.0, 1.0) for c in shared):
        counts = Counter((means_a[c], means_b[c]) for c in shared)
        low, high = newcombe_paired(
            counts[(1.0, 1.0)],
            counts[(1.0, 0.0)],
            counts[(0.0, 1.0)],
            counts[(0.0, 0.0)],
            confidence,
        )
        method = "newcombe"
    elif n >= 2 and sd > 0:
        half = t_quantile(confidence, n - 1) * sd / math.sqrt(n)
        low, high, method = mean - half, mean + half, "t"
    return PairedDifference(
        cases=n,
        a_mean=a_mean,
        b_mean=b_mean,
        mean=mean,
        low=low,
        high=high,
        confidence=confidence,
        unpaired=len(set(means_a) ^ set(means_b)),
        sd=sd,
        method=method,
    )


def _case_means(
    runs: Sequence[CaseRun], value: Callable[[CaseRun], float | None]
) -> dict[str, float]:
    """Each case's mean value over its repeats (cases in first-seen order)."""
    by_case: dict[str, list[float]] = {}
    for run in runs:
        v = value(run)
        if v is not None:
            by_case.setdefault(run.case_id, []).append(float(v))
    return {case: sum(vs) / len(vs) for case, vs in by_case.items()}


@lru_cache(maxsize=256)
def t_quantile(confidence: float, df: int) -> float:
    """The two-sided Student t critical value: ``P(|T| < t) = confidence`` at ``df``."""
    if not 0 < confidence < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0 < confidence < 1 and df >= 1, not {confidence}, {df}")
    low, high = 0.0, 1.0
    while _t_central(high, df) < confidence:
        high *= 2
    for _ in range(80):
        mid = (low + high) / 2
        low, high = (mid, high) if _t_central(mid, df) < confidence else (low, mid)
    return (low + high) / 2


def _t_central(t: float, df: int) -> float:
    """``P(|T| < t)`` for Student's t with integer ``df`` (Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for k in range(2, df, 2):  # 1 + 1/2 c² + (1·3)/(2·4) c⁴ + …
            term *= c2 * (k - 1) / k
            total += term
        return s * total
    if df == 1:
        return 2 * theta / math.pi
    term, total = 1.0, 1.0
    for k in range(3, df, 2):  # 1 + 2/3 c² + (2·4)/(3·5) c⁴ + …
        term *= c2 * (k - 1) / k
        total += term
    return 2 / math.pi * (theta + s * math.cos(theta) * total)
