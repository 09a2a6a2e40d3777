"""Partial graduation (``loopwise graduate --partial``): the generated workflow behind a
certified router, with the agent for the rest.

Full graduation replaces the agent on all its traffic, so one unknown tail of inputs keeps
it from passing. A partial graduation writes a :class:`~loopwise.Cascade` beside the
workflow module (``<workflow>_partial.py``):

* its judge asks which of the mined paths an input will take — one label per path, plus
  ``none`` (none of these) — with probabilities;
* its sure side runs the generated workflow on the input when the judge names a path (the
  agent when it says ``none``); its unsure side is the agent;
* its threshold is **certified** on the held-out cases with the agent's own answers as
  references (:func:`~loopwise.evidence.evals.certify.certify`): a case counts as taken
  by the workflow when the judge named a path with a confidence above λ, and as wrong
  when the cascade's answer then disagrees with the agent's. The certificate says: with
  probability ≥ 1 − δ, the workflow's answers on the share it takes disagree with the
  agent's at most α of the time, on traffic like the held-out inputs. None certified: the
  module is written with threshold 1 (every case to the agent) and the output says so.

Offline (``--model scripted``) the judge's answers come from the agent module's
``offline_path_judge`` (a scripted model, e.g. :func:`~loopwise.testing.scripted_judge`),
as ``offline_model`` stands in for the agent's model (:func:`~loopwise.testing.partial_model`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from loopwise.architectures.cascade import Cascade
from loopwise.core.events import Event, EventType
from loopwise.core.jsontypes import JSONObject, json_number, json_object
from loopwise.errors import ConfigError
from loopwise.evidence.evals.certify import Certification, certify
from loopwise.evidence.evals.dataset import Case
from loopwise.evidence.evals.harness import EvalTarget, evaluate
from loopwise.evidence.evals.sandbox import eval_deps
from loopwise.evidence.graduate.analyze import RunRecord
from loopwise.evidence.graduate.mining import RunSource, load_runs, mine
from loopwise.running.targets import Target, load_target, model_for

__all__ = ["NONE", "PartialGraduation", "graduate_partial", "write_partial"]

NONE = "none"
"""The judge's label for an input on none of the mined paths."""

_GRID = tuple(round(k * 0.05, 2) for k in range(21))
"""The thresholds tried, as a bare ``eval --sweep`` tries them: 0, 0.05 ... 1."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PartialGraduation:
    """What ``graduate --partial`` wrote and certified."""

    out: str
    """The cascade's module."""
    target: str
    """The cascade's target spec (``OUT:NAME``)."""
    threshold: float
    """The threshold written: the certified one, else 1 (every case to the agent)."""
    certification: Certification
    """The certificate, or why there is none."""
    cases: int
    """Held-out cases it was certified on."""

    @property
    def share(self) -> float:
        """The share of the held-out traffic the workflow takes at the written threshold."""
        c = self.certification.certificate
        return 0.0 if c is None else c.coverage

    def to_dict(self) -> JSONObject:
        """The ``partial`` key of ``graduate --partial --json``."""
        return {
            "out": self.out,
            "target": self.target,
            "threshold": self.threshold,
            "cases": self.cases,
            "share": round(self.share, 6),
            **self.certification.to_dict(),
        }

    @property
    def text(self) -> str:
        """The outcome in a few lines, for people."""
        c = self.certification.certificate
        if c is None:
            head = (
                f"partial graduation: no threshold certified on {self.cases} held-out cases; "
                f"wrote {self.out} at threshold 1 (every case to the agent)"
            )
        else:
            head = (
                f"partial graduation: the workflow takes {c.coverage:.0%} of the traffic "
                f"at the certified threshold {c.threshold:g}, {c.errors} of {c.accepted} "
                f"disagreeing (at most {c.error_bound:.1%} at {1 - c.delta:.0%}); wrote "
                f"{self.out} (target {self.target})"
            )
        return f"{head}\n{self.certification.claim}"


