"""What a generated workflow module may hold: identifiers from one registry (:class:`Names`:
ASCII, unique case-sensitively, never a keyword, a builtin or a name the module defines
itself), values as finite JSON-like literals (:func:`literal`), and text from the runs
escaped wherever it lands (:func:`doc` in a docstring, :func:`comment` in a comment) — a
value or a name from a stored run can never become code or keep the module from loading.
"""

from __future__ import annotations

import builtins
import keyword
import math
import re

from loopwise.core.names import printable
from loopwise.errors import ConfigError

__all__ = [
    "Names",
    "argument",
    "comment",
    "doc",
    "identifier",
    "literal",
    "node_doc",
    "wrap",
]


_OWN = frozenset(
    {"AGENT", "Any", "Literal", "annotations", "loopwise", "begin", "answer", "_ANSWER", "_W"}
    | {"_agent", "offline_model", "make_deps", "make_eval_deps", "agent_model"}
    | {"graduated_model", "state", "ctx", "args", "calls", "items", "item", "value", "branch"}
)
"""The names the module (and its functions) define or import besides the generated ones."""


class Names:
    """Every identifier the module defines: ASCII, never a keyword, a builtin or one of
    :data:`_OWN`, and unique (case-sensitively) — ``pay-out`` and ``pay_out`` become
    ``call_pay_out`` and ``call_pay_out_2``."""

    def __init__(self, *taken: str) -> None:
        self.used: set[str] = set(_OWN) | set(dir(builtins)) | set(taken)

    def unique(self, base: str) -> str:
        stem = identifier(base)
        name, n = stem, 2
        while name in self.used:
            name, n = f"{stem}_{n}", n + 1
        self.used.add(name)
        return name


def identifier(text: str) -> str:
    """``text`` as an ASCII Python identifier that is no keyword (``1lookup`` →
    ``_1lookup``, ``pay-out`` → ``pay_out``, ``lambda`` → ``lambda_``)."""
    ident = re.sub(r"[^0-9A-Za-z_]", "_", text) or "step"
    if ident[0].isdigit():
        ident = f"_{ident}"
    return f"{ident}_" if keyword.iskeyword(ident) or keyword.issoftkeyword(ident) else ident


def literal(value: object, what: str) -> str:
    """``value`` as a Python literal; :class:`ConfigError` naming ``what`` when it is not
    plain JSON-like data with finite numbers (a NaN or an infinity would be written as a
    name no module defines, and no condition could compare with it)."""
    _check_literal(value, what)
    return repr(value)


def _check_literal(value: object, what: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(
            f"graduate: the value learned for {printable(what)} is {value!r}, not a finite "
            "number: a workflow cannot be written from it (fix the runs' data, or write that "
            "part by hand)",
            name=printable(what),
        )
    if isinstance(value, list | tuple):
        for item in value:
            _check_literal(item, what)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_literal(key, what)
            _check_literal(item, what)
    elif value is not None and not isinstance(value, str | int | float | bool):
        raise ConfigError(
            f"graduate: the value learned for {printable(what)} is a {type(value).__name__}, "
            "not JSON data",
            name=printable(what),
        )


def argument(name: str, tool: str) -> str:
    """An argument name as a dict key of the module; :class:`ConfigError` for one no tool
    can take (a control character, a NUL: the module could not load)."""
    if not isinstance(name, str) or not name.isprintable() or not name:
        raise ConfigError(
            f"graduate: the runs call {printable(tool)} with an argument named {name!r}, "
            "which no tool takes (a control character or an empty name)",
            name=printable(str(name)),
        )
    return repr(name)


def comment(text: str) -> str:
    """``text`` safe in a ``#`` comment: one line, every unprintable character escaped."""
    return printable(text)


def node_doc(text: str) -> list[str]:
    """A function's docstring of ``text`` (escaped), wrapped at 92 characters."""
    lines = wrap(doc(text), 84)
    if len(lines) == 1:
        return [f'    """{lines[0]}"""']
    return [f'    """{lines[0]}', *(f"    {line}" for line in lines[1:-1]), f'    {lines[-1]}"""']


def wrap(text: str, width: int) -> list[str]:
    lines: list[str] = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def doc(text: str) -> str:
    """``text`` safe inside a generated docstring: values come from stored tool results,
    and a result holding three quotes must not end the docstring and become code, nor a
    control character (a NUL) keep the module from loading."""
    return printable(text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"'))
