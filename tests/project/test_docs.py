"""The docs site: every page is in the navigation, the CLI reference is generated from the
parsers, and every section of the README that was has a home."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

from loopwise.cli.main import VERBS
from tests.support import ROOT

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
    assert "### loopwise runs list\n" in text  # a verb's own subcommands too


def test_the_committed_cli_reference_is_current() -> None:
    hooks: Any = _hooks()
    python, committed = hooks.committed_reference()
    assert committed, "docs/reference/cli.md has no reference: run `make cli-reference`"
    if python != hooks.PYTHON:
        pytest.skip(f"the reference was made with Python {python}; argparse differs here")
    assert committed == hooks.cli_reference(), (
        "docs/reference/cli.md is not current: run `make cli-reference` "
        "(python docs/hooks.py) and commit it"
    )


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


def test_a_link_to_a_missing_anchor_fails_the_strict_build(tmp_path: Path) -> None:
    """mkdocs reports a missing ``page.md#anchor`` at info level unless told otherwise:
    mkdocs.yml's ``validation`` makes it a warning, which ``--strict`` (make docs) fails."""
    import yaml  # mkdocs's own dependency
    from mkdocs.commands.build import build
    from mkdocs.config import load_config
    from mkdocs.exceptions import Abort

    project = yaml.safe_load((ROOT / "mkdocs.yml").read_text().split("\nhooks:")[0])
    assert project["strict"] is True and project["validation"]["anchors"] == "warn"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the part](other.md#the-part).\n")
    (docs / "other.md").write_text("# Other\n\n## The part\n")
    settings = tmp_path / "mkdocs.yml"
    settings.write_text(
        yaml.safe_dump(
            {
                "site_name": "t",
                "docs_dir": str(docs),
                "site_dir": str(tmp_path / "site"),
                "strict": True,
                "validation": project["validation"],
                "markdown_extensions": [{"toc": {"permalink": True}}],
            }
        )
    )
    build(load_config(str(settings)))  # the anchor exists: builds
    (docs / "index.md").write_text("# Home\n\nSee [the part](other.md#a-part-renamed).\n")
    with pytest.raises(Abort):
        build(load_config(str(settings)))


# History belongs in CHANGELOG.md and benchmarks/README.md, not in a page a user reads to
# get something done: "changed in issue 12", "re-measured 21:45 UTC at load 6-8".
HISTORY = re.compile(
    r"(?i)\bissue \d+|\bchanged in\b|re-measured|load average|\bat load\b"
    r"|\d{4}-\d\d-\d\d,? (?:at )?\d\d:\d\d"
)


def test_the_pages_carry_no_history() -> None:
    for page in sorted(DOCS.rglob("*.md")):
        found = HISTORY.search(page.read_text())
        assert found is None, f"{page.relative_to(ROOT)}: {found and found[0]!r} (history)"


def test_the_cli_reference_says_where_eval_records() -> None:
    text = _hooks().cli_reference()  # type: ignore[attr-defined]
    section = text.split("## loopwise eval\n", 1)[1].split("\n## ", 1)[0]
    store = " ".join(section.split("--store STORE", 2)[2].split()[:40])
    assert "$LOOPWISE_EVAL_STORE" in store and ".loopwise/eval.db" in store, store
    assert "or .loopwise/runs.db" not in store  # not the runs' store
