"""Graduate an agent into a workflow, on evidence: :func:`graduate`.

1. **Mine** the agent's completed stored runs (the others are left out, counted) with the
   path analysis; hold out every k-th of them for the evaluation. If the verdict is not
   ``steps_known`` stop: graduating an agent whose steps are not known is wrong advice.
2. **Generate** the workflow module (:mod:`loopwise.evidence.graduate.dataflow` learns the
   bindings and conditions, :mod:`loopwise.evidence.graduate.codegen` writes them) and review it
   with ``check``.
3. **Evaluate** it against the agent on the same cases with the eval harness: the
   held-out runs' inputs, with the agent's own stored answers as references (not labels),
   or a labelled dataset.
4. **Recommend** only as far as the evidence carries it
   (:mod:`loopwise.evidence.graduate.verdict`): graduate when the cases where the workflow
   did worse than the agent are bounded under 5% at 90% and it makes fewer model calls;
   *not enough evidence* (with how many cases would decide) when they are not bounded either
   way.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from loopwise.core.events import Event
from loopwise.core.jsontypes import JSONObject
from loopwise.core.shape import Kind, describe
from loopwise.errors import ConfigError
from loopwise.evidence.check import Finding, check
from loopwise.evidence.evals.dataset import Case
from loopwise.evidence.evals.harness import EvalReport, EvalTarget, evaluate
from loopwise.evidence.evals.paired import PairedDifference, paired_difference, run_quality
from loopwise.evidence.evals.sandbox import eval_deps
from loopwise.evidence.evals.stats import TargetSummary, reference_cost
from loopwise.evidence.graduate.analyze import RunRecord, ToolPath
from loopwise.evidence.graduate.mining import Mined, RunSource, load_runs, mine
from loopwise.evidence.graduate.verdict import Decision, Evidence, evidence, verdict
from loopwise.evidence.graduate.writing import out_path, write_workflow
from loopwise.running.targets import Target, load_target, model_for
from loopwise.store.base import RunStore

__all__ = ["Graduation", "graduate"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Graduation:
    """What :func:`graduate` did and recommends."""

    target: str
    """The agent's spec."""
    verdict: str
    """The path analysis' verdict (only ``steps_known`` goes on)."""
    message: str
    """The verdict with its numbers."""
    mined: int
    """Completed runs mined."""
    held_out: int
    """Completed runs held out for the evaluation."""
    left_out: dict[str, int]
    """Runs left out, by status (they did not complete: no path to write down)."""
    paths: list[tuple[float, str]] = field(default_factory=list)
    """The paths written down: (share of the mined runs, path)."""
    outside_written: int = 0
    """Mined runs on other paths than those written down (the workflow does not take them)."""
    calls: dict[str, int] = field(default_factory=dict)
    """Mined runs by what happened to some call of theirs (``edited``/``approved`` by a
    person, ``denied``, ``failed``): mined, but what a person decided is not learned."""
    unlearned: int = 0
    """Mined runs on a written path not learned from (a denied or failed call)."""
    out: str | None = None
    """The module written."""
    workflow: str | None = None
    """The workflow's target (``OUT:NAME``)."""
    findings: list[Finding] = field(default_factory=list)
    """``check`` on the generated workflow."""
    cases: str = ""
    """Which cases the evaluation ran, and what their references are."""
    report: EvalReport | None = None
    """The evaluation."""
    paired: PairedDifference | None = None
    """Workflow minus agent, per case, on quality."""
    outside: float | None = None
    """Share of cases whose agent run took a path outside the mined ones."""
    graduate: bool = False
    """The recommendation: ``True`` to graduate, ``False`` otherwise (:attr:`decision`)."""
    decision: Decision = "keep_agent"
    """``graduate``, ``keep_agent`` or ``not_enough_evidence`` (too few cases to decide:
    :attr:`evidence` says how many would)."""
    evidence: Evidence | None = None
    """What the decision rests on: the cases where the workflow did worse, and their bound
    (:mod:`loopwise.evidence.graduate.verdict`)."""
    reason: str = ""
    """The recommendation in one line, and why."""

    def to_dict(self) -> JSONObject:
        """The JSON document ``loopwise graduate --json`` prints."""
        summaries: JSONObject = {}
        if self.report is not None:
            for role, t in zip(("agent", "workflow"), self.report.targets, strict=True):
                summaries[role] = _numbers(t)
        return {
            "target": self.target,
            "verdict": self.verdict,
            "message": self.message,
            "mined": self.mined,
            "held_out": self.held_out,
            "left_out": dict(self.left_out),
            "paths": [_path(share, text) for share, text in self.paths],
            "outside_written_paths": self.outside_written,
            "calls": dict(self.calls),
            "unlearned": self.unlearned,
            "out": self.out,
            "workflow": self.workflow,
            "check": [dict(f.to_dict()) for f in self.findings],
            "cases": self.cases,
            "targets": summaries,
            "paired": None if self.paired is None else self.paired.to_dict(),
            "outside_mined_paths": None if self.outside is None else round(self.outside, 4),
            "recommendation": self.decision,
            "evidence": None if self.evidence is None else self.evidence.to_dict(),
            "reason": self.reason,
        }


