"""Since when: :func:`since_instant` reads a span back from now (``30m``, ``24h``, ``7d``,
``2w``) or an ISO date or time as the first instant of a window, in ISO-8601 UTC — the
form the store keeps times in, so a window is a comparison of strings."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from loopwise.errors import ConfigError

__all__ = ["since_instant"]

_SPAN = re.compile(r"([0-9]+)([mhdw])")  # ASCII digits: int() reads any script's
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def since_instant(text: str, *, flag: str, now: datetime | None = None) -> str | None:
    """The first instant ``text`` names (ISO-8601 UTC), or ``None`` for ``all``. Anything
    else raises :class:`ConfigError` naming ``flag`` (``name`` is the flag without its
    dashes)."""
    given = text.strip()
    if given == "all":
        return None
    span = _SPAN.fullmatch(given)
    try:
        if span is not None:
            back = timedelta(**{_UNITS[span[2]]: int(span[1])})
            return ((now or datetime.now(UTC)) - back).isoformat()
        start = datetime.fromisoformat(given)
        # A time at an offset may fall outside the years 1-9999 once in UTC.
        return (start if start.tzinfo else start.replace(tzinfo=UTC)).astimezone(UTC).isoformat()
    except (ValueError, OverflowError):  # not a date, or an instant before the year 1 or after 9999
        raise ConfigError(
            f"{flag} {text!r}: give a span back from now (30m, 24h, 7d, 2w), an ISO date or "
            "time (2026-12-01), or all",
            name=flag.lstrip("-"),
        ) from None
