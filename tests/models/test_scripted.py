"""The scripted model's offline answers (:mod:`loopwise.models.scripted`)."""

from __future__ import annotations

import asyncio
import json

from loopwise import ModelRequest
from loopwise.testing import ScriptedModel, example_from_schema

ANYTHING = {
    "type": "object",
    "properties": {"note": True, "ids": {"type": "array", "items": True}},
}
"""A tool's arguments with JSON Schema's ``true`` (any value) as subschemas, as an MCP
server may declare them."""


def test_a_true_subschema_gets_an_example_where_it_raised_type_error() -> None:
    assert example_from_schema(ANYTHING) == {"note": "example", "ids": ["example"]}


def test_the_offline_model_calls_a_tool_whose_schema_has_a_true_subschema() -> None:
    tool = {"type": "function", "function": {"name": "annotate", "parameters": ANYTHING}}
    request = ModelRequest(messages=[{"role": "user", "content": "go"}], tools=[tool])
    turn = asyncio.run(ScriptedModel().complete(request))
    (called,) = turn.tool_calls
    assert called.name == "annotate"
    assert json.loads(called.arguments) == {"note": "example", "ids": ["example"]}
