"""Evals as distributions: run targets over one dataset and compare them on evidence.

An agent is path-dependent and sampled, so one demo proves little; this module runs every
target over the same cases (each repeated ``repeat`` times to see sampling spread),
concurrently under a limit, and reports each target as a *distribution*
(:mod:`loopwise.evidence.evals.stats`); with several targets, a recommendation that
cites the numbers (:mod:`loopwise.evidence.evals.recommend`).
:mod:`loopwise.evidence.report` writes the report for a terminal or
as an HTML page; the store keeps the eval history.

* the dataset and its scoring (:class:`~loopwise.evidence.evals.dataset.Case`,
  ``load_dataset``, the default scorer ``field_match``) are
  :mod:`loopwise.evidence.evals.dataset`'s;
* :func:`aevaluate` / :func:`evaluate` run the eval, :func:`save_eval` keeps its summaries.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    AsyncExitStack,
    nullcontext,
)
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Required, TextIO, TypedDict, Unpack

from loopwise.core.events import EventSink, Status, jsonable
from loopwise.core.jsontypes import JSONObject
from loopwise.core.loops import blocking
from loopwise.core.options import ModelLike, RunOverrides
from loopwise.core.result import RunResult
from loopwise.core.shape import Kind, describe, name_of
from loopwise.core.step import Step
from loopwise.core.usage import Budget, Pricing
from loopwise.errors import ConfigError, StoreError
from loopwise.evidence.evals.dataset import Case, Scorer, field_diff, field_match
from loopwise.evidence.evals.history import gate_mark, history_key, last_eval
from loopwise.evidence.evals.recommend import Recommendation, recommend
from loopwise.evidence.evals.sandbox import EffectGuard, EvalGates, effects_of
from loopwise.evidence.evals.stats import (
    CaseRun,
    TargetSummary,
    summarize,
)
from loopwise.models.port import model_name
from loopwise.running.conventions import entered
from loopwise.running.targets import EVAL_DEPS_FACTORY
from loopwise.store.base import RunStore
from loopwise.store.open import open_existing, open_store

__all__ = [
    "EvalReport",
    "EvalTarget",
    "aevaluate",
    "architecture_of",
    "build_report",
    "evaluate",
]


Progress = Callable[[int, int, "CaseRun"], None]


class Effects(TypedDict):
    """The effects one target's runs took (:attr:`EvalReport.effects`)."""

    performed: dict[str, int]
    """Calls that took effect, by tool."""
    into: str
    """Whose deps they took effect in (``make_eval_deps()``, ``--deps ...``, ``no deps``)."""
    discarded: bool
    """Whether each run's deps were a throwaway sandbox, left when the run ended."""
    gates: dict[str, int]
    """How its gates were answered (``deny``/``approve`` rule), counted."""


class Disagreement(TypedDict):
    """A case the targets score differently (:meth:`EvalReport.disagreements`)."""

    case_id: str
    """The case."""
    scores: dict[str, float]
    """Target name → its mean score on the case."""


class EvalOptions(TypedDict, total=False):
    """:func:`aevaluate`'s keyword arguments, as :func:`evaluate` and the sweeps
    (:func:`~loopwise.evidence.sweeps.sweep.asweep`) pass them on; each has its meaning there."""

    repeat: int
    concurrency: int
    scorer: Scorer
    progress: Progress | None
    sinks: Sequence[EventSink]
    budget: Budget | None
    max_steps: int | None
    dataset: str
    store: RunStore | str | os.PathLike[str] | None
    deps: object
    pricing: Pricing | None


class ReportSettings(TypedDict, total=False):
    """:func:`build_report`'s settings: the :class:`EvalReport` fields besides the targets'
    summaries and what they say (each has its meaning there)."""

    eval_id: str
    dataset: Required[str]
    cases: Required[int]
    repeat: Required[int]
    concurrency: Required[int]
    previous: dict[str, JSONObject]
    effects: dict[str, Effects]


