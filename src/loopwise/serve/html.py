"""The inbox pages' frame and parts: the page shell and its links, a table that stacks at
phone width, and the effect and state badges.

Cells and bodies come in as HTML already escaped by their page
(:mod:`loopwise.serve.pages`); what is written here (a title, a column's name, a badge's
word) is escaped here.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

from loopwise.core.svg import escape as _e

__all__ = ["effect_badge", "page", "state_badge", "table", "url_path"]


def page(title: str, body: str, *, root: str, nav: str = "inbox") -> str:
    """A whole page: ``body`` under the header, its ``nav`` link marked current, every link
    under ``root`` (the path the inbox is mounted under)."""
    links = (("inbox", url_path(root, ""), "Inbox"), ("runs", url_path(root, "runs"), "Runs"))
    menu = " ".join(
        f"<a href='{href}'{' aria-current=page' if key == nav else ''}>{label}</a>"
        for key, href, label in links
    )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{_e(title)} · loopwise</title>"
        f"<link rel='stylesheet' href='{url_path(root, 'static', 'inbox.css')}'></head><body>"
        f"<header><strong>loopwise</strong> <nav>{menu}</nav></header>"
        f"<main>{body}</main></body></html>"
    )


def url_path(root: str, *parts: str) -> str:
    """A page's link under ``root``, the (URL-quoted) path the inbox is mounted under."""
    return _e(root) + "/" + "/".join(quote(p, safe="") for p in parts)


def effect_badge(effect: str | None) -> str:
    """A call's effect (``read``, ``write``, ``irreversible``) as a coloured badge."""
    name = effect or "unknown"
    return f"<span class='effect {_e(name)}'>{_e(name)}</span>"


def state_badge(state: str) -> str:
    """A run's or a step's state as a coloured badge."""
    return f"<span class='state {_e(state)}'>{_e(state)}</span>"


def table(heads: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> str:
    """A table that scrolls in its box on a wide screen and stacks at phone width: each
    row a card, each cell under its column's name (``data-label``, shown by the CSS)."""
    head = "".join(f"<th>{h}</th>" for h in heads)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td data-label='{_e(h)}'{_td_class(h)}>{cell}</td>"
            for h, cell in zip(heads, row, strict=True)
        )
        + "</tr>"
        for row in rows
    )
    return (
        f"<div class='scroll'><table class='{f'stack {cls}'.strip()}'><thead><tr>{head}</tr>"
        f"</thead><tbody>{body}</tbody></table></div>"
    )


def _td_class(head: str) -> str:
    return " class='wide'" if head in _WIDE else ""


_WIDE = frozenset({"planner's reason", "arguments", "what", "why", "what changed"})
