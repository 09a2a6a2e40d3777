"""Evals as distributions: run targets over one dataset and compare them on evidence.

An agent is path-dependent and sampled, so one demo proves little; this module runs every
target over the same cases (each repeated ``repeat`` times to see sampling spread),
concurrently under a limit, and reports each target as a *distribution*: completed rate,
correct rate (a scorer against ``expected``), within-budget rate, status counts, and
steps, model calls, tool calls, tokens, cost and latency at p50 / p95 / max. With several
targets it writes a :class:`Recommendation` that cites the numbers.

* :func:`load_dataset` reads JSONL cases ``{"input": ..., "expected": ..., "id"?: ...}``.
* :func:`field_match` is the default scorer: every field named in ``expected`` must be
  equal in the output (recursively for nested objects); a custom scorer is any
  ``(output, expected) -> bool | float`` function.
* :func:`aevaluate` / :func:`evaluate` run the eval; :func:`recommend` compares summaries;
  :func:`format_text` renders the side-by-side table; :mod:`loopwise.report` the HTML page.

Definitions (also in the README): a run is *within budget* unless it ended
``step_limit`` or ``budget_exceeded``; a run that did not complete scores 0; cases
without ``expected`` are not scored (``correct_rate`` is ``None`` when none is).
"""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loopwise.errors import ConfigError
from loopwise.step import EventSink, RunResult, Status, Step, blocking, jsonable
from loopwise.targets import import_module_of
from loopwise.usage import Budget

__all__ = [
    "Case",
    "CaseRun",
    "Distribution",
    "EvalReport",
    "EvalTarget",
    "Recommendation",
    "TargetSummary",
    "aevaluate",
    "evaluate",
    "field_match",
    "format_text",
    "load_dataset",
    "percentile",
    "recommend",
]

Scorer = Callable[[Any, Any], "bool | float"]
Progress = Callable[[int, int, "CaseRun"], None]

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
#: Simpler architectures win ties: a fixed path is cheaper to debug and to run.
_SIMPLICITY = {"workflow": 0, "step": 1, "hybrid": 2, "agent": 3}


@dataclass(frozen=True, kw_only=True, slots=True)
class Case:
    """One dataset line."""

    id: str
    """The case's ``id`` field, or its line number."""
    input: Any
    """What the target runs on."""
    expected: Any = None
    """What a correct output contains (``None``: not scored)."""


def load_dataset(path: str | Path) -> list[Case]:
    """Read a JSONL dataset; raises :class:`ConfigError` naming the bad line."""
    source = Path(path)
    if not source.is_file():
        raise ConfigError(f"dataset {source}: no such file", name=str(source))
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"dataset {source}: cannot read it as UTF-8 text ({e})") from e
    cases = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"dataset {source} line {number}: not JSON ({e.msg})") from e
        if not isinstance(row, dict) or "input" not in row:
            raise ConfigError(f"dataset {source} line {number}: needs an object with 'input'")
        cases.append(
            Case(id=str(row.get("id", number)), input=row["input"], expected=row.get("expected"))
        )
    if not cases:
        raise ConfigError(f"dataset {source} has no cases", name=str(source))
    return cases


def field_match(output: Any, expected: Any) -> bool:
    """True when every field named in ``expected`` has the same value in ``output``.

    Objects match field by field (extra output fields are ignored, nested objects are
    matched the same way); anything else must be equal. Pydantic models and enums are
    compared through their JSON form.
    """
    output, expected = jsonable(output), jsonable(expected)
    if isinstance(expected, dict):
        return isinstance(output, dict) and all(
            key in output and field_match(output[key], value) for key, value in expected.items()
        )
    return bool(output == expected)


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalTarget:
    """A step to evaluate, under a display name, with the model its runs use."""

    name: str
    """How the report names it (the CLI uses the target spec)."""
    step: Step
    """The step."""
    model: Any = None
    """A :class:`~loopwise.model.Model` (shared by its runs), or ``None`` for model-free steps."""

    @property
    def architecture(self) -> str:
        """``workflow``, ``agent``, ``hybrid`` or ``step`` (read from the step's class)."""
        return architecture_of(self.step)


