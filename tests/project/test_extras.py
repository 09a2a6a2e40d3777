"""One way an extra is missing: the module that needs it fails at import with
:class:`~loopwise.errors.MissingExtra` naming what to install."""

from __future__ import annotations

import importlib
import sys

import pytest

from loopwise.cli.main import main
from loopwise.errors import ConfigError, MissingExtra, missing_extra
from loopwise.store.open import open_store

CASES = [
    ("loopwise.integrations.otel", "opentelemetry", "otel"),
    ("loopwise.integrations.mcp.servers", "mcp", "mcp"),
    ("loopwise.store.postgres", "psycopg", "postgres"),
]


@pytest.mark.parametrize(("module", "sdk", "extra"), CASES)
def test_a_module_without_its_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, module: str, sdk: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, sdk, None)  # `import sdk` raises ImportError
    monkeypatch.delitem(sys.modules, module, raising=False)
    if module.endswith(".mcp.servers"):  # its connection module checks for the SDK
        monkeypatch.delitem(sys.modules, "loopwise.integrations.mcp.connection", raising=False)
    with pytest.raises(MissingExtra, match=rf"pip install 'loopwise\[{extra}\]'") as raised:
        importlib.import_module(module)
    assert (raised.value.code, raised.value.extra, raised.value.name) == (
        "missing-extra",
        extra,
        sdk,
    )
    assert isinstance(raised.value, ConfigError)


def test_a_postgresql_url_without_the_extra_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.delitem(sys.modules, "loopwise.store.postgres", raising=False)
    with pytest.raises(MissingExtra, match=r"pip install 'loopwise\[postgres\]'"):
        open_store("postgresql://u@127.0.0.1/db")
    assert main(["pending", "--store", "postgresql://u@127.0.0.1/db"]) == 2
    err = capsys.readouterr().err
    assert "loopwise[postgres]" in err and err.count("\n") == 1


def test_the_helper_names_the_module_that_is_missing() -> None:
    error = missing_extra("dev", ModuleNotFoundError(name="playwright"), needed_by="the test")
    assert str(error) == (
        "the test needs the dev extra: pip install 'loopwise[dev]' (playwright is not installed)"
    )
