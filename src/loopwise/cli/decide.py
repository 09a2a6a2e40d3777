"""The ``loopwise decide`` verb: ask the two questions, print
:func:`loopwise.evidence.decide.decide`.

Missing answers are asked on a terminal; without one, the missing flag is a usage error
(:class:`~loopwise.errors.ConfigError`, one line, exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from loopwise.cli.options import Verbs, add_unused_store_flag, count, seconds
from loopwise.errors import ConfigError
from loopwise.evidence.decide import Decision, decide

__all__ = ["add_decide_verb"]


def add_decide_verb(sub: Verbs) -> None:
    """Register ``decide`` on the CLI's subparsers ``sub``."""
    p = sub.add_parser("decide", help="workflow, agent or hybrid?")
    p.add_argument(
        "--steps-known",
        choices=["yes", "no", "partly"],
        help="can the steps be written down in advance?",
    )
    p.add_argument(
        "--wrong-step-cost",
        choices=["cheap", "expensive"],
        help="what does a wrong step cost? (expensive: money, deletes, mail to customers)",
    )
    p.add_argument("--volume", type=count(0), help="runs per day (optional)")
    p.add_argument("--latency", type=seconds, help="latency budget in seconds (optional)")
    add_unused_store_flag(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=_cmd_decide)


_QUESTIONS = {
    "steps_known": (
        "Can the steps be written down in advance? [yes/no/partly] ",
        "--steps-known",
        ("yes", "no", "partly"),
    ),
    "wrong_step_cost": (
        "What does a wrong step cost? [cheap/expensive] (expensive: money, deletes, mail) ",
        "--wrong-step-cost",
        ("cheap", "expensive"),
    ),
}


def _ask(prompt: str) -> str:
    # Prompts go to stderr so that `--json` keeps stdout one document; read at call time,
    # since this module loads only when the verb runs (sys.stderr may be replaced by then).
    sys.stderr.write(prompt)
    sys.stderr.flush()
    return sys.stdin.readline().strip()


def _ask_choice(prompt: str, flag: str, choices: tuple[str, ...]) -> str:
    """Ask until the answer is one of ``choices`` (three tries, then a usage error)."""
    for _ in range(3):
        answer = _ask(prompt).lower()
        if answer in choices:
            return answer
        sys.stderr.write(f"  answer {', '.join(choices[:-1])} or {choices[-1]}\n")
    raise ConfigError(f"decide: no valid answer for {flag}")


def _answers(args: argparse.Namespace) -> argparse.Namespace:
    """Fill missing answers by asking on a terminal; without one, name the missing flag."""
    interactive = sys.stdin.isatty()
    for dest, (prompt, flag, choices) in _QUESTIONS.items():
        if vars(args)[dest] is None:  # each question is a flag of this parser
            if not interactive:
                raise ConfigError(f"decide: missing {flag} (or run it in a terminal to be asked)")
            setattr(args, dest, _ask_choice(prompt, flag, choices))
    if interactive and args.volume is None:
        raw = _ask("Runs per day? (blank to skip) ")
        args.volume = int(raw) if raw.isdigit() else None
    if interactive and args.latency is None:
        raw = _ask("Latency budget in seconds? (blank to skip) ")
        args.latency = float(raw) if raw.replace(".", "", 1).isdigit() else None
    return args


def _cmd_decide(args: argparse.Namespace) -> int:
    args = _answers(args)
    known, cost = args.steps_known, args.wrong_step_cost
    # The canonical examples are at hand in a loopwise checkout only: name them then.
    example = decide(known, cost).example
    decision = decide(
        known,
        cost,
        volume=args.volume,
        latency_seconds=args.latency,
        checkout=Path(example.split(":", maxsplit=1)[0]).is_file(),
    )
    if args.json:
        print(json.dumps(decision.to_dict()))
    else:
        print(_decision_text(decision))
    return 0


def _decision_text(d: Decision) -> str:
    lines = [f"architecture: {d.architecture}", "why:"]
    lines += [f"  - {r}" for r in d.reasons]
    lines.append(f"start with: {d.init}  (a small runnable {d.architecture} project)")
    if d.cautions:
        lines.append("watch out:")
        lines += [f"  - {c}" for c in d.cautions]
    lines.append("next:")
    compare = next((i for i, s in enumerate(d.next_steps) if s.startswith("loopwise init compare")))
    here = next((i for i, s in enumerate(d.next_steps) if d.example in s), None)
    for i, step in enumerate(d.next_steps):
        if i == compare:
            lines.append("see the rule measured: one task as a workflow and as an agent:")
        if i == here:
            lines.append(f"then, in this checkout, the canonical example {d.example}:")
        lines.append(f"  $ {step}")
    return "\n".join(lines)
