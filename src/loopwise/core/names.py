"""The names a user gives a step or a workflow node, checked once: :func:`check_name`.

A step's name is a part of its path (``flow/desk``), which is stored with each of its
events, keys its journal records and begins the approval ids a person reads in a terminal
and types back. So a name is text that every store can hold and every terminal prints
as it is: non-empty, no ``/`` (it separates the names of a path), no control character
(NUL, CR, LF, ESC, DEL...), line or paragraph separator, bidirectional override, or lone
surrogate. Anything else is fine — ``é``, ``中文``, emoji, spaces, ``:`` and ``%`` (the
journal escapes those in its keys).
"""

from __future__ import annotations

import unicodedata

from loopwise.errors import ConfigError

__all__ = ["check_name", "name_problem"]

# The bidirectional embeddings, overrides and isolates: printed, they reorder the text
# around them, so an approval id could read as another.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_UNPRINTABLE = frozenset({"Cc", "Cs", "Zl", "Zp"})


def name_problem(name: object) -> str | None:
    """What is wrong with ``name`` as a step's or a node's name, or ``None`` when nothing."""
    if not isinstance(name, str):
        return f"must be text, not {type(name).__name__}"
    if not name:
        return "must be non-empty"
    if name.isprintable() and "/" not in name:
        return None
    for at, ch in enumerate(name):
        if ch == "/":
            return f"has '/' at position {at}: '/' separates the names of nested steps"
        if ch in _BIDI or unicodedata.category(ch) in _UNPRINTABLE:
            return (
                f"has {ch!a} at position {at}: a name is stored with the run and "
                "printed in approval ids, so it holds no control character, line "
                "separator, bidirectional override or lone surrogate"
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
