"""The ``loopwise eval`` verb: run targets over a dataset, save, print and draw the report.

The logic lives in :mod:`loopwise.evidence.evals.harness` and
:mod:`loopwise.evidence.report`; this module only parses, calls and prints. Usage mistakes
raise :class:`~loopwise.errors.ConfigError`
(one line, exit 2), before any run where they can be seen before.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from loopwise.cli.options import (
    Verbs,
    add_api_flag,
    add_limit_flags,
    add_structured_mode_flag,
    budget_of,
    eval_store,
    eval_store_help,
    load_checked,
    price_per_mtok,
    store_help,
    store_value,
    user_output_to_stderr,
)
from loopwise.cli.watch import add_watch_flags, watch_sinks
from loopwise.core.events import EventSink
from loopwise.core.step import needs_model
from loopwise.core.usage import Price, Pricing
from loopwise.errors import ConfigError
from loopwise.evidence.evals.certify import check_levels
from loopwise.evidence.evals.dataset import Case, Scorer, field_match, load_dataset, load_scorer
from loopwise.evidence.evals.harness import (
    Effects,
    EvalOptions,
    EvalReport,
    EvalTarget,
    StderrProgress,
    build_report,
    evaluate,
    previous_summaries,
    save_eval,
)
from loopwise.evidence.evals.sandbox import GATE_RULES, eval_deps
from loopwise.evidence.report import describe_graph, format_text, write_report
from loopwise.evidence.sweeps.cascades import cascades_within, swept
from loopwise.evidence.sweeps.frontier import format_sweep
from loopwise.evidence.sweeps.person import check_person
from loopwise.evidence.sweeps.sweep import DEFAULT_GRID, parse_sweep, sweep
from loopwise.models.options import SERVICE_TIERS, OpenAIOptions
from loopwise.models.port import model_name
from loopwise.running.targets import Target, model_for, schema_filler_note
from loopwise.store.open import open_existing, store_location

if TYPE_CHECKING:
    from loopwise.architectures.cascade import Cascade

__all__ = ["add_eval_verb"]


def add_eval_verb(sub: Verbs) -> None:
    """Register ``eval`` on the CLI's subparsers ``sub``."""
    p = sub.add_parser("eval", help="run targets over a dataset and compare their distributions")
    p.add_argument("targets", nargs="+", metavar="TARGET", help="steps to compare")
    p.add_argument("--dataset", help="JSONL file of {input, expected} cases")
    p.add_argument(
        "--from-store",
        nargs="?",
        const="",
        metavar="TARGET",
        help="instead of --dataset: the labelled live cases the run store keeps of TARGET "
        "(default: of the targets): people's picks (a cascade's AskPerson) and Shadow pairs "
        "(the shadow's answer as the reference)",
    )
    p.add_argument(
        "--live-store", type=store_value, help="the run store --from-store reads: " + store_help
    )
    p.add_argument("--model", help="model name, or `scripted` for the offline model")
    add_api_flag(p)
    add_structured_mode_flag(p)
    p.add_argument("--repeat", type=int, default=1, help="runs per case and target")
    p.add_argument("--concurrency", type=int, default=4, help="runs in flight at most")
    p.add_argument("--scorer", help="module:function or file.py:function (default field match)")
    p.add_argument(
        "--deps",
        metavar="MODULE:FUNCTION",
        help="make each run's deps with this function of no arguments (default: the target "
        "module's make_eval_deps() sandbox when its tools take effect, else make_deps())",
    )
    p.add_argument(
        "--gates",
        choices=GATE_RULES,
        default="deny",
        help="how every gate of the eval's runs is answered (never by a person; default deny)",
    )
    p.add_argument(
        "--price-per-mtok",
        type=price_per_mtok,
        metavar="IN,OUT",
        help="USD per million input,output tokens of the model (e.g. a self-hosted one)",
    )
    p.add_argument(
        "--service-tier",
        choices=SERVICE_TIERS,
        help="OpenAI's service tier for the eval's calls: flex is slower and half the price "
        "(the report prices the calls the server served on flex so)",
    )
    add_limit_flags(p, "every run")
    p.add_argument(
        "--sweep",
        action="append",
        nargs="?",
        const="",
        metavar="NAME=LO:HI:STEP",
        help="for a cascade target: run each case's decision and each escalated case's unsure "
        "path once, then report every threshold (bare: 0 to 1 by 0.05) and recommend one",
    )
    p.add_argument(
        "--max-error",
        type=float,
        metavar="ALPHA",
        help="with --sweep: certify the lowest threshold whose accepted answers are wrong at "
        "most ALPHA of the time (e.g. 0.05), with probability 1-DELTA over the dataset",
    )
    p.add_argument(
        "--delta",
        type=float,
        help="with --max-error: the chance the certified bound is wrong (default 0.1)",
    )
    p.add_argument(
        "--references",
        choices=("labels", "agent"),
        default="labels",
        help="what the dataset's expected values are: labels (default) or the agent's own "
        "answers (a certificate then bounds disagreement with the agent)",
    )
    p.add_argument(
        "--person-accuracy",
        type=float,
        metavar="P",
        help="with --sweep of a cascade whose unsure side asks a person: count each case "
        "it escalates as decided by a person right with probability P (1: an oracle)",
    )
    p.add_argument(
        "--person-cost",
        type=float,
        metavar="USD",
        help="with --person-accuracy: what one case the person decides costs (default 0)",
    )
    p.add_argument("--report", help="write a self-contained HTML report here")
    p.add_argument(
        "--store",
        help="where the eval records its runs and history, apart from your runs: "
        + eval_store_help,
    )
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
        for found in report.sweeps:
            if found.warning:
                print(f"loopwise eval: warning: {found.target}: {found.warning}", file=sys.stderr)
    else:
        print(format_text(report))
        for found in report.sweeps:
            print(format_sweep(found))
        for name, done in report.effects.items():
            print(_effects_line(name, done))
        for t in report.targets:
            if t.scored_on_proposed_plan:
                print(
                    f"scored on the plan proposed: {t.scored_on_proposed_plan} run(s) of "
                    f"{t.title} were stopped by --gates deny and scored on the plan they "
                    "proposed, not on an outcome (--gates approve runs the plan, in a sandbox)"
                )
        if args.report:
            print(f"report: {args.report}")
    return 0


