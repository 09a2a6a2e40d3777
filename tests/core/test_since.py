"""since_instant: what `runs list --since` and `check --live-window` read."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from loopwise.cli.main import main
from loopwise.core.since import since_instant
from loopwise.errors import ConfigError

NOW = datetime(2026, 12, 5, tzinfo=UTC)


def test_spans_dates_and_offsets_read_as_utc() -> None:
    assert since_instant("7d", flag="--since", now=NOW) == "2026-11-28T00:00:00+00:00"
    assert since_instant("2026-12-01", flag="--since") == "2026-12-01T00:00:00+00:00"
    assert since_instant("2026-12-01T02:00+02:00", flag="--since") == "2026-12-01T00:00:00+00:00"
    assert since_instant("all", flag="--since") is None


@pytest.mark.parametrize(
    "text",
    [
        "0001-01-01T00:00+01:00",  # before the year 1 in UTC
        "9999-12-31T23:59-05:00",  # after 9999 in UTC
        "\u0663d",  # an Arabic-Indic 3: not a span
        "99999999999w",
    ],
)
def test_an_instant_out_of_range_is_a_config_error_naming_the_flag(text: str) -> None:
    with pytest.raises(ConfigError) as raised:
        since_instant(text, flag="--since", now=NOW)
    assert "--since" in str(raised.value)


def test_runs_list_since_out_of_range_is_one_line_exit_2(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"{tmp_path}/runs.db"
    assert main(["runs", "list", "--since", "0001-01-01T00:00+01:00", "--store", store]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--since '0001-01-01T00:00+01:00'" in err
