"""An event's data as the guides read it, under ``mypy --strict``: docs/guides/cascades.md
reads the threshold's decision as ``weighed.data["output"]["side"]``, which type-checked
while ``Event.data`` was ``dict[str, Any]`` and did not while it was a ``JSONObject``
(issue 46's first pass: the nested value was a ``JSONValue`` a user had to narrow before
indexing). A sink reads a tool call's arguments the same way. (Returning such a comparison
from a ``-> bool`` function is ``no-any-return`` under ``--strict``, as with any JSON read
as ``Any``; the guide asserts it.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import strict_mypy_errors

USER_CODE = """
import loopwise


def check_unsure(weighed: loopwise.Event) -> None:
    assert weighed.data["output"]["side"] == "unsure"  # the guide's line, as it reads it


def side_of(weighed: loopwise.Event) -> str:
    side: str = weighed.data["output"]["side"]
    return side


class Refunds:
    def __init__(self) -> None:
        self.total = 0.0

    def record(self, run_id: str, event: loopwise.Event) -> None:
        if event.type == "tool_call" and event.data["tool"] == "refund":
            self.total += float(event.data["args"]["amount"])
"""


@pytest.mark.slow  # mypy in a subprocess
def test_event_data_read_as_the_cascades_guide_does_type_checks(tmp_path: Path) -> None:
    errors = strict_mypy_errors(USER_CODE, tmp_path / "read_event.py")
    assert not errors, "\n".join(errors)