def _effects_line(name: str, done: Effects) -> str:
    """What a target's runs did to the world, in one line."""
    performed = ", ".join(f"{tool} x{n}" for tool, n in sorted(done["performed"].items()))
    gates = ", ".join(f"{n} {d}" for d, n in sorted(done["gates"].items())) or "none asked"
    into = done["into"]
    if done.get("discarded"):
        into += ", a throwaway sandbox per run, discarded when the run ended"
    return f"effects of {name}: {performed or 'none'} (into {into}); gates: {gates}"


def _eval_and_save(args: argparse.Namespace) -> EvalReport:
    """Load, run and store the eval (and write its page); the report for printing."""
    report_path = _report_path(args.report)
    grids = _grids(args.sweep)
    if args.max_error is not None and grids is None:
        raise ConfigError("--max-error certifies a swept threshold: add --sweep", name="max_error")
    if grids is None and (args.person_accuracy is not None or args.person_cost is not None):
        raise ConfigError(
            "--person-accuracy models the person in a sweep: add --sweep", name="person_accuracy"
        )
    if args.delta is not None and args.max_error is None:
        raise ConfigError("--delta goes with --max-error ALPHA: add it", name="delta")
    args.delta = 0.1 if args.delta is None else args.delta
    check_levels(args.max_error, args.delta)
    cases = _dataset(args)
    scorer = load_scorer(args.scorer) if args.scorer else field_match
    loaded = [load_checked(spec) for spec in args.targets]
    if len({t.spec for t in loaded}) != len(loaded):
        raise ConfigError("eval: a target is named twice")
    targets = [
        EvalTarget(
            name=t.spec,
            step=t.step,
            model=model_for(
                t,
                args.model,
                structured_mode=args.structured_mode,
                api=args.api,
                options=OpenAIOptions(service_tier=args.service_tier),
            )
            if (args.model or needs_model(t.step))
            else None,
            make_deps=deps,
            gates=args.gates,
            deps_from=where,
            guard_effects=where is None,
        )
        for t, (deps, where) in zip(
            loaded, [eval_deps(t, args.deps, args.gates) for t in loaded], strict=True
        )
    ]
    if grids is not None:
        _check_sweep(targets, grids, loaded)
        for evaluated in targets:  # a person to model is refused before any run
            if (cascade := swept(evaluated.step)) is not None:
                check_person(cascade, evaluated.name, args.person_accuracy, args.person_cost)

    for t, evaluated in zip(loaded, targets, strict=True):
        note = schema_filler_note(t, evaluated.model)
        if note is not None:
            print(f"loopwise eval: note: {note}", file=sys.stderr)
    # An eval's runs are measurements, not requests: their own store unless told.
    store_path = store_location(args.store or eval_store())[1]
    with watch_sinks(args, progress=False) as sinks:  # eval draws its own progress bar
        report = _evaluate(targets, cases, args, store_path, scorer, sinks=sinks, grids=grids)
    report = replace(
        report,
        previous=previous_summaries(
            store_path,
            report.dataset,
            report.models,
            before=report.created_at,
            gates=report.gates,
        ),
    )
    save_eval(store_path, report)
    if report_path is not None:
        _write_report(report, report_path, targets)
    return report


def _dataset(args: argparse.Namespace) -> list[Case]:
    """The eval's cases: ``--dataset``'s, or the live cases ``--from-store`` names (then
    ``args.dataset`` becomes ``live:TARGET``, the name the history keeps them under)."""
    if (args.dataset is None) == (args.from_store is None):
        raise ConfigError(
            "eval: give the cases with --dataset FILE.jsonl or --from-store [TARGET], one of them",
            name="dataset",
        )
    if args.dataset is not None:
        return load_dataset(args.dataset)
    # Only --from-store reads them.
    from loopwise.evidence.live.cases import live_dataset
    from loopwise.evidence.live.verdict import aliases

    given = [args.from_store] if args.from_store else list(args.targets)
    named = [n for spec in given for n in (spec, *aliases(spec))]
    store = open_existing(args.live_store)
    if store is None:
        where = store_location(args.live_store)[1]
        raise ConfigError(f"--from-store: no run store at {where}", name="from-store")
    with store:
        cases = live_dataset(store, named)
    args.dataset = "live:" + ",".join(given)
    return cases


