"""Test setup: no network beyond 127.0.0.1, no key, a fresh store per test.

PostgreSQL tests use the server ``LOOPWISE_TEST_PG`` names (``.ci/run`` starts a throwaway
one), each test in a database of its own; without it they skip, except under ``CI=true``.
"""

from __future__ import annotations

import os
import socket
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopwise.store.open import close_shared_stores
from tests.support.wheel import Installed, install_wheel

PG_HOW = (
    "PostgreSQL store tests skipped: set LOOPWISE_TEST_PG=postgresql://user@127.0.0.1:PORT/db "
    "(a server where the tests may create databases) or run .ci/run, which starts one"
)
_skipped_pg: list[str] = []

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
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "LOOPWISE_MODEL", "LOOPWISE_API"):
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)  # a developer's tracing setup must not change what runs
    monkeypatch.setenv("LOOPWISE_STORE", str(tmp_path / "runs.db"))
    # The examples' shop database is built on first use: never in the checkout.
    monkeypatch.setenv("LOOPWISE_SHOP_DB", str(tmp_path / "shop.db"))
    yield
    close_shared_stores()


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """This checkout's wheel in a fresh venv outside it (tests/support/wheel.py), built once."""
    return install_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test (dropped afterwards)."""
    base = os.environ.get("LOOPWISE_TEST_PG")
    if not base:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("CI=true but LOOPWISE_TEST_PG is not set (.ci/run starts PostgreSQL)")
        _skipped_pg.append("pg")
        pytest.skip(PG_HOW)
    import psycopg

    name = f"lw_{os.urandom(6).hex()}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield urllib.parse.urlsplit(base)._replace(path=f"/{name}").geturl()
    close_shared_stores()
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgresql"])
def store_at(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a store test keeps its runs: a SQLite path, then a PostgreSQL URL."""
    if request.param == "sqlite":
        return str(tmp_path / "runs.db")
    url: str = request.getfixturevalue("pg_url")
    return url


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _skipped_pg:
        terminalreporter.write_line(PG_HOW)
