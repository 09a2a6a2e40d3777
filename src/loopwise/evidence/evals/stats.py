"""An eval's numbers: one run of one case (:class:`CaseRun`), a metric over runs
(:class:`Distribution`, p50 / p95 / max), one target's summary (:class:`TargetSummary`:
completed, correct and within-budget rates, status counts), and how they are written.

Definitions (also in the README): a run is *within budget* unless it ended
``step_limit`` or ``budget_exceeded``; a run that did not complete scores 0; cases
without ``expected`` are not scored (``correct_rate`` is ``None`` when none is).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from loopwise.core.events import Status
from loopwise.core.jsontypes import JSONObject, JSONValue
from loopwise.core.usage import Pricing

__all__ = [
    "METRICS",
    "REFERENCE_MODEL",
    "CaseRun",
    "Distribution",
    "TargetSummary",
    "metric_text",
    "pct",
    "percentile",
    "reference_cost",
    "reference_costs",
    "secs",
    "summarize",
    "usd",
    "wilson",
]


#: The numeric metrics every target is summarised by, with their units.
METRICS: Mapping[str, str] = {
    "steps": "steps",
    "model_calls": "calls",
    "tool_calls": "calls",
    "tokens": "tokens",
    "cost_usd": "USD",
    "latency_s": "s",
}


_OUT_OF_BUDGET = frozenset({Status.STEP_LIMIT, Status.BUDGET_EXCEEDED})


@dataclass(frozen=True, kw_only=True, slots=True)
class CaseRun:
    """One run of one target on one case."""

    target: str
    """The target's name."""
    case_id: str
    """The case's id."""
    repeat: int
    """Which repetition (0-based)."""
    run_id: str
    """The run's id (in the store when the eval had one)."""
    status: Status
    """How it ended."""
    score: float | None
    """1.0 correct … 0.0 wrong; ``None`` when the case has no ``expected``."""
    steps: int
    """Steps taken."""
    model_calls: int
    """Model calls made."""
    tool_calls: int
    """Tool calls made."""
    tokens: int
    """Input + output tokens."""
    cost_usd: float | None
    """USD, ``None`` when unknown."""
    latency_s: float
    """Wall seconds."""
    input_tokens: int = 0
    """Prompt tokens (for pricing at a reference model)."""
    output_tokens: int = 0
    """Completion tokens."""
    output: JSONValue = None
    """The run's output (JSON form)."""
    detail: str | None = None
    """Why it did not complete."""
    expected: JSONValue = None
    """The case's ``expected`` (JSON form; ``None``: not scored)."""
    diff: list[JSONObject] = field(default_factory=list)
    """Where a completed run's output differs from ``expected``:
    ``[{"field", "expected", "actual"}]`` (see :func:`loopwise.evidence.evals.dataset.field_diff`);
    empty when a custom scorer judged it (``scorer``)."""
    scorer: str | None = None
    """The custom scorer that judged the run, by name (``None``: the default field match,
    whose verdict ``diff`` explains)."""
    scored_on: str | None = None
    """``proposed_plan`` when the score judges the plan a hybrid proposed, not an outcome:
    its run was stopped by the eval's ``deny`` gate rule (``None``: the run's output)."""

    def to_dict(self) -> JSONObject:
        """A JSON-ready dict."""
        return {
            "case_id": self.case_id,
            "repeat": self.repeat,
            "run_id": self.run_id,
            "status": str(self.status),
            "score": self.score,
            "steps": self.steps,
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "tokens": self.tokens,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
            "latency_s": round(self.latency_s, 6),
            "output": self.output,
            "detail": self.detail,
            "expected": self.expected,
            "diff": list(self.diff),
            "scorer": self.scorer,
            "scored_on": self.scored_on,
        }

    @property
    def failed(self) -> bool:
        """Scored and not fully right (a run that did not complete scores 0)."""
        return self.score is not None and self.score < 1.0

    def metric(self, name: str) -> float | None:
        """The value of one of :data:`METRICS`."""
        value = {
            "steps": self.steps,
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "tokens": self.tokens,
            "cost_usd": self.cost_usd,
            "latency_s": self.latency_s,
        }[name]
        return None if value is None else float(value)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass(frozen=True, kw_only=True, slots=True)
