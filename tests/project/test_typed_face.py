"""The public face is what a type checker sees: every import line of the README and the
docs type-checks under ``mypy --strict``, and the names it brings are typed (never
``Any``). The face plays no import trick a checker cannot follow (issue 46)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

IMPORT = re.compile(r"^(?:from loopwise[\w.]* import .+|import loopwise[\w.]*)$")


def _doc_import_lines() -> list[str]:
    lines: set[str] = set()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        inside = False
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.startswith("```"):
                inside = line.strip() in {"```python", "```py"}
                continue
            if inside and IMPORT.match(line) and not line.rstrip().endswith("("):
                lines.add(line.strip())
    return sorted(lines)


def _mypy(source: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "face_check.py"
    path.write_text(source, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


def test_the_docs_import_lines_are_found() -> None:
    lines = _doc_import_lines()
    assert "import loopwise" in lines
    assert any(line.startswith("from loopwise.testing import") for line in lines)


@pytest.mark.slow
def test_every_import_line_of_the_docs_type_checks_and_call_tools_is_typed(
    tmp_path: Path,
) -> None:
    source = "\n".join(
        [
            *_doc_import_lines(),
            "from loopwise import call_tools, gates",
            "reveal_type(call_tools)",
            "reveal_type(gates.human)",
        ]
    )
    done = _mypy(source + "\n", tmp_path)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert not errors, "\n".join(errors)
    revealed = [line for line in done.stdout.splitlines() if "Revealed type" in line]
    assert len(revealed) == 2, done.stdout
    assert all('"Any"' not in line for line in revealed), revealed
    assert "def (" in revealed[0], revealed[0]


@pytest.mark.slow
def test_a_removed_flat_path_is_a_type_error_too(tmp_path: Path) -> None:
    done = _mypy("from loopwise.calls import call_tools\n", tmp_path)
    assert "error" in done.stdout, done.stdout
