"""Choosing a cascade's threshold on evidence: :func:`asweep` (``loopwise eval --sweep``).

A :class:`~loopwise.architectures.cascade.Cascade` answers by its judge when the judge is
sure and hands the rest over; where to draw the line is a trade of accuracy against cost.
The sweep measures it without running the cascade once per threshold:

1. every case's **sure path** runs once: the cascade at threshold 0, so every case it can
   answer is answered by the judge's side; each run records the judge's confidence;
2. every case that some threshold of the grid would escalate has its **unsure path**
   run once (:meth:`~loopwise.architectures.cascade.Cascade.unsure_path`: the agent, or
   the person, fed what the run recorded);
3. per threshold, each case takes the outcome of the side its confidence puts it on
   (an escalated case costs the judge's call plus its unsure path), computed offline.

So a sweep over 50 thresholds makes the model calls of one sure path and one unsure path
per case. Each threshold reports (:class:`SweepPoint`) accuracy with a 95% Wilson
interval, the share escalated, the mean cost (at the reference price when the model has
none, as the eval does), tokens and p95 latency. The **recommended** threshold is the
cheapest *shown* to be within 5 points (or ``max_error``) of the most accurate, on the same
cases (:mod:`loopwise.evidence.sweeps.choice`); when the evidence shows none, the most
accurate, and the reason says which cheaper threshold it could not decide and about how
many cases would. Cheapest by the runs' own cost; when the model has no
prices, by tokens, as a plain eval's recommendation decides (the cost is then shown at
the reference price, for scale). With ``max_error`` the sweep also **certifies** a
threshold (:mod:`loopwise.evidence.evals.certify`). The judge's **calibration** on the dataset (its
confidence against whether the sure path was right) comes with it, and a warning when
it is poor (:mod:`loopwise.evidence.sweeps.calibration`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Unpack

from loopwise.architectures.cascade import THRESHOLD_NODE, Cascade
from loopwise.core.events import Event, EventType
from loopwise.core.jsontypes import JSONMapping, JSONObject, JSONValue, json_number, json_object
from loopwise.core.loops import blocking
from loopwise.core.usage import Pricing, Usage
from loopwise.errors import ConfigError
from loopwise.evidence.evals.certify import Judged, References, certify, check_levels
from loopwise.evidence.evals.dataset import Case
from loopwise.evidence.evals.harness import Effects, EvalOptions, EvalTarget, aevaluate
from loopwise.evidence.evals.stats import REFERENCE_MODEL, CaseRun, percentile, wilson
from loopwise.evidence.sweeps.calibration import calibration, calibration_warning
from loopwise.evidence.sweeps.cascades import swept
from loopwise.evidence.sweeps.choice import MARGIN, choose
from loopwise.evidence.sweeps.person import Person, check_person, person_outcome
from loopwise.evidence.sweeps.points import Sweep, SweepPoint

__all__ = [
    "DEFAULT_GRID",
    "asweep",
    "grid_of",
    "parse_sweep",
    "sweep",
]

MAX_POINTS = 1001
"""The most thresholds one sweep computes."""


def grid_of(low: float, high: float, step: float) -> tuple[float, ...]:
    """``low``, ``low + step`` ... up to ``high`` (within rounding), each rounded to 6 digits."""
    count = math.floor((high - low) / step + 1e-9)
    return tuple(round(low + k * step, 6) for k in range(count + 1))


DEFAULT_GRID = grid_of(0.0, 1.0, 0.05)
"""The bare ``--sweep`` grid: 0, 0.05 ... 1 (both ends: nothing escalated, everything)."""


def parse_sweep(spec: str) -> tuple[str, tuple[float, ...]]:
    """``NAME=LO:HI:STEP`` as the threshold's name and its grid; :class:`ConfigError`
    (``name="sweep"``) for anything else, a bound outside [0, 1], ``LO > HI``, a step that
    is not positive, or more than :data:`MAX_POINTS` points."""
    name, eq, rest = spec.partition("=")
    parts = rest.split(":")
    usage = f"--sweep {spec!r}: use NAME=LO:HI:STEP (e.g. threshold=0.5:0.95:0.05)"
    if not eq or not name.strip() or len(parts) != 3:
        raise ConfigError(usage, name="sweep")
    try:
        low, high, step = (float(p) for p in parts)
    except ValueError:
        raise ConfigError(usage, name="sweep") from None
    if not all(math.isfinite(v) for v in (low, high, step)):
        raise ConfigError(usage, name="sweep")
    if not (0.0 <= low <= high <= 1.0):
        raise ConfigError(
            f"--sweep {spec!r}: the thresholds must lie in [0, 1] with LO <= HI", name="sweep"
        )
    if step <= 0 or (high - low) / step + 1 > MAX_POINTS:
        raise ConfigError(
            f"--sweep {spec!r}: STEP must be positive and give at most {MAX_POINTS} thresholds",
            name="sweep",
        )
    return name.strip(), grid_of(low, high, step)


class _Records:
    """An event sink keeping, per run, what the sweep reads: the weighing and the judge's
    usage (nothing is stored twice: a sink of this eval only)."""

    def __init__(self, cascade: Cascade) -> None:
        self.weighed_at = f"{cascade.name}/{THRESHOLD_NODE}"
        self.judge_at = f"{cascade.name}/{cascade.judge.name}"
        self.weighed: dict[str, JSONObject] = {}
        self.judge: dict[str, Usage] = {}

    def record(self, run_id: str, event: Event) -> None:
        if event.type is not EventType.STEP_FINISHED:
            return
        if event.step == self.weighed_at:
            self.weighed[run_id] = json_object(event.data.get("output"))
        elif event.step == self.judge_at:
            self.judge[run_id] = Usage.from_dict(json_object(event.data.get("usage")))


async def asweep(
    target: EvalTarget,
    cases: Sequence[Case],
    grid: Sequence[float] = DEFAULT_GRID,
    *,
    max_error: float | None = None,
    delta: float = 0.1,
    references: References = "labels",
    person_accuracy: float | None = None,
    person_cost: float | None = None,
    **options: Unpack[EvalOptions],
) -> tuple[Sweep, list[CaseRun]]:
    """Sweep ``target`` (a cascade) over ``grid`` on ``cases``; ``options`` are
    :func:`~loopwise.evidence.evals.harness.aevaluate`'s. With ``max_error`` (α), the sweep
    also certifies the lowest threshold whose accepted answers are wrong at most α of the
    time with probability ``1 - delta`` (:func:`~loopwise.evidence.evals.certify.certify`;
    ``references="agent"`` when the dataset's expected values are the agent's own
    answers). A cascade whose unsure side asks a person is swept with a model of the person
    (``person_accuracy``, ``person_cost`` USD per case: :mod:`loopwise.evidence.sweeps.person`)
    and refused without one. Returns the :class:`Sweep` and each case's outcome at the
    cascade's declared threshold (the target's eval runs). Raises :class:`ConfigError` when
    the target is not a cascade, there is no case, the grid is empty or outside [0, 1],
    ``max_error`` or ``delta`` is outside (0, 1), or the person model is missing or wrong."""
    cascade = swept(target.step)
    if cascade is None:
        raise ConfigError(
            f"--sweep: {target.name} declares no threshold (a loopwise.Cascade does)",
            name=target.name,
        )
    thresholds = sorted({*(float(t) for t in grid), cascade.threshold})
    if not grid or not all(0.0 <= t <= 1.0 for t in thresholds):
        raise ConfigError("--sweep: the grid needs thresholds in [0, 1]", name="sweep")
    if not cases:
        raise ConfigError(
            f"--sweep: no case to sweep {target.name} on (the dataset is empty)", name="cases"
        )
    check_levels(max_error, delta)
    person = check_person(cascade, target.name, person_accuracy, person_cost)
    records = _Records(cascade)
    sinks = (*options.pop("sinks", ()), records)
    first = replace(target, step=cascade.with_threshold(0.0, unknown="sure"))
    first_options: EvalOptions = {**options, "sinks": sinks}
    first_report = await aevaluate([first], cases, **first_options)
    sure = first_report.targets[0].runs
    effects = [first_report.effects[n] for n in [target.name] if n in first_report.effects]
    escalating = _escalating(sure, records, cascade, max(thresholds))
    second = replace(target, step=cascade.unsure_path())
    unsure: dict[tuple[str, int], CaseRun] = {}
    if escalating and person is None:
        inputs = [
            Case(id=_key(r), input=records.weighed[r.run_id], expected=c) for r, c in escalating
        ]
        later_options: EvalOptions = {**options, "repeat": 1}
        later = await aevaluate([second], inputs, **later_options)
        by_key = {r.case_id: r for r in later.targets[0].runs}
        effects += [later.effects[n] for n in [target.name] if n in later.effects]
        unsure = {(r.case_id, r.repeat): by_key[_key(r)] for r, _ in escalating}
    measured = _Measured(
        cascade=cascade,
        sure=sure,
        unsure=unsure,
        records=records,
        pricing=_basis([*sure, *unsure.values()]),
        person=person,
    )
    outcomes = {t: _outcomes(t, measured) for t in thresholds}
    points = [
        _point(t, outcomes[t], measured.pricing, person)
        for t in thresholds
        if t in set(map(float, grid))
    ]
    margin = MARGIN if max_error is None else max_error
    result = replace(_choose(target.name, measured, points, margin), effects=_merged(effects))
    if max_error is not None:
        certified = certify(
            [p.threshold for p in points],
            _judged(measured, cases),
            alpha=max_error,
            delta=delta,
            references=references,
            accepted_unknown=_accepted_unknown(measured),
            accepts_unknown=cascade.unknown == "sure",
        )
        result = replace(result, certification=certified)
    return result, [run for run, _ in outcomes[cascade.threshold]]


def _merged(entries: Sequence[Effects]) -> Effects:
    """The effects both passes took, as one entry of the eval's ``effects``."""
    performed: dict[str, int] = {}
    gates: dict[str, int] = {}
    for entry in entries:
        for tool, n in (entry.get("performed") or {}).items():
            performed[tool] = performed.get(tool, 0) + n
        for decision, n in (entry.get("gates") or {}).items():
            gates[decision] = gates.get(decision, 0) + n
    into = next((e["into"] for e in entries if "into" in e), "no deps")
    discarded = any(e.get("discarded", False) for e in entries)
    return {"performed": performed, "into": into, "discarded": discarded, "gates": gates}


