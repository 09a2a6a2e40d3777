"""pytest fixtures for a project that uses loopwise: pytest loads this plugin by itself once
loopwise is installed (its ``pytest11`` entry point), so a test just names them.

* ``loopwise_store`` — a fresh SQLite store in the test's temporary folder, and
  ``LOOPWISE_STORE`` pointing at it for the test, so ``loopwise.run``'s default store,
  :func:`loopwise.approve`/:func:`loopwise.deny` and the ``loopwise`` command all use it;
  the fixture's value is its path (pass it as ``store=``).
* ``fake_chat_server`` — a function that starts a
  :class:`~loopwise.testing.FakeChatServer` (``fake_chat_server(script, **options)``), points
  ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` at it for the test and stops it afterwards; use
  ``server.model()`` as a run's model.

Nothing is imported until a fixture is used: a test session that uses neither pays nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from loopwise.models.scripted import Responder, ScriptedModel, ScriptEntry
    from loopwise.testing._fakeserver import FakeChatServer

    Script = ScriptedModel | Iterable[ScriptEntry] | Responder | None

__all__ = ["fake_chat_server", "loopwise_store"]


@pytest.fixture
def loopwise_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh store for this test (see the module docstring)."""
    from loopwise.store.open import close_shared_stores

    path = tmp_path / "loopwise" / "runs.db"
    path.parent.mkdir()
    monkeypatch.setenv("LOOPWISE_STORE", str(path))
    yield path
    close_shared_stores()


@pytest.fixture
def fake_chat_server(
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[..., FakeChatServer]]:
    """Start a local Chat Completions server for this test (see the module docstring)."""
    from loopwise.testing._fakeserver import FakeChatServer

    started: list[FakeChatServer] = []

    def start(script: Script = None, **options: Any) -> FakeChatServer:
        server = FakeChatServer(script, **options).start()
        started.append(server)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "fake-key")
        return server

    yield start
    for server in started:
        server.stop()