def graduate_partial(
    agent: str,
    workflow: str,
    *,
    runs: RunSource,
    holdout: float = 0.25,
    limit: int = 1000,
    since: str | None = None,
    model: str | None = None,
    max_error: float = 0.05,
    delta: float = 0.1,
    deps: str | None = None,
    concurrency: int = 4,
) -> PartialGraduation:
    """After :func:`~loopwise.evidence.graduate.graduate.graduate` wrote ``workflow`` for
    ``agent``: mine the same runs again (the same paths, the same held-out inputs: the split
    is by a hash of the input) and :func:`write_partial`."""
    loaded = load_target(agent)
    stored = load_runs(runs, loaded, limit=limit)
    if since is not None:
        stored = [r for r in stored if str(r.get("created_at") or "") >= since]
    mined = mine(stored, target=agent, holdout=holdout)
    return write_partial(
        loaded,
        workflow,
        [(p.share, p.text) for p in mined.paths],
        mined.held_out,
        model=model,
        max_error=max_error,
        delta=delta,
        deps=deps,
        concurrency=concurrency,
    )


def write_partial(
    agent: Target,
    workflow: str,
    paths: Sequence[tuple[float, str]],
    held_out: Sequence[RunRecord],
    *,
    model: str | None,
    max_error: float = 0.05,
    delta: float = 0.1,
    deps: str | None = None,
    concurrency: int = 4,
) -> PartialGraduation:
    """Write the cascade module beside ``workflow`` (the generated workflow's spec) and
    certify its threshold on the ``held_out`` runs (the agent's answers as references).
    Raises :class:`ConfigError` when there is no held-out case or the module does not load."""
    cases = _cases(held_out)
    if not cases:
        raise ConfigError("--partial: no held-out case to certify the router on", name="partial")
    module_path, _, workflow_attr = workflow.rpartition(":")
    out = Path(module_path).with_name(f"{Path(module_path).stem}_partial.py")
    labels = {f"p{i}": text for i, (_, text) in enumerate(paths, 1)}
    name = f"{workflow_attr.removesuffix('_workflow')}_partial"
    source = _source(agent, Path(module_path).stem, workflow_attr, labels, name)
    _write(out, source(1.0))
    spec = f"{out}:{name}"
    loaded = load_target(spec)
    how = _How(model=model, alpha=max_error, delta=delta, deps=deps, concurrency=concurrency)
    certification = _certify(loaded, agent, cases, how)
    c = certification.certificate
    threshold = 1.0 if c is None else c.threshold
    _write(out, source(threshold))
    return PartialGraduation(
        out=str(out),
        target=spec,
        threshold=threshold,
        certification=certification,
        cases=len(cases),
    )


def _cases(held_out: Sequence[RunRecord]) -> list[Case]:
    first: dict[str, RunRecord] = {}
    for r in held_out:  # one case per input
        first.setdefault(json.dumps(r.get("input"), sort_keys=True, default=str), r)
    return [
        Case(id=str(r.get("run_id")), input=r.get("input"), expected=r.get("output"))
        for r in first.values()
    ]


class _Rulings:
    """An event sink keeping each run's ruling (the judge node's output)."""

    def __init__(self, at: str) -> None:
        self.at = at
        self.found: dict[str, JSONObject] = {}

    def record(self, run_id: str, event: Event) -> None:
        if event.type is EventType.STEP_FINISHED and event.step == self.at:
            self.found[run_id] = json_object(event.data.get("output"))


@dataclass(frozen=True, kw_only=True, slots=True)
class _How:
    """How the certifying evaluation runs."""

    model: str | None
    alpha: float
    delta: float
    deps: str | None
    concurrency: int


