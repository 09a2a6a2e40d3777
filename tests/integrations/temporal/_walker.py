"""A scripted agent of 12 read-tool turns and an answer (test_workflow.py beside it: a
run long enough to continue as new workflow runs)."""

from __future__ import annotations

from typing import Any

import loopwise
from loopwise import Agent, tool
from loopwise.testing import ScriptedModel, calls, reply

TURNS = 12


@tool
def look(i: int) -> str:
    """Look at item ``i``."""
    return f"item {i} is fine"


def offline_model() -> ScriptedModel:
    def respond(request: loopwise.ModelRequest) -> Any:
        done = len(request.tool_results())
        return calls(("look", {"i": done}, f"c{done}")) if done < TURNS else reply("all fine")

    return ScriptedModel(respond)


walker = Agent(name="walker", instructions="Look at every item.", tools=[look], max_steps=20)
