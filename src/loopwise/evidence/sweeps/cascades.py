"""A target's cascades and how well their judge's confidence was last measured to mean what
it says: :func:`swept`, :func:`cascades_within` (what ``loopwise eval --sweep`` moves) and
:func:`calibration_findings` (what ``loopwise check`` warns about).

A cascade routes each case on its judge's confidence, so its threshold means something only
as far as that confidence is calibrated. ``loopwise eval TARGET --sweep`` measures it and
keeps it in the eval store's summary of the target; :func:`calibration_findings` reads the
newest such summary and judges it by
:func:`~loopwise.evidence.sweeps.calibration.calibration_verdict`. It never runs anything, and it
opens the eval store only for a target that holds a cascade.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loopwise.architectures.cascade import Cascade
from loopwise.architectures.workflow import Workflow
from loopwise.core.events import now_iso
from loopwise.core.jsontypes import JSONObject
from loopwise.errors import StoreError
from loopwise.evidence.check import Finding, Level
from loopwise.evidence.evals.history import last_eval
from loopwise.evidence.sweeps.calibration import Calibration, calibration_verdict

__all__ = ["Measured", "calibration_findings", "cascades_within", "swept"]


def swept(step: object) -> Cascade | None:
    """``step`` when it declares thresholds a sweep can move (a cascade), else ``None``."""
    return step if isinstance(step, Cascade) else None


def cascades_within(step: object) -> list[tuple[str, Cascade]]:
    """Every cascade that is a node of the workflow ``step`` (at any depth), with its node
    path (``flow/desk``), outermost first. A sweep moves only a cascade that is the target
    itself: one inside a workflow is run at its declared threshold, like any node."""
    found: list[tuple[str, Cascade]] = []
    if not isinstance(step, Workflow):
        return found
    for node, inner in step.steps.items():
        path = f"{step.name}/{node}"
        if isinstance(inner, Cascade):
            found.append((path, inner))
        found += [(f"{step.name}/{at}", c) for at, c in cascades_within(inner)]
    return found


@dataclass(frozen=True, kw_only=True, slots=True)
class Measured:
    """A cascade's calibration as its last sweep stored it."""

    target: str
    """The target the sweep ran (``path.py:name``)."""
    eval_id: str
    """The eval that swept it."""
    dataset: str
    """The dataset it ran on."""
    at: str
    """When the eval was made (ISO 8601)."""
    calibration: Calibration
    """The judge's confidence against whether its side was right."""
    certified: dict[str, Any] | None = None
    """The sweep's certificate (:meth:`~loopwise.evidence.evals.certify.Certificate.to_dict`),
    ``None`` when it certified none or was not asked to."""
    certified_reason: str | None = None
    """Why it certified none (``None``: it certified one, or was not asked to)."""

    def to_dict(self) -> JSONObject:
        """``{"target", "ece", "n", "unknown", "verdict", "certified", "certified_reason",
        "eval_id", "dataset", "at"}`` (``verdict``: ``ok``, ``unknown``, ``uncertain`` or
        ``large``): what ``loopwise check --json`` prints under ``calibration``."""
        verdict = calibration_verdict(self.calibration)
        return {
            "certified": self.certified,
            "certified_reason": self.certified_reason,
            "target": self.target,
            "ece": self.calibration.ece,
            "n": self.calibration.n,
            "unknown": self.calibration.unknown,
            "verdict": "ok" if verdict is None else verdict[0],
            "eval_id": self.eval_id,
            "dataset": self.dataset,
            "at": self.at,
        }


def calibration_findings(
    spec: str, step: object, eval_store: str, *, specs: dict[int, str] | None = None
) -> tuple[list[Finding], list[Measured]]:
    """Findings on the calibration of each cascade ``step`` is or holds, read from the last
    swept eval in ``eval_store`` (a path or URL), and what was read.

    ``spec`` names the target as ``loopwise eval`` was given it; ``specs`` names a nested
    cascade's own target by the cascade's ``id`` (a sweep moves only a cascade given as
    the target). A sweep stored with a verdict gives a ``calibration-large``,
    ``-uncertain`` or ``-unknown`` warning; a cascade never swept, an info
    ``calibration-not-measured``; a sound calibration, none. A step with no cascade gives
    nothing and the store is not opened. An eval store that cannot be read counts as one
    that holds no sweep (the finding says why).
    """
    own = swept(step)
    found: list[tuple[str, str | None, Cascade]] = [] if own is None else [(own.name, spec, own)]
    found += [(path, (specs or {}).get(id(c)), c) for path, c in cascades_within(step)]
    findings: list[Finding] = []
    measured: list[Measured] = []
    for where, target, cascade in found:
        last, problem = (None, "") if target is None else _last_sweep(target, eval_store)
        if last is None:
            findings.append(_not_measured(where, target, problem))
            continue
        measured.append(last)
        findings += _below_certified(where, cascade, last)
        verdict = calibration_verdict(last.calibration)
        if verdict is not None:
            kind, text = verdict
            findings.append(
                Finding(
                    level=Level.WARNING,
                    code=f"calibration-{kind}",
                    where=where,
                    message=f"{text} (eval {last.eval_id} on {last.dataset}, {last.at})",
                    fix="calibrate the judge (or feed it clearer instructions), then sweep "
                    f"again: loopwise eval {last.target} --dataset {last.dataset} --sweep",
                )
            )
    return findings, measured


def _below_certified(where: str, cascade: Cascade, last: Measured) -> list[Finding]:
    """A warning when the cascade accepts answers below the threshold its last sweep
    certified: the cases between the two carry no bound."""
    certified = last.certified
    if certified is None or cascade.threshold >= certified["threshold"]:
        return []
    return [
        Finding(
            level=Level.WARNING,
            code="threshold-below-certified",
            where=where,
            message=f"the declared threshold {cascade.threshold:g} is below the certified "
            f"{certified['threshold']:g} (error at most {certified['alpha']:.0%} at "
            f"{1 - certified['delta']:.0%} confidence, eval {last.eval_id} on "
            f"{last.dataset}): the answers it accepts between the two carry no bound",
            fix=f"declare threshold={certified['threshold']:g}, or sweep again with "
            f"--max-error: loopwise eval {last.target} --dataset {last.dataset} --sweep "
            f"--max-error {certified['alpha']:g}",
        )
    ]


def _last_sweep(target: str, eval_store: str) -> tuple[Measured | None, str]:
    from loopwise.store.open import open_existing  # only a target holding a cascade reads it

    try:
        store = open_existing(eval_store)
        if store is None:
            return None, ""
        with store:
            doc = last_eval(store, target, dataset=None, before=now_iso(), having="calibration")
    except StoreError as e:
        return None, f" (the eval store could not be read: {e})"
    if doc is None:
        return None, ""
    return Measured(
        target=target,
        eval_id=doc["eval_id"],
        dataset=doc["calibration"]["dataset"],
        at=doc["created_at"],
        calibration=Calibration.from_dict(doc["calibration"]),
        certified=doc["calibration"].get("certified"),
        certified_reason=doc["calibration"].get("certified_reason"),
    ), ""


def _not_measured(where: str, target: str | None, problem: str) -> Finding:
    given = target or "path.py:NAME (the cascade itself)"
    return Finding(
        level=Level.INFO,
        code="calibration-not-measured",
        where=where,
        message="this cascade routes on its judge's confidence, but no swept eval of it is "
        f"stored, so whether its threshold means what it says is unknown{problem}",
        fix=f"loopwise eval {given} --dataset D --sweep",
    )
