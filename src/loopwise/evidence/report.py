"""The eval report: :func:`format_text` for a terminal, and one self-contained HTML page
(inline CSS and SVG, no script, no CDN).

:func:`render_html` draws, for an :class:`~loopwise.evidence.evals.harness.EvalReport`: the
recommendation; the side-by-side table; how runs ended (a stacked bar per target); a box
plot per metric (cost, steps, model calls, tokens, latency — whiskers min–max, box
p25–p75, a line at p50, a tick at p95) with the targets on one scale; histograms of cost
and steps per target; each target's shape as an SVG drawing (a workflow's graph laid
out by topological generation, an agent with its tools coloured by effect) with its
Mermaid text; and every run in a collapsible table. It opens offline in any browser.
"""

from __future__ import annotations

from typing import TypedDict

from loopwise.core.jsontypes import JSONMapping, json_number, json_object
from loopwise.core.names import printable
from loopwise.core.shape import Edge, Graph, Node, describe, drawing, mermaid
from loopwise.core.step import Step
from loopwise.core.svg import EFFECT_COLORS, graph_svg
from loopwise.core.svg import escape_shown as _e
from loopwise.evidence.charts import box_plot, histograms, status_bars
from loopwise.evidence.evals.failures import failure_lines, failure_table
from loopwise.evidence.evals.harness import EvalReport, architecture_of
from loopwise.evidence.evals.stats import (
    REFERENCE_MODEL,
    Distribution,
    TargetSummary,
    metric_text,
    pct,
    reference_cost,
    usd,
)
from loopwise.evidence.sweeps.frontier import sweeps_html

__all__ = ["describe_graph", "draw_graph", "format_text", "render_html", "write_report"]

PALETTE = ("#2563eb", "#ea580c", "#16a34a", "#9333ea", "#0891b2", "#be123c")
CHART_METRICS = (
    ("cost_usd", "cost per case (USD)"),
    ("steps", "steps per case"),
    ("model_calls", "model calls per case"),
    ("tokens", "tokens per case"),
    ("latency_s", "latency per case (s)"),
)


def write_report(report: EvalReport, path: str, graphs: dict[str, GraphDescription]) -> None:
    """Write :func:`render_html` of ``report`` to ``path``."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(render_html(report, graphs))


def render_html(report: EvalReport, graphs: dict[str, GraphDescription] | None = None) -> str:
    """The report page; ``graphs`` maps target names to :func:`describe_graph` results."""
    graphs = graphs or {}
    colors = {t.name: PALETTE[i % len(PALETTE)] for i, t in enumerate(report.targets)}
    sections = [
        _header(report),
        _recommendation(report),
        _section("Thresholds", sweeps_html(report.sweeps, report.targets)) if report.sweeps else "",
        _section("Side by side", _summary_table(report, colors) + _history(report)),
        _section("How runs ended", status_bars(report.targets)),
        _section("Where they differ", _disagreement_table(report)),
        _section("Failing cases", failure_table(report)),
        _section(
            "Distributions",
            "".join(box_plot(report.targets, m, title, colors) for m, title in CHART_METRICS),
        ),
        _section("Histograms", histograms(report.targets, colors)),
        _section("Shapes", "".join(_shape(t, graphs.get(t.name), colors) for t in report.targets)),
        _section("Every run", "".join(_runs_table(t) for t in report.targets)),
    ]
    return _PAGE.format(title=_e(f"loopwise eval {report.eval_id}"), body="\n".join(sections))


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body {{ font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #111827;
  margin: 0 auto; max-width: 1100px; padding: 24px; background: #fff; }}
h1 {{ font-size: 22px; margin: 0 0 4px; }} h2 {{ font-size: 17px; margin: 28px 0 8px;
  border-bottom: 1px solid #e5e7eb; padding-bottom: 4px; }}
.meta {{ color: #6b7280; }} .rec {{ background: #f0fdf4; border: 1px solid #86efac;
  border-radius: 8px; padding: 12px 16px; margin: 16px 0; }}
.rec b {{ font-size: 15px; }} table {{ border-collapse: collapse; margin: 8px 0; }}
td, th {{ border: 1px solid #e5e7eb; padding: 4px 8px; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }} th {{ background: #f9fafb; }}
.swatch {{ display: inline-block; width: 10px; height: 10px; border-radius: 2px;
  margin-right: 6px; }} .charts {{ display: flex; flex-wrap: wrap; gap: 16px; }}
svg {{ font: 11px system-ui, sans-serif; }} figure {{ margin: 8px 0 16px; }}
figcaption {{ font-weight: 600; margin-bottom: 4px; }} pre {{ background: #f9fafb;
  padding: 8px; overflow-x: auto; }} details {{ margin: 6px 0; }}
</style></head><body>
{body}
</body></html>
"""


