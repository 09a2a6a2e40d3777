"""Every Python example in the README runs as written (the first one is the quick start)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_has_a_first_example() -> None:
    assert BLOCKS and "loopwise.run(" in BLOCKS[0]


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # examples may write files (a cassette, a store)
    code = compile(BLOCKS[index], f"README.md#example-{index + 1}", "exec", dont_inherit=True)
    exec(code, {"__name__": f"readme_{index + 1}"})
