"""Every chart a report draws, as inline SVG: the reliability diagram of a judge's
confidence (:func:`reliability_svg`), a sweep's accuracy/cost frontier
(:func:`frontier_svg`), and an eval's box plots and histograms; their axes' scales are
:mod:`loopwise.evidence.scales`'."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from loopwise.core.svg import escape as _e
from loopwise.core.svg import escape_shown as _shown
from loopwise.core.svg import shorten as _short
from loopwise.core.svg import svg_element
from loopwise.core.svg import svg_element as _svg
from loopwise.errors import ConfigError
from loopwise.evidence.evals.stats import (
    REFERENCE_MODEL,
    Distribution,
    TargetSummary,
    metric_text,
    percentile,
    reference_costs,
    usd,
)
from loopwise.evidence.scales import axis_span, least_cost_span, nice_step, ticks

if TYPE_CHECKING:
    from loopwise.evidence.sweeps.calibration import Calibration

__all__ = [
    "MAX_COST",
    "FrontierDot",
    "box_plot",
    "frontier_svg",
    "histograms",
    "reliability_svg",
    "status_bars",
]

STATUS_COLORS = {
    "completed": "#16a34a",
    "step_limit": "#f59e0b",
    "budget_exceeded": "#ea580c",
    "stuck": "#dc2626",
    "tool_failed": "#b91c1c",
    "invalid_output": "#a855f7",
    "refused": "#6b7280",
    "awaiting_approval": "#0ea5e9",
    "denied": "#374151",
    "error": "#7f1d1d",
    "cancelled": "#9ca3af",
}
MAX_COST = 1e12
"""The largest cost per case (in USD, either sign) :func:`frontier_svg` draws."""


Scale = Callable[[float], float]
"""A chart's map from a value to its pixel on one axis."""

_GRID = "#e5e7eb"
_AXIS = "#9ca3af"
_MUTED = "#6b7280"
_BLUE = "#2563eb"
_CHOSEN = "#16a34a"
_CERTIFIED = "#ca8a04"


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


