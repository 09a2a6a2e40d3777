"""A cascade threshold with a stated guarantee: :func:`certify` (``eval --sweep --max-error``).

The sweep's recommendation trades accuracy against cost; it says nothing about how often
the answers the sure side *accepts* are wrong, which is the number a team signs off on.
:func:`certify` answers that with Learn-then-Test (Angelopoulos et al., 2021) by
fixed-sequence testing and the exact binomial tail, exactly:

1. the sweep's thresholds from the highest to the lowest; a case is *accepted* at λ when its
   confidence is above λ (the cascade's own rule; an unknown confidence is not accepted);
   at λ, ``n`` = accepted cases, ``k`` = accepted cases whose sure-path outcome the scorer
   marks not correct (unscored cases are left out; with ``--repeat``, each case counts once,
   by its first run: repeats are not independent draws);
2. thresholds accepting fewer than ⌈ln δ / ln(1−α)⌉ cases are skipped: they cannot be
   certified even with no error (decided from the confidences alone, before any label);
3. walking down the rest, λ is certified while ``BinomCDF(k; n, α) ≤ δ``; the walk stops
   at the first λ that fails;
4. the certificate is the lowest certified λ, its ``error_bound`` the one-sided
   Clopper–Pearson upper bound of ``k/n`` at ``1 − δ``. None certified: no certificate
   ("escalate every case"), with how many accepted cases one would need — never a fallback
   to the top threshold.

The claim, and its limits: with probability at least ``1 − δ`` over the draw of the
dataset's cases, the answers the sure side accepts at λ are wrong at most ``α`` of the time
— on traffic like the dataset (the cases are taken as a sample of it), judged by its labels
(or, when the references are the agent's own answers, *agreement with the agent*). It says
nothing about traffic that drifts from the dataset, and a label that is wrong counts as it
is. Testing thresholds in a fixed order, stopping at the first failure, is what lets many
thresholds be tried without spending ``δ`` more than once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from loopwise.core.jsontypes import JSONObject
from loopwise.errors import ConfigError
from loopwise.evidence.evals.bounds import (
    binom_cdf,
    cases_to_bound,
    cases_to_bound_rate,
    clopper_pearson_upper,
)

__all__ = ["Certificate", "Certification", "Judged", "certify", "check_levels"]

References = Literal["labels", "agent"]

Judged = tuple[float | None, bool]
"""One scored sure-path run: the judge's confidence (``None``: unknown) and whether the
sure side's outcome was not correct."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Certificate:
    """A certified threshold: what ``eval --sweep --max-error --json`` prints as
    ``certified``."""

    threshold: float
    """The lowest certified threshold λ (a case is accepted when its confidence is above it)."""
    alpha: float
    """The error rate bounded (``--max-error``)."""
    delta: float
    """The chance the bound is wrong (``--delta``): it holds with probability ``1 − δ``."""
    accepted: int
    """Scored cases the sure side accepts at λ."""
    errors: int
    """Of those, how many its outcome got wrong."""
    coverage: float
    """The share of the scored cases accepted at λ (the traffic the sure side takes)."""
    error_bound: float
    """The one-sided Clopper–Pearson upper bound of ``errors / accepted`` at ``1 − δ``."""

    def to_dict(self) -> JSONObject:
        """``{"threshold", "alpha", "delta", "accepted", "errors", "coverage", "error_bound"}``."""
        return {
            "threshold": self.threshold,
            "alpha": self.alpha,
            "delta": self.delta,
            "accepted": self.accepted,
            "errors": self.errors,
            "coverage": round(self.coverage, 6),
            "error_bound": round(self.error_bound, 6),
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Certification:
    """The outcome of :func:`certify`: a :class:`Certificate` or why there is none."""

    certificate: Certificate | None
    """The certified threshold, or ``None`` (escalate every case)."""
    reason: str | None
    """Why none is certified (``None`` when one is)."""
    alpha: float
    """The error rate asked for."""
    delta: float
    """The chance allowed for the bound to be wrong."""
    needed: int
    """The fewest accepted cases any certificate needs (⌈ln δ / ln(1−α)⌉, with no error)."""
    would_need: int | None
    """When none is certified: about how many accepted cases at the observed error rate
    would certify (``None`` when that rate is not below ``α``: no number would)."""
    scored: int
    """Scored cases the procedure read."""
    references: References = "labels"
    """What the dataset's ``expected`` values are: labels, or the agent's own answers."""

    @property
    def claim(self) -> str:
        """The guarantee in words, with its scope (or what to do when there is none)."""
        scope = (
            "agreement with the agent (the references are the agent's own answers)"
            if self.references == "agent"
            else "judged by its labels"
        )
        c = self.certificate
        if c is None:
            return f"no threshold is certified: escalate every case ({self.reason})"
        wrong = "disagree with the agent" if self.references == "agent" else "are wrong"
        return (
            f"certified threshold {c.threshold:g}: with probability >= {1 - c.delta:.0%} over "
            f"this dataset's cases, the answers the sure side accepts above it {wrong} at most "
            f"{c.alpha:.0%} of the time ({c.errors} of {c.accepted} accepted cases, bound "
            f"{c.error_bound:.1%}; it takes {c.coverage:.0%} of the traffic) - on traffic like "
            f"this dataset, {scope}"
        )

    def to_dict(self) -> JSONObject:
        """``{"certified": {...} | None, "certified_reason", "certified_claim", ...}``: the
        keys ``eval --sweep --max-error --json`` adds to a sweep."""
        return {
            "certified": None if self.certificate is None else self.certificate.to_dict(),
            "certified_reason": self.reason,
            "certified_claim": self.claim,
            "certified_needs": self.needed,
            "certified_would_need": self.would_need,
            "certified_references": self.references,
        }


def check_levels(alpha: float | None, delta: float) -> None:
    """:class:`ConfigError` naming ``max_error`` or ``delta`` when outside (0, 1)."""
    if alpha is not None and not 0 < alpha < 1:
        raise ConfigError(
            f"--max-error {alpha}: the error rate to certify must be between 0 and 1 (e.g. 0.05)",
            name="max_error",
        )
    if not 0 < delta < 1:
        raise ConfigError(
            f"--delta {delta}: the chance the bound may be wrong must be between 0 and 1 "
            "(e.g. 0.1)",
            name="delta",
        )


def certify(
    thresholds: Sequence[float],
    judged: Sequence[Judged],
    *,
    alpha: float,
    delta: float = 0.1,
    references: References = "labels",
    accepted_unknown: int = 0,
    accepts_unknown: bool = False,
) -> Certification:
    """Run the procedure of the module docstring over ``thresholds`` on ``judged`` (one
    ``(confidence, wrong)`` per scored sure-path run). ``accepted_unknown`` counts runs the
    cascade accepts with no confidence; ``accepts_unknown`` says it declares
    ``unknown="sure"``: no bound covers a case accepted with no confidence, so such a
    cascade is never certified, whether or not this dataset held one."""
    check_levels(alpha, delta)
    needed = cases_to_bound(alpha, delta)
    scored = len(judged)

    def none(reason: str, would_need: int | None) -> Certification:
        return Certification(
            certificate=None,
            reason=reason,
            alpha=alpha,
            delta=delta,
            needed=needed,
            would_need=would_need,
            scored=scored,
            references=references,
        )

    if not judged:
        return none("no case is scored, so no error rate can be bounded", needed)
    if accepted_unknown or accepts_unknown:
        return none(
            "the cascade accepts a case whose confidence is unknown (unknown='sure'), and "
            f"{accepted_unknown} of {scored} scored cases here had none: no bound covers "
            "such a case on traffic to come; declare unknown='unsure' to certify",
            None,
        )
    certified: Certificate | None = None
    first_fail: tuple[float, int, int] | None = None
    most = 0
    for level in sorted(set(thresholds), reverse=True):
        accepted = [
            wrong for confidence, wrong in judged if confidence is not None and confidence > level
        ]
        n, k = len(accepted), sum(accepted)
        most = max(most, n)
        if n < needed:
            continue
        if binom_cdf(k, n, alpha) > delta:
            first_fail = (level, n, k)
            break
        certified = Certificate(
            threshold=level,
            alpha=alpha,
            delta=delta,
            accepted=n,
            errors=k,
            coverage=n / scored,
            error_bound=clopper_pearson_upper(k, n, 1 - delta),
        )
    if certified is not None:
        return Certification(
            certificate=certified,
            reason=None,
            alpha=alpha,
            delta=delta,
            needed=needed,
            would_need=None,
            scored=scored,
            references=references,
        )
    if first_fail is None:
        return none(
            f"the sure side accepts at most {most} of {scored} scored cases at any threshold "
            f"swept; bounding its error under {alpha:.0%} at {1 - delta:.0%} confidence needs at "
            f"least {needed} accepted cases, even with none wrong",
            needed,
        )
    level, n, k = first_fail
    would = cases_to_bound_rate(k / n, alpha, delta)
    more = (
        f"about {would} accepted cases at this error rate would certify it"
        if would is not None
        else f"its error rate ({k / n:.1%}) is not below {alpha:.0%}, so no number of cases would"
    )
    return none(
        f"at threshold {level:g} the sure side accepts {n} cases with {k} wrong: "
        f"BinomCDF({k}; {n}, {alpha:g}) = {binom_cdf(k, n, alpha):.3f} > δ = {delta:g}, so its "
        f"error cannot be bounded under {alpha:.0%}; {more}",
        would,
    )
