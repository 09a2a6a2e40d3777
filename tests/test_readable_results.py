"""Results people can read: `runs list` columns, one output shape per status."""

from __future__ import annotations

from pathlib import Path

import pytest

import loopwise
from loopwise.cli import main
from loopwise.testing import ScriptedModel, reply


def test_runs_list_has_a_header_and_columns_that_hold_with_long_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clerk = loopwise.Agent(name="clerk", instructions="Answer.", max_steps=2)
    long_model = "meta-llama/Llama-3.1-70B-Instruct-Turbo-quantized-q4_k_m-gguf-v2"
    for name in ("scripted", long_model, "m"):
        loopwise.run(clerk, "Hi?", model=ScriptedModel([reply("Hello.")], name=name))
    assert main(["runs", "list"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["RUN", "STATUS", "TARGET", "MODEL", "TOKENS", "CREATED", "(UTC)"]
    assert len(rows) == 3
    created = header.index("CREATED")
    tokens_end = header.index("TOKENS") + len("TOKENS")
    for row in rows:
        assert row[header.index("STATUS") :].startswith("completed")
        assert row[header.index("TARGET") :].startswith("clerk")
        assert row[created : created + 4].isdigit()  # the year, in its column
        assert row[tokens_end - 1].isdigit()  # right-aligned under its header
    assert any("…" in row for row in rows)  # a 64-character model name is cut, not shifting