def architecture_of(step: Any) -> str:
    """What kind of step ``step`` is, by duck typing (``architecture`` attribute wins)."""
    declared = getattr(step, "architecture", None)
    if isinstance(declared, str):
        return declared
    kind = type(step).__name__.lower()
    for name in ("hybrid", "workflow", "agent"):
        if name in kind:
            return name
    if getattr(step, "tools", None) is not None:
        return "agent"
    return "workflow" if getattr(step, "graph", None) is not None else "step"


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
    output: Any = None
    """The run's output (JSON form)."""
    detail: str | None = None
    """Why it did not complete."""

    def to_dict(self) -> dict[str, Any]:
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
        }

    def metric(self, name: str) -> float | None:
        """The value of one of :data:`METRICS`."""
        value = getattr(self, name)
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

    def to_dict(self) -> dict[str, Any]:
        """``{"n", "unknown", "mean", "min", "p50", "p95", "max"}``."""
        out: dict[str, Any] = {"n": self.n, "unknown": self.unknown}
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
    def flaky_cases(self) -> int:
        """Cases whose repetitions did not all score the same (sampling spread)."""
        by_case: dict[str, set[float | None]] = {}
        for r in self.runs:
            by_case.setdefault(r.case_id, set()).add(r.score)
        return sum(len(scores) > 1 for scores in by_case.values())

    def to_dict(self, *, runs: bool = True) -> dict[str, Any]:
        """A JSON-ready dict (with every run unless ``runs=False``)."""
        out: dict[str, Any] = {
            "target": self.name,
            "label": self.title,
            "architecture": self.architecture,
            "n": self.n,
            "completed_rate": round(self.completed_rate, 4),
            "correct_rate": None if self.correct_rate is None else round(self.correct_rate, 4),
            "within_budget_rate": round(self.within_budget_rate, 4),
            "scored": self.scored,
            "flaky_cases": self.flaky_cases,
            "status_counts": self.status_counts,
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


def _share(flags: Any) -> float:
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


@dataclass(frozen=True, kw_only=True, slots=True)
class Recommendation:
    """Which target to ship, and why, citing the numbers."""

    choice: str | None
    """The recommended target's name (``None`` when there is nothing to choose from)."""
    text: str
    """One paragraph a person reads."""
    reasons: list[str] = field(default_factory=list)
    """The comparisons behind it, one per other target."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"choice": self.choice, "text": self.text, "reasons": self.reasons}


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalReport:
    """The whole eval: settings, one summary per target, the recommendation."""

    eval_id: str
    """Identifies this eval in the store."""
    created_at: str
    """ISO-8601 UTC."""
    dataset: str
    """Where the cases came from."""
    cases: int
    """Distinct cases."""
    repeat: int
    """Runs per case and target."""
    concurrency: int
    """Runs in flight at most."""
    targets: list[TargetSummary]
    """One per target, in the order given."""
    recommendation: Recommendation
    """The verdict."""
    models: dict[str, str] = field(default_factory=dict)
    """Target name → model name."""
    previous: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Target name → its summary in the last stored eval on the same dataset."""

    def to_dict(self, *, runs: bool = True) -> dict[str, Any]:
        """The JSON document ``loopwise eval --json`` prints."""
        return {
            "eval_id": self.eval_id,
            "created_at": self.created_at,
            "dataset": self.dataset,
            "cases": self.cases,
            "repeat": self.repeat,
            "concurrency": self.concurrency,
            "models": self.models,
            "targets": [t.to_dict(runs=runs) for t in self.targets],
            "recommendation": self.recommendation.to_dict(),
            "previous": self.previous,
            "disagreements": self.disagreements(),
        }

    def disagreements(self) -> list[dict[str, Any]]:
        """Cases the targets score differently: ``{"case_id", "scores": {target: mean}}``.

        Where one architecture gets a case right and another does not is where to look
        first (and what a prompt or a route should change).
        """
        if len(self.targets) < 2:
            return []
        means: dict[str, dict[str, float]] = {}
        for t in self.targets:
            by_case: dict[str, list[float]] = {}
            for r in t.runs:
                if r.score is not None:
                    by_case.setdefault(r.case_id, []).append(r.score)
            for case_id, scores in by_case.items():
                means.setdefault(case_id, {})[t.name] = round(sum(scores) / len(scores), 4)
        return [
            {"case_id": case_id, "scores": scores}
            for case_id, scores in means.items()
            if len(scores) == len(self.targets) and len(set(scores.values())) > 1
        ]


async def aevaluate(
    targets: Sequence[EvalTarget],
    cases: Sequence[Case],
    *,
    repeat: int = 1,
    concurrency: int = 4,
    scorer: Scorer = field_match,
    progress: Progress | None = None,
    sinks: Sequence[EventSink] = (),
    budget: Budget | None = None,
    max_steps: int | None = None,
    dataset: str = "",
    store: Any = None,
) -> EvalReport:
    """Run every target over every case ``repeat`` times, at most ``concurrency`` at once.

    Runs interleave targets so a slow target does not starve the others; ``progress`` is
    called after each run with ``(done, total, run)``. Guardrails end single runs with a
    status (counted, never raised); a :class:`ConfigError` (no model, bad target) stops
    the eval. With a ``store`` (a path or a :class:`~loopwise.store.RunStore`) every run
    is recorded there like any other run (``runs list``, ``analyze`` see them), with the
    target's name as its spec; human gates then pause runs (``awaiting_approval``).
    ``budget`` and ``max_steps`` override the targets' own limits for every run, so the
    within-budget rate answers "how often does it fit in this budget?".
    """
    if repeat < 1 or concurrency < 1:
        raise ConfigError("repeat and concurrency must be at least 1")
    gate = asyncio.Semaphore(concurrency)
    jobs = [(t, c, k) for k in range(repeat) for c in cases for t in targets]
    done = [0]

    options = {"sinks": tuple(sinks), "budget": budget, "max_steps": max_steps}

    async def one(target: EvalTarget, case: Case, k: int) -> CaseRun:
        async with gate:
            result = await _run_one(target, case.input, store, options)
        record = _case_run(target.name, case, k, result, scorer)
        done[0] += 1
        if progress is not None:
            progress(done[0], len(jobs), record)
        return record

    records = await asyncio.gather(*(one(t, c, k) for t, c, k in jobs))
    return _report(
        targets, records, cases=len(cases), repeat=repeat, concurrency=concurrency, dataset=dataset
    )


async def _run_one(
    target: EvalTarget, input: Any, store: Any, options: dict[str, Any]
) -> RunResult:
    """One run, recorded in ``store`` when there is one (``None``: not recorded)."""
    from loopwise import runner

    return await runner.arun(
        target.step, input, store=store, spec=target.name, model=target.model, **options
    )


def _report(
    targets: Sequence[EvalTarget], records: Sequence[CaseRun], **settings: Any
) -> EvalReport:
    labels = _labels([t.name for t in targets])
    summaries = [
        summarize(
            t.name, t.architecture, [r for r in records if r.target == t.name], label=labels[i]
        )
        for i, t in enumerate(targets)
    ]
    return EvalReport(
        eval_id=uuid.uuid4().hex[:12],
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        targets=summaries,
        recommendation=recommend(summaries),
        models={t.name: str(getattr(t.model, "name", None) or "none") for t in targets},
        **settings,
    )


def _labels(names: Sequence[str]) -> list[str]:
    """``path.py:name`` → ``name`` when the short names are unique."""
    short = [n.rsplit(":", 1)[-1] for n in names]
    return short if len(set(short)) == len(short) else list(names)


def evaluate(targets: Sequence[EvalTarget], cases: Sequence[Case], **options: Any) -> EvalReport:
    """The sync wrapper of :func:`aevaluate`."""
    return blocking(aevaluate(targets, cases, **options))


def _case_run(name: str, case: Case, k: int, result: RunResult, scorer: Scorer) -> CaseRun:
    output = jsonable(result.output)
    return CaseRun(
        target=name,
        case_id=case.id,
        repeat=k,
        run_id=result.run_id,
        status=result.status,
        score=_score(case, result, output, scorer),
        steps=result.steps,
        model_calls=result.usage.model_calls,
        tool_calls=result.usage.tool_calls,
        tokens=result.usage.total_tokens,
        input_tokens=result.usage.input_tokens,
        output_tokens=result.usage.output_tokens,
        cost_usd=result.usage.cost_usd,
        latency_s=result.usage.wall_seconds,
        output=output,
        detail=result.detail,
    )


def _score(case: Case, result: RunResult, output: Any, scorer: Scorer) -> float | None:
    if case.expected is None:
        return None
    if result.status is not Status.COMPLETED:
        return 0.0
    try:
        value = scorer(output, case.expected)
    except Exception as e:
        raise ConfigError(
            f"scorer {getattr(scorer, '__name__', scorer)!r} failed on case {case.id}: "
            f"{type(e).__name__}: {e}"
        ) from e
    return max(0.0, min(1.0, float(value)))


def recommend(summaries: Sequence[TargetSummary]) -> Recommendation:
    """Pick a target on evidence and say why, citing the numbers.

    Quality first: the correct rate (the completed rate when nothing is scored).
    Targets within noise of the best (the larger of 5 points and a 95% two-proportion
    interval) count as equally accurate; among those, the one that stays within budget
    more often wins, then the cheaper (mean USD per case, then mean tokens), then fewer
    model calls, then the lower p95 latency, and last the simpler architecture
    (workflow before hybrid before agent).
    """
    if not summaries:
        return Recommendation(choice=None, text="no targets were evaluated")
    if len(summaries) == 1:
        only = summaries[0]
        return Recommendation(choice=only.name, text=f"{only.title}: {_profile(only)}")
    best_quality = max(_quality(s) for s in summaries)
    top = summaries[max(range(len(summaries)), key=lambda i: _quality(summaries[i]))]
    tied = [s for s in summaries if best_quality - _quality(s) <= _margin(s, top)]
    best = min(tied, key=_preference)
    reasons = [_compare(best, other, other in tied) for other in summaries if other is not best]
    text = (
        f"{'; '.join(reasons)} → the {best.architecture}, {best.title}."
        if best.architecture != "step"
        else f"{'; '.join(reasons)} → {best.title}."
    )
    return Recommendation(choice=best.name, text=text, reasons=reasons)


def _quality(s: TargetSummary) -> float:
    rate = s.correct_rate
    return s.completed_rate if rate is None else rate


def _margin(a: TargetSummary, b: TargetSummary) -> float:
    """Half-width of a 95% interval for the difference of two rates, at least 5 points."""
    pa, pb = _quality(a), _quality(b)
    na, nb = max(a.scored or a.n, 1), max(b.scored or b.n, 1)
    spread = 1.96 * math.sqrt(pa * (1 - pa) / na + pb * (1 - pb) / nb)
    return max(0.05, spread)


def _preference(s: TargetSummary) -> tuple[float, ...]:
    cost = s.metrics["cost_usd"].stat("mean")
    return (
        -round(s.within_budget_rate, 2),
        math.inf if cost is None or s.metrics["cost_usd"].unknown else cost,
        s.metrics["tokens"].stat("mean") or 0.0,
        s.metrics["model_calls"].stat("mean") or 0.0,
        s.metrics["latency_s"].stat("p95") or 0.0,
        _SIMPLICITY.get(s.architecture, 1),
    )


def _compare(best: TargetSummary, other: TargetSummary, tied: bool) -> str:
    """One clause: ``best`` against ``other``, with the numbers."""
    a, b = _quality(best), _quality(other)
    what = "correct" if best.correct_rate is not None else "completed"
    if tied:
        parts = [f"equal accuracy within noise ({_pct(a)} vs {_pct(b)} {what})"]
    else:
        parts = [f"more accurate ({_pct(a)} vs {_pct(b)} {what})"]
    parts.extend(_cost_clauses(best, other))
    if round(best.within_budget_rate, 2) != round(other.within_budget_rate, 2):
        parts.append(
            f"within budget {_pct(best.within_budget_rate)} vs {_pct(other.within_budget_rate)}"
        )
    stops = {k: v for k, v in other.status_counts.items() if k != "completed"}
    if stops:
        listed = ", ".join(f"{k} ×{v}" for k, v in stops.items())
        parts.append(f"{other.title} stopped early: {listed}")
    return f"{best.title} vs {other.title}: " + ", ".join(parts)


#: Tokens are priced at this model when the real cost is zero (the scripted model) or
#: unknown, so an offline eval still says what the difference would cost.
REFERENCE_MODEL = "gpt-4o-mini"


def reference_costs(s: TargetSummary, model: str = REFERENCE_MODEL) -> Distribution:
    """USD per run had every call been priced as ``model``."""
    from loopwise.usage import Pricing

    pricing = Pricing()
    return Distribution.of([pricing.cost(model, r.input_tokens, r.output_tokens) for r in s.runs])


def reference_cost(s: TargetSummary, model: str = REFERENCE_MODEL) -> float | None:
    """Mean USD per case had every call been priced as ``model``."""
    return reference_costs(s, model).stat("mean")


def _cost_clauses(best: TargetSummary, other: TargetSummary) -> list[str]:
    out = []
    ca, cb = _mean(best, "cost_usd"), _mean(other, "cost_usd")
    unknown = best.metrics["cost_usd"].unknown or other.metrics["cost_usd"].unknown
    if ca is not None and cb is not None and not unknown and (ca or cb):
        out.append(f"{_ratio(ca, cb, 'cost')} ({_usd(ca)} vs {_usd(cb)} per case)")
    else:
        ra, rb = reference_cost(best), reference_cost(other)
        why = "cost unknown (a model without a price)" if unknown else "$0 with this model"
        if ra is not None and rb is not None and (ra or rb):
            out.append(
                f"{why}; at {REFERENCE_MODEL} prices {_ratio(ra, rb, 'cost')} "
                f"({_usd(ra)} vs {_usd(rb)} per case)"
            )
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
    out.append(f"p95 latency {_secs(la)} vs {_secs(lb)}")
    return out


def _mean(s: TargetSummary, metric: str) -> float | None:
    return s.metrics[metric].stat("mean")


def _stat(s: TargetSummary, metric: str, stat: str) -> float:
    return s.metrics[metric].stat(stat) or 0.0


def _calls(n: float) -> str:
    return f"{n:g} model call{'' if n == 1 else 's'}"


def _secs(value: float) -> str:
    return f"{value * 1000:.3g} ms" if value < 1 else f"{value:.3g} s"


def _pct(rate: float) -> str:
    return f"{rate:.0%}"


def _usd(value: float) -> str:
    if value == 0:
        return "$0"
    digits = max(2, 1 - math.floor(math.log10(abs(value))) + 1)
    return f"${value:.{digits}f}"


def _ratio(a: float, b: float, noun: str) -> str:
    """``a`` as a share of ``b`` in words: "a quarter of the cost", "2.5× the tokens"."""
    if b == 0:
        return f"more {noun}" if a else f"the same {noun}"
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
    cost_text = "unknown" if cost is None or s.metrics["cost_usd"].unknown else _usd(cost)
    return (
        f"{_pct(quality)} {what}, {_pct(s.within_budget_rate)} within budget, "
        f"p95 {_stat(s, 'model_calls', 'p95'):g} model calls, "
        f"{_stat(s, 'tokens', 'p95'):,.0f} tokens, {cost_text} and "
        f"{_secs(_stat(s, 'latency_s', 'p95'))} per case; compare it with another architecture "
        "to get a recommendation"
    )


_LABELS = {
    "steps": "steps",
    "model_calls": "model calls",
    "tool_calls": "tool calls",
    "tokens": "tokens",
    "cost_usd": "cost (USD)",
    "latency_s": "latency",
}


def format_text(report: EvalReport) -> str:
    """The side-by-side table and the recommendation, for a terminal."""
    head = ["", *(f"{t.title} ({t.architecture})" for t in report.targets)]
    rows = [head, ["", *(["p50 / p95 / max"] * len(report.targets))]]
    rows.append(["runs", *(str(t.n) for t in report.targets)])
    rates: list[tuple[str, list[float | None]]] = [
        ("completed", [t.completed_rate for t in report.targets]),
        ("correct", [t.correct_rate for t in report.targets]),
        ("within budget", [t.within_budget_rate for t in report.targets]),
    ]
    for label, values in rates:
        rows.append([label, *("—" if v is None else _pct(v) for v in values)])
    rows.append(
        [
            "statuses",
            *(", ".join(f"{k} {v}" for k, v in t.status_counts.items()) for t in report.targets),
        ]
    )
    for metric, label in _LABELS.items():
        rows.append([label, *(_triple(t.metrics[metric], metric) for t in report.targets)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    settings = (
        f"{report.cases} cases × {report.repeat} repeat(s) from {report.dataset or 'the dataset'}, "
        f"concurrency {report.concurrency}"
    )
    history = [
        _since(t, report.previous[t.name]) for t in report.targets if t.name in report.previous
    ]
    return "\n".join(
        [
            settings,
            "",
            *lines,
            *_disagreement_lines(report),
            *(["", *history] if history else []),
            "",
            _recommendation_text(report),
        ]
    )


def _recommendation_text(report: EvalReport) -> str:
    rec = report.recommendation
    if len(rec.reasons) <= 1:
        return f"Recommendation: {rec.text}"
    final = rec.text.rsplit(" → ", 1)[-1]
    return "\n".join([f"Recommendation: → {final}", *(f"  - {r}" for r in rec.reasons)])


def _disagreement_lines(report: EvalReport) -> list[str]:
    cases = report.disagreements()
    if not cases:
        return []
    shown = ", ".join(c["case_id"] for c in cases[:12]) + (" …" if len(cases) > 12 else "")
    return ["", f"cases the targets score differently: {len(cases)} ({shown})"]


def _since(t: TargetSummary, before: Mapping[str, Any]) -> str:
    """One line comparing ``t`` with its last stored eval."""
    old_rate = before.get("correct_rate")
    rate = t.correct_rate
    parts = []
    if rate is not None and old_rate is not None:
        parts.append(f"correct {_pct(rate)} (was {_pct(float(old_rate))})")
    old_cost = (before.get("metrics", {}).get("cost_usd") or {}).get("p95")
    cost = t.metrics["cost_usd"].stat("p95")
    if cost is not None and old_cost is not None:
        parts.append(f"p95 cost {_usd(cost)} (was {_usd(float(old_cost))})")
    old_tokens = (before.get("metrics", {}).get("tokens") or {}).get("p95")
    tokens = t.metrics["tokens"].stat("p95")
    if tokens is not None and old_tokens is not None:
        parts.append(f"p95 tokens {tokens:,.0f} (was {float(old_tokens):,.0f})")
    return f"since {before.get('created_at', '?')}: {t.title}: " + ", ".join(parts)


def _triple(dist: Distribution, metric: str) -> str:
    if dist.n == 0:
        return "unknown"
    values = [dist.stat(s) or 0.0 for s in ("p50", "p95", "max")]
    if metric == "cost_usd":
        text = " / ".join(_usd(v) for v in values)
    elif metric == "latency_s":
        text = " / ".join(_secs(v) for v in values)
    else:
        text = " / ".join(f"{v:,.0f}" if v >= 100 else f"{v:g}" for v in values)
    return text + (f" ({dist.unknown} unknown)" if dist.unknown else "")


class StderrProgress:
    """A progress bar on stderr: redrawn in place on a terminal, a line per 25% otherwise.

    Never writes to stdout, so ``--json`` output stays one clean document.
    """

    def __init__(self, stream: Any = None, *, width: int = 30) -> None:
        import sys

        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_quarter = -1
        self._not_completed = 0

    def __call__(self, done: int, total: int, run: CaseRun) -> None:
        """Report that ``done`` of ``total`` runs have finished, the last being ``run``."""
        self._not_completed += run.status is not Status.COMPLETED
        filled = int(self.width * done / max(total, 1))
        bar = "█" * filled + "·" * (self.width - filled)
        line = f"eval [{bar}] {done}/{total} runs, {self._not_completed} not completed"
        if self.tty:
            end = "\n" if done == total else ""
            self.stream.write(f"\r{line}{end}")
            self.stream.flush()
            return
        quarter = 4 * done // max(total, 1)
        if quarter != self._last_quarter:
            self._last_quarter = quarter
            self.stream.write(line + "\n")


def load_scorer(spec: str) -> Scorer:
    """A scorer from ``module:function`` or ``path/to/file.py:function``."""
    module_part, _, name = spec.partition(":")
    if not module_part or not name:
        raise ConfigError(f"--scorer {spec!r}: use module:function or file.py:function")
    module = import_module_of(module_part, spec, what="--scorer")
    scorer = getattr(module, name, None)
    if not callable(scorer):
        raise ConfigError(f"--scorer {spec!r}: {name!r} is not a function")
    return scorer  # type: ignore[no-any-return]


_HISTORY_TABLE = """
CREATE TABLE IF NOT EXISTS eval_results (
    eval_id TEXT NOT NULL,
    target TEXT NOT NULL,
    dataset TEXT NOT NULL,
    created_at TEXT NOT NULL,
    summary TEXT NOT NULL,
    PRIMARY KEY (eval_id, target)
)
"""


def save_eval(path: str | Path, report: EvalReport) -> None:
    """Keep ``report``'s per-target summaries (not every run) in the store file.

    They go into an ``eval_results`` table of the run store's SQLite file (created here
    if missing: the store's own schema does not know it), beside the ``runs`` table that
    holds every run the eval made (the report's runs name their ``run_id``), so evals can
    be compared over time (:func:`previous_summaries`).
    """
    import sqlite3

    from loopwise.errors import StoreError

    target = Path(path)
    rows = [
        (
            report.eval_id,
            t.name,
            report.dataset,
            report.created_at,
            json.dumps(t.to_dict(runs=False)),
        )
        for t in report.targets
    ]
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(target, timeout=10) as conn:
            conn.execute(_HISTORY_TABLE)
            conn.executemany("INSERT INTO eval_results VALUES (?, ?, ?, ?, ?)", rows)
        conn.close()
    except (sqlite3.Error, OSError) as e:
        raise StoreError(f"cannot save eval results in {target}: {e}") from e


def previous_summaries(
    path: str | Path, dataset: str, targets: Sequence[str], *, before: str
) -> dict[str, dict[str, Any]]:
    """The latest stored summary of each target on ``dataset`` from an eval ``before`` then."""
    import sqlite3

    if not Path(path).is_file():
        return {}
    out: dict[str, dict[str, Any]] = {}
    try:
        conn = sqlite3.connect(path, timeout=10)
        try:
            conn.execute(_HISTORY_TABLE)
            for name in targets:
                row = conn.execute(
                    "SELECT created_at, summary, eval_id FROM eval_results WHERE target = ? "
                    "AND dataset = ? AND created_at <= ? ORDER BY created_at DESC LIMIT 1",
                    (name, dataset, before),
                ).fetchone()
                if row is not None:
                    out[name] = {"created_at": row[0], "eval_id": row[2], **json.loads(row[1])}
        finally:
            conn.close()
    except sqlite3.Error:
        return {}
    return out
