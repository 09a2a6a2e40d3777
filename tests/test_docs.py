"""The docs site: every page is in the navigation, the CLI reference is generated from the
parsers, and every section of the README that was has a home."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from loopwise.cli.main import VERBS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _hooks() -> object:
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_reference_is_every_verbs_help() -> None:
    text = _hooks().cli_reference()  # type: ignore[attr-defined]
    for verb in VERBS:
        assert f"## loopwise {verb}\n" in text
        assert f"usage: loopwise {verb}" in text
    assert "--version" in text and "init" in text and "compare" in text


def test_every_page_is_in_the_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    missing = sorted(p for p in pages if f" {p}" not in nav)
    assert not missing, f"pages not in mkdocs.yml's nav: {missing}"


# The README's sections before it became a front door, and where each lives now.
HOMES = {
    "The two commands": "CONTRIBUTING.md",
    "Configuration": "docs/guides/configuration.md",
    "Tested against": "docs/tested-against.md",
    "The Responses API": "docs/guides/configuration.md",
    "Start a project": "docs/guides/start-a-project.md",
    "A first example": "docs/guides/first-example.md",
    "Structured output": "docs/guides/structured-output.md",
    "Testing offline": "docs/guides/testing.md",
    "Workflows": "docs/guides/workflows.md",
    "Agents and guardrails": "docs/guides/agents.md",
    "Conversations": "docs/guides/conversations.md",
    "Hybrids: propose, then execute": "docs/guides/hybrids.md",
    "Dependencies": "docs/guides/dependencies.md",
    "Deciding on evidence": "docs/guides/deciding.md",
    "Store, gates and resume": "docs/guides/store-gates-resume.md",
    "The approvals inbox: `loopwise serve`": "docs/guides/store-gates-resume.md",
    "Past one machine: PostgreSQL and workers": "docs/guides/store-gates-resume.md",
    "Watching runs": "docs/guides/watching.md",
    "Safety: one effect path": "docs/guides/safety.md",
    "Mutation testing": "CONTRIBUTING.md",
    "Tools from MCP servers": "docs/guides/mcp.md",
    "Speed": "benchmarks/README.md",
}


def test_every_former_readme_section_has_a_home() -> None:
    for heading, home in HOMES.items():
        text = (ROOT / home).read_text()
        assert re.search(rf"(?m)^#+ {re.escape(heading)}", text), f"{heading!r} not in {home}"


def test_the_changelog_page_shows_the_changelog() -> None:
    page = _hooks().on_page_markdown("<!-- changelog -->", None)  # type: ignore[attr-defined]
    assert "## Unreleased" in page and page.strip() in (ROOT / "CHANGELOG.md").read_text()