def sweep(
    target: EvalTarget,
    cases: Sequence[Case],
    grid: Sequence[float] = DEFAULT_GRID,
    *,
    max_error: float | None = None,
    delta: float = 0.1,
    references: References = "labels",
    person_accuracy: float | None = None,
    person_cost: float | None = None,
    **options: Unpack[EvalOptions],
) -> tuple[Sweep, list[CaseRun]]:
    """The sync wrapper of :func:`asweep` (the target's model released when it ends)."""
    return blocking(
        asweep(
            target,
            cases,
            grid,
            max_error=max_error,
            delta=delta,
            references=references,
            person_accuracy=person_accuracy,
            person_cost=person_cost,
            **options,
        ),
        release=[target.model],
    )


def _judged(m: _Measured, cases: Sequence[Case]) -> list[Judged]:
    """Each scored case's confidence on its first run (``None`` unless the judge's side
    took it with a known one) and whether the sure side's outcome was not correct; a case
    whose input an earlier case already has counts once, as repeats do."""
    first: dict[str, str] = {}
    for case in cases:
        first.setdefault(json.dumps(case.input, sort_keys=True, default=str), case.id)
    distinct = set(first.values())
    out: list[Judged] = []
    for run in m.sure:
        # One outcome per input: repeats of a case, or the same input listed twice, are not
        # independent draws, and counting them would narrow the bound the certificate is.
        if run.score is None or run.repeat != 0 or run.case_id not in distinct:
            continue
        weighed = m.records.weighed.get(run.run_id) or {}
        confidence = _confidence(weighed) if weighed.get("side") == "sure" else None
        out.append((confidence, run.score < 1.0))
    return out


