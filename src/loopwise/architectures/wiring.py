"""Wiring: whether one node's output can feed another node's input.

The type rules a :class:`~loopwise.architectures.workflow.Workflow` checks its edges with when it is
declared (``Annotated`` and an optional ``None`` stripped, ``Any`` matches anything, a
dict feeds a pydantic input model), the values a ``Literal``/``Enum``/``bool`` route must
cover, and the coercion a node's input gets when it runs (a dict validated into the
pydantic model the step declares).

A step's declared types are type forms — a class, ``list[str]``, a ``Literal[...]``, a
union, ``Any`` for unsaid. A step declares one as a ``TypeForm[object]`` (PEP 747); the
rules here take any ``object`` and read it with ``get_origin``/``get_args``, as a
workflow's types also come from steps that declare nothing (``Any``) or build a
``Literal`` at run time.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Mapping
from dataclasses import is_dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

from pydantic import BaseModel, ValidationError
from typing_extensions import TypeForm

from loopwise.core.events import Status
from loopwise.core.result import Halt


def hints_of(fn: object) -> dict[str, TypeForm[object]]:
    """``fn``'s resolved annotations; none when they cannot be resolved."""
    try:
        return get_type_hints(fn)
    except (NameError, TypeError):
        return {}


def coerce_input(value: object, wanted: object, where: str) -> object:
    """``value`` as the pydantic input model a step declares (the CLI passes JSON objects);
    a value that cannot be one (a string where a ``Ticket`` is declared) ends the run."""
    if wanted is Any or (type(wanted) is type and not issubclass(wanted, BaseModel)):
        return value  # no model to coerce to, and no typing form for strip_type to unwrap
    model = strip_type(wanted)
    if not (isinstance(model, type) and issubclass(model, BaseModel)) or isinstance(value, model):
        return value
    if isinstance(value, BaseModel):
        value = value.model_dump()
    try:
        return model.model_validate(dict(value) if isinstance(value, Mapping) else value)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "input"
        raise Halt(
            Status.ERROR,
            f"{where}: input does not match {model.__name__}: {field}: {first['msg']}",
        ) from e


def plain_key(key: object) -> object:
    """A route key as routes compare it: an enum member by its value."""
    return key.value if isinstance(key, enum.Enum) else key


def strip_type(tp: object) -> object:
    """Drop ``Annotated`` and an optional ``None`` from a type."""
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if get_origin(tp) in (Union, types.UnionType):
        rest = [a for a in get_args(tp) if a is not type(None)]
        if len(rest) == 1:
            return strip_type(rest[0])
    return tp


def types_compatible(out: object, wanted: object) -> bool:
    """Can a value of type ``out`` feed an input of type ``wanted``? Unknown → yes."""
    out, wanted = strip_type(out), strip_type(wanted)
    if out is Any or wanted is Any or wanted is object or out == wanted:
        return True
    if get_origin(wanted) in (Union, types.UnionType):
        return any(types_compatible(out, a) for a in get_args(wanted))
    if get_origin(out) in (Union, types.UnionType):
        return all(types_compatible(a, wanted) for a in get_args(out))
    if get_origin(out) is Literal:
        return all(types_compatible(type(v), wanted) for v in get_args(out))
    paired = _same_generic_model(out, wanted)
    if paired is not None:  # Ruling[Literal["a", "b"]] feeds Ruling[str]: data, read only
        return all(types_compatible(a, b) for a, b in paired)
    o, w = get_origin(out) or out, get_origin(wanted) or wanted
    if not (isinstance(o, type) and isinstance(w, type)):
        return True
    try:
        if issubclass(o, w) or (w is float and o is int):
            return True
    except TypeError:  # TypedDicts and friends refuse class checks
        return True
    # A dict is validated into a pydantic input model when the node runs.
    return issubclass(w, BaseModel) and issubclass(o, Mapping)


def _same_generic_model(out: object, wanted: object) -> list[tuple[object, object]] | None:
    """The argument pairs of two parametrisations of one generic pydantic model (pydantic
    makes each a class of its own, which ``issubclass`` does not relate), else ``None``."""
    meta = [
        tp.__pydantic_generic_metadata__
        if isinstance(tp, type) and issubclass(tp, BaseModel)
        else None
        for tp in (out, wanted)
    ]
    if not (meta[0] and meta[1] and meta[0]["origin"] is not None):
        return None
    if meta[0]["origin"] is not meta[1]["origin"]:
        return None
    return list(zip(meta[0]["args"], meta[1]["args"], strict=True))


def fields_of(tp: object) -> dict[str, object] | None:
    """Field name → type of a pydantic model, dataclass or TypedDict (else ``None``)."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return {k: f.annotation for k, f in tp.model_fields.items()}
    if isinstance(tp, type) and (is_dataclass(tp) or hasattr(tp, "__total__")):
        try:
            return get_type_hints(tp, include_extras=False)
        except (NameError, TypeError):
            return None
    return None


def domain_of(tp: object) -> list[object] | None:
    """Every value of a ``Literal``/``Enum``/``bool`` type (normalised), else ``None``."""
    tp = strip_type(tp)
    if get_origin(tp) is Literal:
        return [plain_key(v) for v in get_args(tp)]
    if get_origin(tp) in (Union, types.UnionType):
        parts = [domain_of(a) for a in get_args(tp)]
        return None if any(p is None for p in parts) else [v for p in parts if p for v in p]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return [m.value for m in tp]
    if tp is bool:
        return [True, False]
    return None


def type_name(tp: object) -> str:
    """``tp`` as an error message names it."""
    tp = strip_type(tp)
    if isinstance(tp, type) and not get_args(tp):
        return tp.__name__
    return repr(tp).replace("typing.", "")
