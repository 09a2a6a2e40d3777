"""What the tests share that is not a fixture: the checkout's root, helper modules and scripts.

``ROOT`` is the checkout (where ``workflows/``, ``agents/``, ``docs/`` live): a test finds files
through it, never by counting its own ``__file__``'s parents, so a test moved to another folder
still finds them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The checkout's root folder."""


def strict_mypy_errors(source: str, path: Path) -> list[str]:
    """The ``error:`` lines of ``mypy --strict`` on ``source`` written to ``path``: user
    code as the docs show it, checked against the loopwise in this checkout."""
    path.write_text(source, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    return [line for line in done.stdout.splitlines() if ": error:" in line]
