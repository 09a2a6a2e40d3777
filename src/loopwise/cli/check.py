"""The ``loopwise check`` verb: load a target and print :func:`loopwise.evidence.check.check`'s
findings.

Exit 1 when an error is found, 0 otherwise; a target that cannot be found is a usage
error (exit 2).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from loopwise.cli.options import add_unused_store_flag, user_output_to_stderr
from loopwise.errors import ConfigError, TargetError
from loopwise.evidence.check import Finding, Level, check
from loopwise.running.targets import load_target

__all__ = ["add_check_verb", "check_target"]


def add_check_verb(sub: Any) -> None:
    """Register ``check`` on the CLI's subparsers ``sub``."""
    p = sub.add_parser("check", help="static review of a step (errors exit 1)")
    p.add_argument("target", help="path/to/module.py:name or package.module:name")
    add_unused_store_flag(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=_cmd_check)


def _cmd_check(args: argparse.Namespace) -> int:
    with user_output_to_stderr(args.json):
        findings = check_target(args.target)
    errors = sum(f.level is Level.ERROR for f in findings)
    if args.json:
        doc = {
            "target": args.target,
            "ok": errors == 0,
            "findings": [f.to_dict() for f in findings],
        }
        print(json.dumps(doc))
        return 1 if errors else 0
    warnings = sum(f.level is Level.WARNING for f in findings)
    verdict = "FAILED" if errors else "ok"
    print(f"check {args.target}: {verdict} ({errors} error(s), {warnings} warning(s))")
    for f in findings:
        print(f"{f.level:<8} {f.code}  {f.where}\n         {f.message}\n         fix: {f.fix}")
    return 1 if errors else 0


def check_target(spec: str) -> list[Finding]:
    """:func:`check` the step ``spec`` names (``path.py:name``), as ``loopwise check`` does.

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
        ]
    return check(target.step)
