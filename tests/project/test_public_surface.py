"""The names users import, pinned: a move inside the package never breaks a user.

Users import from ``loopwise`` (the lazy face) and ``loopwise.testing``. The documented
submodules (``loopwise.gates``, ``loopwise.mcp``...) are attributes of the face — each the
very module that defines its names — not import paths of their own: no import hook, so a
type checker sees exactly what runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import loopwise

TESTING = {
    "PROFILES", "Cassette", "CassetteMismatch", "FakeChatServer", "Fault", "Rejection",
    "ScriptAnswer", "ScriptExhausted", "ScriptedAgent", "ScriptedModel", "ServerProfile",
    "call", "calls",
    "example_from_schema", "graduated_model", "logprob_turn", "refuse", "reply",
    "SplitModel", "judge_input", "partial_model", "scripted_judge",
}  # fmt: skip

DOCUMENTED = {
    "loopwise.gates": ("loopwise.tools.gates", {"policy", "policy_then_human", "human", "Gate"}),
    "loopwise.hybrid": ("loopwise.architectures.hybrid", {"Hybrid", "ActionCatalog", "REJECTED"}),
    "loopwise.approvals": ("loopwise.running.approvals", {"decide"}),
    "loopwise.calls": ("loopwise.tools.calls", {"call_tools"}),
    "loopwise.mcp": ("loopwise.integrations.mcp.servers", {"stdio", "http", "Override"}),
    "loopwise.otel": ("loopwise.integrations.otel", {"OTelSink"}),
}


def test_the_testing_face_is_exactly_its_list() -> None:
    import loopwise.testing

    assert set(loopwise.testing.__all__) == TESTING
    assert all(getattr(loopwise.testing, name) is not None for name in TESTING)


@pytest.mark.parametrize("public", sorted(DOCUMENTED))
def test_a_documented_submodule_is_its_home_module(public: str) -> None:
    home, names = DOCUMENTED[public]
    attribute = public.rpartition(".")[2]
    module = getattr(loopwise, attribute)
    assert module is importlib.import_module(home)
    assert names <= set(dir(module))
    assert attribute in loopwise.__all__


def test_the_face_plays_no_import_trick_in_a_fresh_process() -> None:
    code = (
        "import sys\n"
        "before = list(sys.meta_path)\n"
        "import loopwise\n"
        "from loopwise import gates, calls, approvals, hybrid, call_tools\n"
        "assert sys.meta_path == before, 'loopwise changed sys.meta_path'\n"
        "assert loopwise.gates is gates and calls.call_tools is call_tools\n"
        "assert callable(gates.policy) and callable(loopwise.check) and hybrid.REJECTED\n"
        "try:\n"
        "    import loopwise.gates\n"
        "except ModuleNotFoundError:\n"
        "    print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr


def test_the_package_root_never_touches_meta_path() -> None:
    source = importlib.util.find_spec("loopwise").origin  # type: ignore[union-attr]
    assert source is not None
    assert "meta_path" not in Path(source).read_text(encoding="utf-8")


def test_an_unknown_submodule_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = loopwise.nope  # type: ignore[attr-defined]
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("loopwise.step")


@pytest.mark.parametrize(
    ("name", "home"),
    [
        ("Cascade", "loopwise.architectures.cascade"),
        ("AskPerson", "loopwise.architectures.cascade"),
        ("Weighed", "loopwise.architectures.cascade"),
        ("sweep", "loopwise.evidence.sweeps.sweep"),
        ("asweep", "loopwise.evidence.sweeps.sweep"),
        ("Sweep", "loopwise.evidence.sweeps.points"),
        ("SweepPoint", "loopwise.evidence.sweeps.points"),
        ("Shadow", "loopwise.evidence.live.shadow"),
    ],
)
def test_the_cascade_and_sweep_names_come_from_their_homes(name: str, home: str) -> None:
    assert getattr(loopwise, name) is getattr(importlib.import_module(home), name)
    assert name in loopwise.__all__
