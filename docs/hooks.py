"""The CLI reference from the parsers, and mkdocs hooks (the changelog from CHANGELOG.md).

``docs/reference/cli.md`` holds the text ``cli_reference()`` makes from the ``loopwise``
command's own parsers, committed so the repository's page is the reference too.
Regenerate it after changing a flag or a help text::

    make cli-reference        # or: python docs/hooks.py

tests/project/test_docs.py fails, naming that command, when the committed text is not current.
The text is made at a fixed width (``COLUMNS=100``) so argparse wraps it the same way in
every terminal.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLI_PAGE = ROOT / "docs" / "reference" / "cli.md"
WIDTH = "100"
# argparse's layout changes between Python versions (3.13 prints ``-o, --output FILE``): the
# marker records which one made the text, and the test compares only under that version.
PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"
BEGIN = "<!-- cli-reference, Python {}: made by `make cli-reference` (python docs/hooks.py) -->"
END = "<!-- /cli-reference -->"


def cli_reference() -> str:
    """Every verb's ``--help`` (and its subcommands'), in the order ``loopwise --help``
    lists them, wrapped at ``WIDTH`` columns."""
    import argparse

    from loopwise.cli.main import VERBS, build_parser

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH  # argparse reads the width when a parser formats help
    try:
        parser = build_parser()
        parts = _section("loopwise", parser)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for verb in VERBS:
            parts += _section(f"loopwise {verb}", sub.choices[verb])
            for action in sub.choices[verb]._actions:
                if isinstance(action, argparse._SubParsersAction):
                    for name, child in action.choices.items():
                        parts += _section(f"loopwise {verb} {name}", child, level="###")
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    return "\n".join(parts).rstrip() + "\n"


def _section(title: str, parser: Any, *, level: str = "##") -> list[str]:
    return [f"{level} {title}", "", "```text", parser.format_help().rstrip(), "```", ""]


def committed_reference() -> tuple[str, str]:
    """The Python version that made ``docs/reference/cli.md``'s reference, and its text as
    committed (``("", "")`` when the page has none)."""
    found = re.search(
        re.escape(BEGIN).replace(r"\{\}", r"(\d+\.\d+)") + "\n(.*?)" + re.escape(END),
        CLI_PAGE.read_text(),
        re.S,
    )
    return (found[1], found[2]) if found else ("", "")


def write_cli_reference() -> bool:
    """Put the current reference into ``docs/reference/cli.md``; whether it changed."""
    text = CLI_PAGE.read_text()
    head = text.split("<!-- cli-reference", 1)[0].rstrip("\n")
    tail = text.split(END, 1)[1] if END in text else "\n"
    new = f"{head}\n\n{BEGIN.format(PYTHON)}\n{cli_reference()}{END}{tail}"
    if new == text:
        return False
    CLI_PAGE.write_text(new)
    return True


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if "<!-- changelog -->" in markdown:
        text = (ROOT / "CHANGELOG.md").read_text()
        markdown = markdown.replace("<!-- changelog -->", text.split("\n", 1)[1])
    return markdown


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    changed = write_cli_reference()
    print(f"{CLI_PAGE.relative_to(ROOT)}: {'updated' if changed else 'already current'}")
