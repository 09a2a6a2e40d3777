"""The one SVG drawing of a :class:`~loopwise.core.shape.Graph`: rendered on the server, no
script, no Mermaid runtime.

The eval report draws each target's shape with it, and the approvals inbox draws a run's
proposed plan with it, each plan step coloured by its state (done, waiting for a person,
denied, skipped). Rows are the graph's topological generations (networkx), wrapped at
five nodes; an edge back up (a hybrid's invalid plan returning to its planner) is drawn
but does not move its target down. Every text is escaped: labels can be model output.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping

from loopwise.core.names import printable
from loopwise.core.shape import Graph, Node

__all__ = [
    "EFFECT_COLORS",
    "KIND_FILLS",
    "STATE_FILLS",
    "escape",
    "escape_shown",
    "graph_svg",
    "shorten",
    "svg_element",
]

EFFECT_COLORS = {"read": "#16a34a", "write": "#f59e0b", "irreversible": "#dc2626"}
"""A node's border by the effect of its tool."""

KIND_FILLS = {
    "agent": "#ede9fe",
    "workflow": "#dbeafe",
    "hybrid": "#fce7f3",
    "route": "#fef9c3",
    "structured": "#e0f2fe",
    "function": "#f3f4f6",
    "tool": "#f3f4f6",
    "opaque": "#f3f4f6",
}
"""A node's fill by its kind (when no state is drawn)."""

STATE_FILLS = {
    "done": "#dcfce7",
    "approved": "#dbeafe",
    "pending": "#fef3c7",
    "denied": "#fee2e2",
    "failed": "#fee2e2",
    "skipped": "#e5e7eb",
    "planned": "#ffffff",
}
"""A plan step's fill by its state."""

_NODE_W, _NODE_H, _GAP_X, _GAP_Y, _ROW_MAX = 150, 40, 20, 44, 5
_LINE, _LINE_H = 22, 13
"""A node's name: characters per line (two lines at most), and a line's height."""


def escape(text: object) -> str:
    """``text`` as HTML/SVG text or an attribute value (quotes escaped too)."""
    return html.escape(str(text), quote=True)


def escape_shown(text: object) -> str:
    """Text a page shows for people to read (a reason, a name, a case id, a model's
    output): :func:`escape`, and with what would reorder or hide the text around it (a
    bidirectional override, a control character) shown as an escape; line breaks and
    tabs stay. Not for form values: those go back as they are."""
    return escape(printable(str(text), keep="\n\r\t"))


_e = escape


def shorten(text: str, n: int) -> str:
    """``text`` cut to ``n`` characters, an ellipsis last when it was longer."""
    return text if len(text) <= n else text[: n - 1] + "…"


_short = shorten


def svg_element(width: float, height: float, body: str, label: str) -> str:
    """An ``<svg>`` of ``width`` × ``height`` holding ``body``, labelled for screen readers."""
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width:g}' height='{height:g}' "
        f"viewBox='0 0 {width:g} {height:g}' role='img' aria-label='{_e(label)}'>{body}</svg>"
    )


def _layout(graph: Graph) -> dict[str, tuple[int, int]]:
    """Node id → (row, column): rows are topological generations, wrapped at five nodes."""
    import networkx as nx

    order = [n.id for n in graph.nodes]
    known = set(order)
    dag = nx.DiGraph()
    dag.add_nodes_from(order)
    for e in graph.edges:
        if e.source not in known or e.target not in known:
            continue
        if not nx.has_path(dag, e.target, e.source):
            dag.add_edge(e.source, e.target)
    positions: dict[str, tuple[int, int]] = {}
    row = 0
    for layer in nx.topological_generations(dag):
        ranked = sorted(layer, key=order.index)
        for start in range(0, len(ranked), _ROW_MAX):
            for col, node in enumerate(ranked[start : start + _ROW_MAX]):
                positions[node] = (row, col)
            row += 1
    return positions


