"""The names users import, pinned: a move inside the package never breaks a user.

Users import from ``loopwise`` (the lazy face), ``loopwise.testing`` and the documented
submodules (``loopwise.gates``, ``loopwise.mcp``...), which stay importable by their flat
names wherever their modules live; each is the very module that defines its names.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import loopwise

TESTING = {
    "PROFILES", "Cassette", "CassetteMismatch", "FakeChatServer", "Fault", "Rejection",
    "ScriptExhausted", "ScriptedAgent", "ScriptedModel", "ServerProfile", "call", "calls",
    "example_from_schema", "graduated_model", "logprob_turn", "refuse", "reply",
}  # fmt: skip

DOCUMENTED = {
    "loopwise.gates": ("loopwise.tools.gates", {"policy", "policy_then_human", "human", "Gate"}),
    "loopwise.hybrid": ("loopwise.architectures.hybrid", {"Hybrid", "ActionCatalog", "REJECTED"}),
    "loopwise.approvals": ("loopwise.running.approvals", {"decide"}),
    "loopwise.calls": ("loopwise.tools.calls", {"call_tools"}),
    "loopwise.mcp": ("loopwise.integrations.mcp", {"stdio", "http", "Override"}),
    "loopwise.otel": ("loopwise.integrations.otel", {"OTelSink"}),
}


def test_the_testing_face_is_exactly_its_list() -> None:
    import loopwise.testing

    assert set(loopwise.testing.__all__) == TESTING
    assert all(getattr(loopwise.testing, name) is not None for name in TESTING)


@pytest.mark.parametrize("public", sorted(DOCUMENTED))
def test_a_documented_submodule_is_its_home_module(public: str) -> None:
    home, names = DOCUMENTED[public]
    module = importlib.import_module(public)
    assert module is importlib.import_module(home)
    assert module.__name__ == home and module.__spec__ is not None
    assert module.__spec__.name == home
    assert names <= set(dir(module))
    assert getattr(loopwise, public.rpartition(".")[2]) is module


def test_old_flat_imports_still_work_in_a_fresh_process() -> None:
    code = (
        "from loopwise.gates import policy, policy_then_human\n"
        "from loopwise.hybrid import REJECTED, PlanContext\n"
        "from loopwise import gates, calls, approvals\n"
        "import loopwise, loopwise.gates\n"
        "assert loopwise.gates is gates and callable(loopwise.check) and callable(loopwise.step)\n"
        "assert sorted(dir(loopwise))[:3] == ['Action', 'ActionCatalog', 'ActionResult']\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr


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
        ("Sweep", "loopwise.evidence.sweeps.sweep"),
        ("SweepPoint", "loopwise.evidence.sweeps.sweep"),
    ],
)
def test_the_cascade_and_sweep_names_come_from_their_homes(name: str, home: str) -> None:
    assert getattr(loopwise, name) is getattr(importlib.import_module(home), name)
    assert name in loopwise.__all__
