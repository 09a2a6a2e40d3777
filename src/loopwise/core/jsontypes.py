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
from typing import TypeAlias

__all__ = ["JSONMapping", "JSONObject", "JSONScalar", "JSONValue", "json_object"]

JSONScalar: TypeAlias = str | int | float | bool | None
"""A JSON leaf: a string, a number, true/false or null."""

JSONValue: TypeAlias = "JSONScalar | list[JSONValue] | dict[str, JSONValue]"
"""Any JSON value, nested to any depth."""

JSONObject: TypeAlias = "dict[str, JSONValue]"
"""A JSON object a function builds and returns (an event's data, a wire payload)."""

JSONMapping: TypeAlias = "Mapping[str, JSONValue]"
"""A JSON object a function only reads (covariant: any ``Mapping[str, str]`` fits)."""


def json_object(value: JSONValue | object) -> JSONObject:
    """``value`` if it is a JSON object, else an empty one: how a reader steps into a
    nested object it does not trust to be there (``json_object(data.get("args"))``)."""
    if isinstance(value, dict):
        return value
    return {}