def _path(share: float, text: str) -> JSONObject:
    return {"share": round(share, 4), "path": text}


def _numbers(t: TargetSummary) -> JSONObject:
    def stat(metric: str, name: str) -> float | None:
        return t.metrics[metric].stat(name)

    return {
        "target": t.name,
        "runs": t.n,
        "completed_rate": round(t.completed_rate, 4),
        "correct_rate": None if t.correct_rate is None else round(t.correct_rate, 4),
        "cost_usd_mean": stat("cost_usd", "mean"),
        "tokens_mean": stat("tokens", "mean"),
        "model_calls_mean": stat("model_calls", "mean"),
        "latency_p95_s": stat("latency_s", "p95"),
        "reference_cost_usd_mean": reference_cost(t),
        "status_counts": dict(t.status_counts),
    }


def graduate(
    agent: str,
    *,
    runs: RunSource,
    out: str | Path | None = None,
    force: bool = False,
    dataset: Sequence[Case] | None = None,
    model: str | None = None,
    repeat: int = 1,
    holdout: float = 0.25,
    store: RunStore | str | os.PathLike[str] | None = None,
    limit: int = 1000,
    since: str | None = None,
    concurrency: int = 4,
    deps: str | None = None,
    gates: str = "deny",
) -> Graduation:
    """Mine ``agent``'s stored runs, write a workflow module, evaluate it against the agent
    and recommend.

    ``agent`` is the agent's target spec (``agents/x.py:investigate``: the generated module
    imports the agent's module). ``runs`` is a store (path, URL or store object; its newest
    ``limit`` runs of the agent, created ``since`` that ISO date or time when given) or a
    list of runs ``{"run_id", "status", "input",
    "output", "events"}``. ``out`` defaults to ``<agent_module>_workflow.py`` beside the
    agent; an existing file is kept unless ``force``. ``dataset`` (labelled cases) replaces
    the held-out runs as the evaluation's cases. ``store`` records the evaluation's runs
    (by default they are not recorded: the agent's would be mined the next time).
    ``deps`` (``module:function``, as ``eval --deps``) makes the evaluation's runs' deps,
    else the agent module's sandbox or ``make_deps`` (which the module re-exports).
    ``gates`` answers both sides' gates in the evaluation (``deny``, the default, or
    ``approve``: then a call that takes effect needs a sandbox, as ``eval --gates approve``).
    Only the agent's own runs are mined: the runs whose spec names its module and name,
    not an eval's (see :mod:`loopwise.evidence.graduate.mining`). Returns a
    :class:`Graduation`: when the verdict is not ``steps_known`` nothing is
    written or run. Raises :class:`ConfigError` for a target that is not an agent, an
    ``out`` that exists, or no model.
    """
    loaded = _agent(agent)
    stored = load_runs(runs, loaded, limit=limit)
    if since is not None:
        stored = [r for r in stored if str(r.get("created_at") or "") >= since]
    mined = mine(stored, target=agent, holdout=0 if dataset is not None else holdout)
    base = Graduation(
        target=agent,
        verdict=mined.analysis.verdict,
        message=mined.analysis.message,
        mined=mined.mined,
        held_out=len(mined.held_out),
        left_out=mined.left_out,
        outside_written=mined.outside,
        calls=mined.calls,
        unlearned=mined.unlearned,
    )
    if mined.analysis.verdict != "steps_known":
        reason = f"keep the agent: {mined.analysis.message}"
        return replace(base, reason=reason)
    if not mined.traces:
        reason = (
            "keep the agent: no mined run on the paths written down can be learned from "
            "(each had a denied or failed call)"
        )
        return replace(base, reason=reason)
    path = out_path(loaded, out, force)
    cases, what = _cases(mined, dataset)
    if cases:  # the evaluation's deps: refused before anything is written
        eval_deps(loaded, deps, gates)
    spec, workflow = write_workflow(loaded, mined, path)
    findings = check(workflow.step)
    paths = [(p.share, p.text) for p in mined.paths]
    base = replace(base, out=str(path), workflow=spec, findings=findings, paths=paths)
    if not cases:
        return replace(base, reason="keep the agent: no case to evaluate the workflow on")
    how = _Eval(
        cases=cases,
        what=what,
        references="labels" if dataset is not None else "agent",
        model=model,
        repeat=repeat,
        store=store,
        concurrency=concurrency,
        deps=deps,
        gates=gates,
    )
    return _evaluated(base, loaded, workflow, mined, how)


