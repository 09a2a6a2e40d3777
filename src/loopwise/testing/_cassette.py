"""Cassettes: record a model's answers once, replay them in regression tests.

``Cassette(path, model=real)`` forwards every call to ``real`` and appends the request's
fingerprint and the turn to ``path`` (JSON); ``Cassette(path)`` on an existing file
answers from it without any model or network. A replayed request must match a recorded
one (messages, tools, tool choice, response format); matching is by fingerprint, not by
order, so concurrent branches may ask in any order. A request the cassette does not
hold raises :class:`CassetteMismatch` (an ``AssertionError``) naming the call, so a
prompt change shows up as a failing test rather than a silent different answer.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict, deque
from pathlib import Path

from loopwise.core.jsontypes import JSONObject, JSONValue
from loopwise.errors import ConfigError
from loopwise.models.port import Model, ModelDefaults, ModelRequest, Turn, model_member

__all__ = ["Cassette", "CassetteMismatch"]

_VERSION = 1


class CassetteMismatch(AssertionError):
    """A replayed run asked something the cassette did not record."""


def fingerprint(request: ModelRequest) -> str:
    """A stable hash of what decides the answer: messages, tools, tool choice, format."""
    material = {
        "messages": request.messages,
        "tools": request.tools,
        "tool_choice": request.tool_choice,
        "response_format": request.response_format,
    }
    text = json.dumps(material, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class Cassette(ModelDefaults):
    """A model that records to, or replays from, one JSON file (see the module docs)."""

    def __init__(self, path: str | Path, *, model: Model | None = None) -> None:
        self.path = Path(path)
        self.inner = model
        self.recording = model is not None
        self._tape: dict[str, deque[JSONObject]] = defaultdict(deque)
        self._entries: list[JSONValue] = []
        if model is not None:
            self.name = model.name
        elif self.path.is_file():
            self.name = self._load()
        else:
            raise ConfigError(
                f"cassette {self.path} does not exist: record it first with "
                "Cassette(path, model=a_real_model)",
                name=str(self.path),
            )

    def _load(self) -> str:
        try:
            data = json.loads(self.path.read_text())
            entries = data["interactions"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(
                f"cassette {self.path} is unreadable: {e}", name=str(self.path)
            ) from e
        for entry in entries:
            self._tape[entry["fingerprint"]].append(entry["turn"])
        return str(data.get("model", "cassette"))

    async def complete(self, request: ModelRequest) -> Turn:
        """Forward and record (recording), or answer from the tape (replaying)."""
        key = fingerprint(request)
        if self.inner is not None:
            turn = await self.inner.complete(request)
            self._entries.append({"fingerprint": key, "turn": turn.to_dict()})
            self._save()
            return turn
        queue = self._tape.get(key)
        if not queue:
            last = request.messages[-1] if request.messages else {}
            raise CassetteMismatch(
                f"cassette {self.path} holds no answer for this request (fingerprint {key}); "
                f"the last message was {json.dumps(last, default=str)[:200]}; "
                "re-record the cassette if the prompt changed on purpose"
            )
        return Turn.from_dict(queue.popleft())

    async def aclose(self) -> None:
        """Release the recorded model's connections (nothing to do when replaying)."""
        if self.inner is not None:
            await model_member(self.inner, "aclose")()

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        document = {"version": _VERSION, "model": self.name, "interactions": self._entries}
        self.path.write_text(json.dumps(document, indent=1) + "\n")