def graph_svg(graph: Graph, *, name: str, states: Mapping[str, str] | None = None) -> str:
    """``graph`` as an SVG drawing; with ``states`` (node id → state) each such node is
    filled by its state and says it on its second line."""
    positions = _layout(graph)
    rows: dict[int, int] = {}
    for r, _ in positions.values():
        rows[r] = rows.get(r, 0) + 1
    widest = max(rows.values(), default=1)
    # A long name wraps to a second line (every node of the drawing grows alike).
    tall = _NODE_H + _LINE_H * (max((len(_name(n.label)) for n in graph.nodes), default=1) - 1)
    width = widest * (_NODE_W + _GAP_X) + _GAP_X
    height = len(rows) * (tall + _GAP_Y) + _GAP_X

    def center(node: str) -> tuple[float, float]:
        r, c = positions[node]
        offset = (width - rows[r] * (_NODE_W + _GAP_X) + _GAP_X) / 2
        return offset + c * (_NODE_W + _GAP_X) + _NODE_W / 2, _GAP_X + r * (tall + _GAP_Y)

    parts = [
        "<defs><marker id='arrow' viewBox='0 0 10 10' refX='10' refY='5' markerWidth='7' "
        "markerHeight='7' orient='auto-start-reverse'><path d='M0,0 L10,5 L0,10 z' "
        "fill='#6b7280'/></marker></defs>"
    ]
    labels: dict[tuple[str, str], list[str]] = {}
    for e in graph.edges:
        if e.source not in positions or e.target not in positions:
            continue
        if (e.source, e.target) not in labels:
            (x1, y1), (x2, y2) = center(e.source), center(e.target)
            parts.append(
                f"<line x1='{x1:.1f}' y1='{y1 + tall:.1f}' x2='{x2:.1f}' y2='{y2:.1f}' "
                "stroke='#6b7280' marker-end='url(#arrow)'/>"
            )
        labels.setdefault((e.source, e.target), [])
        if e.label:
            labels[(e.source, e.target)].append(e.label)
    parts.extend(_edge_labels(labels, center, tall))
    states = states or {}
    for node in graph.nodes:
        state = states.get(node.id)
        parts.append(_node(node, state, *center(node.id), tall))
    return svg_element(width, height, "".join(parts), f"graph of {name}")


def _edge_labels(
    labels: Mapping[tuple[str, str], list[str]],
    center: Callable[[str], tuple[float, float]],
    tall: float,
) -> list[str]:
    """Each labelled edge's label on its line just above its target, where edges that fan
    out from one node are a column apart (at their midpoints they crowd together and run
    into each other); the values of edges sharing a source and target are one label, and
    labels into the same target stack upwards. A halo keeps a label readable over lines."""
    out = []
    stacked: dict[str, int] = {}
    for (source, target), values in labels.items():
        if not values:
            continue
        (x1, y1), (x2, y2) = center(source), center(target)
        level = stacked.get(target, 0)
        stacked[target] = level + 1
        y = max(y2 - 9 - 13 * level, 11.0)
        top = y1 + tall
        t = 1.0 if y2 == top else min(max((y - top) / (y2 - top), 0.0), 1.0)
        x = x1 + (x2 - x1) * t
        text = ", ".join(values)
        out.append(
            f"<text class='edge-label' x='{x:.1f}' y='{y:.1f}' text-anchor='middle' "
            "fill='#92400e' stroke='#ffffff' stroke-width='3' paint-order='stroke'>"
            f"<title>{_e(text)}</title>{_e(_short(text, 22))}</text>"
        )
    return out


def _name(label: str) -> list[str]:
    """A node's name in lines of at most :data:`_LINE` characters, two at most: broken
    after a ``_``, space, ``.``, ``:``, ``/`` or ``-`` in the second half of the first line
    when there is one, the rest cut with an ellipsis (the node's title holds it whole)."""
    if len(label) <= _LINE:
        return [label]
    after = max(label.rfind(c, 0, _LINE) for c in "_ .:/-")
    at = after + 1 if after >= _LINE // 2 else _LINE
    return [label[:at].rstrip(), _short(label[at:].lstrip(), _LINE)]


def _node(node: Node, state: str | None, cx: float, top: float, tall: float) -> str:
    label, kind, detail = node.label, node.kind, node.detail
    stroke = EFFECT_COLORS.get(kind, "#4b5563")
    if state is not None:
        fill = STATE_FILLS.get(state, "#ffffff")
    else:
        fill = KIND_FILLS.get(kind, "#f9fafb" if kind not in EFFECT_COLORS else "#ffffff")
    dash = " stroke-dasharray='4 3'" if kind == "route" or state == "skipped" else ""
    sub = " · ".join(x for x in (state or kind, detail) if x)
    return (
        f"<g class='node {_e(state or kind)}'><title>{_e(label)} ({_e(sub)})</title>"
        f"<rect x='{cx - _NODE_W / 2:.1f}' y='{top:.1f}' width='{_NODE_W}' height='{tall:g}' "
        f"rx='6' fill='{fill}' stroke='{stroke}' stroke-width='1.5'{dash}/>"
        + "".join(
            f"<text x='{cx:.1f}' y='{top + 16 + _LINE_H * i:.1f}' text-anchor='middle' "
            f"font-weight='600'>{_e(line)}</text>"
            for i, line in enumerate(_name(label))
        )
        + f"<text x='{cx:.1f}' y='{top + tall - 9:.1f}' text-anchor='middle' fill='#6b7280'>"
        f"{_e(_short(sub, 26))}</text></g>"
    )
