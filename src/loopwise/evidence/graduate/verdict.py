"""Whether to replace the agent with the generated workflow, only as far as the evidence
carries it: :func:`verdict`.

The question a team signs off on is *how often the workflow does worse than the agent*:
the cases where the workflow is wrong and the agent right (with the agent's own stored
answers as references: the cases where the two disagree). On ``n`` held-out cases with
``k`` of them, the one-sided Clopper–Pearson bound at 90% (δ = 0.1,
:func:`~loopwise.evidence.evals.bounds.clopper_pearson_upper`) bounds that rate:

* a workflow that makes no fewer model calls than the agent saves nothing: **keep the
  agent**, whatever the accuracy;
* at most 5% (:data:`ALPHA`) → the workflow is shown nearly as good: **graduate**;
* shown above 5% (the lower bound is) → **keep the agent**;
* neither → **not enough evidence**, with how many cases would decide: 0 disagreements in
  11 cases bound disagreement below 19% at 90%, and about 45 agreeing cases would bound it
  under 5% (:func:`~loopwise.evidence.evals.bounds.cases_to_bound_rate`). Never "graduate"
  on 3 cases because they happened to agree.

A case's repeats are averaged first: a case counts against the workflow when its mean
quality is below the agent's on that case.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from loopwise.core.jsontypes import JSONObject
from loopwise.evidence.evals.bounds import (
    cases_to_bound_rate,
    clopper_pearson_lower,
    clopper_pearson_upper,
)
from loopwise.evidence.evals.paired import run_quality
from loopwise.evidence.evals.stats import CaseRun, TargetSummary

__all__ = ["ALPHA", "DELTA", "Decision", "Evidence", "verdict"]

ALPHA = 0.05
"""The share of cases on which the workflow may do worse than the agent."""
DELTA = 0.1
"""The chance allowed for the bound to be wrong (the bound holds at 90%)."""

Decision = Literal["graduate", "keep_agent", "not_enough_evidence"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Evidence:
    """What the verdict rests on."""

    cases: int
    """Cases both ran."""
    worse: int
    """Cases where the workflow did worse than the agent (disagreed, with the agent's
    answers as references)."""
    upper_bound: float
    """The one-sided Clopper–Pearson upper bound of ``worse / cases`` at ``1 - delta``."""
    lower_bound: float
    """Its lower bound at the same level."""
    alpha: float
    """The rate the upper bound must stay under to graduate."""
    delta: float
    """The chance the bound is wrong."""
    cases_needed: int | None
    """About how many cases at the rate seen would bound it under ``alpha`` (``None``:
    the rate seen is not below ``alpha``, so none would)."""
    references: Literal["agent", "labels"]
    """What the cases' expected values are: the agent's own answers, or labels."""

    @property
    def sentence(self) -> str:
        """``0 disagreements in 11 cases bound disagreement below 19% at 90%``."""
        what = "disagreement" if self.references == "agent" else "the workflow doing worse"
        s = "" if self.worse == 1 else "s"
        count = (
            f"{self.worse} disagreement{s}"
            if self.references == "agent"
            else f"{self.worse} case{s} where the workflow did worse"
        )
        return (
            f"{count} in {self.cases} case{'' if self.cases == 1 else 's'} bounds {what} below "
            f"{_pct(self.upper_bound)} at {1 - self.delta:.0%}"
        )

    def to_dict(self) -> JSONObject:
        """``{"cases", "worse", "upper_bound", "lower_bound", "alpha", "delta",
        "cases_needed", "references"}``."""
        return {
            "cases": self.cases,
            "worse": self.worse,
            "upper_bound": round(self.upper_bound, 6),
            "lower_bound": round(self.lower_bound, 6),
            "alpha": self.alpha,
            "delta": self.delta,
            "cases_needed": self.cases_needed,
            "references": self.references,
        }


def _pct(x: float) -> str:
    return f"{x:.1%}" if x < 0.1 else f"{x:.0%}"


def evidence(
    agent: Sequence[CaseRun],
    flow: Sequence[CaseRun],
    *,
    references: Literal["agent", "labels"],
    alpha: float = ALPHA,
    delta: float = DELTA,
) -> Evidence:
    """Count the cases where ``flow`` did worse than ``agent`` and bound their rate."""
    a, w = _means(agent), _means(flow)
    shared = [c for c in a if c in w]
    n = len(shared)
    k = sum(w[c] < a[c] for c in shared)
    return Evidence(
        cases=n,
        worse=k,
        upper_bound=clopper_pearson_upper(k, n, 1 - delta),
        lower_bound=clopper_pearson_lower(k, n, 1 - delta),
        alpha=alpha,
        delta=delta,
        cases_needed=cases_to_bound_rate(k / n, alpha, delta) if n else None,
        references=references,
    )


def _means(runs: Sequence[CaseRun]) -> dict[str, float]:
    by_case: dict[str, list[float]] = {}
    for r in runs:
        by_case.setdefault(r.case_id, []).append(run_quality(r))
    return {c: sum(v) / len(v) for c, v in by_case.items()}


def verdict(
    agent: TargetSummary, flow: TargetSummary, e: Evidence, outside: float | None
) -> tuple[Decision, str]:
    """The decision and its reason in one line (see the module docstring)."""
    calls_a = agent.metrics["model_calls"].stat("mean") or 0.0
    calls_w = flow.metrics["model_calls"].stat("mean") or 0.0
    calls = f"{calls_w:.3g} model calls per run vs {calls_a:.3g}"
    bound = f"under {e.alpha:.0%}"
    if calls_w >= calls_a:  # nothing to gain, whatever the accuracy
        return "keep_agent", f"keep the agent: the workflow saves no model calls ({calls})"
    if e.cases and e.lower_bound > e.alpha:
        return "keep_agent", (
            f"keep the agent: the workflow does worse on more than {e.alpha:.0%} of cases "
            f"({e.worse} of {e.cases}; at least {_pct(e.lower_bound)} at {1 - e.delta:.0%})"
        )
    if not e.cases or e.upper_bound > e.alpha:
        if e.cases_needed is None:
            more = f"at this rate no number of cases would bound it {bound}"
        elif e.worse == 0:
            more = f"about {e.cases_needed} agreeing cases would bound it {bound}"
        else:
            more = f"about {e.cases_needed} cases at this rate would bound it {bound}"
        return "not_enough_evidence", f"not enough evidence: {e.sentence}: {more}"
    share = "" if outside is None else f"; {outside:.0%} of cases fell outside the mined paths"
    return "graduate", f"graduate: {e.sentence} ({bound}), with {calls}{share}"
