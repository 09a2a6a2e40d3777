"""Allow-lists for tool arguments: the valid inputs made explicit, whatever the model sends.

Each helper goes in an ``Annotated`` hint of a tool's parameter (or an MCP tool's
:class:`~loopwise.integrations.mcp.mapping.Override`) and is enforced by pydantic when the
arguments are validated; where JSON schema can say it, the tool's schema says it too::

    @tool
    def get_order(order_id: Annotated[str, IdPattern(r"O-\\d{4}")]) -> dict: ...

:class:`OneOf` (an ``enum``), :class:`IdPattern` (a full-match ``pattern``),
:class:`InDirectory` (paths that cannot leave a root) and :class:`Bounds` (finite numbers
within ``minimum``/``maximum``). A helper declared wrongly raises
:class:`~loopwise.errors.ToolError`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

import pydantic
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from loopwise.errors import ToolError

__all__ = ["Bounds", "IdPattern", "InDirectory", "OneOf", "field_note"]


class _Constraint:
    """Base of the allow-list helpers: a validator around pydantic's plus a JSON-schema hint.

    ``check_raw`` sees the value as sent (before pydantic's lax conversions, which read
    ``true`` as ``1``), ``check`` the converted one.
    """

    def check_raw(self, raw: object) -> None:
        """Reject a value as sent, before conversion (default: accept)."""

    def check(self, value: Any) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def schema_hint(self, schema: dict[str, object]) -> None:
        """Add what JSON schema can express of this constraint to ``schema``."""

    def _validate(self, raw: object, handler: core_schema.ValidatorFunctionWrapHandler) -> object:
        self.check_raw(raw)
        return self.check(handler(raw))

    def __get_pydantic_core_schema__(
        self, source: object, handler: pydantic.GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_wrap_validator_function(self._validate, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: pydantic.GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = dict(handler(schema))
        self.schema_hint(json_schema)
        return json_schema


class OneOf(_Constraint):
    """Allow only these values: ``Annotated[str, OneOf(["low", "high"])]`` (schema ``enum``)."""

    def __init__(self, values: Iterable[object]) -> None:
        self.values = tuple(values)
        if not self.values:
            raise ToolError("OneOf() needs at least one allowed value", tool="OneOf")

    def check_raw(self, raw: object) -> None:
        # ``True == 1``: without this, OneOf([1, 2]) on an int would take ``true``.
        if isinstance(raw, bool) and not any(isinstance(v, bool) for v in self.values):
            raise ValueError(f"{raw!r} is a boolean, not one of the allowed values")

    def check(self, value: object) -> object:
        if value not in self.values:
            allowed = ", ".join(repr(v) for v in self.values)
            raise ValueError(f"{value!r} is not one of the allowed values: {allowed}")
        return value

    def schema_hint(self, schema: dict[str, object]) -> None:
        schema["enum"] = list(self.values)

    def __repr__(self) -> str:
        return f"OneOf({list(self.values)!r})"


class IdPattern(_Constraint):
    """Allow only strings that match ``regex`` in full: ``IdPattern(r"C-\\d{4}")``.

    ``\\d``, ``\\w``, ``\\s`` and ``\\b`` match ASCII only (the pattern is compiled with
    ``re.ASCII``), as they do in the schema's ECMAScript ``pattern``: ``O-١٢٣٤`` (Arabic-Indic
    digits), fullwidth and mathematical digits are rejected, so an approver never reads
    one id while a tool's ``int()`` reads another. Pass ``unicode=True`` to let them match
    any Unicode digit, word or space character instead.
    """

    def __init__(self, regex: str, *, unicode: bool = False) -> None:
        self.regex = regex.removeprefix("^").removesuffix("$")
        self.unicode = unicode
        try:
            self._compiled = re.compile(self.regex, 0 if unicode else re.ASCII)
        except re.error as e:
            message = f"IdPattern({regex!r}) is not a valid regex: {e}"
            raise ToolError(message, tool="IdPattern") from e

    def check(self, value: object) -> object:
        if not isinstance(value, str) or self._compiled.fullmatch(value) is None:
            raise ValueError(f"{value!r} does not match the id pattern ^{self.regex}$")
        return value

    def schema_hint(self, schema: dict[str, object]) -> None:
        schema["pattern"] = f"^{self.regex}$"

    def __repr__(self) -> str:
        flag = ", unicode=True" if self.unicode else ""
        return f"IdPattern({self.regex!r}{flag})"


class InDirectory(_Constraint):
    """Allow only paths inside ``root``.

    A relative path is relative to ``root`` (not to the process's working directory): the
    model names files as it sees them, ``notes/a.md`` meaning ``root/notes/a.md``. ``..``
    and symlinks are resolved before the check, so neither can leave ``root``. The tool
    receives the resolved absolute path (a ``Path`` for ``Path`` parameters, a ``str``
    otherwise). What the model reads — the schema's description and a refusal — never
    holds ``root`` itself: the machine's directory layout is not the model's business.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()

    def check(self, value: str | Path) -> str | Path:
        candidate = Path(value)
        full = (candidate if candidate.is_absolute() else self.root / candidate).resolve()
        if not full.is_relative_to(self.root):
            raise ValueError(
                f"path {str(value)!r} is outside the allowed directory: give a path relative "
                "to it, without '..' leaving it"
            )
        return full if isinstance(value, Path) else str(full)

    NOTE = "A path inside the allowed directory, relative to it (it may not leave it)."
    """What the schema tells the model, after the parameter's own description if any."""

    def schema_hint(self, schema: dict[str, object]) -> None:
        note = self.NOTE
        schema["description"] = (
            f"{schema['description']} {note}" if "description" in schema else note
        )

    def __repr__(self) -> str:
        return f"InDirectory({str(self.root)!r})"


class Bounds(_Constraint):
    """Allow only finite numbers within ``[ge, le]`` (either side optional; schema min/max).

    NaN and infinities are rejected whatever the bounds (NaN compares false with every
    bound, so a policy's ``amount > 50`` would let it through), and so are booleans
    (``true`` is not the number 1 here).
    """

    def __init__(self, *, ge: float | None = None, le: float | None = None) -> None:
        if ge is None and le is None:
            raise ToolError("Bounds() needs ge= and/or le=", tool="Bounds")
        self.ge, self.le = ge, le

    def check_raw(self, raw: object) -> None:
        if isinstance(raw, bool):
            raise ValueError(f"{raw!r} is a boolean, not a number")

    def check(self, value: Any) -> Any:
        if not _finite(value):
            raise ValueError(f"{value!r} is not a finite number")
        if self.ge is not None and value < self.ge:
            raise ValueError(f"{value!r} is below the minimum {self.ge}")
        if self.le is not None and value > self.le:
            raise ValueError(f"{value!r} is above the maximum {self.le}")
        return value

    def schema_hint(self, schema: dict[str, object]) -> None:
        if self.ge is not None:
            schema["minimum"] = self.ge
        if self.le is not None:
            schema["maximum"] = self.le

    def __repr__(self) -> str:
        return f"Bounds(ge={self.ge!r}, le={self.le!r})"


def _finite(value: Any) -> bool:  # math.isfinite is tried on anything: not a number raises
    if isinstance(value, int):
        return True  # however long: ``math.isfinite`` would overflow converting it
    try:
        return math.isfinite(value)
    except (TypeError, ValueError, OverflowError):
        return False  # not a number at all (Bounds on a str), or a signalling NaN


def field_note(hint: object) -> str | None:
    """The note an :class:`InDirectory` in an ``Annotated`` parameter hint adds to the
    parameter's description (``None`` without one): a tool adds it to a description of its
    own, which pydantic would otherwise apply over the helper's."""
    if get_origin(hint) is not Annotated:
        return None
    notes = [m.NOTE for m in get_args(hint)[1:] if isinstance(m, InDirectory)]
    return notes[0] if notes else None
