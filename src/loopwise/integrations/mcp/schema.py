"""An MCP tool's input schema as loopwise validates it: a pydantic model and a validator.

:func:`args_model` builds the pydantic model a tool's arguments are parsed into (nested
objects, enums, required properties, ``$ref`` inside the schema; unknown properties
refused unless the schema allows them); what pydantic cannot say becomes ``Any``, and
:func:`schema_validator` checks the whole JSON schema with ``jsonschema`` besides.
:func:`apply_hints` shows the model what the user's allow-list validators allow. A schema
loopwise cannot use raises :class:`Unusable` (the tool is left out, with the reason);
a validator naming no argument raises :class:`~loopwise.errors.ConfigError`.

:func:`check_limits` bounds what a server's schema may cost before any of this runs:
nesting (:data:`MAX_DEPTH` levels), size (:data:`MAX_NODES` schema nodes, ``$ref``
expansions counted); past a limit it raises :class:`OverLimits`. A ``pattern`` is matched
in linear time (pydantic-core's Rust engine), never by Python's backtracking ``re``, where
``^(a+)+$`` takes exponential time on a crafted argument — checked when a run validates
arguments, where no timeout applies; a pattern only a backtracking engine can match is
over the limits too.
"""

from __future__ import annotations

import functools
import keyword
import re
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Annotated, Any, Literal, Protocol, Union

import pydantic
from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import SchemaError, SchemaValidator, ValidationError, core_schema

from loopwise.core.jsontypes import JSONMapping, JSONObject, JSONValue, json_list, json_object
from loopwise.errors import ConfigError

__all__ = [
    "MAX_DEPTH",
    "MAX_NODES",
    "OverLimits",
    "Unusable",
    "apply_hints",
    "args_model",
    "check_limits",
    "schema_validator",
    "wraps_result",
]

MAX_DEPTH = 32
"""How deeply a tool's input schema may nest, in JSON objects and arrays."""
MAX_NODES = 5_000
"""How many schema nodes (values, ``$ref`` expansions included) a tool's schema may hold."""


class Unusable(Exception):
    """A listed tool loopwise leaves out (the message says why)."""


class OverLimits(Exception):
    """A listed tool's schema past loopwise's limits (the message says which)."""


def check_limits(schema: JSONValue) -> None:
    """Raise :class:`OverLimits` when ``schema`` nests past :data:`MAX_DEPTH`, holds more
    than :data:`MAX_NODES` nodes, or has a ``pattern`` no linear-time engine can match;
    :class:`Unusable` for ``patternProperties`` (see :func:`schema_validator`). Iterative,
    so a hostile schema cannot exhaust the stack."""
    stack: list[tuple[JSONValue, int]] = [(schema, 1)]
    nodes = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise OverLimits(f"its input schema has more than {MAX_NODES:,} parts")
        if depth > MAX_DEPTH:
            raise OverLimits(f"its input schema nests deeper than {MAX_DEPTH} levels of JSON")
        if isinstance(value, dict):
            if "patternProperties" in value:
                raise Unusable(
                    "its input schema uses patternProperties, which loopwise does not check"
                )
            pattern = value.get("pattern")
            if isinstance(pattern, str):
                _matcher(pattern)
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


@functools.lru_cache(maxsize=1024)
def _matcher(pattern: str) -> Callable[[str], bool]:
    """``pattern`` as a search in linear time (the Rust ``regex`` engine pydantic-core
    ships): ``^(a+)+$`` cannot take exponential time on a crafted argument, as it would
    in Python's backtracking ``re``."""
    try:
        check = SchemaValidator(core_schema.str_schema(pattern=pattern, regex_engine="rust-regex"))
    except SchemaError as e:
        try:
            re.compile(pattern)
        except (re.error, RecursionError, OverflowError) as bad:
            raise Unusable(f"its input schema has a pattern that is not a regex: {bad}") from e
        raise OverLimits(
            f"its input schema has the pattern {pattern[:80]!r}, which only a backtracking "
            "engine matches (lookaround, backreference): its time cannot be bounded"
        ) from e

    def matches(text: str) -> bool:
        try:
            check.validate_python(text)
        except ValidationError:
            return False
        return True

    return matches


class SchemaProblem(Protocol):
    """One failure ``jsonschema`` reports (its ``ValidationError``, as loopwise reads it)."""

    @property
    def message(self) -> str: ...
    @property
    def path(self) -> Sequence[str | int]: ...
    @property
    def absolute_path(self) -> Sequence[str | int]: ...


class SchemaCheck(Protocol):
    """A ``jsonschema`` validator of one schema, as loopwise uses it."""

    def iter_errors(self, instance: JSONValue) -> Iterable[SchemaProblem]: ...


def _pattern(
    validator: object, pattern: str, instance: JSONValue, schema: JSONObject
) -> Iterator[Exception]:
    """jsonschema's ``pattern`` keyword, matched by :func:`_matcher` (a non-string has no
    pattern to match: jsonschema's ``is_type(instance, "string")`` is this isinstance)."""
    from jsonschema import ValidationError as Invalid

    if isinstance(instance, str) and not _matcher(pattern)(instance):
        yield Invalid(f"{instance[:80]!r} does not match {pattern[:80]!r}")


def schema_validator(schema: JSONObject) -> SchemaCheck:
    """A ``jsonschema`` validator of the whole schema, its ``pattern`` in linear time
    (a schema with ``patternProperties``, which jsonschema matches with ``re``, is
    refused by :func:`check_limits` first)."""
    from jsonschema import Draft202012Validator, SchemaError, validators

    if schema.get("type") != "object":
        raise Unusable(f"its input schema is not an object schema (type {schema.get('type')!r})")
    cls = validators.validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as e:
        raise Unusable(f"its input schema is invalid: {e.message}") from e
    check: SchemaCheck = validators.extend(cls, {"pattern": _pattern})(schema)
    return check