def _effects_json(e: Effects) -> JSONObject:
    return {
        "performed": dict(e["performed"]),
        "into": e["into"],
        "discarded": e["discarded"],
        "gates": dict(e["gates"]),
    }


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalTarget:
    """A step to evaluate, under a display name, with the model its runs use."""

    name: str
    """How the report names it (the CLI uses the target spec)."""
    step: Step
    """The step."""
    model: ModelLike = None
    """A :class:`~loopwise.models.port.Model` (shared by its runs), or ``None`` for
    model-free steps."""
    make_deps: Callable[[], object] | None = None
    """Makes each run's deps (fresh per run: a scratch ledger per case); wins over
    ``aevaluate``'s ``deps``. A context manager it returns (sync or async: a
    ``@contextlib.contextmanager`` sandbox) is entered for its run, the run gets what it
    yields, and it is left when the run ends: a throwaway sandbox, removed (the report
    says so: ``discarded``). Wrap shared deps in ``contextlib.nullcontext`` to keep them."""
    gates: str | None = None
    """How its runs' gates are answered: ``deny`` or ``approve``
    (:mod:`loopwise.evidence.evals.sandbox`), never by a person; ``None``: as any run's are."""
    deps_from: str | None = None
    """Where its deps come from, as the report says it (``None``: the default)."""
    guard_effects: bool = False
    """No tool the review sees could take effect, so its runs' deps are the real ones: a
    ``write``/``irreversible`` call reached anyway (from code the review cannot see into)
    is stopped before it starts and the run ends ``denied`` (:class:`EffectGuard`)."""

    @property
    def architecture(self) -> str:
        """``workflow``, ``agent``, ``hybrid`` or ``step`` (from the step's description)."""
        return architecture_of(self.step)


def architecture_of(step: Step) -> str:
    """``workflow``, ``agent`` or ``hybrid`` from the step's description; ``step`` for any
    other kind (a function, a structured call, a tool, an opaque step)."""
    kind = describe(step).kind
    return kind.value if kind in _ARCHITECTURES else "step"


