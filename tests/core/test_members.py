"""The optional members of a step and a model are declared with their defaults (issue 26).

The protocols stay two members each (a step: ``name`` + ``async run``; a model: ``name`` +
``async complete``), so a user's plain object is still a step or a model; the library's
own steps and models inherit the declared defaults (``StepDefaults``, ``ModelDefaults``).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import pydantic

import loopwise
from loopwise import Budget, ModelRequest, Step, Structured, Turn, Workflow
from loopwise.core.members import StepDefaults, step_member
from loopwise.models.port import Model, ModelDefaults, model_member
from loopwise.testing import ScriptedModel


class Shout:
    """A user's own step: a name and async run, nothing else."""

    name = "shout"

    async def run(self, input: Any, ctx: Any) -> str:
        return str(input).upper()


class Echo:
    """A user's own model: a name and async complete, nothing else."""

    name = "echo"

    def __init__(self, text: str) -> None:
        self.text = text

    async def complete(self, request: ModelRequest) -> Turn:
        return Turn(text=self.text)


class Summary(pydantic.BaseModel):
    text: str


def test_a_plain_object_with_name_and_run_is_still_a_step() -> None:
    assert isinstance(Shout(), Step)
    result = loopwise.run(Shout(), "hi", model=ScriptedModel())
    assert (result.status, result.output) == ("completed", "HI")


def test_a_plain_step_reads_as_the_declared_defaults() -> None:
    plain = Shout()
    assert step_member(plain, "input_type") is Any
    assert step_member(plain, "output_type") is Any
    assert step_member(plain, "budget") is None
    assert step_member(plain, "needs_model") is True
    # ... the same a library step that says nothing has
    declared = StepDefaults()
    assert (declared.input_type, declared.budget, declared.needs_model) == (Any, None, True)


def test_a_plain_step_runs_in_a_workflow_and_as_a_tool() -> None:
    wf = Workflow("wf").then(Shout())
    assert loopwise.run(wf, "hi", model=ScriptedModel()).output == "HI"
    tool = loopwise.as_tool(Shout(), description="Shout the text.")
    assert tool.args_model.model_json_schema()["properties"]["input"]["type"] == "string"


def test_what_a_step_declares_wins_over_the_default() -> None:
    class Limited(Shout):
        budget = Budget(max_tokens=5)
        needs_model = False
        input_type = int

    assert step_member(Limited(), "budget") == Budget(max_tokens=5)
    assert step_member(Limited(), "needs_model") is False
    assert step_member(Limited(), "input_type") is int
    assert loopwise.run(Limited(), "hi").output == "HI"  # no model needed


def test_a_plain_model_is_still_a_model_and_reads_as_the_defaults() -> None:
    model = Echo('{"text": "ok"}')
    assert isinstance(model, Model)
    assert model_member(model, "endpoint") is None
    assert model_member(model, "structured_mode") is None
    assert model_member(model, "decision_backends") == ()
    result = loopwise.run(Structured("sum", Summary, "Summarise."), "x", model=model)
    assert result.output == Summary(text="ok")
    # the structured ladder remembered the rung on the model, as it did before
    assert model.structured_modes == {("", "echo"): "json_schema"}  # type: ignore[attr-defined]


def _package_classes() -> list[type]:
    found: list[type] = []
    for info in pkgutil.walk_packages(loopwise.__path__, "loopwise."):
        if info.name.startswith(("loopwise.integrations", "loopwise.templates")):
            continue  # optional extras; their classes are not steps or models
        module = importlib.import_module(info.name)
        found += [
            c
            for c in vars(module).values()
            if inspect.isclass(c) and c.__module__ == module.__name__ and c is not Step
        ]
    return found


def test_every_step_and_model_of_the_library_inherits_the_declared_defaults() -> None:
    classes = _package_classes()
    steps = [c for c in classes if inspect.iscoroutinefunction(vars(c).get("run"))]
    models = [c for c in classes if inspect.iscoroutinefunction(vars(c).get("complete"))]
    assert len(steps) >= 10 and len(models) >= 3
    assert [c for c in steps if not issubclass(c, StepDefaults)] == []
    assert [c for c in models if c is not Model and not issubclass(c, ModelDefaults)] == []
