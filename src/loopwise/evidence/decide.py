"""The decision rule of DESIGN §1 as a pure function: :func:`decide`.

Two questions (can the steps be written down in advance? what does a wrong step cost?)
plus volume and latency budget → ``workflow``, ``agent`` or ``hybrid``, with the reasons
and the example to start from. The static review of a built step is :mod:`loopwise.evidence.check`;
the evidence from stored runs is :mod:`loopwise.evidence.graduate.analyze`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from loopwise.core.jsontypes import JSONObject
from loopwise.evidence.scaffold import TEMPLATES

__all__ = ["EXAMPLES", "Architecture", "Decision", "decide"]


class Architecture(enum.StrEnum):
    """The three shapes an LLM feature can take."""

    WORKFLOW = "workflow"
    AGENT = "agent"
    HYBRID = "hybrid"


STEPS_KNOWN = ("yes", "no", "partly")
WRONG_STEP_COST = ("cheap", "expensive")

#: The canonical example to start from, per architecture (DESIGN §12).
EXAMPLES: Mapping[Architecture, str] = {
    Architecture.WORKFLOW: "workflows/ticket_triage.py:triage",
    Architecture.AGENT: "agents/order_investigation.py:investigate",
    Architecture.HYBRID: "workflows/refund_desk.py:refund_desk",
}

#: Where to start when the steps are known but a wrong step is expensive: a workflow
#: whose irreversible node is a tool behind a human gate.
GATED_WORKFLOW = "workflows/announce.py:announce"

#: Runs per day from which an agent's per-run cost and variance dominate the bill.
HIGH_VOLUME = 10_000
#: A latency budget (seconds) under which a multi-turn agent loop rarely fits.
TIGHT_LATENCY = 5.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    """The answer of :func:`decide`."""

    architecture: Architecture
    """``workflow``, ``agent`` or ``hybrid``."""
    reasons: list[str]
    """Why, one sentence each, most important first."""
    start_from: str
    """The target to start from: the one ``init`` writes (``refunds.py:refund_desk``), so it
    exists wherever loopwise is installed."""
    init: str = ""
    """The command that writes that runnable starter project (``loopwise init hybrid``)."""
    example: str = ""
    """The canonical example of a loopwise checkout it is modelled on (``workflows/...``):
    a ``loopwise run`` target there only."""
    cautions: list[str] = field(default_factory=list)
    """What to watch for with this choice (volume, latency)."""
    next_steps: list[str] = field(default_factory=list)
    """Commands that turn the choice into evidence."""
    answers: dict[str, str | float] = field(default_factory=dict)
    """The answers the decision was made from."""

    def to_dict(self) -> JSONObject:
        """The JSON document ``loopwise decide --json`` prints."""
        return {
            "architecture": str(self.architecture),
            "reasons": list(self.reasons),
            "start_from": self.start_from,
            "init": self.init,
            "example": self.example,
            "cautions": list(self.cautions),
            "next_steps": list(self.next_steps),
            "answers": dict(self.answers),
        }


def decide(
    steps_known: str,
    wrong_step_cost: str,
    *,
    volume: int | None = None,
    latency_seconds: float | None = None,
    checkout: bool = False,
) -> Decision:
    """Apply the decision rule.

    ``steps_known`` is ``yes``, ``no`` or ``partly``; ``wrong_step_cost`` is ``cheap``
    (actions reversible, or read-only) or ``expensive`` (money, deletes, mail to customers).
    ``volume`` is runs per day and ``latency_seconds`` the answer-time budget; both
    only add cautions (the tail cost of an agent at volume, sequential turns against a
    latency budget); they never overrule the two questions. The next steps start a project
    with ``loopwise init`` (:mod:`loopwise.evidence.scaffold`); ``checkout=True`` (the canonical
    examples are at hand, as in a loopwise checkout) adds the steps that run them.

    The table (the first three rows are DESIGN §1; the rest are this module's choice):

    ============  ==========  =========  ===============================================
    steps known   wrong step  →          because
    ============  ==========  =========  ===============================================
    yes           cheap       workflow   fixed path: one call + routing code
    no            cheap       agent      the model must choose steps; mistakes undo
    no            expensive   hybrid     model proposes, deterministic code executes
    yes           expensive   workflow   path is fixed; put human gates on the effects
    partly        cheap       workflow   fixed skeleton, an agent node for the open part
    partly        expensive   hybrid     the open part must not touch effects directly
    ============  ==========  =========  ===============================================

    Raises :class:`~loopwise.errors.ConfigError` naming a value that is not allowed.
    """
    known, cost = (
        _norm(steps_known, STEPS_KNOWN, "steps_known"),
        _norm(wrong_step_cost, WRONG_STEP_COST, "wrong_step_cost"),
    )
    arch, reasons = _rule(known, cost, volume, latency_seconds)
    answers: dict[str, str | float] = {"steps_known": known, "wrong_step_cost": cost}
    if volume is not None:
        answers["volume_per_day"] = volume
    if latency_seconds is not None:
        answers["latency_seconds"] = latency_seconds
    example = GATED_WORKFLOW if (known, cost) == ("yes", "expensive") else EXAMPLES[arch]
    return Decision(
        architecture=arch,
        reasons=reasons,
        start_from=TEMPLATES[arch.value].target,
        init=TEMPLATES[arch.value].command,
        example=example,
        cautions=_cautions(arch, volume, latency_seconds),
        next_steps=_next_steps(arch, example, checkout=checkout),
        answers=answers,
    )


def _norm(value: str, allowed: Sequence[str], name: str) -> str:
    from loopwise.errors import ConfigError

    norm = str(value).strip().lower()
    if norm not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(allowed)}, not {value!r}", name=name)
    return norm


def _rule(
    known: str, cost: str, volume: int | None, latency: float | None
) -> tuple[Architecture, list[str]]:
    fixed = (
        "the steps can be written down in advance, so plain code fixes the path: usually one "
        "structured-output call plus routing code — cheaper, more reliable, debuggable at a "
        "known line"
    )
    if known == "yes" and cost == "cheap":
        return Architecture.WORKFLOW, [fixed]
    if known == "yes":
        return Architecture.WORKFLOW, [
            fixed,
            "a wrong step is expensive, so make each irreversible step a tool node behind a "
            "human gate (or a stricter policy): Workflow(...).then(tool) pauses the run for a "
            "person and runs the tool once after approval; no model chooses the path, so "
            "nothing injectable reaches the effects (README: gates on a workflow's tool node; "
            f"in a loopwise checkout, {GATED_WORKFLOW})",
        ]
    if cost == "expensive":
        return Architecture.HYBRID, _hybrid_reasons(known)
    if known == "partly":
        return Architecture.WORKFLOW, [
            "part of the path is known: write that part as a workflow, so most of every run "
            "is fixed, cheap and debuggable",
            "make only the open part an agent node (a workflow node can be an agent) with "
            "read-only or reversible tools, a small max_steps and a run budget",
        ]
    return Architecture.AGENT, _agent_reasons()


def _hybrid_reasons(known: str) -> list[str]:
    first = (
        "the steps cannot be written down in advance, so a model has to choose them"
        if known == "no"
        else "part of the path must be chosen by a model"
    )
    return [
        first,
        "a wrong step is expensive (money, deletes, mail to customers), so the model only "
        "proposes a plan; a deterministic workflow validates and executes it",
        "irreversible actions wait behind human gates: the looping, injectable, "
        "error-compounding part never touches what cannot be undone",
    ]


def _agent_reasons() -> list[str]:
    return [
        "the steps cannot be written down in advance: each case needs a different sequence "
        "of lookups, so a model with tools in a loop chooses them",
        "a wrong step is cheap and reversible, so no plan approval is needed: give the agent "
        "read-only or reversible tools, a small max_steps and a run budget",
    ]


def _cautions(arch: Architecture, volume: int | None, latency: float | None) -> list[str]:
    out = []
    if arch is not Architecture.WORKFLOW and volume is not None and volume >= HIGH_VOLUME:
        out.append(
            f"{volume} runs/day: an agent's cost varies per run and its tail (p95) is what you "
            "pay for; run `loopwise analyze` on stored runs, and when the steps are known "
            "`loopwise graduate` writes the dominant paths as a workflow and tests it against "
            "the agent"
        )
    if arch is not Architecture.WORKFLOW and latency is not None and latency < TIGHT_LATENCY:
        out.append(
            f"a {latency:g}s latency budget: every agent turn is a sequential model call; keep "
            "max_steps small and measure p95 latency with `loopwise eval`"
        )
    if arch is Architecture.HYBRID:
        out.append(
            "approvals make runs pause: decide who approves, and use `loopwise pending` / "
            "`approve` / `resume` for durable runs"
        )
    return out


def _next_steps(arch: Architecture, example: str, *, checkout: bool) -> list[str]:
    template = TEMPLATES[arch.value]
    compare = TEMPLATES["compare"]
    started = [template.command, *template.commands()]
    # The rule measured on one task: the first eval that prints a recommendation.
    started += [f"{compare.command} compare", "cd compare", compare.commands()[-1]]
    if not checkout:
        return started
    steps = [
        f"loopwise check {example}",
        f"loopwise run {example} --model scripted",
        "loopwise eval YOUR_WORKFLOW YOUR_AGENT --dataset cases.jsonl --report report.html",
    ]
    if arch is Architecture.AGENT:
        steps.append(f"loopwise analyze {example}  # after some runs: are the steps known?")
        steps.append(f"loopwise graduate {example}  # if they are: a workflow, tested against it")
    return started + steps
