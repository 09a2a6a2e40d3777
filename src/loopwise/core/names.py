"""The names people give and the text a terminal prints, checked by one rule.

A step's name is a part of its path (``flow/desk``), which is stored with each of its
events, keys its journal records and begins the approval ids a person reads in a terminal
and types back. So a name is text that every store can hold and every terminal prints
as it is: non-empty, no ``/`` (it separates the names of a path), no character a terminal
would obey or reorder instead of showing it — a control character (NUL, CR, LF, ESC,
DEL...), a line or paragraph separator, a bidirectional mark, embedding, override or
isolate, or a lone surrogate (:func:`unprintable`). Anything else is fine — ``é``,
``中文``, emoji, spaces, ``:`` and ``%`` (the journal escapes those in its keys).
:func:`check_name` and :func:`name_problem` check a step's or a node's name.

A name a person gives that is printed back to other people — who decided an approval
(``loopwise approve --by``, the inbox's name field or its proxy's user header,
``decide(by=)``) — follows the same rule except that it may hold ``/`` (``team/lead``):
it is never part of a path — and shows somebody: not only spaces, zero-width or formatting
characters, and at most :data:`MAX_SHOWN_NAME` characters. :func:`shown_name_problem`
checks it.

Free text (a reason for a denial, a tool's error, a planner's reason) may hold anything,
several lines too; wherever it is printed on a terminal it goes through :func:`printable`,
which shows each unprintable character as an escape (``\\x1b``, ``\\n``, ``\\u202e``).
"""

from __future__ import annotations

import difflib
import unicodedata
from collections.abc import Iterable

from loopwise.errors import ConfigError

__all__ = [
    "MAX_SHOWN_NAME",
    "check_name",
    "counted",
    "did_you_mean",
    "name_problem",
    "printable",
    "shown_name_problem",
    "unprintable",
]

# The bidirectional marks, embeddings, overrides and isolates: printed, they reorder the
# text around them, so an approval id could read as another.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_UNPRINTABLE = frozenset({"Cc", "Cs", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def unprintable(ch: str) -> bool:
    """Whether a terminal would obey or reorder by the character ``ch`` rather than show
    it (a control character, line or paragraph separator, bidirectional control or lone
    surrogate)."""
    return ch in _BIDI or unicodedata.category(ch) in _UNPRINTABLE


def printable(text: str, *, keep: str = "") -> str:
    """``text`` with each :func:`unprintable` character but those in ``keep`` shown as an
    escape (``\\n``, ``\\r``, ``\\t``, ``\\xNN``, ``\\uNNNN``); other characters (``é``,
    ``中文``, emoji) stay as they are."""
    if text.isprintable():
        return text
    return "".join(_escape(ch) if ch not in keep and unprintable(ch) else ch for ch in text)


def _escape(ch: str) -> str:
    code = ord(ch)
    return _NAMED.get(ch) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def name_problem(name: object) -> str | None:
    """What is wrong with ``name`` as a step's or a node's name, or ``None`` when nothing."""
    return _problem(name, slash=False)


MAX_SHOWN_NAME = 200
"""The longest name of a person who decides, in characters."""

_INVISIBLE = frozenset({"Zs", "Cf", "Mn", "Me"})


def shown_name_problem(name: object) -> str | None:
    """What is wrong with ``name`` as the name of a person who decides (printed back to
    others; ``/`` is allowed: see the module docs), or ``None`` when nothing. Such a name
    also shows something — not only spaces, zero-width or formatting characters (the
    audit log would name nobody) — and holds at most :data:`MAX_SHOWN_NAME` characters."""
    problem = _problem(name, slash=True)
    if problem is not None or not isinstance(name, str):
        return problem
    if len(name) > MAX_SHOWN_NAME:
        return f"is {len(name)} characters long; a name holds at most {MAX_SHOWN_NAME}"
    if all(unicodedata.category(ch) in _INVISIBLE for ch in name):
        return "shows nothing (only spaces, zero-width or formatting characters)"
    return None


def _problem(name: object, *, slash: bool) -> str | None:
    if not isinstance(name, str):
        return f"must be text, not {type(name).__name__}"
    if not name:
        return "must be non-empty"
    if name.isprintable() and (slash or "/" not in name):
        return None
    for at, ch in enumerate(name):
        if ch == "/" and not slash:
            return f"has '/' at position {at}: '/' separates the names of nested steps"
        if unprintable(ch):
            where = (
                "printed to the people who read the run"
                if slash
                else "stored with the run and printed in approval ids"
            )
            return (
                f"has {ch!a} at position {at}: a name is {where}, so it holds no control "
                "character, line separator, bidirectional control or lone surrogate"
            )
    return None


def check_name(name: object, *, what: str) -> str:
    """``name`` when it is a valid name (see the module docs); else :class:`ConfigError`
    (``name="name"``, ``code="bad-name"``) saying which character, where. ``what`` is
    what the name is of (``"agent"``, ``"workflow"``)."""
    problem = name_problem(name)
    if problem is None:
        return str(name)
    raise ConfigError(f"{what} name {name!r} {problem}", name="name", code="bad-name")


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, the noun in the plural unless ``n`` is 1 (``1 model call``,
    ``2 model calls``, ``0 runs``); ``plural`` when adding an ``s`` is wrong."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the choice closest to a mistyped ``name`` (standard
    library :func:`difflib.get_close_matches`), or ``""`` when none is close."""
    close = difflib.get_close_matches(name, sorted(set(choices)), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""
