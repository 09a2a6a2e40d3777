"""Which target to ship, on evidence: :func:`recommend` compares target summaries and
writes a :class:`Recommendation` that cites the numbers."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from loopwise.core.jsontypes import JSONObject
from loopwise.evidence.evals.paired import (
    PairedDifference,
    paired_difference,
    run_quality,
    t_quantile,
)
from loopwise.evidence.evals.stats import (
    REFERENCE_MODEL,
    CaseRun,
    TargetSummary,
    pct,
    reference_cost,
    secs,
    usd,
)

__all__ = ["Recommendation", "cases_to_decide", "paired_text", "recommend"]


#: Simpler architectures win ties: a fixed path is cheaper to debug and to run.
_SIMPLICITY = {"workflow": 0, "step": 1, "hybrid": 2, "agent": 3}


@dataclass(frozen=True, kw_only=True, slots=True)
class Recommendation:
    """Which target to ship, and why, citing the numbers."""

    choice: str | None
    """The recommended target's name (``None`` when there is nothing to choose from)."""
    text: str
    """One paragraph a person reads."""
    reasons: list[str] = field(default_factory=list)
    """The comparisons behind it, one per other target."""

    def to_dict(self) -> JSONObject:
        """A JSON-ready dict."""
        return {"choice": self.choice, "text": self.text, "reasons": list(self.reasons)}


def recommend(summaries: Sequence[TargetSummary]) -> Recommendation:
    """Pick a target on evidence and say why, citing the numbers.

    Quality first: the correct rate (the completed rate when nothing is scored).
    Targets within noise of the best (the larger of 5 points and the half-width of a 95%
    interval for the difference) count as equally accurate: a paired interval over the
    per-case differences when the two ran the same cases (see
    :func:`loopwise.evidence.evals.paired.paired_difference`), else a two-proportion one;
    among those, the one that stays within budget more often wins, then the cheaper (mean
    USD per case, then mean tokens), then fewer model calls, then the lower p95 latency,
    and last the simpler architecture (workflow before hybrid before agent). A target none
    of whose runs completed is never recommended; it is reported as failed (and with every
    target failed, none is chosen).

    **Cost counts only when it can be compared**: every equally accurate target's cost is
    known and some is above $0. A model that costs nothing (``--model scripted``) or has no
    price (cost unknown, never zero) gives no dollars to weigh, so tokens decide next, and
    the text says the cost was not compared (with what the tokens would cost at
    gpt-4o-mini prices, for scale) and which count chose among those not shown less accurate
    (``among those not shown less accurate, chosen for fewer tokens``). A tie says whether
    the cases *show* the two within 5 points ("equal accuracy, shown within 5 points") or
    cannot tell them apart ("not enough evidence to tell them apart", with about how many
    cases would).
    """
    if not summaries:
        return Recommendation(choice=None, text="no targets were evaluated")
    failed = [
        f"{s.title}: every run failed ({_stops(s)})" for s in summaries if not s.completed_rate
    ]
    summaries = [s for s in summaries if s.completed_rate]
    if not summaries:
        return Recommendation(choice=None, text="no recommendation: " + "; ".join(failed))
    if failed:
        found = recommend(summaries)
        reasons = [*found.reasons, *failed]
        return Recommendation(
            choice=found.choice, text=f"{found.text} ({'; '.join(failed)})", reasons=reasons
        )
    if len(summaries) == 1:
        only = summaries[0]
        return Recommendation(choice=only.name, text=f"{only.title}: {_profile(only)}")
    best_quality = max(_quality(s) for s in summaries)
    top = summaries[max(range(len(summaries)), key=lambda i: _quality(summaries[i]))]
    tied = [s for s in summaries if best_quality - _quality(s) <= _margin(s, top)]
    priced = _costs_comparable(tied)
    best = min(tied, key=lambda s: _preference(s, priced))
    reasons = [_compare(best, other, other in tied) for other in summaries if other is not best]
    chosen = _chosen_for(best, [s for s in tied if s is not best], priced)
    said = "; ".join(reasons) + (f"; {chosen}" if chosen else "")
    text = (
        f"{said} → the {best.architecture}, {best.title}."
        if best.architecture != "step"
        else f"{said} → {best.title}."
    )
    return Recommendation(choice=best.name, text=text, reasons=reasons)


