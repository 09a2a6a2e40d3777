"""Test setup: no network beyond 127.0.0.1, no key, a fresh store per test."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_real_connect = socket.socket.connect


def _loopback_only(self: socket.socket, address: Any) -> Any:
    host = address[0] if isinstance(address, tuple) else address
    if (
        isinstance(host, str)
        and host not in {"127.0.0.1", "localhost", "::1"}
        and not (self.family == socket.AF_UNIX)
    ):
        raise RuntimeError(f"tests may not touch the network (tried {address!r})")
    return _real_connect(self, address)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setattr(socket.socket, "connect", _loopback_only)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "LOOPWISE_MODEL"):
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)  # a developer's tracing setup must not change what runs
    monkeypatch.setenv("LOOPWISE_STORE", str(tmp_path / "runs.db"))
    # The examples' shop database is built on first use: never in the checkout.
    monkeypatch.setenv("LOOPWISE_SHOP_DB", str(tmp_path / "shop.db"))
    yield