def _certify(loaded: Target, agent: Target, cases: list[Case], how: _How) -> Certification:
    """Run the cascade with every case on the judge's side (threshold 0), read each
    ruling, and certify on the cases the judge gave to a path."""
    cascade = loaded.step
    assert isinstance(cascade, Cascade)  # the module write_partial wrote makes one
    rulings = _Rulings(f"{cascade.name}/{cascade.judge.name}")
    make, where = eval_deps(agent, how.deps, "deny")
    target = EvalTarget(
        name=loaded.spec,
        step=cascade.with_threshold(0.0, unknown="unsure"),
        model=model_for(loaded, how.model),
        make_deps=make,
        gates="deny",
        deps_from=where,
        guard_effects=where is None,
    )
    report = evaluate([target], cases, sinks=[rulings], concurrency=how.concurrency, store=None)
    judged: list[tuple[float | None, bool]] = []
    for run in report.targets[0].runs:
        ruling = rulings.found.get(run.run_id) or {}
        confidence = ruling.get("confidence")
        on_path = ruling.get("answer") not in (None, NONE) and confidence is not None
        judged.append((json_number(confidence) if on_path else None, (run.score or 0.0) < 1.0))
    return certify(_GRID, judged, alpha=how.alpha, delta=how.delta, references="agent")


def _write(path: Path, text: str) -> None:
    compile(text, str(path), "exec")
    path.write_text(text, encoding="utf-8")


def _source(
    agent: Target, workflow_module: str, workflow_attr: str, labels: dict[str, str], name: str
) -> Callable[[float], str]:
    """The module's text as a function of its threshold."""
    module_part, _, agent_attr = agent.spec.rpartition(":")
    agent_module = Path(module_part).stem if module_part.endswith(".py") else module_part
    listed = "\n".join(f"    {k!r}: {v!r}," for k, v in labels.items())
    offline = hasattr(agent.module, "offline_path_judge") and hasattr(agent.module, "offline_model")
    question = (
        "Which of these tool paths will handling this input take? Answer none when it "
        "takes none of them."
    )

    def text(threshold: float) -> str:
        lines = [
            f'"""Partial graduation of {agent.spec}: the workflow {workflow_attr} behind a',
            "certified router, the agent for the rest (written by loopwise graduate --partial;",
            "review it like any module you commit).",
            '"""',
            "",
            "from __future__ import annotations",
            "",
            "from typing import Any",
            "",
            "import loopwise",
            "",
            f"import {agent_module} as _agent_module",
            f"import {workflow_module} as _workflow_module",
            "",
            "#: The mined paths the judge chooses among (one label each), and none of these.",
            "PATHS = {",
            listed,
            "}",
            f"THRESHOLD = {threshold!r}  # certified on the held-out cases (1: none was)",
            "",
            "judge = loopwise.Judge(",
            f"    'path', [*PATHS, {NONE!r}],",
            f"    instructions={question!r}",
            "    + ''.join(f' {k}: {v}.' for k, v in PATHS.items()),",
            ")",
            "",
            "",
            "@loopwise.step",
            "async def by_path(",
            "    ruling: loopwise.Ruling,  # type: ignore[type-arg]  # any of the judge's labels",
            "    ctx: loopwise.Context,",
            ") -> Any:",
            '    """The generated workflow when the judge names a path; the agent for none."""',
            f"    step: Any = _agent_module.{agent_attr}",
            f"    if ruling.answer != {NONE!r}:",
            f"        step = _workflow_module.{workflow_attr}",
            "    return await ctx.run_step(step, ruling.input)",
            "",
            "",
            f"{name} = loopwise.Cascade(",
            f"    {name!r}, judge, sure=by_path, unsure=_agent_module.{agent_attr},",
            "    threshold=THRESHOLD,",
            ")",
        ]
        if offline:
            lines += [
                "",
                "",
                "def offline_model() -> Any:",
                '    """--model scripted: the agent module\'s path judge, workflow and agent."""',
                "    from loopwise.testing import partial_model",
                "",
                "    return partial_model(",
                "        _agent_module.offline_path_judge,",
                "        _workflow_module.offline_model,",
                "        _agent_module.offline_model,",
                "    )",
            ]
        return "\n".join(lines) + "\n"

    return text
