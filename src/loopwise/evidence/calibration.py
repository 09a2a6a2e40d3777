"""Is a decision's confidence worth a threshold? :func:`calibration` measures it on a
dataset, and two drawings show it: :func:`reliability_svg` (accuracy per confidence bin
against the diagonal) and :func:`frontier_svg` (accuracy against cost, one dot per
threshold beside the pure workflow and the pure agent).

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

from loopwise.core.svg import escape as _e
from loopwise.core.svg import shorten as _short
from loopwise.core.svg import svg_element
from loopwise.errors import ConfigError
from loopwise.evidence.stats import usd

__all__ = [
    "ECE_LIMIT",
    "MAX_BINS",
    "MAX_COST",
    "MIN_CASES",
    "Calibration",
    "CalibrationBin",
    "FrontierDot",
    "calibration",
    "calibration_verdict",
    "calibration_warning",
    "frontier_svg",
    "reliability_svg",
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

MAX_COST = 1e12
"""The largest cost per case (in USD, either sign) :func:`frontier_svg` draws."""


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

    def to_dict(self) -> dict[str, Any]:
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

    def to_dict(self) -> dict[str, Any]:
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
    if cal.ece > limit:
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


_GRID = "#e5e7eb"
_AXIS = "#9ca3af"
_MUTED = "#6b7280"
_BLUE = "#2563eb"
_CHOSEN = "#16a34a"


def reliability_svg(cal: Calibration) -> str:
    """A reliability diagram of ``cal``: a bar per non-empty bin up to its accuracy, a dot
    at (mean confidence, accuracy), the diagonal a perfectly calibrated decision would
    follow, and each bin's case count under it."""
    size, left, top, bottom = 240, 44, 26, 46
    width, height = left + size + 16, top + size + bottom

    def x(v: float) -> float:
        return left + v * size

    def y(v: float) -> float:
        return top + (1 - v) * size

    parts = [_frame(left, top, size, size)]
    for k in range(5):
        v = k / 4
        parts.append(
            f"<text x='{x(v):.1f}' y='{top + size + 14}' text-anchor='middle' "
            f"fill='{_MUTED}'>{v:.0%}</text>"
            f"<text x='{left - 4}' y='{y(v) + 4:.1f}' text-anchor='end' fill='{_MUTED}'>"
            f"{v:.0%}</text>"
        )
    parts.append(
        f"<line class='diagonal' x1='{x(0):.1f}' y1='{y(0):.1f}' x2='{x(1):.1f}' y2='{y(1):.1f}' "
        f"stroke='{_AXIS}' stroke-dasharray='4 3'/>"
    )
    for b in cal.bins:
        if not b.count or b.accuracy is None or b.mean_confidence is None:
            continue
        tip = (
            f"{b.low:.0%}–{b.high:.0%}: {b.count} case(s), mean confidence "
            f"{b.mean_confidence:.0%}, accuracy {b.accuracy:.0%}"
        )
        w = (b.high - b.low) * size
        parts.append(
            f"<g class='bin'><title>{_e(tip)}</title>"
            f"<rect x='{x(b.low) + 1:.1f}' y='{y(b.accuracy):.1f}' width='{max(w - 2, 1):.1f}' "
            f"height='{b.accuracy * size:.1f}' fill='{_BLUE}' fill-opacity='0.25' "
            f"stroke='{_BLUE}'/>"
            f"<circle cx='{x(b.mean_confidence):.1f}' cy='{y(b.accuracy):.1f}' r='3' "
            f"fill='{_BLUE}'/>"
            f"<text x='{x((b.low + b.high) / 2):.1f}' y='{top + size + 27}' "
            f"text-anchor='middle' fill='{_MUTED}' font-size='9'>{b.count}</text></g>"
        )
    ece = "ECE unknown" if cal.ece is None else f"ECE {cal.ece:.3f}"
    unknown = f" · {cal.unknown} unknown" if cal.unknown else ""
    parts.append(
        f"<text x='{left}' y='16' font-weight='600'>{_e(f'{ece} · {cal.n} cases{unknown}')}</text>"
        f"<text x='{x(0.5):.1f}' y='{height - 6}' text-anchor='middle' fill='{_MUTED}'>"
        "confidence (cases per bin below the axis)</text>"
        f"<text x='12' y='{y(0.5):.1f}' text-anchor='middle' fill='{_MUTED}' "
        f"transform='rotate(-90 12 {y(0.5):.1f})'>accuracy</text>"
    )
    return svg_element(width, height, "".join(parts), f"reliability diagram, {ece}")


