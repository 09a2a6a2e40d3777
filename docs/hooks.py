"""mkdocs hooks: the CLI reference from the parsers, the changelog from CHANGELOG.md.

``cli_reference()`` is what replaces ``<!-- cli-reference -->`` (tests/test_docs.py checks it
names every verb); the changelog page shows the repository's CHANGELOG.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def cli_reference() -> str:
    """Every verb's ``--help``, in the order ``loopwise --help`` lists them."""
    import argparse

    from loopwise.cli.main import VERBS, build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parts = ["## loopwise", "", "```text", parser.format_help().rstrip(), "```", ""]
    for verb in VERBS:
        help_text = sub.choices[verb].format_help().rstrip()
        parts += [f"## loopwise {verb}", "", "```text", help_text, "```", ""]
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if "<!-- cli-reference -->" in markdown:
        markdown = markdown.replace("<!-- cli-reference -->", cli_reference())
    if "<!-- changelog -->" in markdown:
        text = (ROOT / "CHANGELOG.md").read_text()
        markdown = markdown.replace("<!-- changelog -->", text.split("\n", 1)[1])
    return markdown
