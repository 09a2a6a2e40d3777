"""Fakes for tests and offline runs: scripted models and a local Chat Completions server.

* :class:`ScriptedModel` (in :mod:`loopwise.models.scripted`) answers in-process, from a list of
  turns (consumed in order, for unit tests) or from a function of the request (pure, so a
  resumed run replays the same answers). With no script it is the offline
  ``--model scripted``: schema-valid JSON for structured calls, one plausible call of the
  first tool when tools are offered. A :class:`Fault` entry injects a failure.
* :func:`reply`, :func:`call`, :func:`calls`, :func:`refuse` build turns tersely.
* :class:`FakeChatServer` (in :mod:`loopwise.testing._fakeserver`) is a real HTTP server on
  127.0.0.1 speaking Chat Completions, so integration tests go through the real
  ``openai`` client.
* :class:`ServerProfile` and :data:`PROFILES` (in :mod:`loopwise.testing._serverprofiles`)
  reproduce real servers' quirks: ``FakeChatServer(profile="llama-cpp-python")``.
* :class:`Cassette` (in :mod:`loopwise.testing._cassette`) records a real model's answers to a
  JSON file once and replays whole runs from it in regression tests.

Token counts of scripted turns are estimated at ~4 characters per token, so budgets
behave as they would against a real model.
"""

from __future__ import annotations

from loopwise.models.scripted import (
    Fault,
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
from loopwise.testing._serverprofiles import PROFILES, Rejection, ServerProfile

__all__ = [
    "PROFILES",
    "Cassette",
    "CassetteMismatch",
    "FakeChatServer",
    "Fault",
    "Rejection",
    "ScriptExhausted",
    "ScriptedModel",
    "ServerProfile",
    "call",
    "calls",
    "example_from_schema",
    "refuse",
    "reply",
]