_ARCHITECTURES = frozenset({Kind.WORKFLOW, Kind.AGENT, Kind.HYBRID})


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
    gates: dict[str, str | None] = field(default_factory=dict)
    """Target name → how its gates were answered (``deny``, ``approve``; ``None``: as any
    run's): part of the eval's identity in the history."""
    previous: dict[str, JSONObject] = field(default_factory=dict)
    """Target name → its summary in the last stored eval on the same dataset."""
    effects: dict[str, Effects] = field(default_factory=dict)
    """Target name → ``{"performed": {tool: count}, "into": where, "discarded": bool,
    "gates": {decision: count}}``: the effects its runs took, in which deps (``discarded``:
    a throwaway sandbox per run, left when the run ended), and how its gates were
    answered."""
    sweeps: list[Any] = field(default_factory=list)
    """The :class:`~loopwise.evidence.sweeps.sweep.Sweep` of each cascade swept (``--sweep``)."""

    def to_dict(self, *, runs: bool = True) -> JSONObject:
        """The JSON document ``loopwise eval --json`` prints."""
        return {
            "eval_id": self.eval_id,
            "created_at": self.created_at,
            "dataset": self.dataset,
            "cases": self.cases,
            "repeat": self.repeat,
            "concurrency": self.concurrency,
            "models": dict(self.models),
            "gates": dict(self.gates),
            "targets": [t.to_dict(runs=runs) for t in self.targets],
            "recommendation": self.recommendation.to_dict(),
            "previous": dict(self.previous),
            "effects": {name: _effects_json(e) for name, e in self.effects.items()},
            "disagreements": [
                {"case_id": d["case_id"], "scores": dict(d["scores"])} for d in self.disagreements()
            ],
            "sweeps": [s.to_dict() for s in self.sweeps],
        }

    def disagreements(self) -> list[Disagreement]:
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
    store: RunStore | str | os.PathLike[str] | None = None,
    deps: object = None,
    pricing: Pricing | None = None,
) -> EvalReport:
    """Run every target over every case ``repeat`` times, at most ``concurrency`` at once.

    Runs interleave targets so a slow target does not starve the others; ``progress`` is
    called after each run with ``(done, total, run)``. Guardrails end single runs with a
    status (counted, never raised); a :class:`ConfigError` (no model, bad target) stops
    the eval. With a ``store`` (a path or a :class:`~loopwise.store.base.RunStore`) every run
    is recorded there like any other run (``runs list``, ``analyze`` see them), with the
    target's name as its spec and the eval's id as its mark (``StoredRun.eval_id``): a
    human gate then pauses the run (``awaiting_approval``), but ``pending``, the inbox and
    the workers' queue leave it out, even in a store shared with real runs.
    ``budget`` and ``max_steps`` override the targets' own limits for every run, so the
    within-budget rate answers "how often does it fit in this budget?". ``deps`` are every
    run's deps (a target's own ``make_deps`` makes fresh ones per run instead). ``pricing``
    prices every run's model calls (a self-hosted model is unpriced, its cost unknown,
    without it).
    """
    if repeat < 1 or concurrency < 1:
        raise ConfigError("repeat and concurrency must be at least 1")
    gate = asyncio.Semaphore(concurrency)
    jobs = [(t, c, k) for k in range(repeat) for c in cases for t in targets]
    eval_id = uuid.uuid4().hex[:12]  # every run's mark in the store, and the report's id
    done = [0]

    options: RunOverrides = {
        "sinks": tuple(sinks),
        "budget": budget,
        "max_steps": max_steps,
        "deps": deps,
    }
    if pricing is not None:
        options["pricing"] = pricing

    handlers = {t.name: EvalGates(t.gates) for t in targets if t.gates is not None}
    effects = {t.name: _effects_entry(t, handlers.get(t.name)) for t in targets}

    async def one(target: EvalTarget, case: Case, k: int) -> CaseRun:
        own = options
        if target.name in handlers:
            own = {**options, "approvals": handlers[target.name]}
        async with gate:
            result, discarded = await _run_one(target, case.input, store, own, eval_id)
        effects[target.name]["discarded"] |= discarded
        performed = effects[target.name]["performed"]
        for tool, n in effects_of(result).items():
            performed[tool] = performed.get(tool, 0) + n
        record = _case_run(target.name, case, k, result, scorer, plan=_plan_scored(target, result))
        done[0] += 1
        if progress is not None:
            progress(done[0], len(jobs), record)
        return record

    records = await asyncio.gather(*(one(t, c, k) for t, c, k in jobs))
    return build_report(
        targets,
        records,
        cases=len(cases),
        repeat=repeat,
        concurrency=concurrency,
        dataset=dataset,
        effects=effects,
        eval_id=eval_id,
    )


def _effects_entry(target: EvalTarget, gates: EvalGates | None) -> Effects:
    """What the report says of a target's effects (filled in as its runs end)."""
    into = target.deps_from or ("make_deps()" if target.make_deps is not None else "no deps")
    # The handler's own counts: the report shows them as they are when the eval ends.
    answered = {} if gates is None else gates.answered
    return {"performed": {}, "into": into, "discarded": False, "gates": answered}


_SCOPED = (AbstractContextManager, AbstractAsyncContextManager)


async def _run_one(
    target: EvalTarget,
    input: object,
    store: RunStore | str | os.PathLike[str] | None,
    options: RunOverrides,
    eval_id: str,
) -> tuple[RunResult, bool]:
    """One run, recorded in ``store`` when there is one (``None``: not recorded), and
    whether its deps were a sandbox left (thrown away) when it ended."""
    from loopwise.running import runner

    async with AsyncExitStack() as scope:
        discarded = False
        if target.make_deps is not None:
            made = target.make_deps()
            discarded = isinstance(made, _SCOPED) and not isinstance(made, nullcontext)
            options = {**options, "deps": await entered(scope, made)}
        if target.guard_effects:
            guard = EffectGuard(
                f"eval: {{tools}} would take effect on {target.name}'s real deps (no sandbox; "
                f"the review saw no such tool): define {EVAL_DEPS_FACTORY}() in its module, "
                "or pass --deps module:function"
            )
            options = {**options, "sinks": (*options.get("sinks", ()), guard)}
        options = {**options, "model": target.model}
        result = await runner.arun(
            target.step, input, store=store, spec=target.name, eval_id=eval_id, **options
        )
    return result, discarded


