"""The ``loopwise check`` verb: load a target and print :func:`loopwise.evidence.check.check`'s
findings, and for a target that is or holds a cascade, what its last sweep says of its
judge's calibration (:func:`loopwise.evidence.sweeps.cascades.calibration_findings`, read from the
eval store ``loopwise eval`` writes; ``--store`` names another).

Exit 1 when an error is found, 0 otherwise; a target that cannot be found is a usage
error (exit 2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from loopwise.cli.options import (
    Verbs,
    eval_store,
    eval_store_help,
    store_help,
    store_value,
    user_output_to_stderr,
)
from loopwise.core.jsontypes import JSONObject
from loopwise.errors import ConfigError, TargetError
from loopwise.evidence.check import Finding, Level, check
from loopwise.evidence.live.verdict import (
    DEFAULT_WINDOW,
    LiveReport,
    aliases,
    drift_finding,
    live_report,
)
from loopwise.evidence.sweeps.cascades import Measured, calibration_findings, swept
from loopwise.running.targets import Target, load_target
from loopwise.store.open import open_existing

if TYPE_CHECKING:
    from loopwise.core.step import Step

__all__ = ["add_check_verb", "check_target", "checked"]


def add_check_verb(sub: Verbs) -> None:
    """Register ``check`` on the CLI's subparsers ``sub``."""
    p = sub.add_parser("check", help="static review of a step (errors exit 1)")
    p.add_argument("target", help="path/to/module.py:name or package.module:name")
    p.add_argument(
        "--store",
        type=store_value,
        help="the eval store to read a cascade's last sweep from: " + eval_store_help,
    )
    p.add_argument(
        "--live-window",
        default=DEFAULT_WINDOW,
        help="the live cases a Shadow kept to judge: a span back from now (30m, 24h, 7d, "
        f"2w), an ISO date, or all (default {DEFAULT_WINDOW})",
    )
    p.add_argument(
        "--max-error",
        type=_rate,
        help="the live disagreement allowed when the target has no certificate (0-1)",
    )
    p.add_argument(
        "--live-store",
        type=store_value,
        help="the run store the shadowed runs are recorded in: " + store_help,
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=_cmd_check)


def _rate(raw: str) -> float:
    """A ``--max-error`` value: a number strictly between 0 and 1."""
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a rate between 0 and 1")
    return value


def _cmd_check(args: argparse.Namespace) -> int:
    with user_output_to_stderr(args.json):
        findings, measured = checked(args.target, args.store or eval_store())
        live = live_of(args.target, args)
    drift = None if live is None else drift_finding(live, args.target, _rerun(args, live))
    extra = [f for f in (drift, _refused(args.target)) if f is not None]
    if extra:
        findings = sorted([*findings, *extra], key=lambda f: f.level is not Level.ERROR)
    errors = sum(f.level is Level.ERROR for f in findings)
    if args.json:
        doc = {
            "target": args.target,
            "ok": errors == 0,
            "findings": [f.to_dict() for f in findings],
            "calibration": _calibration_doc(measured),
            "calibrations": [m.to_dict() for m in measured],
            "live": None if live is None else live.to_dict(),
        }
        print(json.dumps(doc))
        return 1 if errors else 0
    warnings = sum(f.level is Level.WARNING for f in findings)
    verdict = "FAILED" if errors else "ok"
    print(f"check {args.target}: {verdict} ({errors} error(s), {warnings} warning(s))")
    for f in findings:
        print(f"{f.level:<8} {f.code}  {f.where}\n         {f.message}\n         fix: {f.fix}")
    for m in measured:
        print(_measured_line(m))
    if live is not None:
        print(_live_line(live))
    return 1 if errors else 0


def live_of(spec: str, args: argparse.Namespace) -> LiveReport | None:
    """The live report of ``spec`` (``None`` when its run store keeps no live case of it):
    live cases from ``--live-store`` (the run store), certificates from the eval store."""
    live = open_existing(args.live_store)
    if live is None:
        return None
    with live:
        history = open_existing(args.store or eval_store())
        try:
            return live_report(
                live,
                history,
                spec,
                aliases=aliases(spec),
                also=_primaries(spec),
                window=args.live_window,
                max_error=args.max_error,
            )
        finally:
            if history is not None:
                history.close()


def _primaries(spec: str) -> tuple[str, ...]:
    """The specs of the step the target shadows, whose certificates judge it too: its
    names in the target's module, then in any other module loaded from a file (a cascade
    the target imports was swept under its own module's name)."""
    primary = _shadowed(spec)
    if primary is None:
        return ()
    module_part = spec.partition(":")[0]
    own = vars(load_target(spec).module).items()
    found = [f"{module_part}:{k}" for k, v in own if v is primary and k[:1] != "_"]
    for module in list(sys.modules.values()):
        where = vars(module).get("__file__")
        if isinstance(where, str) and where.endswith(".py"):
            named = list(vars(module).items())
            found += [f"{where}:{k}" for k, v in named if v is primary and k[:1] != "_"]
    return tuple(dict.fromkeys(found))