def _pricing(
    price: Price | None, targets: list[EvalTarget], tier: str | None = None
) -> Pricing | None:
    """``--price-per-mtok`` as a price table: the eval's models (by the name asked for, and
    any other name a server answers with) cost ``price``; with ``--service-tier flex``, a
    call served on flex costs half of it (OpenAI's flex price)."""
    if price is None:
        return None
    if tier == "flex" and price.flex is None:
        price = replace(price, flex=0.5)
    names = {name for t in targets if (name := model_name(t.model))}
    return Pricing(extra={name: price for name in names}, default=price)


def _evaluate(
    targets: list[EvalTarget],
    cases: Sequence[Case],
    args: argparse.Namespace,
    store: str,
    scorer: Scorer,
    *,
    sinks: tuple[EventSink, ...],
    grids: dict[str, tuple[float, ...]] | None = None,
) -> EvalReport:
    options: EvalOptions = {
        "repeat": args.repeat,
        "concurrency": args.concurrency,
        "scorer": scorer,
        "progress": StderrProgress(),
        "budget": budget_of(args),
        "max_steps": args.max_steps,
        "store": store,
        "dataset": args.dataset,
        "sinks": sinks,
        "pricing": _pricing(args.price_per_mtok, targets, args.service_tier),
    }
    if grids is None:
        return evaluate(targets, cases, **options)
    plain = [t for t in targets if swept(t.step) is None]
    first = evaluate(plain, cases, **options) if plain else None
    records = [r for s in first.targets for r in s.runs] if first else []
    effects = dict(first.effects) if first else {}
    found = []
    for t in targets:
        if swept(t.step) is not None:
            result, runs = sweep(
                t,
                cases,
                grids.get("threshold", DEFAULT_GRID),
                max_error=args.max_error,
                delta=args.delta,
                references=args.references,
                person_accuracy=args.person_accuracy,
                person_cost=args.person_cost,
                **options,
            )
            found.append(result)
            records += runs
            effects[t.name] = result.effects
    report = build_report(
        targets,
        records,
        cases=len(cases),
        effects=effects,
        repeat=args.repeat,
        concurrency=args.concurrency,
        dataset=args.dataset,
    )
    return replace(report, sweeps=found)


def _spec_of(target: Target, cascade: Cascade) -> str:
    """The target spec naming ``cascade`` in ``target``'s module, or how to get one."""
    names = [name for name, value in vars(target.module).items() if value is cascade]
    if names:
        return f"{target.spec.partition(':')[0]}:{names[0]}"
    return f"a module-level name for the cascade {cascade.name!r} (module.py:NAME)"


def _grids(given: list[str] | None) -> dict[str, tuple[float, ...]] | None:
    """The ``--sweep`` grids by threshold name (bare: the default grid for each), checked
    before any run; ``None`` without ``--sweep``."""
    if given is None:
        return None
    grids: dict[str, tuple[float, ...]] = {}
    for spec in given:
        if spec:
            name, grid = parse_sweep(spec)
            grids[name] = grid
    return grids


def _check_sweep(
    targets: list[EvalTarget], grids: dict[str, tuple[float, ...]], loaded: list[Target]
) -> None:
    """Refuse a sweep with nothing to sweep, or of a threshold no cascade declares; a
    workflow that holds a cascade is named with the target that would sweep it."""
    cascades = [c for c in (swept(t.step) for t in targets) if c is not None]
    held = [
        (t, at, c) for t in loaded if swept(t.step) is None for at, c in cascades_within(t.step)
    ]
    if not cascades and held:
        target, at, cascade = held[0]
        raise ConfigError(
            f"--sweep: {target.spec} is not a loopwise.Cascade but holds one (node {at}); "
            f"--sweep needs the cascade itself as a TARGET: {_spec_of(target, cascade)}",
            name="sweep",
        )
    if not cascades:
        raise ConfigError(
            "--sweep: none of the targets declares a threshold (a loopwise.Cascade does)",
            name="sweep",
        )
    for target, at, cascade in held:
        print(
            f"loopwise eval: note: {target.spec} holds the cascade at node {at}, run at its "
            f"declared threshold; to sweep it, name it as a TARGET: {_spec_of(target, cascade)}",
            file=sys.stderr,
        )
    declared = {name for c in cascades for name in c.thresholds()}
    unknown = sorted(set(grids) - declared)
    if unknown:
        raise ConfigError(
            f"--sweep {unknown[0]}: no target declares a threshold of that name (they "
            f"declare: {', '.join(sorted(declared))})",
            name="sweep",
        )