def build_report(
    targets: Sequence[EvalTarget], records: Sequence[CaseRun], **settings: Unpack[ReportSettings]
) -> EvalReport:
    """The report of ``targets`` from their runs ``records`` (each run's ``target`` names
    its target); ``settings`` are the :class:`EvalReport` fields besides those (a fresh
    ``eval_id`` unless given: the one its runs are marked with in the store)."""
    settings.setdefault("eval_id", uuid.uuid4().hex[:12])
    labels = _labels([t.name for t in targets])
    summaries = [
        summarize(
            t.name, t.architecture, [r for r in records if r.target == t.name], label=labels[i]
        )
        for i, t in enumerate(targets)
    ]
    return EvalReport(
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        targets=summaries,
        recommendation=recommend(summaries),
        models={t.name: model_name(t.model) or "none" for t in targets},
        gates={t.name: t.gates for t in targets},
        **settings,
    )


def _labels(names: Sequence[str]) -> list[str]:
    """``path.py:name`` → ``name`` when the short names are unique."""
    short = [n.rsplit(":", 1)[-1] for n in names]
    return short if len(set(short)) == len(short) else list(names)


def evaluate(
    targets: Sequence[EvalTarget], cases: Sequence[Case], **options: Unpack[EvalOptions]
) -> EvalReport:
    """The sync wrapper of :func:`aevaluate`; the targets' models have their connections
    released when it ends, as :func:`loopwise.run`'s model has."""
    return blocking(aevaluate(targets, cases, **options), release=[t.model for t in targets])


def _plan_scored(target: EvalTarget, result: RunResult) -> bool:
    """Whether ``result`` is scored on the plan it proposed: a hybrid whose run the eval's
    ``deny`` rule stopped (its gates are never a person's) still proposed a plan, and that
    plan is what the eval can judge; scored 0 as not completed, a right plan would count
    as wrong."""
    if target.architecture != "hybrid" or target.gates != "deny":
        return False
    output = jsonable(result.output)
    return (
        result.status is Status.DENIED
        and isinstance(output, dict)
        and output.get("plan") is not None
    )


def _case_run(
    name: str, case: Case, k: int, result: RunResult, scorer: Scorer, *, plan: bool = False
) -> CaseRun:
    output = jsonable(result.output)
    # A field-by-field diff explains field_match's verdict only: a custom scorer may have
    # judged on other grounds, and its own verdict is what a failing run shows.
    custom = scorer is not field_match
    return CaseRun(
        target=name,
        case_id=case.id,
        repeat=k,
        run_id=result.run_id,
        status=result.status,
        score=_score(case, result, output, scorer, plan=plan),
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
        expected=jsonable(case.expected),
        diff=[] if custom else _diff(case, result, output),
        scorer=(name_of(scorer) or repr(scorer)) if custom else None,
        scored_on="proposed_plan" if plan and case.expected is not None else None,
    )


def _diff(case: Case, result: RunResult, output: object) -> list[JSONObject]:
    """What a wrong answer got wrong (nothing to compare when the run did not complete)."""
    if case.expected is None or result.status is not Status.COMPLETED:
        return []
    return field_diff(output, case.expected)