def _shadowed(spec: str) -> Step | None:
    """The primary of the target when it is a Shadow, else ``None``."""
    # Here, not at the top: the Shadow's module loads the eval harness, which a check of a
    # target with no live cases never needs.
    from loopwise.evidence.live.shadow import Shadow

    step = load_target(spec).step
    return step.primary if isinstance(step, Shadow) else None


def _refused(spec: str) -> Finding | None:
    """A warning when the target is a Shadow whose every shadow run would be refused."""
    from loopwise.evidence.live.shadow import Shadow  # (see _shadowed)

    try:
        step = load_target(spec).step
    except TargetError:
        return None
    problem = step.refusal() if isinstance(step, Shadow) else None
    if problem is None:
        return None
    return Finding(
        level=Level.WARNING,
        code="shadow-refused",
        where=spec,
        message=f"every shadow run would be refused, so no live case is kept: {problem}",
        fix="give the Shadow sandbox= (a function making throwaway deps), or define "
        "make_eval_deps() in its module, as loopwise eval needs",
    )


def _rerun(args: argparse.Namespace, live: LiveReport) -> str:
    """The command that re-runs the decision on the target's live cases: a sweep that
    certifies the shadowed cascade again, else an eval of the primary on them."""
    primaries = _primaries(args.target)
    primary = primaries[0] if primaries else args.target
    model = os.environ.get("LOOPWISE_MODEL") or "<your model>"
    command = (
        f"loopwise eval {primary} --from-store {args.target} --model {model} --references agent"
    )
    if swept(_shadowed(args.target)) is None:
        return command.replace(" --references agent", "")
    bound = f" --max-error {live.bound:g}" if live.bound is not None else ""
    return f"{command} --sweep{bound}"


def _live_line(live: LiveReport) -> str:
    rate = "no case" if live.rate is None else f"{live.disagreements} of {live.cases} disagree"
    bound = "" if live.bound is None else f", judged against {live.bound:g} ({live.bound_from})"
    window = f"since {live.since}" if live.since else "all cases"
    return (
        f"live     {live.verdict}: {rate} {window}, at most {live.upper_bound:.1%} at "
        f"{1 - live.delta:.0%}{bound}"
    )


def _measured_line(m: Measured) -> str:
    """A cascade's last sweep in one line: the calibration and the certificate beside it."""
    ece = "unknown" if m.calibration.ece is None else f"ECE {m.calibration.ece:.3f}"
    line = f"sweep of {m.target} (eval {m.eval_id} on {m.dataset}): calibration {ece}"
    c = m.certified
    if c is not None:
        return (
            f"{line}; certified threshold {c['threshold']:g}: accepted answers wrong at most "
            f"{c['alpha']:.0%} with probability >= {1 - c['delta']:.0%} ({c['errors']} of "
            f"{c['accepted']}, bound {c['error_bound']:.1%}, {c['coverage']:.0%} of the traffic)"
        )
    if m.certified_reason is not None:
        return f"{line}; no threshold certified: escalate every case ({m.certified_reason})"
    return line


def _calibration_doc(measured: list[Measured]) -> JSONObject | None:
    """The last sweep of the target's cascade (the first one's when it holds several:
    ``calibrations`` lists every cascade's, outermost first)."""
    return measured[0].to_dict() if measured else None


def check_target(spec: str, *, store: str | None = None) -> list[Finding]:
    """:func:`check` the step ``spec`` names (``path.py:name``), as ``loopwise check`` does:
    :func:`checked`'s findings (``store``: the eval store, the default one unless told)."""
    return checked(spec, store or eval_store())[0]


def checked(spec: str, store: str) -> tuple[list[Finding], list[Measured]]:
    """:func:`check`'s findings on the step ``spec`` names (``path.py:name``) with the
    calibration findings of its cascades, read from the eval store ``store``, and the
    calibrations read.

    A declaration error raised while the target's module loads (an agent given an
    ungated irreversible tool refuses to be built) is reported as an error finding, not
    raised: the check's answer is still "this target is not fit to run". A target that
    cannot be found raises :class:`~loopwise.errors.TargetError`.
    """
    try:
        target = load_target(spec)
    except TargetError as e:
        cause = e.__cause__
        if not isinstance(cause, ConfigError):
            raise
        return [
            Finding(
                level=Level.ERROR,
                code="ungated-irreversible"
                if cause.code == "ungated-irreversible"
                else "declaration",
                where=f"{spec}/{cause.name}" if cause.name else spec,
                message=f"the target cannot be built: {cause}",
                fix="fix the declaration the message names; loopwise refuses it at construction",
            )
        ], []
    found, measured = calibration_findings(spec, target.step, store, specs=_cascade_specs(target))
    order = {Level.ERROR: 0, Level.WARNING: 1, Level.INFO: 2}
    return sorted([*check(target.step), *found], key=lambda f: order[f.level]), measured


def _cascade_specs(target: Target) -> dict[int, str]:
    """The spec of each step the target's module names, by the step's ``id``: a cascade
    inside the target is swept as its own target, under the name its module gives it."""
    module_part = target.spec.partition(":")[0]
    return {id(v): f"{module_part}:{k}" for k, v in vars(target.module).items() if k[:1] != "_"}
