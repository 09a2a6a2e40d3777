"""The ``loopwise graduate`` verb: mine an agent's stored runs, write a workflow module,
evaluate it against the agent, recommend (:mod:`loopwise.evidence.graduate.graduate`).

Exit codes: 0 when the recommendation is to graduate, 1 when it is to keep the agent (the
steps are not known, or the workflow did not hold up), 2 for a usage mistake, 3 when there
is not enough evidence to decide (too few held-out cases: the output says how many would).
With ``--partial``, the partial graduation decides: 0 when a threshold is certified, 3
when none is (the cascade is written sending every case to the agent).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from loopwise.cli.options import Verbs, count, store_help, user_output_to_stderr
from loopwise.errors import ConfigError
from loopwise.evidence.evals.certify import check_levels
from loopwise.evidence.evals.dataset import load_dataset
from loopwise.evidence.evals.stats import (
    REFERENCE_MODEL,
    TargetSummary,
    metric_text,
    pct,
    reference_cost,
    usd,
)
from loopwise.evidence.graduate.graduate import Graduation, graduate
from loopwise.evidence.graduate.partial import PartialGraduation, graduate_partial
from loopwise.evidence.report import describe_graph, write_report
from loopwise.running.targets import load_target
from loopwise.store.open import store_location

__all__ = ["NOT_ENOUGH_EVIDENCE", "add_graduate_verb"]

NOT_ENOUGH_EVIDENCE = 3
"""``graduate``'s exit code when the cases cannot carry a decision either way."""


def add_graduate_verb(sub: Verbs) -> None:
    """Register ``graduate`` on the CLI's subparsers ``sub``."""
    p = sub.add_parser(
        "graduate", help="turn an agent whose steps are known into a workflow, on evidence"
    )
    p.add_argument("target", metavar="AGENT_TARGET", help="the agent (path.py:name)")
    p.add_argument("--store", help=store_help)
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--runs",
        type=count(1),
        default=1000,
        help="mine this agent's newest N stored runs (its own: same module and name, no eval's)",
    )
    which.add_argument("--since", help="mine the runs created since this ISO date")
    p.add_argument("--out", help="the module to write (default <agent_module>_workflow.py)")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    p.add_argument("--dataset", help="labelled JSONL cases to evaluate on (default: held out)")
    p.add_argument("--holdout", type=float, default=0.25, help="share of runs held out")
    p.add_argument("--model", help="model name, or `scripted` for the offline model")
    p.add_argument("--repeat", type=count(1), default=1, help="runs per case and target")
    p.add_argument("--concurrency", type=count(1), default=4, help="runs in flight at most")
    p.add_argument(
        "--deps",
        metavar="MODULE:FUNCTION",
        help="make each evaluation run's deps with this function of no arguments (default: "
        "the agent module's make_eval_deps() sandbox when its tools take effect, else "
        "make_deps())",
    )
    p.add_argument(
        "--gates",
        choices=("deny", "approve"),
        default="deny",
        help="how the evaluation answers gates (default deny; approve needs a sandbox when a "
        "call takes effect, as eval --gates approve)",
    )
    p.add_argument(
        "--partial",
        action="store_true",
        help="also write <workflow>_partial.py: a cascade whose judge picks a mined path (or "
        "none), the workflow on the paths, the agent for the rest, its threshold certified "
        "on the held-out cases (exit 0 when one is, 3 when none is)",
    )
    p.add_argument(
        "--max-error",
        type=float,
        default=0.05,
        metavar="ALPHA",
        help="with --partial: the disagreement with the agent to certify under (default 0.05)",
    )
    p.add_argument(
        "--delta",
        type=float,
        default=0.1,
        help="with --partial: the chance the certified bound is wrong (default 0.1)",
    )
    p.add_argument("--report", help="write a self-contained HTML report here")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=_cmd_graduate)


def _cmd_graduate(args: argparse.Namespace) -> int:
    store = store_location(args.store)[1]
    dataset = load_dataset(args.dataset) if args.dataset else None
    if args.partial:
        if dataset is not None:
            raise ConfigError(
                "--partial certifies on the held-out runs: drop --dataset", name="partial"
            )
        check_levels(args.max_error, args.delta)
    if args.report and Path(args.report).is_dir():
        raise ConfigError(f"--report {args.report}: not a file path", name="report")
    with user_output_to_stderr(args.json):
        result = graduate(
            args.target,
            runs=store,
            out=args.out,
            force=args.force,
            dataset=dataset,
            model=args.model,
            repeat=args.repeat,
            holdout=args.holdout,
            limit=args.runs,
            since=args.since,
            concurrency=args.concurrency,
            deps=args.deps,
            gates=args.gates,
        )
    if args.report and result.report is not None and result.workflow is not None:
        graphs = {
            result.target: describe_graph(load_target(result.target).step),
            result.workflow: describe_graph(load_target(result.workflow).step),
        }
        write_report(result.report, args.report, graphs)
    partial = _partial(args, result, store) if args.partial else None
    if args.json:
        doc = {**result.to_dict(), "report": args.report}
        if args.partial:
            doc["partial"] = None if partial is None else partial.to_dict()
        print(json.dumps(doc, default=str))
    else:
        print(_text(result, args.report))
        if partial is not None:
            print(partial.text)
    if args.partial:  # the partial graduation's own verdict decides the exit
        certified = partial is not None and partial.certification.certificate is not None
        return 0 if certified else NOT_ENOUGH_EVIDENCE
    return {"graduate": 0, "not_enough_evidence": NOT_ENOUGH_EVIDENCE}.get(result.decision, 1)


