"""An event's data as the guides read it, under ``mypy --strict``: docs/guides/cascades.md
reads the threshold's decision as ``weighed.data["output"]["side"]``, which type-checked
while ``Event.data`` was ``dict[str, Any]`` and does not since it is a ``JSONObject``
(issue 46): the nested value is a ``JSONValue`` a user must narrow before indexing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

USER_CODE = """
import loopwise


def went_unsure(weighed: loopwise.Event) -> bool:
    return weighed.data["output"]["side"] == "unsure"
"""


@pytest.mark.slow  # mypy in a subprocess
@pytest.mark.xfail(
    strict=True,
    reason="defect (review1): Event.data is JSONObject; docs/guides/cascades.md indexes "
    'data["output"]["side"], an error under mypy --strict since issue 46 (the guide or '
    "the type must change)",
)
def test_event_data_read_as_the_cascades_guide_does_type_checks(tmp_path: Path) -> None:
    path = tmp_path / "read_event.py"
    path.write_text(USER_CODE, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert not errors, "\n".join(errors)
