"""The failing cases of an eval, for people: what each wrong run was expected to give, what
it gave, and which fields differ — as terminal lines (:func:`failure_lines`) and as an
HTML table (:func:`failure_table`) for :mod:`loopwise.evidence.report`.

A run *fails* when it was scored and is not fully right (:attr:`CaseRun.failed`): a
completed run with a wrong answer (its :attr:`~loopwise.evidence.evals.stats.CaseRun.diff` names the
fields) or a run that did not complete (its status and detail say why).
"""

from __future__ import annotations

import json

from loopwise.core.jsontypes import JSONMapping
from loopwise.core.names import printable
from loopwise.core.svg import escape_shown as _e
from loopwise.evidence.evals.harness import EvalReport
from loopwise.evidence.evals.stats import CaseRun, TargetSummary

__all__ = ["failing_runs", "failure_lines", "failure_table", "why_failed"]


def failing_runs(report: EvalReport) -> list[tuple[TargetSummary, CaseRun]]:
    """Every failing run with its target: target by target, case by case, repeats together."""
    found = []
    for t in report.targets:
        order = {case: i for i, case in reversed(list(enumerate(r.case_id for r in t.runs)))}
        wrong = sorted((r for r in t.runs if r.failed), key=lambda r: (order[r.case_id], r.repeat))
        found += [(t, r) for r in wrong]
    return found


def _value(value: object, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def why_failed(run: CaseRun) -> str:
    """One line: the fields that differ, or how the run ended, or what the scorer gave
    (a custom scorer's verdict, by its name)."""
    if str(run.status) != "completed":
        detail = f": {run.detail}" if run.detail else ""
        return f"ended {run.status}{detail}; expected {_value(run.expected)}"
    if run.diff:
        return "; ".join(_field_text(d) for d in run.diff)
    score = "—" if run.score is None else f"{run.score:g}"
    if run.scorer is not None:
        return (
            f"scorer {run.scorer} gave {score}: got {_value(run.output)}, "
            f"expected {_value(run.expected)}"
        )
    return (
        f"the scorer gave {score} (no field differs): got {_value(run.output)}, "
        f"expected {_value(run.expected)}"
    )


def _field_text(d: JSONMapping) -> str:
    name = d["field"] or "output"
    if d.get("missing"):
        return f"{name}: expected {_value(d['expected'])}, missing"
    return f"{name}: expected {_value(d['expected'])}, got {_value(d['actual'])}"


def _case(t: TargetSummary, run: CaseRun, repeats: bool) -> str:
    again = f" (repeat {run.repeat + 1})" if repeats else ""
    return f"{t.title} case {run.case_id}{again}"


def failure_lines(report: EvalReport, limit: int = 20) -> list[str]:
    """The failing runs for a terminal, at most ``limit`` lines of them."""
    failing = failing_runs(report)
    if not failing:
        return []
    repeats = report.repeat > 1
    counts = ", ".join(
        f"{sum(r.failed for r in t.runs)} of {t.scored} scored run(s) of {t.title}"
        for t in report.targets
    )
    lines = ["", f"failing: {counts}"]
    # Case ids, outputs and a failed run's detail are data and model text: a terminal shows
    # an ESC, a line break or a bidi override in them as an escape, each run on one line.
    lines += [printable(f"  {_case(t, r, repeats)}: {why_failed(r)}") for t, r in failing[:limit]]
    if len(failing) > limit:
        lines.append(
            f"  … {len(failing) - limit} more (every one in --json's runs and --report's page)"
        )
    return lines


def failure_table(report: EvalReport, limit: int = 500) -> str:
    """The failing runs as an HTML table: case, target, status, and expected vs actual of
    every differing field."""
    failing = failing_runs(report)
    if not failing:
        return "<p class='meta'>no scored run failed</p>"
    rows = []
    for t, r in failing[:limit]:
        cells = (t.title, r.case_id, r.repeat, r.status, why_failed(r), r.run_id)
        rows.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    head = "".join(
        f"<th>{h}</th>" for h in ("target", "case", "repeat", "status", "what differs", "run")
    )
    more = (
        f"<p class='meta'>… and {len(failing) - limit} more (in --json)</p>"
        if len(failing) > limit
        else ""
    )
    return (
        f"<p class='meta'>{len(failing)} failing run(s): expected vs actual of each field "
        f"that differs</p><table><tr>{head}</tr>{''.join(rows)}</table>{more}"
    )