def _agent(spec: str) -> Target:
    loaded = load_target(spec)
    if describe(loaded.step).kind is not Kind.AGENT:
        raise ConfigError(
            f"graduate {spec}: not an agent (graduate turns an agent into a workflow)"
        )
    return loaded


def _cases(mined: Mined, dataset: Sequence[Case] | None) -> tuple[list[Case], str]:
    if dataset is not None:
        return list(dataset), f"{len(dataset)} labelled cases of the dataset"
    first: dict[str, RunRecord] = {}
    for r in mined.held_out:  # one case per input: the same question asked twice is one case
        first.setdefault(json.dumps(r.get("input"), sort_keys=True, default=str), r)
    cases = [
        Case(id=str(r.get("run_id")), input=r.get("input"), expected=r.get("output"))
        for r in first.values()
    ]
    return cases, (
        f"{len(cases)} held-out inputs (about 1 in {mined.every} of the completed runs, "
        "chosen by a hash of the input, kept out of the mining); the references are the "
        "agent's own stored answers, not labels: the score says how often the workflow "
        "answers as the agent did"
    )


class _Paths:
    """An event sink keeping each run's tool-call events (to tell its path)."""

    def __init__(self) -> None:
        self.events: dict[str, list[Event]] = {}

    def record(self, run_id: str, event: Event) -> None:
        if event.type.value in ("model_call", "tool_call"):
            self.events.setdefault(run_id, []).append(event)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Eval:
    """How the evaluation runs."""

    cases: list[Case]
    what: str
    references: Literal["agent", "labels"]
    model: str | None
    repeat: int
    store: RunStore | str | os.PathLike[str] | None
    concurrency: int
    deps: str | None = None
    gates: str = "deny"


def _evaluated(
    base: Graduation, agent: Target, workflow: Target, mined: Mined, how: _Eval
) -> Graduation:
    sink = _Paths()
    # The workflow makes the agent's calls: both run against the agent module's sandbox
    # when those take effect (refused without one), every gate answered by how.gates.
    deps, where = eval_deps(agent, how.deps, how.gates)
    targets = [
        EvalTarget(
            name=t.spec,
            step=t.step,
            model=model_for(t, how.model),
            make_deps=deps,
            gates=how.gates,
            deps_from=where,
            guard_effects=where is None,
        )
        for t in (agent, workflow)
    ]
    report = evaluate(
        targets,
        how.cases,
        repeat=how.repeat,
        concurrency=how.concurrency,
        store=how.store,
        sinks=[sink],
        dataset=how.what,
    )
    agent_runs, flow_runs = report.targets
    paired = paired_difference(flow_runs.runs, agent_runs.runs, value=run_quality)
    outside = _outside(agent_runs, sink, {p.path for p in mined.paths})
    found = evidence(agent_runs.runs, flow_runs.runs, references=how.references)
    decision, reason = verdict(agent_runs, flow_runs, found, outside)
    stopped = flow_runs.status_counts.get("denied", 0)
    if stopped and how.gates == "deny":
        # Not "does worse": the eval's own rule said no where a person was asked before.
        reason += (
            f" ({stopped} of the workflow's runs were stopped at a gate by the eval's rule, "
            "--gates deny; --gates approve, with a sandbox, compares them as they would run)"
        )
    return replace(
        base,
        cases=how.what,
        report=report,
        paired=paired,
        outside=outside,
        graduate=decision == "graduate",
        decision=decision,
        evidence=found,
        reason=reason,
    )


def _outside(agent: TargetSummary, sink: _Paths, paths: set[ToolPath]) -> float | None:
    from loopwise.evidence.graduate.analyze import tool_path

    cases: dict[str, bool] = {}
    for r in agent.runs:
        path, _ = tool_path(sink.events.get(r.run_id, []))
        cases[r.case_id] = cases.get(r.case_id, False) or path not in paths
    return sum(cases.values()) / len(cases) if cases else None