def _section(title: str, body: str) -> str:
    return f"<h2>{_e(title)}</h2>\n{body}"


def _header(report: EvalReport) -> str:
    models = ", ".join(f"{_e(k)}: {_e(v)}" for k, v in report.models.items())
    return (
        f"<h1>loopwise eval</h1><div class='meta'>{report.cases} cases × {report.repeat} "
        f"repeat(s) from <code>{_e(report.dataset)}</code>, concurrency {report.concurrency}, "
        f"{_e(report.created_at)} · eval {_e(report.eval_id)} · models {models}</div>"
    )


def _recommendation(report: EvalReport) -> str:
    rec = report.recommendation
    if not rec.choice:
        return f"<div class='rec'><b>No choice</b><p>{_e(rec.text)}</p></div>"
    winner = next((t for t in report.targets if t.name == rec.choice), None)
    title = winner.title if winner else rec.choice
    head = f"<b>Recommendation: {_e(title)}</b>"
    if len(rec.reasons) <= 1:
        return f"<div class='rec'>{head}<p>{_e(rec.text)}</p></div>"
    # With several targets the text is every comparison in a row; list them instead.
    kind = f"the {winner.architecture}, " if winner and winner.architecture != "step" else ""
    reasons = "".join(f"<li>{_e(r)}</li>" for r in rec.reasons)
    return (
        f"<div class='rec'>{head}<p>→ {_e(kind)}{_e(title)}, compared with each:</p>"
        f"<ul>{reasons}</ul></div>"
    )


def _fmt(value: float | None, metric: str) -> str:
    return "unknown" if value is None else metric_text(value, metric)


def _history(report: EvalReport) -> str:
    """How each target moved since its last stored eval on the same dataset."""
    rows = []
    for t in report.targets:
        before = report.previous.get(t.name)
        if not before:
            continue
        old_rate = _stored(before, "correct_rate")
        old_tokens = _stored_p95(before, "tokens")
        rate = "—" if t.correct_rate is None else f"{t.correct_rate:.0%}"
        rows.append(
            f"<tr><td>{_e(t.title)}</td><td>{_e(before.get('created_at', '?'))}</td>"
            f"<td>{'—' if old_rate is None else f'{old_rate:.0%}'} → {rate}</td>"
            f"<td>{_fmt(old_tokens, 'tokens')} → {_fmt(t.metrics['tokens'].stat('p95'), 'tokens')}"
            "</td></tr>"
        )
    if not rows:
        return ""
    head = "<tr><th>since last eval</th><th>at</th><th>correct</th><th>p95 tokens</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def _disagreement_table(report: EvalReport, limit: int = 30) -> str:
    """The cases the targets score differently, with what each answered."""
    cases = report.disagreements()
    if not cases:
        return "<p class='meta'>every case scored the same for every target</p>"
    outputs = {
        (t.name, r.case_id): r.output for t in report.targets for r in t.runs if r.repeat == 0
    }
    head = "".join(f"<th>{_e(t.title)}</th>" for t in report.targets)
    rows = []
    for case in cases[:limit]:
        cells = "".join(
            f"<td title='{_e(outputs.get((t.name, case['case_id'])))}'>"
            f"{case['scores'][t.name]:.0%}</td>"
            for t in report.targets
        )
        rows.append(f"<tr><td>{_e(case['case_id'])}</td>{cells}</tr>")
    more = f"<p class='meta'>… and {len(cases) - limit} more</p>" if len(cases) > limit else ""
    return (
        f"<p class='meta'>{len(cases)} case(s); score per target (hover for the output)</p>"
        f"<table><tr><th>case</th>{head}</tr>{''.join(rows)}</table>{more}"
    )


