"""Fakes for tests and offline runs: scripted models and a local Chat Completions server.

* :class:`ScriptedModel` (in :mod:`loopwise.models.scripted`) answers in-process, from a list of
  turns (consumed in order, for unit tests) or from a function of the request (pure, so a
  resumed run replays the same answers). With no script it is the offline
  ``--model scripted``: schema-valid JSON for structured calls, one plausible call of the
  first tool when tools are offered. A :class:`Fault` entry injects a failure.
* :func:`reply`, :func:`call`, :func:`calls`, :func:`refuse` build turns tersely;
  :func:`logprob_turn` a judge's one-token answer with its log-probabilities (a script
  may also answer a judge with a dict of probabilities, :mod:`loopwise.models.decided`).
* :class:`ScriptedAgent` (in :mod:`loopwise.testing._scripted_agent`) is an offline model for
  an agent or a planner declared as a plan: call these tools in this order with these
  arguments, then answer. Its steps and answer read the transcript through
  :meth:`~loopwise.ModelRequest.user_text`, :meth:`~loopwise.ModelRequest.tool_results`,
  :meth:`~loopwise.ModelRequest.last_result` and :meth:`~loopwise.ModelRequest.called`.
* :class:`FakeChatServer` (in :mod:`loopwise.testing._fakeserver`) is a real HTTP server on
  127.0.0.1 speaking Chat Completions, so integration tests go through the real
  ``openai`` client.
* :class:`ServerProfile` and :data:`PROFILES` (in :mod:`loopwise.testing._serverprofiles`)
  reproduce real servers' quirks: ``FakeChatServer(profile="llama-cpp-python")``.
* :func:`graduated_model` (in :mod:`loopwise.testing._graduated`) answers the calls of a
  workflow ``loopwise graduate`` wrote as the agent's own scripted model would have.
* :func:`scripted_judge` (in :mod:`loopwise.testing._judging`) scripts a judge's
  probabilities per input; :class:`SplitModel` sends a judge's requests to one model and
  everything else to another (what a cascade needs offline).
* :class:`Cassette` (in :mod:`loopwise.testing._cassette`) records a real model's answers to a
  JSON file once and replays whole runs from it in regression tests.

* The pytest plugin (:mod:`loopwise.testing.pytest_plugin`, loaded by pytest itself once
  loopwise is installed) gives the fixtures ``loopwise_store`` and ``fake_chat_server``.

Names load on first use (as in ``loopwise``), so the plugin costs a pytest session nothing
until a test uses the fakes. Token counts of scripted turns are estimated at ~4 characters
per token, so budgets behave as they would against a real model.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loopwise.models.decided import logprob_turn
    from loopwise.models.scripted import (
        Fault,
        ScriptAnswer,
        ScriptedModel,
        ScriptExhausted,
        call,
        calls,
        example_from_schema,
        refuse,
        reply,
    )
    from loopwise.testing._cassette import Cassette, CassetteMismatch
    from loopwise.testing._fakeserver import FakeChatServer
    from loopwise.testing._graduated import graduated_model
    from loopwise.testing._judging import SplitModel, judge_input, partial_model, scripted_judge
    from loopwise.testing._scripted_agent import ScriptedAgent
    from loopwise.testing._serverprofiles import PROFILES, Rejection, ServerProfile

_LAZY = {
    **dict.fromkeys(
        [
            "Fault",
            "ScriptAnswer",
            "ScriptedModel",
            "ScriptExhausted",
            "call",
            "calls",
            "example_from_schema",
            "refuse",
            "reply",
        ],
        "loopwise.models.scripted",
    ),
    **dict.fromkeys(["Cassette", "CassetteMismatch"], "loopwise.testing._cassette"),
    "FakeChatServer": "loopwise.testing._fakeserver",
    "graduated_model": "loopwise.testing._graduated",
    **dict.fromkeys(
        ["SplitModel", "judge_input", "partial_model", "scripted_judge"],
        "loopwise.testing._judging",
    ),
    "logprob_turn": "loopwise.models.decided",
    "ScriptedAgent": "loopwise.testing._scripted_agent",
    **dict.fromkeys(["PROFILES", "Rejection", "ServerProfile"], "loopwise.testing._serverprofiles"),
}


def __getattr__(name: str) -> Any:
    """Load an exported name on first access."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)  # getattr: a lazy export, by name
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names, before any has loaded."""
    return sorted(__all__)


__all__ = [
    "PROFILES",
    "Cassette",
    "CassetteMismatch",
    "FakeChatServer",
    "Fault",
    "Rejection",
    "ScriptAnswer",
    "ScriptExhausted",
    "ScriptedAgent",
    "ScriptedModel",
    "ServerProfile",
    "SplitModel",
    "call",
    "calls",
    "example_from_schema",
    "graduated_model",
    "judge_input",
    "logprob_turn",
    "partial_model",
    "refuse",
    "reply",
    "scripted_judge",
]
