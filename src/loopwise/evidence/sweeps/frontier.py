"""A sweep for people: the frontier as text (:func:`format_sweep`) and as a report section
(:func:`sweeps_html`: the accuracy/cost frontier beside the pure workflow and agent, the
judge's reliability diagram, and every threshold in a table)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from loopwise.core.svg import escape as _e
from loopwise.evidence.charts import FrontierDot, frontier_svg, reliability_svg
from loopwise.evidence.evals.stats import TargetSummary, reference_cost, secs, usd, wilson
from loopwise.evidence.sweeps.points import Sweep, SweepPoint

__all__ = ["format_sweep", "frontier_dots", "sweeps_html"]


def _label(value: float) -> str:
    return f"{value:.2f}"


def _cost(p: SweepPoint) -> str:
    return "unknown" if p.cost is None else usd(p.cost)


def format_sweep(s: Sweep) -> str:
    """The sweep as a table, the recommendation and the calibration, for a terminal."""
    lines = [
        f"Thresholds of {s.target} (declared {s.declared:g}; a case is sure above it; "
        f"cost: {s.cost_basis}{_person(s)}):",
        f"  {'threshold':>9}  {'accuracy [95% CI]':<20} {'escalated':>9}  {'cost/case':>11}  "
        f"{'tokens':>7}  {'p95':>9}",
    ]
    certified = _certified(s)
    for p in s.points:
        mark = " *" if p is s.recommended else (" ^" if p is s.best else "")
        if certified is not None and p.threshold == certified:
            mark += " c"
        accuracy = "-" if p.accuracy is None else f"{p.accuracy:.0%} [{p.low:.0%}-{p.high:.0%}]"
        lines.append(
            f"  {_label(p.threshold):>9}  {accuracy:<20} {p.share_escalated:>9.0%}  "
            f"{_cost(p):>11}  {p.tokens:>7,.0f}  {secs(p.latency):>9}{mark}"
        )
    lines.append("  (* recommended, ^ most accurate" + (", c certified)" if certified else ")"))
    lines.append(f"Recommended threshold: {s.reason}")
    if s.certification is not None:
        lines.append(f"Certified: {s.certification.claim}")
    cal = s.calibration
    if cal.ece is not None:
        unknown = f", {cal.unknown} unknown" if cal.unknown else ""
        lines.append(
            f"Calibration of the judge: ECE {cal.ece:.3f} on {cal.n} cases{unknown} (mean "
            f"confidence {cal.mean_confidence or 0:.0%}, its side right {cal.accuracy or 0:.0%})"
        )
    if s.warning:
        lines.append(f"warning: {s.warning}")
    return "\n".join(lines)


def _person(s: Sweep) -> str:
    """How the person deciding escalated cases is counted, for the table's title."""
    if s.person is None:
        return ""
    return (
        f"; the person modelled right {s.person['accuracy']:.0%} of the time at "
        f"{usd(s.person['cost_usd'])} per case they decide"
    )


def _certified(s: Sweep) -> float | None:
    """The certified threshold, if the sweep certified one."""
    c = s.certification
    return None if c is None or c.certificate is None else c.certificate.threshold


def frontier_dots(s: Sweep, targets: Sequence[TargetSummary]) -> list[FrontierDot]:
    """The sweep's thresholds and, as endpoints, the eval's other workflow and agent
    targets (on the sweep's cost basis), for :func:`frontier_svg`."""
    dots = [
        FrontierDot(
            label=_label(p.threshold),
            kind="threshold",
            cost=p.cost,
            accuracy=p.accuracy,
            low=p.low,
            high=p.high,
        )
        for p in s.points
        if p.cost is not None and p.accuracy is not None
    ]
    for t in targets:
        if t.name == s.target or t.architecture not in ("workflow", "agent"):
            continue
        cost = t.metrics["cost_usd"].stat("mean") if s.cost_basis == "USD" else reference_cost(t)
        if cost is None or t.correct_rate is None:
            continue
        low, high = wilson(t.correct_rate * t.scored, t.scored)
        kind: Literal["workflow", "agent"] = "workflow" if t.architecture == "workflow" else "agent"
        dots.append(
            FrontierDot(
                label=t.title, kind=kind, cost=cost, accuracy=t.correct_rate, low=low, high=high
            )
        )
    return dots


def sweeps_html(sweeps: Sequence[Sweep], targets: Sequence[TargetSummary]) -> str:
    """One block per sweep: the frontier, the reliability diagram, the table."""
    return "".join(_one(s, targets) for s in sweeps)


def _one(s: Sweep, targets: Sequence[TargetSummary]) -> str:
    chosen = None if s.recommended is None else _label(s.recommended.threshold)
    dots = frontier_dots(s, targets)
    if chosen is not None and not any(d.label == chosen for d in dots):
        chosen = None
    basis = "USD" if s.cost_basis == "USD" else f"USD at {s.cost_basis}"
    if s.person is not None:
        basis += f", plus {usd(s.person['cost_usd'])} per case the person decides"
    certified = None if _certified(s) is None else _label(_certified(s) or 0.0)
    if certified is not None and not any(d.label == certified for d in dots):
        certified = None
    frontier = frontier_svg(
        dots, chosen, cost_label=f"cost per case ({basis})", certified=certified
    )
    claim = (
        ""
        if s.certification is None
        else f"<p class='certified'><b>Certified:</b> {_e(s.certification.claim)}</p>"
    )
    cal = s.calibration
    ece = "unknown" if cal.ece is None else f"{cal.ece:.3f} on {cal.n} cases"
    warning = f"<p class='warn'>⚠ {_e(s.warning)}</p>" if s.warning else ""
    rows = "".join(
        f"<tr{' class=chosen' if p is s.recommended else ''}><td>{_label(p.threshold)}</td>"
        f"<td>{'-' if p.accuracy is None else f'{p.accuracy:.0%}'}</td>"
        f"<td>{p.low:.0%}–{p.high:.0%}</td><td>{p.share_escalated:.0%}</td>"
        f"<td>{_e(_cost(p))}</td><td>{p.tokens:,.0f}</td><td>{_e(secs(p.latency))}</td></tr>"
        for p in s.points
    )
    return (
        f"<h3>{_e(s.target)}: thresholds</h3>"
        f"<p><b>Recommended threshold:</b> {_e(s.reason)}</p>{claim}"
        f"<div class='frontier'>{frontier}</div>"
        f"<h4>Calibration of the judge (ECE {_e(ece)})</h4>{warning}"
        f"<div class='reliability'>{reliability_svg(cal)}</div>"
        "<details><summary>every threshold</summary><table><tr><th>threshold</th>"
        "<th>accuracy</th><th>95% CI</th><th>escalated</th><th>cost/case</th><th>tokens</th>"
        f"<th>p95 latency</th></tr>{rows}</table></details>"
    )