def _accepted_unknown(m: _Measured) -> int:
    """Scored runs the cascade would accept with no confidence (``unknown="sure"``)."""
    if m.cascade.unknown != "sure":
        return 0
    return sum(
        1
        for run in m.sure
        if run.score is not None
        and run.repeat == 0
        and (weighed := m.records.weighed.get(run.run_id)) is not None
        and weighed.get("side") == "sure"
        and weighed.get("confidence") is None
    )


def _key(run: CaseRun) -> str:
    return f"{run.case_id}#{run.repeat}"


def _escalating(
    sure: Sequence[CaseRun], records: _Records, cascade: Cascade, top: float
) -> list[tuple[CaseRun, JSONValue]]:
    """The sure-path runs some threshold up to ``top`` would escalate (that took the sure
    side: one weighed unsure even at 0 already is its own unsure path), with expected."""
    found = []
    for run in sure:
        weighed = records.weighed.get(run.run_id)
        if weighed is None or weighed.get("side") != "sure":
            continue
        confidence = _confidence(weighed)
        if (confidence is None and cascade.unknown == "unsure") or (
            confidence is not None and confidence <= top
        ):
            found.append((run, run.expected))
    return found


def _sure_at(threshold: float, weighed: JSONMapping, cascade: Cascade) -> bool:
    confidence = _confidence(weighed)
    if confidence is None:
        return cascade.unknown == "sure"
    return bool(confidence > threshold)


