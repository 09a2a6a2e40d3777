"""Which threshold of a sweep to recommend, and only as far as the evidence carries it:
:func:`choose`.

The **best** threshold is the most accurate (the cheapest of those tied). A cheaper
threshold may replace it only when the evidence *shows* it is nearly as accurate: the
paired difference of the best minus it, on the same runs, has a 95% upper bound of at most
``margin`` (5 points unless told; Newcombe's score interval for right/wrong outcomes,
:func:`~loopwise.evidence.evals.paired.paired_difference`). An interval that merely reaches
0 is not enough — on one case everything "reaches 0", and a threshold scoring 0% would be
"within noise" of one scoring 100%. So each cheaper threshold is either

* *shown within the margin* — a candidate; the cheapest candidate is recommended;
* *shown worse* — the interval is above 0; or
* *undecided* — neither: the reason says so, with about how many cases would decide.

With no scored case nothing is recommended. The recommendation always cites the cases it
rests on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from loopwise.evidence.evals.paired import PairedDifference, paired_difference
from loopwise.evidence.evals.stats import usd
from loopwise.evidence.sweeps.points import SweepPoint

__all__ = ["MARGIN", "Choice", "choose", "cost_key"]

MARGIN = 0.05
"""How much less accurate (in accuracy points) a cheaper threshold may be shown to be."""

_MOST_CASES = 1_000_000


@dataclass(frozen=True, kw_only=True, slots=True)
class Choice:
    """What :func:`choose` found."""

    best: SweepPoint | None
    """The most accurate threshold."""
    recommended: SweepPoint | None
    """The cheapest shown within the margin of :attr:`best` (``best`` itself when none)."""
    versus: PairedDifference | None
    """``best`` minus ``recommended`` (``None`` when they are the same point)."""
    reason: str
    """Why, citing the numbers and the cases they rest on."""


def cost_key(p: SweepPoint, by_cost: bool) -> tuple[float, float]:
    """Cheaper first: mean cost (unknown last), then tokens. Without the model's own
    prices (and no priced person) the cost shown (at the reference price) is for scale
    only: tokens decide, as in a plain eval's recommendation."""
    if not by_cost:
        return (p.tokens, math.inf if p.cost is None else p.cost)
    return (math.inf if p.cost is None else p.cost, p.tokens)


def choose(
    points: Sequence[SweepPoint], pricing: str, margin: float = MARGIN, *, by_cost: bool = False
) -> Choice:
    """The best threshold, the cheapest shown within ``margin`` of it, and why
    (``by_cost``: cheapest by cost even on the reference price, as when a person's time is
    priced)."""
    by_cost = by_cost or pricing == "USD"
    scored = [p for p in points if p.accuracy is not None]
    if not scored:
        reason = "no case is scored (the dataset has no expected values): nothing to choose on"
        return Choice(best=None, recommended=None, versus=None, reason=reason)
    best = min(scored, key=lambda p: (-(p.accuracy or 0.0), *cost_key(p, by_cost), p.threshold))
    cheaper = sorted(
        (p for p in scored if cost_key(p, by_cost) < cost_key(best, by_cost)),
        key=lambda p: (*cost_key(p, by_cost), -(p.accuracy or 0.0), p.threshold),
    )
    chosen, versus = best, None
    undecided: list[tuple[SweepPoint, PairedDifference]] = []
    for p in cheaper:
        d = paired_difference(list(best.runs), list(p.runs))
        if d.high <= margin:
            chosen, versus = p, d
            break
        if d.low <= 0:
            undecided.append((p, d))
    reason = _reason(best, chosen, versus, by_cost, margin)
    if undecided:
        p, d = undecided[0]
        reason += "; " + _undecided(p, d, margin)
    if not by_cost:
        reason += (
            " (the model has no prices: chosen for fewer tokens; the frontier shows cost at "
            f"{pricing})"
        )
    return Choice(best=best, recommended=chosen, versus=versus, reason=reason)


def _at(p: SweepPoint, by_cost: bool) -> str:
    cost = "cost unknown" if p.cost is None else f"{usd(p.cost)} per case"
    if not by_cost:  # tokens chose: they lead, not a price that did not decide
        cost = f"{p.tokens:,.0f} tokens per case"
    return (
        f"{p.threshold:g} ({p.accuracy or 0.0:.0%} correct, {p.share_escalated:.0%} "
        f"escalated, {cost})"
    )


def _reason(
    best: SweepPoint,
    chosen: SweepPoint,
    versus: PairedDifference | None,
    by_cost: bool,
    margin: float,
) -> str:
    cases = f"on {best.cases} case{'s' if best.cases != 1 else ''}"
    if versus is None:
        return (
            f"threshold {_at(chosen, by_cost)}: the most accurate {cases}; no cheaper "
            f"threshold is shown within {margin * 100:g} points of it"
        )
    return (
        f"threshold {_at(chosen, by_cost)}: the cheapest shown within {margin * 100:g} points "
        f"of the best, {_at(best, by_cost)}; best minus it: {paired_points(versus)}"
    )


def paired_points(d: PairedDifference) -> str:
    """``+1 points (95% CI -2 to +4, 49 cases)``."""
    return (
        f"{_signed(d.mean)} points ({d.confidence:.0%} CI {_signed(d.low)} to "
        f"{_signed(d.high)}, {d.cases} cases)"
    )


def _signed(value: float) -> str:
    if not math.isfinite(value):
        return "-inf" if value < 0 else "+inf"
    shown = round(value * 100)
    return "0" if shown == 0 else f"{shown:+d}"


def _undecided(p: SweepPoint, d: PairedDifference, margin: float) -> str:
    """Why a cheaper threshold was neither taken nor ruled out, and about how many cases
    would decide (the interval's half-widths shrinking as one over the square root of the
    cases: to fall under the margin, or to clear 0)."""
    n = d.cases
    options = []
    if d.mean < margin and d.high > d.mean:
        options.append(n * ((d.high - d.mean) / (margin - d.mean)) ** 2)
    if d.mean > 0 and d.mean > d.low:
        options.append(n * ((d.mean - d.low) / d.mean) ** 2)
    needed = math.ceil(min(options)) if options else None
    more = (
        f"about {max(needed, n + 1)} cases would decide"
        if needed is not None and needed <= _MOST_CASES
        else "no practical number of cases would decide"
    )
    return (
        f"not enough evidence on threshold {p.threshold:g} ({p.accuracy or 0.0:.0%} correct, "
        f"cheaper): best minus it {paired_points(d)} is neither within {margin * 100:g} points "
        f"nor above 0; {more}"
    )
