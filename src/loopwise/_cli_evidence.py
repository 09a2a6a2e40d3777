"""The deciding verbs of the command line: ``decide``, ``check``, ``eval``, ``analyze``.

Registered by :mod:`loopwise.cli` (:func:`add_evidence_verbs`); the logic lives in
:mod:`loopwise.decide`, :mod:`loopwise.evals` and :mod:`loopwise.report`, this module only
parses, calls and prints. Usage mistakes raise :class:`~loopwise.errors.ConfigError`
(one line, exit 2).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from loopwise._cli_store import store_help
from loopwise.decide import (
    Decision,
    Level,
    TraceAnalysis,
    analyze,
    check_target,
    decide,
    stored_runs,
)
from loopwise.errors import ConfigError
from loopwise.evals import (
    EvalReport,
    EvalTarget,
    StderrProgress,
    aevaluate,
    field_match,
    format_text,
    load_dataset,
    load_scorer,
    previous_summaries,
    save_eval,
)
from loopwise.report import describe_graph, write_report
from loopwise.step import needs_model
from loopwise.store import default_store_path
from loopwise.targets import Target, load_target, model_for
from loopwise.usage import Budget
from loopwise.workflow import Workflow

__all__ = [
    "add_evidence_verbs",
    "add_limit_flags",
    "budget_of",
    "load_checked",
    "user_output_to_stderr",
]


@contextmanager
def user_output_to_stderr(as_json: bool) -> Iterator[None]:
    """While user code runs (a target's import, its steps and tools), send what it prints
    to stderr when ``--json`` promises one document on stdout."""
    if not as_json:
        yield
        return
    with redirect_stdout(sys.stderr):
        yield


def add_evidence_verbs(sub: Any) -> None:
    """Register ``decide``, ``check``, ``eval`` and ``analyze`` on the subparsers ``sub``."""
    _add_decide(sub)
    _add_check(sub)
    _add_eval(sub)
    _add_analyze(sub)


def _add_decide(sub: Any) -> None:
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
    p.add_argument("--volume", type=_count(0), help="runs per day (optional)")
    p.add_argument("--latency", type=_seconds, help="latency budget in seconds (optional)")
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


def _ask(prompt: str, stream: TextIO = sys.stderr) -> str:
    # Prompts go to stderr so that `--json` keeps stdout one document.
    stream.write(prompt)
    stream.flush()
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
        if getattr(args, dest) is None:
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
    decision = decide(
        args.steps_known, args.wrong_step_cost, volume=args.volume, latency_seconds=args.latency
    )
    if args.json:
        print(json.dumps(decision.to_dict()))
    else:
        print(_decision_text(decision))
    return 0


def _decision_text(d: Decision) -> str:
    lines = [f"architecture: {d.architecture}", "why:"]
    lines += [f"  - {r}" for r in d.reasons]
    lines.append(f"start from: {d.start_from}")
    if d.cautions:
        lines.append("watch out:")
        lines += [f"  - {c}" for c in d.cautions]
    lines.append("next:")
    lines += [f"  $ {s}" for s in d.next_steps]
    return "\n".join(lines)


def _add_check(sub: Any) -> None:
    p = sub.add_parser("check", help="static review of a step (errors exit 1)")
    p.add_argument("target", help="path/to/module.py:name or package.module:name")
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
    warnings = len(findings) - errors
    verdict = "FAILED" if errors else "ok"
    print(f"check {args.target}: {verdict} ({errors} error(s), {warnings} warning(s))")
    for f in findings:
        print(f"{f.level:<8} {f.code}  {f.where}\n         {f.message}\n         fix: {f.fix}")
    return 1 if errors else 0


def _add_eval(sub: Any) -> None:
    p = sub.add_parser("eval", help="run targets over a dataset and compare their distributions")
    p.add_argument("targets", nargs="+", metavar="TARGET", help="steps to compare")
    p.add_argument("--dataset", required=True, help="JSONL file of {input, expected} cases")
    p.add_argument("--model", help="model name, or `scripted` for the offline model")
    p.add_argument("--repeat", type=int, default=1, help="runs per case and target")
    p.add_argument("--concurrency", type=int, default=4, help="runs in flight at most")
    p.add_argument("--scorer", help="module:function or file.py:function (default field match)")
    add_limit_flags(p, "every run")
    p.add_argument("--report", help="write a self-contained HTML report here")
    p.add_argument("--store", help=store_help)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=_cmd_eval)


def _count(least: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            value = least - 1
        if value < least:
            raise argparse.ArgumentTypeError(f"{raw!r} is not a whole number >= {least}")
        return value

    return parse


def _amount(unit: str) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not value >= 0 or value == float("inf"):  # also refuses nan
            raise argparse.ArgumentTypeError(f"{raw!r} is not an amount of {unit} >= 0")
        return value

    return parse


_usd = _amount("USD")
_seconds = _amount("seconds")


def add_limit_flags(p: argparse.ArgumentParser, scope: str) -> None:
    """``--max-steps``, ``--max-tokens``, ``--max-cost``: validated as they are parsed."""
    p.add_argument("--max-steps", type=_count(1), help=f"override the step limit of {scope}")
    p.add_argument("--max-tokens", type=_count(0), help=f"token budget for {scope}")
    p.add_argument("--max-cost", type=_usd, help=f"USD budget for {scope}")


def budget_of(args: argparse.Namespace) -> Budget | None:
    """The budget the limit flags ask for (``None`` when neither is given)."""
    if args.max_tokens is None and args.max_cost is None:
        return None
    return Budget(max_tokens=args.max_tokens, max_cost_usd=args.max_cost)


def load_checked(spec: str) -> Target:
    """Load a target and, for a workflow, validate its graph now: a graph error is a
    usage error (exit 2) before any run is recorded, not a failed run."""
    target = load_target(spec)
    if isinstance(target.step, Workflow):
        target.step.validate()
    return target


def _report_path(raw: str | None) -> Path | None:
    """The ``--report`` file, checked before any run (a bad path must not waste an eval)."""
    if raw is None:
        return None
    path = Path(raw)
    if path.is_dir() or (path.parent.exists() and not path.parent.is_dir()):
        raise ConfigError(f"--report {raw}: not a file path", name="report")
    return path


def _write_report(report: EvalReport, path: Path, targets: list[EvalTarget]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_report(report, str(path), {t.name: describe_graph(t.step) for t in targets})
    except OSError as e:
        raise ConfigError(
            f"--report {path}: cannot write it ({e}); the eval is saved in the store",
            name="report",
        ) from e


def _cmd_eval(args: argparse.Namespace) -> int:
    with user_output_to_stderr(args.json):
        report = _eval_and_save(args)
    if args.json:
        doc = report.to_dict()
        doc["report"] = args.report
        print(json.dumps(doc, default=str))
    else:
        print(format_text(report))
        if args.report:
            print(f"report: {args.report}")
    return 0


def _eval_and_save(args: argparse.Namespace) -> EvalReport:
    """Load, run and store the eval (and write its page); the report for printing."""
    report_path = _report_path(args.report)
    cases = load_dataset(args.dataset)
    scorer = load_scorer(args.scorer) if args.scorer else field_match
    loaded = [load_checked(spec) for spec in args.targets]
    if len({t.spec for t in loaded}) != len(loaded):
        raise ConfigError("eval: a target is named twice")
    targets = [
        EvalTarget(
            name=t.spec,
            step=t.step,
            model=model_for(t, args.model) if (args.model or needs_model(t.step)) else None,
        )
        for t in loaded
    ]
    store_path = default_store_path(args.store)
    report = asyncio.run(_evaluate(targets, cases, args, store_path, scorer))
    report = replace(
        report,
        previous=previous_summaries(
            store_path, report.dataset, [t.name for t in targets], before=report.created_at
        ),
    )
    save_eval(store_path, report)
    if report_path is not None:
        _write_report(report, report_path, targets)
    return report


async def _evaluate(
    targets: list[EvalTarget], cases: Any, args: argparse.Namespace, store: Path, scorer: Any
) -> EvalReport:
    try:
        return await aevaluate(
            targets,
            cases,
            repeat=args.repeat,
            concurrency=args.concurrency,
            scorer=scorer,
            progress=StderrProgress(),
            budget=budget_of(args),
            max_steps=args.max_steps,
            store=store,
            dataset=args.dataset,
        )
    finally:
        for t in targets:
            close = getattr(t.model, "aclose", None)
            if callable(close):
                await close()


def _add_analyze(sub: Any) -> None:
    p = sub.add_parser("analyze", help="mine stored agent runs for their tool-call paths")
    p.add_argument("target", nargs="?", help="only runs of this target (spec or step name)")
    p.add_argument("--store", help=store_help)
    p.add_argument("--limit", type=int, default=1000, help="most recent runs to read")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=_cmd_analyze)


def _cmd_analyze(args: argparse.Namespace) -> int:
    runs = stored_runs(default_store_path(args.store), args.target, limit=args.limit)
    result = analyze(runs, target=args.target)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print(_analysis_text(result))
    return 0


def _analysis_text(a: TraceAnalysis) -> str:
    lines = [f"{a.runs} agent run(s) of {a.target or 'every target'}; {len(a.paths)} path(s)"]
    for p in a.paths[:10]:
        statuses = ", ".join(f"{k} {v}" for k, v in p.statuses.items())
        lines.append(f"  {p.share:>4.0%}  {p.runs:>4} run(s)  {p.text}   [{statuses}]")
    if len(a.paths) > 10:
        lines.append(f"  … {len(a.paths) - 10} more")
    lines += ["", f"verdict: {a.verdict} — {a.message}"]
    if a.skeleton:
        lines += ["", a.skeleton]
    return "\n".join(lines)