def _frame(left: float, top: float, w: float, h: float, *, grid: bool = True) -> str:
    lines = "".join(
        f"<line x1='{left}' y1='{top + h * k / 4:.1f}' x2='{left + w}' y2='{top + h * k / 4:.1f}' "
        f"stroke='{_GRID}'/>"
        for k in range(5)
        if grid
    )
    return lines + (
        f"<line x1='{left}' y1='{top}' x2='{left}' y2='{top + h}' stroke='{_AXIS}'/>"
        f"<line x1='{left}' y1='{top + h}' x2='{left + w}' y2='{top + h}' stroke='{_AXIS}'/>"
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class FrontierDot:
    """One point of an accuracy/cost frontier: a threshold of a cascade, or an endpoint."""

    label: str
    """What the dot is (``"0.80"``, ``"triage"``): user text, escaped when drawn."""
    kind: Literal["threshold", "workflow", "agent"]
    """A cascade's threshold, or the pure workflow / pure agent endpoint."""
    cost: float
    """Mean cost per case (the x axis)."""
    accuracy: float
    """Accuracy in [0, 1] (the y axis)."""
    low: float
    """The accuracy interval's lower bound."""
    high: float
    """The accuracy interval's upper bound."""


_KINDS = ("threshold", "workflow", "agent")
_CHAR_W, _LABEL_H = 6.2, 12.0  # 11px system-ui: an upper estimate of a character's width


def _check_dots(points: Sequence[FrontierDot], chosen: str | None) -> None:
    for i, p in enumerate(points):
        if p.kind not in _KINDS:
            raise ConfigError(
                f"frontier_svg: points[{i}].kind is {p.kind!r}; one of {', '.join(_KINDS)}",
                name="points",
            )
        if not isinstance(p.label, str):
            raise ConfigError(
                f"frontier_svg: points[{i}].label is {p.label!r}; a label is a string",
                name="points",
            )
        values = (p.cost, p.accuracy, p.low, p.high)
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
            raise ConfigError(
                f"frontier_svg: points[{i}] ({p.label!r}) has a cost or accuracy that is not "
                "a finite number",
                name="points",
            )
        if abs(p.cost) > MAX_COST:
            raise ConfigError(
                f"frontier_svg: points[{i}] ({p.label!r}) costs {p.cost:g} per case; a cost "
                f"per case is within ±{MAX_COST:g} USD",
                name="points",
            )
        if not 0.0 <= p.low <= p.accuracy <= p.high <= 1.0:
            raise ConfigError(
                f"frontier_svg: points[{i}] ({p.label!r}) needs 0 <= low <= accuracy <= high "
                f"<= 1, not {p.low:g}, {p.accuracy:g}, {p.high:g}",
                name="points",
            )
    if chosen is not None and not any(p.label == chosen for p in points):
        raise ConfigError(
            f"frontier_svg: chosen {chosen!r} is none of the points' labels", name="chosen"
        )


def _span(
    values: Sequence[float], floor: float, ceil: float, least: float
) -> tuple[float, float, float]:
    """A nice axis over ``values`` within [floor, ceil], at least ``least`` wide:
    ``(low, high, step)`` with both ends on a multiple of a 1-2-2.5-5 step."""
    lo, hi = min(values), max(values)
    if hi - lo < least:
        mid = (lo + hi) / 2
        lo, hi = mid - least / 2, mid + least / 2
    pad = (hi - lo) * 0.06
    lo, hi = max(floor, lo - pad), min(ceil, hi + pad)
    if hi - lo < least:  # pushed against a wall: grow away from it
        lo, hi = (lo, lo + least) if lo == floor else (hi - least, hi)
    step = _nice_step((hi - lo) / 4)
    lo = max(floor, math.floor(lo / step + 1e-9) * step)
    hi = min(ceil, math.ceil(hi / step - 1e-9) * step)
    return lo, hi, step


def _nice_step(raw: float) -> float:
    exp = 10.0 ** math.floor(math.log10(raw))
    return next(m * exp for m in (1, 2, 2.5, 5, 10) if raw <= m * exp * (1 + 1e-9))


def _ticks(lo: float, hi: float, step: float) -> list[float]:
    count = round((hi - lo) / step)
    return [lo + k * step for k in range(count + 1)]


def frontier_svg(
    points: Sequence[FrontierDot],
    chosen: str | None = None,
    *,
    cost_label: str = "cost per case (USD)",
) -> str:
    """An accuracy/cost frontier: each point at (cost, accuracy) with its interval as a
    bar, the thresholds joined in order of cost, the workflow (■) and agent (◆) endpoints
    marked, and the point labelled ``chosen`` ringed in green; the legend lists the marks
    drawn. Costs are drawn as USD; ``cost_label`` is the cost axis's title, unit included.

    Raises :class:`~loopwise.errors.ConfigError` naming ``points`` (a kind outside
    threshold/workflow/agent, a value that is not finite, an interval that does not hold
    its accuracy within [0, 1]) or ``chosen`` (no point has that label).
    """
    _check_dots(points, chosen)
    width, height = 640, 340
    left, right, top, bottom = 56, 40, 28, 44
    pw, ph = width - left - right, height - top - bottom
    if not points:
        return svg_element(
            width, 40, f"<text x='4' y='24' fill='{_MUTED}'>no points to draw</text>", "no frontier"
        )
    costs = [p.cost for p in points]
    c_lo, c_hi, c_step = _span(
        costs, 0.0 if min(costs) >= 0 else -math.inf, math.inf, _least_cost(costs)
    )
    a_lo, a_hi, a_step = _span([v for p in points for v in (p.low, p.high)], 0.0, 1.0, 0.1)

    def x(v: float) -> float:
        return left + (v - c_lo) / (c_hi - c_lo) * pw

    def y(v: float) -> float:
        return top + (a_hi - v) / (a_hi - a_lo) * ph

    parts = [
        _frame(left, top, pw, ph, grid=False),
        *_frontier_axes(x, y, _ticks(c_lo, c_hi, c_step), _ticks(a_lo, a_hi, a_step)),
    ]
    parts.append(
        f"<text x='{left + pw / 2:.1f}' y='{height - 6}' text-anchor='middle' fill='{_MUTED}'>"
        f"{_e(cost_label)}</text>"
        f"<text x='12' y='{top + ph / 2:.1f}' text-anchor='middle' fill='{_MUTED}' "
        f"transform='rotate(-90 12 {top + ph / 2:.1f})'>accuracy</text>"
    )
    parts.append(f"<text x='{left}' y='14' fill='#374151'>{_legend(points, chosen)}</text>")
    line = sorted((p for p in points if p.kind == "threshold"), key=lambda p: (p.cost, p.accuracy))
    if len(line) > 1:
        path = " ".join(f"{x(p.cost):.1f},{y(p.accuracy):.1f}" for p in line)
        parts.append(
            f"<polyline class='frontier' points='{path}' fill='none' stroke='{_BLUE}' "
            "stroke-opacity='0.5'/>"
        )
    for p in points:
        parts.append(
            _dot(p, (x(p.cost), y(p.accuracy), y(p.low), y(p.high)), chosen=p.label == chosen)
        )
    parts.extend(_labels(points, chosen, x, y, (left, top, left + pw, top + ph)))
    title = "accuracy against cost" + (f", chosen {chosen}" if chosen is not None else "")
    return svg_element(width, height, "".join(parts), title)


_LEGEND = {
    "workflow": "<tspan fill='#ea580c'>■</tspan> workflow",
    "agent": "<tspan fill='#9333ea'>◆</tspan> agent",
    "threshold": f"<tspan fill='{_BLUE}'>●</tspan> threshold (bar: its interval)",
}


def _legend(points: Sequence[FrontierDot], chosen: str | None) -> str:
    """The legend of the marks drawn: an endpoint the eval did not run is not listed."""
    kinds = {p.kind for p in points}
    marks = [mark for kind, mark in _LEGEND.items() if kind in kinds]
    if chosen is not None:
        marks.append(f"<tspan fill='{_CHOSEN}'>◯</tspan> chosen")
    return "  ".join(marks)


def _least_cost(costs: Sequence[float]) -> float:
    """The narrowest cost axis: a tenth of the largest cost, or a dollar-cent when all are 0."""
    least = max(abs(c) for c in costs) * 0.2
    return least if least > 0 else 0.01  # a cost of 5e-324 has no fifth: it is 0 here


def _frontier_axes(x: Any, y: Any, costs: list[float], accuracy: list[float]) -> list[str]:
    parts = []
    base_y, base_x, end_x = y(accuracy[0]), x(costs[0]), x(costs[-1])
    for c in costs:
        parts.append(
            f"<text x='{x(c):.1f}' y='{base_y + 15:.1f}' text-anchor='middle' fill='{_MUTED}'>"
            f"{_e(usd(c) if c >= 0 else '-' + usd(-c))}</text>"
        )
    for a in accuracy:
        parts.append(
            f"<line x1='{base_x:.1f}' y1='{y(a):.1f}' x2='{end_x:.1f}' y2='{y(a):.1f}' "
            f"stroke='{_GRID}'/>"
            f"<text x='{base_x - 4:.1f}' y='{y(a) + 4:.1f}' text-anchor='end' fill='{_MUTED}'>"
            f"{round(a * 100, 1):g}%</text>"
        )
    return parts


def _dot(p: FrontierDot, at: tuple[float, float, float, float], *, chosen: bool) -> str:
    """``p``'s mark at ``at`` = (x, y, y of its low bound, y of its high bound)."""
    cx, cy, ylo, yhi = at
    color = {"threshold": _BLUE, "workflow": "#ea580c", "agent": "#9333ea"}[p.kind]
    tip = (
        f"{p.label} ({p.kind}): accuracy {p.accuracy:.0%} ({p.low:.0%}–{p.high:.0%}), "
        f"cost {usd(p.cost) if p.cost >= 0 else p.cost}" + (" · chosen" if chosen else "")
    )
    bar = (
        f"<line x1='{cx:.1f}' y1='{yhi:.1f}' x2='{cx:.1f}' y2='{ylo:.1f}' stroke='{color}' "
        f"stroke-opacity='0.6'/>"
        + "".join(
            f"<line x1='{cx - 3:.1f}' y1='{v:.1f}' x2='{cx + 3:.1f}' y2='{v:.1f}' "
            f"stroke='{color}'/>"
            for v in (yhi, ylo)
        )
    )
    if p.kind == "workflow":
        mark = f"<rect x='{cx - 5:.1f}' y='{cy - 5:.1f}' width='10' height='10' fill='{color}'/>"
    elif p.kind == "agent":
        mark = f"<path d='M{cx:.1f},{cy - 6:.1f} l6,6 l-6,6 l-6,-6 z' fill='{color}'/>"
    else:
        mark = f"<circle cx='{cx:.1f}' cy='{cy:.1f}' r='3.5' fill='{color}'/>"
    ring = (
        f"<circle class='chosen' cx='{cx:.1f}' cy='{cy:.1f}' r='9' fill='none' "
        f"stroke='{_CHOSEN}' stroke-width='2.5'/>"
        if chosen
        else ""
    )
    css = f"dot {p.kind}" + (" chosen" if chosen else "")
    return f"<g class='{css}'><title>{_e(tip)}</title>{bar}{mark}{ring}</g>"


Box = tuple[float, float, float, float]


def _labels(
    points: Sequence[FrontierDot], chosen: str | None, x: Any, y: Any, plot: Box
) -> list[str]:
    """Labels placed greedily, most important first (chosen, endpoints, then thresholds
    by cost), each at the first of eight spots around its dot that overlaps no label
    placed before, no dot and stays inside the plot; a label with no such spot is
    left out (its dot's tooltip still names it)."""
    dots: list[Box] = [
        (x(p.cost) - 6, y(p.accuracy) - 6, x(p.cost) + 6, y(p.accuracy) + 6) for p in points
    ]
    rank = {"workflow": 1, "agent": 1, "threshold": 2}
    order = sorted(
        range(len(points)),
        key=lambda i: (0 if points[i].label == chosen else rank[points[i].kind], points[i].cost),
    )
    placed: list[Box] = []
    out = []
    for i in order:
        p = points[i]
        text = _short(p.label, 24) + (" (chosen)" if p.label == chosen else "")
        w = len(text) * _CHAR_W
        cx, cy = x(p.cost), y(p.accuracy)
        for dx, dy in _SPOTS:
            bx = cx + dx * (10 + w / 2) - w / 2
            by = cy + dy * (10 + _LABEL_H / 2) - _LABEL_H / 2
            box = (bx, by, bx + w, by + _LABEL_H)
            inside = (
                box[0] >= plot[0] + 2
                and box[2] <= plot[2] + 20
                and box[1] >= 0
                and box[3] <= plot[3]
            )
            if inside and not any(_overlaps(box, o) for o in (*placed, *dots)):
                placed.append(box)
                weight = " font-weight='700'" if p.label == chosen else ""
                fill = _CHOSEN if p.label == chosen else "#374151"
                out.append(
                    f"<text class='label' x='{bx:.1f}' y='{by + _LABEL_H - 2:.1f}' "
                    f"data-w='{w:.1f}' fill='{fill}'{weight}>{_e(text)}</text>"
                )
                break
    return out


# Right, left, above, below, then the four corners: (dx, dy) in half-label steps.
_SPOTS = ((1, 0), (-1, 0), (0, -1), (0, 1), (1, -1), (-1, -1), (1, 1), (-1, 1))


def _overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