def apply_hints(schema: JSONObject, checks: Mapping[str, object], tool: str) -> None:
    """Show the model what the user's allow-list validators allow (in its copy of the schema)."""
    properties = json_object(schema.get("properties"))
    for name, check in checks.items():
        if name not in properties:
            known = ", ".join(sorted(properties)) or "(none)"
            raise ConfigError(
                f"override of {tool!r}: a validator for {name!r}, which is not one of its "
                f"arguments: {known}",
                name=tool,
            )
        # getattr: a validator is a plain function, or one of tools.allowlists', which
        # also narrow the schema the model is shown (schema_hint).
        hint = getattr(check, "schema_hint", None)
        if hint is not None:
            prop = dict(json_object(properties[name]))
            hint(prop)
            properties[name] = prop
    if checks:
        schema["properties"] = properties


def args_model(tool: str, schema: JSONObject, checks: Mapping[str, object]) -> type[BaseModel]:
    return _Models(tool, schema).model(schema, f"{tool}_arguments", checks)


_SIMPLE: dict[str, object] = {
    "string": str,
    "integer": int,
    "number": int | float,
    "boolean": bool,
    "null": None,
}


class _Models:
    """Pydantic types from the JSON schema of one tool; what pydantic cannot say is ``Any``
    and is still enforced by the ``jsonschema`` check of
    :meth:`loopwise.integrations.mcp.servers.MCPTool.parse`."""

    def __init__(self, tool: str, root: JSONObject) -> None:
        self.tool = tool
        self.root = root
        self._resolving: list[str] = []
        self._count = 0
        self._expanded = 0  # schema nodes turned into types, $ref expansions included

    def model(self, schema: JSONObject, name: str, checks: Mapping[str, object]) -> type[BaseModel]:
        properties = json_object(schema.get("properties"))
        required = set(json_list(schema.get("required")))
        extra = schema.get("additionalProperties", False)
        fields: dict[str, Any] = {}  # pydantic's TypeForm, which mypy cannot name
        for i, (prop, sub) in enumerate(properties.items()):
            kind = self.type_of(sub, f"{name}_{i}")
            if prop in checks:
                kind = Annotated[kind, checks[prop]]
            default = ... if prop in required else None
            if _plain_name(prop):
                fields[prop] = (kind, Field(default))
            else:
                fields[f"arg_{i}"] = (kind, Field(default, alias=prop))
        config = ConfigDict(extra="forbid" if extra is False else "allow", populate_by_name=True)
        return pydantic.create_model(name, __config__=config, **fields)

    def type_of(self, schema: JSONValue, name: str) -> object:
        self._expanded += 1
        if self._expanded > MAX_NODES:
            # References that fan out (a -> [b, b], b -> [c, c]...) grow exponentially.
            raise OverLimits(f"its input schema expands to more than {MAX_NODES:,} parts")
        if schema is True or schema == {}:
            return Any
        if not isinstance(schema, dict):
            raise Unusable(f"a part of its input schema is not a schema: {schema!r}")
        if "$ref" in schema:
            return self._ref(str(schema["$ref"]), name)
        if "const" in schema:
            return _literal([schema["const"]])
        if "enum" in schema:
            return _literal(json_list(schema["enum"]))
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return _union(
                    [self.type_of(s, f"{name}_{i}") for i, s in enumerate(json_list(schema[key]))]
                )
        return self._typed(schema, name)

    def _typed(self, schema: JSONObject, name: str) -> object:
        kind = schema.get("type")
        if isinstance(kind, list):
            return _union([self.type_of({**schema, "type": k}, name) for k in kind])
        if kind == "object":
            if schema.get("properties"):
                return self.model(schema, name, {})
            return dict[str, Any]
        if kind == "array":
            items = schema.get("items")
            item = Any if items is None else self.type_of(items, f"{name}_item")
            return types.GenericAlias(list, (item,))
        if isinstance(kind, str) and kind in _SIMPLE:
            return _SIMPLE[kind]
        if kind is None:
            return Any
        raise Unusable(f"its input schema has an unknown type {kind!r}")

    def _ref(self, ref: str, name: str) -> object:
        if ref in self._resolving:
            return Any  # a recursive schema: the jsonschema check still holds
        if not ref.startswith("#/"):
            raise Unusable(f"its input schema refers outside itself ({ref!r})")
        target: JSONValue = self.root
        for escaped in ref[2:].split("/"):
            part = escaped.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise Unusable(f"its input schema refers to {ref!r}, which it does not define")
            target = target[part]
        self._resolving.append(ref)
        try:
            return self.type_of(target, f"{name}_{ref.rsplit('/', 1)[-1]}")
        finally:
            self._resolving.pop()


def _plain_name(prop: str) -> bool:
    return (
        prop.isidentifier()
        and not keyword.iskeyword(prop)
        and not prop.startswith(("_", "model_"))
        and not hasattr(BaseModel, prop)
    )


def _literal(values: Sequence[JSONValue]) -> object:
    if values and all(v is None or isinstance(v, str | int | float | bool) for v in values):
        return Literal[tuple(values)]
    return Any


def _union(kinds: list[object]) -> object:
    if not kinds:
        return Any
    return kinds[0] if len(kinds) == 1 else Union[tuple(kinds)]  # noqa: UP007


def wraps_result(output_schema: JSONMapping | None) -> bool:
    """Whether structured results are ``{"result": value}`` (the SDK's wrapping of a
    non-object return value, which its output schema declares)."""
    if not output_schema:
        return False
    properties = json_object(output_schema.get("properties"))
    return list(properties) == ["result"] and output_schema.get("required") == ["result"]