class Distribution:
    """One metric over a target's runs."""

    values: tuple[float, ...]
    """Every known value (for charts)."""
    unknown: int = 0
    """Runs where the value was unknown (a cost without a price)."""

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Distribution:
        """Build from values where ``None`` means unknown."""
        known = tuple(v for v in values if v is not None)
        return cls(values=known, unknown=len(values) - len(known))

    @property
    def n(self) -> int:
        """How many values are known."""
        return len(self.values)

    def stat(self, name: str) -> float | None:
        """``mean``, ``min``, ``p50``, ``p95`` or ``max``; ``None`` with no known value."""
        if not self.values:
            return None
        if name == "mean":
            return sum(self.values) / len(self.values)
        if name in {"min", "max"}:
            return float(min(self.values) if name == "min" else max(self.values))
        return percentile(self.values, float(name.removeprefix("p")))

    def to_dict(self) -> JSONObject:
        """``{"n", "unknown", "mean", "min", "p50", "p95", "max"}``."""
        out: JSONObject = {"n": self.n, "unknown": self.unknown}
        for name in ("mean", "min", "p50", "p95", "max"):
            value = self.stat(name)
            out[name] = None if value is None else round(value, 9)
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class TargetSummary:
    """One target's distribution over the eval."""

    name: str
    """The target's name."""
    architecture: str
    """``workflow``, ``agent``, ``hybrid`` or ``step``."""
    runs: list[CaseRun]
    """Every run, in case order."""
    metrics: dict[str, Distribution]
    """One :class:`Distribution` per name of :data:`METRICS`."""
    label: str = ""
    """A short display name (the step name when that is unique), else :attr:`name`."""

    @property
    def title(self) -> str:
        """:attr:`label` or :attr:`name`."""
        return self.label or self.name

    @property
    def n(self) -> int:
        """Runs made."""
        return len(self.runs)

    @property
    def status_counts(self) -> dict[str, int]:
        """How the runs ended, most frequent first."""
        return dict(Counter(str(r.status) for r in self.runs).most_common())

    @property
    def completed_rate(self) -> float:
        """Share of runs that completed."""
        return _share(r.status is Status.COMPLETED for r in self.runs)

    @property
    def within_budget_rate(self) -> float:
        """Share of runs that did not hit the step limit or the budget."""
        return _share(r.status not in _OUT_OF_BUDGET for r in self.runs)

    @property
    def correct_rate(self) -> float | None:
        """Mean score over scored runs (``None`` when no case has ``expected``)."""
        scores = [r.score for r in self.runs if r.score is not None]
        return sum(scores) / len(scores) if scores else None

    @property
    def scored(self) -> int:
        """Runs that were scored."""
        return sum(r.score is not None for r in self.runs)

    @property
    def scored_on_proposed_plan(self) -> int:
        """Runs scored on the plan a hybrid proposed, its gates denied by the eval."""
        return sum(r.scored_on == "proposed_plan" for r in self.runs)

    @property
    def flaky_cases(self) -> int:
        """Cases whose repetitions did not all score the same (sampling spread)."""
        by_case: dict[str, set[float | None]] = {}
        for r in self.runs:
            by_case.setdefault(r.case_id, set()).add(r.score)
        return sum(len(scores) > 1 for scores in by_case.values())

    def to_dict(self, *, runs: bool = True) -> JSONObject:
        """A JSON-ready dict (with every run unless ``runs=False``)."""
        out: JSONObject = {
            "target": self.name,
            "label": self.title,
            "architecture": self.architecture,
            "n": self.n,
            "completed_rate": round(self.completed_rate, 4),
            "correct_rate": None if self.correct_rate is None else round(self.correct_rate, 4),
            "within_budget_rate": round(self.within_budget_rate, 4),
            "scored": self.scored,
            "flaky_cases": self.flaky_cases,
            "scored_on_proposed_plan": self.scored_on_proposed_plan,
            "status_counts": dict(self.status_counts),
            "metrics": {name: d.to_dict() for name, d in self.metrics.items()},
            "reference_cost_usd": {
                "model": REFERENCE_MODEL,
                "mean": _round(reference_cost(self)),
            },
        }
        if runs:
            out["runs"] = [r.to_dict() for r in self.runs]
        return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 9)


def _share(flags: Iterable[bool]) -> float:
    items = list(flags)
    return sum(items) / len(items) if items else 0.0


def summarize(
    name: str, architecture: str, runs: Sequence[CaseRun], *, label: str = ""
) -> TargetSummary:
    """Build a :class:`TargetSummary` from one target's runs."""
    return TargetSummary(
        name=name,
        label=label,
        architecture=architecture,
        runs=list(runs),
        metrics={m: Distribution.of([r.metric(m) for r in runs]) for m in METRICS},
    )


#: Tokens are priced at this model when the real cost is zero (the scripted model) or
#: unknown, so an offline eval still says what the difference would cost.
REFERENCE_MODEL = "gpt-4o-mini"


def reference_costs(s: TargetSummary, model: str = REFERENCE_MODEL) -> Distribution:
    """USD per run had every call been priced as ``model``."""
    pricing = Pricing()
    return Distribution.of([pricing.cost(model, r.input_tokens, r.output_tokens) for r in s.runs])


def reference_cost(s: TargetSummary, model: str = REFERENCE_MODEL) -> float | None:
    """Mean USD per case had every call been priced as ``model``."""
    return reference_costs(s, model).stat("mean")


def pct(rate: float) -> str:
    """A rate as a whole percentage."""
    return f"{rate:.0%}"


def usd(value: float) -> str:
    """USD with enough digits to tell small costs apart: ``$0.00042``."""
    if value == 0:
        return "$0"
    digits = max(2, 1 - math.floor(math.log10(abs(value))) + 1)
    return f"${value:.{digits}f}"


def secs(value: float) -> str:
    """Seconds for people: ``250 ms``, ``1.5 s``."""
    return f"{value * 1000:.3g} ms" if value < 1 else f"{value:.3g} s"


def metric_text(value: float, metric: str) -> str:
    """One value of a :data:`METRICS` name for people, in its unit."""
    if metric == "cost_usd":
        return usd(value)
    if metric == "latency_s":
        return secs(value)
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def wilson(successes: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The 95% Wilson score interval of ``successes`` of ``n`` (``(0, 1)`` with none); it
    always holds the proportion itself."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(max(0.0, p * (1 - p)) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))
