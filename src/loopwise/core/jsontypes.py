"""The shape of JSON as loopwise writes and reads it: events' data, tool arguments and
results on the wire, store rows and reports.

:data:`JSONValue` is recursive, so a type checker follows a value into its nesting and
asks the reader to narrow it (``isinstance(value, dict)``) before indexing — where
``dict[str, Any]`` would let a misspelt key or a wrong shape through. Parameters that only
read take :data:`JSONMapping` (a ``Mapping`` is covariant, so a ``dict[str, str]`` fits);
what a function builds and hands back is a :data:`JSONObject`.

Plain aliases, nothing at run time: the recursion is a string the type checker reads, so
these are for annotations only — a pydantic field takes ``pydantic.JsonValue``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

__all__ = [
    "JSONMapping",
    "JSONObject",
    "JSONRecord",
    "JSONScalar",
    "JSONValue",
    "json_list",
    "json_number",
    "json_object",
    "json_str",
]

JSONScalar: TypeAlias = str | int | float | bool | None
"""A JSON leaf: a string, a number, true/false or null."""

JSONValue: TypeAlias = "JSONScalar | list[JSONValue] | dict[str, JSONValue]"
"""Any JSON value, nested to any depth."""

JSONObject: TypeAlias = "dict[str, JSONValue]"
"""A JSON object a function builds and returns (an event's data, a wire payload)."""

JSONRecord: TypeAlias = dict[str, Any]
"""A JSON object loopwise hands user code to read (an event's data, a plan step's
arguments): its values are ``Any``, so a nested read indexes and adds as the guides write
it (``event.data["output"]["side"]``, ``step.args_dict()["amount_cents"]``)."""

JSONMapping: TypeAlias = "Mapping[str, JSONValue]"
"""A JSON object a function only reads (covariant: any ``Mapping[str, str]`` fits)."""


def json_object(value: JSONValue | object) -> JSONObject:
    """``value`` if it is a JSON object, else an empty one: how a reader steps into a
    nested object it does not trust to be there (``json_object(data.get("args"))``)."""
    if isinstance(value, dict):
        return value
    return {}


def json_list(value: JSONValue | object) -> list[JSONValue]:
    """``value`` if it is a JSON array, else an empty one (``json_list(data.get("calls"))``)."""
    if isinstance(value, list):
        return value
    return []


def json_str(value: JSONValue | object) -> str | None:
    """``value`` as text, ``None`` when it is null or missing: a field written as a string
    that a reader does not otherwise check (``json_str(data.get("reason"))``)."""
    return None if value is None else str(value)


def json_number(value: JSONValue | object) -> float:
    """``value`` if it is a number, else 0: a count or an amount that may be missing or null
    (``int(json_number(usage.get("input_tokens")))``)."""
    return float(value) if isinstance(value, int | float) else 0.0
