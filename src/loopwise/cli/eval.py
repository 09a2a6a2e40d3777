"""The ``loopwise eval`` verb: run targets over a dataset, save, print and draw the report.

The logic lives in :mod:`loopwise.evidence.evals` and :mod:`loopwise.evidence.report`; this module
only
parses, calls and prints. Usage mistakes raise :class:`~loopwise.errors.ConfigError`
(one line, exit 2), before any run where they can be seen before.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from loopwise.cli.options import (
    add_api_flag,
    add_deps_flag,
    add_limit_flags,
    add_structured_mode_flag,
    budget_of,
    load_checked,
    price_per_mtok,
    store_help,
    user_output_to_stderr,
)
from loopwise.cli.watch import add_watch_flags, watch_sinks
from loopwise.core.step import needs_model
from loopwise.core.usage import Price, Pricing
from loopwise.errors import ConfigError
from loopwise.evidence.evals import (
    EvalReport,
    EvalTarget,
    StderrProgress,
    evaluate,
    field_match,
    load_dataset,
    load_scorer,
    previous_summaries,
    save_eval,
)
from loopwise.evidence.report import describe_graph, format_text, write_report
from loopwise.running.targets import deps_factory, model_for, schema_filler_note
from loopwise.store.open import store_location

__all__ = ["add_eval_verb"]


def add_eval_verb(sub: Any) -> None:
    """Register ``eval`` on the CLI's subparsers ``sub``."""
    p = sub.add_parser("eval", help="run targets over a dataset and compare their distributions")
    p.add_argument("targets", nargs="+", metavar="TARGET", help="steps to compare")
    p.add_argument("--dataset", required=True, help="JSONL file of {input, expected} cases")
    p.add_argument("--model", help="model name, or `scripted` for the offline model")
    add_api_flag(p)
    add_structured_mode_flag(p)
    p.add_argument("--repeat", type=int, default=1, help="runs per case and target")
    p.add_argument("--concurrency", type=int, default=4, help="runs in flight at most")
    p.add_argument("--scorer", help="module:function or file.py:function (default field match)")
    add_deps_flag(p)
    p.add_argument(
        "--price-per-mtok",
        type=price_per_mtok,
        metavar="IN,OUT",
        help="USD per million input,output tokens of the model (e.g. a self-hosted one)",
    )
    add_limit_flags(p, "every run")
    p.add_argument("--report", help="write a self-contained HTML report here")
    p.add_argument("--store", help=store_help)
    add_watch_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=_cmd_eval)


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
            model=model_for(t, args.model, structured_mode=args.structured_mode, api=args.api)
            if (args.model or needs_model(t.step))
            else None,
            make_deps=deps_factory(t, args.deps),
        )
        for t in loaded
    ]
    for t, evaluated in zip(loaded, targets, strict=True):
        note = schema_filler_note(t, evaluated.model)
        if note is not None:
            print(f"loopwise eval: note: {note}", file=sys.stderr)
    store_path = store_location(args.store)[1]  # a path or a URL
    with watch_sinks(args, progress=False) as sinks:  # eval draws its own progress bar
        report = _evaluate(targets, cases, args, store_path, scorer, sinks=sinks)
    report = replace(
        report,
        previous=previous_summaries(
            store_path, report.dataset, report.models, before=report.created_at
        ),
    )
    save_eval(store_path, report)
    if report_path is not None:
        _write_report(report, report_path, targets)
    return report


def _pricing(price: Price | None, targets: list[EvalTarget]) -> Pricing | None:
    """``--price-per-mtok`` as a price table: the eval's models (by the name asked for, and
    any other name a server answers with) cost ``price``."""
    if price is None:
        return None
    names = {str(t.model.name) for t in targets if getattr(t.model, "name", None)}
    return Pricing(extra={name: price for name in names}, default=price)


def _evaluate(
    targets: list[EvalTarget],
    cases: Any,
    args: argparse.Namespace,
    store: str,
    scorer: Any,
    *,
    sinks: tuple[Any, ...],
) -> EvalReport:
    return evaluate(
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
        sinks=sinks,
        pricing=_pricing(args.price_per_mtok, targets),
    )