def _summary_table(report: EvalReport, colors: dict[str, str]) -> str:
    head = "".join(
        f"<th><span class='swatch' style='background:{colors[t.name]}'></span>"
        f"{_e(t.title)}<br><span class='meta'>{_e(t.architecture)}</span></th>"
        for t in report.targets
    )
    rows = [
        ("runs", [str(t.n) for t in report.targets]),
        ("completed", [f"{t.completed_rate:.0%}" for t in report.targets]),
        (
            "correct",
            ["—" if t.correct_rate is None else f"{t.correct_rate:.0%}" for t in report.targets],
        ),
        ("within budget", [f"{t.within_budget_rate:.0%}" for t in report.targets]),
        ("flaky cases", [str(t.flaky_cases) for t in report.targets]),
    ]
    for metric, title in CHART_METRICS:
        cells = []
        for t in report.targets:
            d = t.metrics[metric]
            cells.append(" / ".join(_fmt(d.stat(s), metric) for s in ("p50", "p95", "max")))
        rows.append((f"{title.split(' (')[0]} p50 / p95 / max", cells))
    rows.append(
        (
            f"mean cost at {REFERENCE_MODEL} prices",
            [_fmt(reference_cost(t), "cost_usd") for t in report.targets],
        )
    )
    body = "".join(
        f"<tr><td>{_e(label)}</td>{''.join(f'<td>{_e(c)}</td>' for c in cells)}</tr>"
        for label, cells in rows
    )
    return f"<table><tr><th></th>{head}</tr>{body}</table>"


def _runs_table(t: TargetSummary) -> str:
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "case",
            "repeat",
            "status",
            "score",
            "steps",
            "model calls",
            "tool calls",
            "tokens",
            "cost",
            "latency",
            "run",
        )
    )
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{_e(v)}</td>"
            for v in (
                r.case_id,
                r.repeat,
                r.status,
                "—" if r.score is None else f"{r.score:g}",
                r.steps,
                r.model_calls,
                r.tool_calls,
                r.tokens,
                _fmt(r.cost_usd, "cost_usd"),
                _fmt(r.latency_s, "latency_s"),
                r.run_id,
            )
        )
        + "</tr>"
        for r in t.runs
    )
    return (
        f"<details><summary>{_e(t.title)} — {t.n} runs</summary>"
        f"<table><tr>{head}</tr>{rows}</table></details>"
    )


_LABELS = {
    "steps": "steps",
    "model_calls": "model calls",
    "tool_calls": "tool calls",
    "tokens": "tokens",
    "cost_usd": "cost (USD)",
    "latency_s": "latency",
}