def _partial(args: argparse.Namespace, g: Graduation, store: str) -> PartialGraduation | None:
    """The certified router, when a workflow was written (``None``: nothing to route to)."""
    if g.workflow is None:
        return None
    with user_output_to_stderr(args.json):
        return graduate_partial(
            g.target,
            g.workflow,
            runs=store,
            holdout=args.holdout,
            limit=args.runs,
            since=args.since,
            model=args.model,
            max_error=args.max_error,
            delta=args.delta,
            deps=args.deps,
            concurrency=args.concurrency,
        )


def _text(g: Graduation, report: str | None) -> str:
    left = ", ".join(f"{v} {k}" for k, v in g.left_out.items())
    lines = [
        f"mined {g.mined} completed run(s) of {g.target}; held out {g.held_out}"
        + (
            f"; left out {left} (a run that did not complete is no path to write down)"
            if left
            else ""
        ),
    ]
    if g.calls:
        kinds = ", ".join(f"{v} with a call {_KINDS.get(k, k)}" for k, v in g.calls.items())
        lines.append(f"runs mined with calls not plain: {kinds}")
    if g.out is None:
        lines += [f"verdict: {g.verdict} — {g.message}", "nothing was written. " + g.reason]
        return "\n".join(lines)
    covered = sum(share for share, _ in g.paths)
    lines.append(
        f"the steps are known: {len(g.paths)} path(s) cover {pct(covered)} of them; "
        f"{g.outside_written} mined run(s) took other paths, which the workflow does not take"
    )
    lines += [f"  {pct(share):>4}  {text}" for share, text in g.paths]
    if g.unlearned:
        lines.append(
            f"{g.unlearned} run(s) on these paths not learned from (a denied or failed call)"
        )
    errors = sum(f.level.value == "error" for f in g.findings)
    lines.append(
        f"wrote {g.out} (target {g.workflow}); loopwise check: {errors} error(s), "
        f"{len(g.findings) - errors} other finding(s)"
    )
    lines.append(f"evaluated on {g.cases}")
    if g.report is not None:
        lines += _table(g.report.targets)
    if g.paired is not None:
        d = g.paired
        lines.append(
            f"paired difference, workflow − agent: {d.mean * 100:+.0f} points "
            f"({d.confidence:.0%} CI {_pts(d.low)} to {_pts(d.high)}, {d.cases} cases)"
        )
    if g.outside is not None:
        lines.append(
            f"cases outside the mined paths (the agent took another path): {pct(g.outside)}"
        )
    lines.append(g.reason)
    if report:
        lines.append(f"report: {report}")
    return "\n".join(lines)


_KINDS = {
    "edited": "a person edited (what they changed is filled, never learned)",
    "approved": "a person approved (its gate asks again)",
    "waiting": "waiting for a person",
    "denied": "denied",
    "failed": "that failed",
}


def _pts(x: float) -> str:
    return "—" if x in (float("inf"), float("-inf")) else f"{x * 100:+.0f}"


def _table(targets: list[TargetSummary]) -> list[str]:
    rows: list[tuple[str, ...]] = [("", "agent", "workflow")]
    rows.append(("accuracy", *(_accuracy(t) for t in targets)))
    priced = [reference_cost(t) for t in targets]
    rows.append(
        (f"cost at {REFERENCE_MODEL}", *("unknown" if c is None else usd(c) for c in priced))
    )
    for label, metric, stat in (
        ("cost per run", "cost_usd", "mean"),
        ("tokens per run", "tokens", "mean"),
        ("model calls per run", "model_calls", "mean"),
        ("p95 latency", "latency_s", "p95"),
    ):
        values = [t.metrics[metric].stat(stat) for t in targets]
        rows.append((label, *("unknown" if v is None else metric_text(v, metric) for v in values)))
    rows.append(
        ("statuses", *(", ".join(f"{k} {v}" for k, v in t.status_counts.items()) for t in targets))
    )
    return [f"  {r[0]:<20} {r[1]:<24} {r[2]}" for r in rows]


def _accuracy(t: TargetSummary) -> str:
    rate = t.correct_rate if t.correct_rate is not None else t.completed_rate
    return f"{pct(rate)} of {t.n} run(s)"