def _quality(s: TargetSummary) -> float:
    rate = s.correct_rate
    return s.completed_rate if rate is None else rate


def _margin(a: TargetSummary, b: TargetSummary) -> float:
    """Half-width of a 95% interval for the difference of two rates, at least 5 points:
    paired when both ran the same cases, else as two independent samples."""
    paired = _paired(a, b)
    if paired is not None:
        return max(0.05, paired.half_width)
    pa, pb = _quality(a), _quality(b)
    na, nb = max(a.scored or a.n, 1), max(b.scored or b.n, 1)
    spread = 1.96 * math.sqrt(pa * (1 - pa) / na + pb * (1 - pb) / nb)
    return max(0.05, spread)


def _paired(a: TargetSummary, b: TargetSummary) -> PairedDifference | None:
    """``a - b`` case by case when both ran the same (two or more) cases, else ``None``."""
    if a is b or not _same_cases(a, b):
        return None
    scored = a.correct_rate is not None and b.correct_rate is not None
    paired = paired_difference(a.runs, b.runs, value=_score if scored else run_quality)
    return paired if paired.cases > 1 else None


def _score(r: CaseRun) -> float | None:
    return r.score


def _same_cases(a: TargetSummary, b: TargetSummary) -> bool:
    cases = {r.case_id for r in a.runs}
    return len(cases) > 1 and cases == {r.case_id for r in b.runs}


def _known_cost(s: TargetSummary) -> float | None:
    """Mean USD per case, ``None`` when some run's cost is unknown."""
    cost = s.metrics["cost_usd"].stat("mean")
    return None if s.metrics["cost_usd"].unknown else cost


def _costs_comparable(summaries: Sequence[TargetSummary]) -> bool:
    """Every cost known and some above $0: only then is "cheaper" a fact."""
    costs = [_known_cost(s) for s in summaries]
    return all(c is not None for c in costs) and any(c for c in costs)


def _preference(s: TargetSummary, priced: bool) -> tuple[float, ...]:
    return (
        -round(s.within_budget_rate, 2),
        (_known_cost(s) or 0.0) if priced else 0.0,
        s.metrics["tokens"].stat("mean") or 0.0,
        s.metrics["model_calls"].stat("mean") or 0.0,
        s.metrics["latency_s"].stat("p95") or 0.0,
        _SIMPLICITY.get(s.architecture, 1),
    )


_CHOSEN_FOR = (
    "staying within budget more often",
    "the lower cost",
    "fewer tokens",
    "fewer model calls",
    "the lower p95 latency",
    "the simpler architecture",
)
"""What each place of :func:`_preference` stands for, in words."""


def _chosen_for(best: TargetSummary, others: Sequence[TargetSummary], priced: bool) -> str:
    """Which count chose ``best`` over the equally accurate ``others`` (``""`` when none is
    equally accurate), and that the cost was not compared when it was not."""
    if not others:
        return ""
    mine = _preference(best, priced)
    runner = min(_preference(s, priced) for s in others)
    place = next((i for i, (a, b) in enumerate(zip(mine, runner, strict=True)) if a != b), None)
    why = "every count equal, the first given" if place is None else _CHOSEN_FOR[place]
    text = f"among those not shown less accurate, chosen for {why}"
    if not priced and place is not None and place > 1:
        text += " (cost not compared)"
    return text


_UNKNOWN = "unknown, a model without a price"
_FREE = "$0 with this model"


def _compare(best: TargetSummary, other: TargetSummary, tied: bool) -> str:
    """One clause: ``best`` against ``other``, with the numbers."""
    a, b = _quality(best), _quality(other)
    what = "correct" if best.correct_rate is not None else "completed"
    if tied and _shown_equal(best, other):
        parts = [f"equal accuracy, shown within 5 points ({pct(a)} vs {pct(b)} {what})"]
    elif tied:
        parts = [f"not enough evidence to tell them apart ({pct(a)} vs {pct(b)} {what})"]
        needed = cases_to_decide(best, other)
        if needed is not None:
            parts.append(needed)
    else:
        parts = [f"more accurate ({pct(a)} vs {pct(b)} {what})"]
    paired = _paired(best, other)
    if paired is not None:
        parts.append(paired_text(paired))
    parts.extend(_cost_clauses(best, other))
    if round(best.within_budget_rate, 2) != round(other.within_budget_rate, 2):
        parts.append(
            f"within budget {pct(best.within_budget_rate)} vs {pct(other.within_budget_rate)}"
        )
    if _stops(other):
        parts.append(f"{other.title} stopped early: {_stops(other)}")
    return f"{best.title} vs {other.title}: " + ", ".join(parts)