def _score(
    case: Case, result: RunResult, output: object, scorer: Scorer, *, plan: bool = False
) -> float | None:
    if case.expected is None:
        return None
    if result.status is not Status.COMPLETED and not plan:
        return 0.0
    try:
        value = scorer(output, case.expected)
    except Exception as e:
        raise ConfigError(
            f"scorer {name_of(scorer) or scorer!r} failed on case {case.id}: "
            f"{type(e).__name__}: {e}"
        ) from e
    return max(0.0, min(1.0, float(value)))


class StderrProgress:
    """A progress bar on stderr, redrawn in place, on a terminal only: piped or in CI it
    writes nothing (the report that follows says it all).

    Never writes to stdout, so ``--json`` output stays one clean document.
    """

    def __init__(self, stream: TextIO | None = None, *, width: int = 30) -> None:
        import sys

        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        # getattr: the stream is the caller's; any object with write() will do.
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._not_completed = 0

    def __call__(self, done: int, total: int, run: CaseRun) -> None:
        """Report that ``done`` of ``total`` runs have finished, the last being ``run``."""
        self._not_completed += run.status is not Status.COMPLETED
        if not self.tty:
            return
        filled = int(self.width * done / max(total, 1))
        bar = "█" * filled + "·" * (self.width - filled)
        line = f"eval [{bar}] {done}/{total} runs, {self._not_completed} not completed"
        end = "\n" if done == total else ""
        self.stream.write(f"\r{line}{end}")
        self.stream.flush()


def save_eval(path: str | Path, report: EvalReport) -> None:
    """Keep ``report``'s per-target summaries (not every run) in the run store at ``path``;
    a swept cascade's summary also keeps its judge's ``calibration`` (with the threshold the
    cascade declared, the dataset and, when the sweep certified, its ``certified`` threshold
    or ``certified_reason``), which ``loopwise check`` reads.

    The store's eval history sits beside the runs the eval made (the report's runs name
    their ``run_id``), so evals can be compared over time (:func:`previous_summaries`).
    Raises :class:`~loopwise.errors.StoreError` when the store cannot be written.
    """
    summaries = {
        history_key(t.name): {
            **t.to_dict(runs=False),
            "model": report.models.get(t.name, "none"),
            "gates": report.gates.get(t.name),
            gate_mark(report.gates.get(t.name)): True,
        }
        for t in report.targets
    }
    for swept in (s.to_dict() for s in report.sweeps):
        # A sweep's calibration of the judge, kept so `loopwise check` can judge it later.
        calibration = {
            **swept["calibration"],
            "threshold": swept["declared"],
            "dataset": report.dataset,
        }
        if "certified" in swept:  # the certificate (or why none), for `check` beside it
            calibration["certified"] = swept["certified"]
            calibration["certified_reason"] = swept["certified_reason"]
        summaries.setdefault(history_key(swept["target"]), {})["calibration"] = calibration
    with open_store(path) as store:
        store.save_eval(
            report.eval_id,
            dataset=history_key(report.dataset),
            created_at=report.created_at,
            summaries=summaries,
        )


def previous_summaries(
    path: str | Path,
    dataset: str,
    models: Mapping[str, str],
    *,
    before: str,
    gates: Mapping[str, str | None] | None = None,
) -> dict[str, JSONObject]:
    """The latest stored summary of each target on ``dataset`` with the same model, from an
    eval ``before`` then; ``models`` maps target names to model names (``report.models``).

    History is keyed by dataset, target, model *and* gate rule (``gates``: target name →
    rule, :func:`~loopwise.evidence.evals.history.gate_mark`): an eval of the same target
    with another model, or with its gates denied instead of approved, is another
    experiment, not a regression. No store yet, or one that
    cannot be read, means no history: the eval still runs.
    """
    try:
        store = open_existing(path)
        if store is None:
            return {}
        with store:
            found = {
                t: last_eval(
                    store,
                    t,
                    dataset=dataset,
                    before=before,
                    model=m,
                    having=gate_mark((gates or {}).get(t)),
                )
                for t, m in models.items()
            }
    except StoreError:
        return {}
    return {t: summary for t, summary in found.items() if summary is not None}