Outcome = tuple[CaseRun, bool]
"""A case's run at one threshold, and whether it was escalated."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Measured:
    """What the two passes measured, from which every threshold is computed."""

    cascade: Cascade
    sure: Sequence[CaseRun]
    unsure: dict[tuple[str, int], CaseRun]
    records: _Records
    pricing: str
    person: Person | None = None


def _outcomes(threshold: float, m: _Measured) -> list[Outcome]:
    """Each case's run at ``threshold``: its sure path, or the judge plus its unsure path."""
    cascade, records, unsure = m.cascade, m.records, m.unsure
    out: list[Outcome] = []
    for run in m.sure:
        weighed = records.weighed.get(run.run_id)
        took_sure = weighed is not None and weighed.get("side") == "sure"
        if weighed is None or (took_sure and _sure_at(threshold, weighed, cascade)):
            out.append((run, False))
        elif m.person is not None:
            judged = records.judge.get(run.run_id, _UNWEIGHED)
            out.append((person_outcome(run, judged, m.person), True))
        elif not took_sure:
            out.append((run, True))
        else:
            later = unsure[(run.case_id, run.repeat)]
            joined = _joined(run, records.judge.get(run.run_id, _UNWEIGHED), later)
            out.append((joined, True))
    return out


_UNWEIGHED = Usage(cost_usd=None)
"""The judge's usage of a run that recorded none: nothing counted, its cost unknown."""


def _confidence(weighed: JSONMapping) -> float | None:
    """The judge's confidence as the weighing recorded it (``None``: unknown)."""
    found = weighed.get("confidence")
    return None if found is None else json_number(found)


def _joined(first: CaseRun, judge: Usage, later: CaseRun) -> CaseRun:
    """An escalated case: the judge's part of its sure-path run, then its unsure path."""
    judge_cost = judge.cost_usd
    cost = None if judge_cost is None or later.cost_usd is None else judge_cost + later.cost_usd
    return replace(
        later,
        target=first.target,
        case_id=first.case_id,
        repeat=first.repeat,
        model_calls=judge.model_calls + later.model_calls,
        tokens=judge.total_tokens + later.tokens,
        input_tokens=judge.input_tokens + later.input_tokens,
        output_tokens=judge.output_tokens + later.output_tokens,
        cost_usd=cost,
        latency_s=judge.wall_seconds + later.latency_s,
        steps=first.steps + later.steps,
    )