_FLOOR = 0.05
"""Differences of quality up to this count as equal at any sample size."""
_MOST_CASES = 100_000


def _shown_equal(a: TargetSummary, b: TargetSummary) -> bool:
    """Whether the cases show the two within the 5-point floor: the 95% interval of the
    difference (paired when they ran the same cases) lies inside ±5 points."""
    paired = _paired(a, b)
    if paired is not None:
        return paired.low >= -_FLOOR and paired.high <= _FLOOR
    pa, pb = _quality(a), _quality(b)
    n = min(a.scored or a.n, b.scored or b.n)
    half = 1.96 * math.sqrt((pa * (1 - pa) + pb * (1 - pb)) / n) if n else math.inf
    return abs(pa - pb) + half <= _FLOOR


def cases_to_decide(a: TargetSummary, b: TargetSummary) -> str | None:
    """For two targets tied within noise: what the cases show and, when they are too few,
    about how many would decide. A difference above the 5-point floor: how many cases (at
    the spread seen, paired when they ran the same cases) would tell it from noise. One
    within the floor (equal rates included): whether the 95% interval shows it within 5
    points, else how many cases would. ``None`` when there is nothing to say (one case)."""
    diff = abs(_quality(a) - _quality(b))
    paired = _paired(a, b)
    n = paired.cases if paired is not None else min(a.scored or a.n, b.scored or b.n)
    shown = abs(int(pct(_quality(a))[:-1]) - int(pct(_quality(b))[:-1]))  # as printed
    gap = f"a {shown}-point difference"
    if diff <= _FLOOR:
        return _within_floor(a, b, paired, n=n, gap=gap, diff=diff)
    if paired is not None:
        var = paired.sd**2  # the per-case differences' variance
    else:
        pa, pb = _quality(a), _quality(b)
        var = pa * (1 - pa) + pb * (1 - pb)  # two independent samples of N cases each
    needed = max(n + 1, math.ceil((1.96 / diff) ** 2 * var))
    while needed <= _MOST_CASES and _half(needed, var, paired is not None) >= diff:
        needed += 1  # Student's t at small N is wider than 1.96
    if needed > _MOST_CASES:
        return f"more than {_MOST_CASES:,} cases would be needed to tell {gap} from noise"
    return f"on {n} cases; about {needed} cases would tell {gap} from noise"


def _within_floor(
    a: TargetSummary,
    b: TargetSummary,
    paired: PairedDifference | None,
    *,
    n: int,
    gap: str,
    diff: float,
) -> str | None:
    """Whether the interval shows the two within the 5-point floor, and if not, about how
    many cases would (half-widths shrinking as one over the square root of the cases)."""
    if paired is not None and math.isfinite(paired.half_width):
        half = max(paired.mean - paired.low, paired.high - paired.mean)
        ci = ""  # the paired difference itself is printed beside it
        if paired.low >= -_FLOOR and paired.high <= _FLOOR:
            return f"{gap}, shown within {_FLOOR:.0%} on {n} cases"
    elif paired is None and n > 0:
        pa, pb = _quality(a), _quality(b)
        half = 1.96 * math.sqrt((pa * (1 - pa) + pb * (1 - pb)) / n)
        ci = " (two independent samples)"
        if half + diff <= _FLOOR:
            return f"{gap}, shown within {_FLOOR:.0%} on {n} cases{ci}"
    else:
        return None
    room = _FLOOR - diff
    needed = math.ceil(n * (half / room) ** 2) if room > 0 else None
    if needed is None or needed > _MOST_CASES:
        return f"{gap} on {n} cases{ci}: no practical number of cases would show it within 5%"
    return (
        f"{gap} on {n} cases, not shown within {_FLOOR:.0%}{ci}: about "
        f"{max(needed, n + 1)} cases would show whether it is"
    )


def _half(n: int, var: float, paired: bool) -> float:
    z = t_quantile(0.95, n - 1) if paired and n < 200 else 1.96
    return z * math.sqrt(var / n)


