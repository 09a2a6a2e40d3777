"""Reading the arguments a model (or a person) wrote for a tool: JSON that can be read
safely, then the tool's pydantic model, with a message a model can act on when either fails.

Lenient by default, as models write (``"5000"`` for ``5000``), except where leniency would
change what an effect does: a non-finite number, or a JSON boolean read as ``0``/``1``, is
refused (``"amount_cents": true`` would otherwise refund one cent). :func:`validated` with
``strict=True`` reads a person's edit exactly (pydantic's strict JSON mode).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

from pydantic import BaseModel, ValidationError

from loopwise.core.events import json_value, jsonable, nests_deeper_than
from loopwise.core.svg import shorten
from loopwise.errors import LoopwiseError

__all__ = ["MAX_DEPTH", "ToolArgumentsError", "load_arguments", "validated"]


class ToolArgumentsError(LoopwiseError):
    """Arguments a model sent are not JSON or fail the tool's validation.

    The message says exactly what was wrong, in words a model can act on.
    """

    def __init__(self, message: str, *, tool: str) -> None:
        super().__init__(message)
        self.tool = tool


def validated(args_model: type[BaseModel], raw: object, name: str, *, strict: bool) -> BaseModel:
    """``raw`` arguments of the tool ``name`` read (:func:`load_arguments`) and validated by
    ``args_model``; :class:`ToolArgumentsError` saying what is wrong. ``strict`` is
    pydantic's strict JSON mode (a person's edit: ``"5000"`` is no number); lenient mode
    (a model's call) reads texts as numbers but never a boolean as one."""
    arguments = load_arguments(raw, name)
    if not isinstance(arguments, Mapping):
        raise ToolArgumentsError(
            f"arguments for {name!r} must be a JSON object, got {type(arguments).__name__}",
            tool=name,
        )
    where = _non_finite(arguments)
    if where is not None:
        raise ToolArgumentsError(
            f"arguments for {name!r}: {where} is not a finite number", tool=name
        )
    try:
        if strict:
            text = json.dumps(jsonable(dict(arguments)))
            return args_model.model_validate_json(text, strict=True)
        parsed = args_model.model_validate(dict(arguments))
    except ValidationError as e:
        raise ToolArgumentsError(_describe(e, name), tool=name) from e
    where = _bool_as_number(arguments, parsed)
    if where is not None:
        message = f"arguments for {name!r}: {where} is a boolean, not a number"
        raise ToolArgumentsError(message, tool=name)
    return parsed


def _non_finite(arguments: Mapping[str, object]) -> str | None:
    """Where a NaN or infinite float sits in already-parsed arguments (a plan's, an edit's:
    pydantic's JSON reader accepts ``NaN``), as a dotted path, or ``None``."""
    stack: list[tuple[str, object]] = [(str(k), v) for k, v in arguments.items()]
    while stack:
        where, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return where
        if isinstance(value, Mapping):
            stack.extend((f"{where}.{k}", v) for k, v in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((f"{where}.{i}", v) for i, v in enumerate(value))
    return None


def _bool_as_number(arguments: Mapping[str, object], parsed: BaseModel) -> str | None:
    """Where a JSON ``true``/``false`` became a number in lenient parsing (pydantic's lax
    mode reads ``true`` as ``1``: a model's ``"amount_cents": true`` would refund a cent),
    as a dotted path, or ``None``. Texts stay lenient (``"5000"`` is read as ``5000``)."""
    stack: list[tuple[str, object]] = [(str(k), v) for k, v in arguments.items()]
    dumped: object = None
    while stack:
        where, value = stack.pop()
        if isinstance(value, bool):
            if dumped is None:  # dumped only when a boolean was sent: the usual call pays nothing
                dumped = parsed.model_dump(by_alias=True)
            got = _at(dumped, where)
            if isinstance(got, set | frozenset):  # no positions: look for what it became
                got = next((v for v in got if v == value and not isinstance(v, bool)), value)
            if isinstance(got, int | float) and not isinstance(got, bool):
                return where
        elif isinstance(value, Mapping):
            stack.extend((f"{where}.{k}", v) for k, v in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((f"{where}.{i}", v) for i, v in enumerate(value))
    return None


def _at(doc: object, where: str) -> object:
    """The value at dotted path ``where`` in dumped arguments (``None`` when it is not there;
    the set the path enters, when it enters one: a set keeps no positions)."""
    for part in where.split("."):
        if isinstance(doc, Mapping) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list | tuple) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        elif isinstance(doc, set | frozenset):
            return doc
        else:
            return None
    return doc


MAX_DEPTH = 32
"""How deeply a call's arguments may nest (objects and arrays)."""


def load_arguments(raw: object, name: str) -> object:
    """Arguments a model wrote, as data. Text that cannot be read safely — not JSON, a
    number of more than 4,300 digits, nesting deeper than :data:`MAX_DEPTH` (or than the
    parser's recursion limit) — raises :class:`ToolArgumentsError` saying why, never
    anything else, so it can go back to the model as an error result."""
    if not isinstance(raw, str):
        if nests_deeper_than(raw, MAX_DEPTH):
            raise ToolArgumentsError(_too_deep(name), tool=name)
        return raw
    if not raw.strip():
        return {}
    try:
        value = json_value(raw)
    except json.JSONDecodeError as e:
        shown = raw if len(raw) <= 200 else raw[:200] + "…"
        raise ToolArgumentsError(
            f"arguments for {name!r} are not valid JSON ({e.msg} at line {e.lineno} column "
            f"{e.colno}): {shown}",
            tool=name,
        ) from None
    except (ValueError, RecursionError) as e:
        # int() refuses numbers of more than 4,300 digits; the parser, deep nesting.
        what = "they nest too deeply" if isinstance(e, RecursionError) else str(e)
        raise ToolArgumentsError(
            f"arguments for {name!r} cannot be read: {what}", tool=name
        ) from None
    if nests_deeper_than(value, MAX_DEPTH):
        raise ToolArgumentsError(_too_deep(name), tool=name)
    return value


def _too_deep(name: str) -> str:
    return f"arguments for {name!r} nest deeper than {MAX_DEPTH} levels; send flatter arguments"


def _describe(error: ValidationError, name: str) -> str:
    problems = []
    for item in error.errors(include_url=False):
        where = ".".join(str(p) for p in item["loc"]) or "(arguments)"
        message = str(item["msg"]).removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown argument (not in the tool's schema)"
        elif item["type"] == "missing":
            message = "missing required argument"
        # The value cut short: a 100,000-character argument is not echoed back whole.
        got = "" if item["type"] == "missing" else f" (got {shorten(repr(item.get('input')), 80)})"
        problems.append(f"{where}: {message}{got}")
    return f"invalid arguments for {name!r}: " + "; ".join(problems)