def format_text(report: EvalReport) -> str:
    """The side-by-side table and the recommendation, for a terminal."""
    head = ["", *(f"{t.title} ({t.architecture})" for t in report.targets)]
    rows = [head, ["", *(["p50 / p95 / max"] * len(report.targets))]]
    rows.append(["runs", *(str(t.n) for t in report.targets)])
    rates: list[tuple[str, list[float | None]]] = [
        ("completed", [t.completed_rate for t in report.targets]),
        ("correct", [t.correct_rate for t in report.targets]),
        ("within budget", [t.within_budget_rate for t in report.targets]),
    ]
    for label, values in rates:
        rows.append([label, *("—" if v is None else pct(v) for v in values)])
    rows.append(
        [
            "statuses",
            *(", ".join(f"{k} {v}" for k, v in t.status_counts.items()) for t in report.targets),
        ]
    )
    for metric, label in _LABELS.items():
        rows.append([label, *(_triple(t.metrics[metric], metric) for t in report.targets)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    settings = (
        f"{report.cases} cases × {report.repeat} repeat(s) from {report.dataset or 'the dataset'}, "
        f"concurrency {report.concurrency}"
    )
    history = [
        _since(t, report.previous[t.name]) for t in report.targets if t.name in report.previous
    ]
    return "\n".join(
        [
            settings,
            "",
            *lines,
            *_disagreement_lines(report),
            *failure_lines(report),
            *(["", *history] if history else []),
            "",
            _recommendation_text(report),
        ]
    )


def _recommendation_text(report: EvalReport) -> str:
    rec = report.recommendation
    if len(rec.reasons) <= 1:
        return f"Recommendation: {rec.text}"
    final = rec.text.rsplit(" → ", 1)[-1]
    return "\n".join([f"Recommendation: → {final}", *(f"  - {r}" for r in rec.reasons)])


def _disagreement_lines(report: EvalReport) -> list[str]:
    cases = report.disagreements()
    if not cases:
        return []
    shown = ", ".join(printable(str(c["case_id"])) for c in cases[:12])
    shown += " …" if len(cases) > 12 else ""
    return ["", f"cases the targets score differently: {len(cases)} ({shown})"]


def _stored(summary: JSONMapping, key: str) -> float | None:
    """A number of a stored summary (``None``: not recorded)."""
    found = summary.get(key)
    return None if found is None else json_number(found)


def _stored_p95(summary: JSONMapping, metric: str) -> float | None:
    """The p95 of ``metric`` in a stored summary (``None``: not recorded)."""
    return _stored(json_object(json_object(summary.get("metrics")).get(metric)), "p95")


def _since(t: TargetSummary, before: JSONMapping) -> str:
    """One line comparing ``t`` with its last stored eval."""
    old_rate = _stored(before, "correct_rate")
    rate = t.correct_rate
    parts = []
    if rate is not None and old_rate is not None:
        parts.append(f"correct {pct(rate)} (was {pct(old_rate)})")
    old_cost = _stored_p95(before, "cost_usd")
    cost = t.metrics["cost_usd"].stat("p95")
    if cost is not None and old_cost is not None:
        parts.append(f"p95 cost {usd(cost)} (was {usd(old_cost)})")
    old_tokens = _stored_p95(before, "tokens")
    tokens = t.metrics["tokens"].stat("p95")
    if tokens is not None and old_tokens is not None:
        parts.append(f"p95 tokens {tokens:,.0f} (was {old_tokens:,.0f})")
    return f"since {before.get('created_at', '?')}: {t.title}: " + ", ".join(parts)


def _triple(dist: Distribution, metric: str) -> str:
    if dist.n == 0:
        return "unknown"
    text = " / ".join(metric_text(dist.stat(s) or 0.0, metric) for s in ("p50", "p95", "max"))
    return text + (f" ({dist.unknown} unknown)" if dist.unknown else "")


class DrawnNode(TypedDict):
    """A node of :func:`describe_graph` (:class:`~loopwise.core.shape.Node`'s drawn fields)."""

    id: str
    label: str
    kind: str
    detail: str


class DrawnEdge(TypedDict):
    """An edge of :func:`describe_graph` (:class:`~loopwise.core.shape.Edge`)."""

    source: str
    target: str
    label: str


class GraphDescription(TypedDict):
    """A step's shape as data for drawing (:func:`describe_graph`)."""

    kind: str
    name: str
    nodes: list[DrawnNode]
    edges: list[DrawnEdge]
    mermaid: str


def describe_graph(step: Step) -> GraphDescription:
    """A step's shape as data for drawing: ``{"kind", "name", "nodes", "edges", "mermaid"}``.

    From the step's own description (:mod:`loopwise.core.shape`): a workflow gives its nodes
    and edges (route edges labelled with their values); an agent itself and its tools,
    each tool's ``kind`` its effect; a hybrid its planner, the validation and its
    actions; any other step, one node. ``mermaid`` is the same drawing as Mermaid text.
    """
    shape = describe(step)
    graph = drawing(shape)
    nodes = [DrawnNode(id=n.id, label=n.label, kind=n.kind, detail=n.detail) for n in graph.nodes]
    edges = [DrawnEdge(source=e.source, target=e.target, label=e.label) for e in graph.edges]
    return {
        "kind": architecture_of(step),
        "name": shape.name,
        "nodes": nodes,
        "edges": edges,
        "mermaid": mermaid(shape),
    }


def draw_graph(desc: GraphDescription) -> str:
    """An SVG drawing of a :func:`describe_graph` result (:func:`loopwise.core.svg.graph_svg`)."""
    graph = Graph(
        nodes=tuple(
            Node(id=n["id"], label=n["label"], kind=n["kind"], detail=n["detail"])
            for n in desc["nodes"]
        ),
        edges=tuple(
            Edge(source=e["source"], target=e["target"], label=e["label"]) for e in desc["edges"]
        ),
    )
    return graph_svg(graph, name=desc["name"])


def _shape(t: TargetSummary, desc: GraphDescription | None, colors: dict[str, str]) -> str:
    title = (
        f"<h3><span class='swatch' style='background:{colors[t.name]}'></span>"
        f"{_e(t.title)} <span class='meta'>({_e(t.architecture)}, "
        f"<code>{_e(t.name)}</code>)</span></h3>"
    )
    if not desc:
        return title + "<p class='meta'>no shape recorded</p>"
    legend = (
        "<p class='meta'>tool borders: <span style='color:#16a34a'>read</span>, "
        "<span style='color:#f59e0b'>write</span>, "
        "<span style='color:#dc2626'>irreversible</span></p>"
        if any(n["kind"] in EFFECT_COLORS for n in desc["nodes"])
        else ""
    )
    mermaid = (
        f"<details><summary>Mermaid</summary><pre>{_e(desc['mermaid'])}</pre></details>"
        if desc.get("mermaid")
        else ""
    )
    return f"{title}{draw_graph(desc)}{legend}{mermaid}"