def paired_text(d: PairedDifference) -> str:
    """A paired difference for people:
    ``paired difference +20 points (95% CI -5 to +45, 10 cases)``."""
    return (
        f"paired difference {_points(d.mean)} points ({d.confidence:.0%} CI "
        f"{_points(d.low)} to {_points(d.high)}, {d.cases} cases)"
    )


def _points(x: float) -> str:
    shown = round(x * 100)
    return "0" if shown == 0 else f"{shown:+d}"


def _stops(s: TargetSummary) -> str:
    """How runs of ``s`` ended other than completed: ``error ×2, step_limit ×1``."""
    return ", ".join(f"{k} ×{v}" for k, v in s.status_counts.items() if k != "completed")


def _cost_clauses(best: TargetSummary, other: TargetSummary) -> list[str]:
    out = []
    ca, cb = _known_cost(best), _known_cost(other)
    if _costs_comparable([best, other]) and ca is not None and cb is not None:
        out.append(f"{_ratio(ca, cb, 'cost')} ({usd(ca)} vs {usd(cb)} per case)")
    else:
        why = _UNKNOWN if ca is None or cb is None else _FREE
        ra, rb = reference_cost(best), reference_cost(other)
        scale = ""
        if ra is not None and rb is not None and (ra or rb):
            scale = (
                f" (at {REFERENCE_MODEL} prices {_ratio(ra, rb, 'cost')}, "
                f"{usd(ra)} vs {usd(rb)} per case)"
            )
        out.append(f"cost not compared: {why}{scale}")
    ta, tb = _mean(best, "tokens"), _mean(other, "tokens")
    if ta is not None and tb is not None and (ta or tb):
        p95a, p95b = _stat(best, "tokens", "p95"), _stat(other, "tokens", "p95")
        out.append(
            f"{_ratio(ta, tb, 'tokens')} ({ta:,.0f} vs {tb:,.0f} per case, "
            f"p95 {p95a:,.0f} vs {p95b:,.0f})"
        )
    ma, mb = _stat(best, "model_calls", "p50"), _stat(other, "model_calls", "p50")
    out.append(f"{_calls(ma)} vs {mb:g} at p50")
    la, lb = _stat(best, "latency_s", "p95"), _stat(other, "latency_s", "p95")
    out.append(f"p95 latency {secs(la)} vs {secs(lb)}")
    return out


def _mean(s: TargetSummary, metric: str) -> float | None:
    return s.metrics[metric].stat("mean")


def _stat(s: TargetSummary, metric: str, stat: str) -> float:
    return s.metrics[metric].stat(stat) or 0.0


def _calls(n: float) -> str:
    return f"{n:g} model call{'' if n == 1 else 's'}"


def _ratio(a: float, b: float, noun: str) -> str:
    """``a`` as a share of ``b`` in words: "a quarter of the cost", "2.5× the tokens"."""
    if b == 0:
        return f"more {noun}" if a else f"the same {noun}"
    if a == 0:  # a target whose runs all ended before any call
        return f"no {noun}"
    r = a / b
    if 0.9 <= r <= 1.1:
        return f"about the same {noun}"
    if r > 1:
        return f"{r:.1f}× the {noun}"
    inverse = 1 / r
    if inverse < 1.8:
        return f"{r:.0%} of the {noun}"
    n = round(inverse)
    named = {2: "half the", 3: "a third of the", 4: "a quarter of the"}
    return f"{named.get(n, f'1/{n} of the')} {noun}"


def _profile(s: TargetSummary) -> str:
    quality = _quality(s)
    what = "correct" if s.correct_rate is not None else "completed"
    cost = s.metrics["cost_usd"].stat("p95")
    cost_text = "unknown" if cost is None or s.metrics["cost_usd"].unknown else usd(cost)
    return (
        f"{pct(quality)} {what}, {pct(s.within_budget_rate)} within budget, "
        f"p95 {_stat(s, 'model_calls', 'p95'):g} "
        f"{'model call' if _stat(s, 'model_calls', 'p95') == 1 else 'model calls'}, "
        f"{_stat(s, 'tokens', 'p95'):,.0f} tokens, {cost_text} and "
        f"{secs(_stat(s, 'latency_s', 'p95'))} per case; compare it with another architecture "
        "to get a recommendation"
    )