def _priced(run: CaseRun, pricing: str) -> CaseRun:
    """``run`` with its cost on the sweep's basis (the reference price when priceless)."""
    if pricing == "USD":
        return run
    return replace(
        run, cost_usd=Pricing().cost(REFERENCE_MODEL, run.input_tokens, run.output_tokens)
    )


def _basis(runs: Sequence[CaseRun]) -> str:
    """``USD`` when some run has a real, non-zero cost; else the reference price's name."""
    if any(r.cost_usd for r in runs):
        return "USD"
    return f"{REFERENCE_MODEL} prices"


def _point(
    threshold: float, outcomes: Sequence[Outcome], pricing: str, person: Person | None
) -> SweepPoint:
    runs = [r for r, _ in outcomes]
    scores = [r.score for r in runs if r.score is not None]
    accuracy = sum(scores) / len(scores) if scores else None
    low, high = wilson(sum(scores), len(scores))
    costs = [_priced(r, pricing).cost_usd for r in runs]
    if person is not None:  # the person's time, per case they decide, on any basis
        costs = [
            None if c is None else c + (person.cost_usd if escalated else 0.0)
            for c, (_, escalated) in zip(costs, outcomes, strict=True)
        ]
    n = max(len(runs), 1)
    return SweepPoint(
        threshold=threshold,
        accuracy=accuracy,
        low=low,
        high=high,
        cases=len(runs),
        escalated=sum(escalated for _, escalated in outcomes),
        cost=None if any(c is None for c in costs) else sum(c or 0.0 for c in costs) / n,
        tokens=sum(r.tokens for r in runs) / n,
        latency=percentile([r.latency_s for r in runs], 95) if runs else 0.0,
        model_calls=sum(r.model_calls for r in runs) / n,
        runs=tuple(runs),
    )


def _choose(target: str, m: _Measured, points: Sequence[SweepPoint], margin: float) -> Sweep:
    """The best point, the cheapest shown within ``margin`` of it, and the calibration."""
    cascade, pricing = m.cascade, m.pricing
    by_cost = pricing == "USD" or (m.person is not None and m.person.cost_usd > 0)
    chosen = choose(points, pricing, margin, by_cost=by_cost)
    confidences, correct, listed = _confidences(m.sure, m.records)
    cal = calibration(confidences, correct)
    return Sweep(
        target=target,
        name="threshold",
        declared=cascade.threshold,
        points=list(points),
        best=chosen.best,
        recommended=chosen.recommended,
        versus_best=chosen.versus,
        reason=chosen.reason,
        cost_basis=pricing,
        calibration=cal,
        warning=calibration_warning(cal),
        unknown=cascade.unknown,
        confidences=listed,
        person=None if m.person is None else m.person.to_dict(),
    )


def _confidences(
    sure: Sequence[CaseRun], records: _Records
) -> tuple[list[float | None], list[bool], list[JSONObject]]:
    """Each scored sure-path run's confidence and whether its sure side was right."""
    confidences: list[float | None] = []
    correct: list[bool] = []
    listed: list[JSONObject] = []
    for run in sure:
        weighed = records.weighed.get(run.run_id)
        if weighed is None or weighed.get("side") != "sure" or run.score is None:
            continue
        confidence = weighed.get("confidence")
        right = run.score >= 1.0
        confidences.append(_confidence(weighed))
        correct.append(right)
        listed.append(
            {
                "case_id": run.case_id,
                "repeat": run.repeat,
                "confidence": confidence,
                "sure_correct": right,
            }
        )
    return confidences, correct, listed
