"""Every Python example in the README and in the docs runs as written (the README's first
one is the workflow of its "one example per architecture")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import ROOT

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
BLOCKS = [
    (page, i, block)
    for page in PAGES
    for i, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), re.S))
]


def _name(page: Path, index: int) -> str:
    return f"{page.relative_to(ROOT)}#example-{index + 1}"


def test_the_readme_has_a_first_example_and_stays_a_front_door() -> None:
    first = next(block for page, _, block in BLOCKS if page == README)
    assert "loopwise.run(" in first
    assert len(README.read_bytes()) <= 15_000
    assert not re.search(r"(?mi)^#+ .*issue \d+", README.read_text())


@pytest.mark.parametrize(
    ("page", "index", "block"), BLOCKS, ids=[_name(p, i) for p, i, _ in BLOCKS]
)
def test_example_runs(
    page: Path, index: int, block: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # examples may write files (a cassette, a store)
    code = compile(block, _name(page, index), "exec", dont_inherit=True)
    exec(code, {"__name__": f"example_{index + 1}"})