def frontier_svg(
    points: Sequence[FrontierDot],
    chosen: str | None = None,
    *,
    cost_label: str = "cost per case (USD)",
    certified: str | None = None,
) -> str:
    """An accuracy/cost frontier: each point at (cost, accuracy) with its interval as a
    bar, the thresholds joined in order of cost, the workflow (■) and agent (◆) endpoints
    marked, the point labelled ``chosen`` ringed in green and the one labelled ``certified``
    (a threshold with a certified error bound) squared in gold; the legend lists the marks
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
    c_lo, c_hi, c_step = axis_span(
        costs, 0.0 if min(costs) >= 0 else -math.inf, math.inf, least_cost_span(costs)
    )
    a_lo, a_hi, a_step = axis_span([v for p in points for v in (p.low, p.high)], 0.0, 1.0, 0.1)

    def x(v: float) -> float:
        return left + (v - c_lo) / (c_hi - c_lo) * pw

    def y(v: float) -> float:
        return top + (a_hi - v) / (a_hi - a_lo) * ph

    parts = [
        _frame(left, top, pw, ph, grid=False),
        *_frontier_axes(x, y, ticks(c_lo, c_hi, c_step), ticks(a_lo, a_hi, a_step)),
    ]
    parts.append(
        f"<text x='{left + pw / 2:.1f}' y='{height - 6}' text-anchor='middle' fill='{_MUTED}'>"
        f"{_e(cost_label)}</text>"
        f"<text x='12' y='{top + ph / 2:.1f}' text-anchor='middle' fill='{_MUTED}' "
        f"transform='rotate(-90 12 {top + ph / 2:.1f})'>accuracy</text>"
    )
    legend = _legend(points, chosen) + (
        f"  <tspan fill='{_CERTIFIED}'>□</tspan> certified" if certified is not None else ""
    )
    parts.append(f"<text x='{left}' y='14' fill='#374151'>{legend}</text>")
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
    for p in points:
        if p.label == certified:
            parts.append(
                f"<rect class='certified' x='{x(p.cost) - 7:.1f}' y='{y(p.accuracy) - 7:.1f}' "
                f"width='14' height='14' fill='none' stroke='{_CERTIFIED}' stroke-width='2'>"
                f"<title>{_e(p.label)}: certified threshold</title></rect>"
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


def _frontier_axes(x: Scale, y: Scale, costs: list[float], accuracy: list[float]) -> list[str]:
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
    points: Sequence[FrontierDot], chosen: str | None, x: Scale, y: Scale, plot: Box
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


def status_bars(targets: Sequence[TargetSummary]) -> str:
    width, left, row = 960, 180, 30
    parts = []
    for i, t in enumerate(targets):
        y, x = 10 + i * row, float(left)
        parts.append(f"<text x='0' y='{y + 15}'>{_shown(_tail(t.title, 28))}</text>")
        for status, count in t.status_counts.items():
            w = (width - left - 10) * count / max(t.n, 1)
            color = STATUS_COLORS.get(status, "#9ca3af")
            parts.append(
                f"<rect x='{x:.1f}' y='{y}' width='{w:.1f}' height='20' fill='{color}'>"
                f"<title>{_shown(status)}: {count}</title></rect>"
            )
            if w > 60:
                parts.append(
                    f"<text x='{x + 4:.1f}' y='{y + 14}' fill='#fff'>"
                    f"{_shown(status)} {count}</text>"
                )
            x += w
    legend_y = 20 + len(targets) * row
    statuses = sorted({s for t in targets for s in t.status_counts})
    for j, status in enumerate(statuses):
        lx = left + j * 120
        parts.append(
            f"<rect x='{lx}' y='{legend_y - 9}' width='10' height='10' "
            f"fill='{STATUS_COLORS.get(status, '#9ca3af')}'/>"
            f"<text x='{lx + 14}' y='{legend_y}'>{_shown(status)}</text>"
        )
    return _svg(width, legend_y + 10, "".join(parts), "how runs ended per target")


def _tail(text: str, n: int) -> str:
    return text if len(text) <= n else "…" + text[-(n - 1) :]


def _priceless(targets: Sequence[TargetSummary]) -> bool:
    """No target has a real, non-zero cost (the scripted model, or unpriced models)."""
    return all(not any(t.metrics["cost_usd"].values) for t in targets)


def _dist(t: TargetSummary, metric: str, targets: Sequence[TargetSummary]) -> Distribution:
    """The distribution charted for ``metric``: costs at a reference price when none is real."""
    if metric == "cost_usd" and _priceless(targets):
        return reference_costs(t)
    return t.metrics[metric]


def box_plot(
    targets: Sequence[TargetSummary], metric: str, title: str, colors: dict[str, str]
) -> str:
    dists = [_dist(t, metric, targets) for t in targets]
    if metric == "cost_usd" and _priceless(targets):
        title = (
            f"cost per case at {REFERENCE_MODEL} prices (the model used costs $0 or is unpriced)"
        )
    top = nice_step(max((d.stat("max") or 0.0) for d in dists))
    width, left, right, row = 960, 180, 120, 34
    scale = (width - left - right) / top
    height = 30 + row * len(targets)
    parts = _axis(left, scale, top, height - 18, metric)
    for i, (t, d) in enumerate(zip(targets, dists, strict=True)):
        y = 8 + i * row
        parts.append(f"<text x='0' y='{y + 14}'>{_shown(_tail(t.title, 28))}</text>")
        parts.append(_box(d, left, scale, y=y, color=colors[t.name], metric=metric))
    caption = f"{title} — whiskers min–max, box p25–p75, | p50, ◆ p95"
    svg = _svg(width, height, "".join(parts), title)
    return f"<figure><figcaption>{_shown(caption)}</figcaption>{svg}</figure>"


def _axis(left: int, scale: float, top: float, y: int, metric: str) -> list[str]:
    parts = [
        f"<line x1='{left}' y1='{y}' x2='{left + top * scale:.1f}' y2='{y}' stroke='#9ca3af'/>"
    ]
    for k in range(5):
        value = top * k / 4
        x = left + value * scale
        parts.append(
            f"<line x1='{x:.1f}' y1='{y}' x2='{x:.1f}' y2='{y + 4}' stroke='#9ca3af'/>"
            f"<text x='{x:.1f}' y='{y + 15}' text-anchor='middle' fill='#6b7280'>"
            f"{_shown(_metric(value, metric))}</text>"
        )
    return parts


def _box(d: Distribution, left: int, scale: float, *, y: int, color: str, metric: str) -> str:
    if d.n == 0:
        return f"<text x='{left}' y='{y + 14}' fill='#6b7280'>unknown</text>"
    lo, q1, med, q3, p95, hi = (
        min(d.values),
        percentile(d.values, 25),
        percentile(d.values, 50),
        percentile(d.values, 75),
        percentile(d.values, 95),
        max(d.values),
    )

    def x(v: float) -> float:
        return left + v * scale

    tip = " · ".join(
        f"{name} {_metric(v, metric)}"
        for name, v in (("min", lo), ("p50", med), ("p95", p95), ("max", hi))
    )
    return (
        f"<g><title>{_shown(tip)}</title>"
        f"<line x1='{x(lo):.1f}' y1='{y + 10}' x2='{x(hi):.1f}' y2='{y + 10}' stroke='{color}'/>"
        f"<line x1='{x(lo):.1f}' y1='{y + 4}' x2='{x(lo):.1f}' y2='{y + 16}' stroke='{color}'/>"
        f"<line x1='{x(hi):.1f}' y1='{y + 4}' x2='{x(hi):.1f}' y2='{y + 16}' stroke='{color}'/>"
        f"<rect x='{x(q1):.1f}' y='{y + 2}' width='{max(x(q3) - x(q1), 1.5):.1f}' height='16' "
        f"fill='{color}' fill-opacity='0.25' stroke='{color}'/>"
        f"<line x1='{x(med):.1f}' y1='{y + 1}' x2='{x(med):.1f}' y2='{y + 19}' stroke='{color}' "
        "stroke-width='3'/>"
        f"<path d='M{x(p95):.1f},{y + 4} l5,6 l-5,6 l-5,-6 z' fill='{color}'/>"
        f"<text x='{x(hi) + 8:.1f}' y='{y + 14}' fill='#374151'>"
        f"p95 {_shown(_metric(p95, metric))}</text>"
        "</g>"
    )


def histograms(targets: Sequence[TargetSummary], colors: dict[str, str]) -> str:
    figures = []
    cost = f"cost per case at {REFERENCE_MODEL} prices" if _priceless(targets) else "cost per case"
    for metric, title in (
        ("cost_usd", cost),
        ("steps", "steps per case"),
        ("tokens", "tokens per case"),
    ):
        top = max((_dist(t, metric, targets).stat("max") or 0.0) for t in targets)
        for t in targets:
            svg = _histogram(_dist(t, metric, targets), top, colors[t.name], metric)
            figures.append(
                f"<figure><figcaption>{_shown(t.title)}: {_shown(title)}</figcaption>{svg}</figure>"
            )
    return f"<div class='charts'>{''.join(figures)}</div>"


def _bins(values: Sequence[float], top: float, metric: str) -> list[tuple[float, float, int]]:
    """``(low, high, count)`` bins over ``0..top``: one per integer when counts are small."""
    if metric in {"steps", "model_calls", "tool_calls"} and top <= 20:
        edges = [float(k) for k in range(int(top) + 2)]
    else:
        width = (top or 1.0) / 10
        edges = [k * width for k in range(11)]
    bins = []
    for i in range(len(edges) - 1):
        lo, hi = edges[i], edges[i + 1]
        last = i == len(edges) - 2
        count = sum(lo <= v < hi or (last and v == hi) for v in values)
        bins.append((lo, hi, count))
    return bins


def _histogram(d: Distribution, top: float, color: str, metric: str) -> str:
    width, height, pad = 320, 130, 24
    if d.n == 0:
        return _svg(width, 40, "<text x='4' y='20' fill='#6b7280'>unknown</text>", "no data")
    bins = _bins(d.values, top, metric)
    tallest = max(c for _, _, c in bins) or 1
    bar_w = (width - 2 * pad) / len(bins)
    parts = []
    for i, (lo, hi, count) in enumerate(bins):
        h = (height - 2 * pad) * count / tallest
        x = pad + i * bar_w
        parts.append(
            f"<rect x='{x:.1f}' y='{height - pad - h:.1f}' width='{max(bar_w - 2, 1):.1f}' "
            f"height='{h:.1f}' fill='{color}'><title>{_shown(_metric(lo, metric))}–"
            f"{_shown(_metric(hi, metric))}: {count} runs</title></rect>"
        )
    parts.append(
        f"<line x1='{pad}' y1='{height - pad}' x2='{width - pad}' y2='{height - pad}' "
        "stroke='#9ca3af'/>"
        f"<text x='{pad}' y='{height - 8}' fill='#6b7280'>"
        f"{_shown(_metric(bins[0][0], metric))}</text>"
        f"<text x='{width - pad}' y='{height - 8}' text-anchor='end' fill='#6b7280'>"
        f"{_shown(_metric(bins[-1][1], metric))}</text>"
        f"<text x='{pad}' y='14' fill='#6b7280'>max {tallest} runs/bin</text>"
    )
    return _svg(width, height, "".join(parts), f"histogram of {metric}")


def _metric(value: float | None, metric: str) -> str:
    return "unknown" if value is None else metric_text(value, metric)
