"""A scripted agent: an offline model declared as "call these tools in this order, then answer".

:class:`ScriptedAgent` is a :class:`~loopwise.models.scripted.ScriptedModel` whose answers
come from a plan instead of a hand-written responder. Each step is one turn of tool calls:

* ``("tool", {"arg": 1})`` — one call with these arguments;
* ``("tool", args_of)`` — ``args_of(request)`` gives the arguments from the transcript so far
  (the input, ``request.user_text()``, or earlier results, ``request.last_result(name)``):
  a dict for one call, a list of dicts for several calls in one turn (they run
  concurrently), ``None`` or ``[]`` to skip the step;
* a list of such pairs — calls of several tools in one turn.

After the last step it answers with ``answer`` (a value, or a function of the request):
through the agent's ``final_answer`` tool when the agent has a typed output (a dict or a
pydantic model), as text otherwise. With ``stop_on_error`` (the default) a failed call ends
the plan early: the next turn is the answer, which can read the error from the request.

It is a pure function of the transcript (the step is the number of tool turns since the
latest user message), so a resumed run replays it exactly and one model serves every case
of an eval.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

from pydantic import BaseModel

from loopwise.architectures.agent import FINAL_ANSWER
from loopwise.errors import ConfigError
from loopwise.models.port import ModelRequest, Turn
from loopwise.models.scripted import ScriptedModel, calls, reply

__all__ = ["ScriptedAgent"]

Args: TypeAlias = "Mapping[str, object]"
ArgsOf: TypeAlias = "Args | Callable[[ModelRequest], Args | Sequence[Args] | None]"
PlanStep: TypeAlias = "tuple[str, ArgsOf] | Sequence[tuple[str, ArgsOf]]"
"""A step of the plan (module docstring): ``(tool, args or args_of)`` or a list of them."""


class ScriptedAgent(ScriptedModel):
    """An offline model for an agent or a planner, declared as a plan (module docstring).

    ``ScriptedAgent(("lookup_customer", {"customer_id": "C-1001"}), answer={...})``.
    """

    def __init__(
        self,
        *steps: PlanStep,
        answer: object | Callable[[ModelRequest], object],
        stop_on_error: bool = True,
        name: str = "scripted",
        keep: int = 100,
    ) -> None:
        self.steps = steps
        self.answer = answer
        self.stop_on_error = stop_on_error
        super().__init__(self._next, name=name, keep=keep)

    def _next(self, request: ModelRequest) -> Turn:
        turns, failed = _progress(request)
        if not (failed and self.stop_on_error):
            taken = 0
            for step in self.steps:
                planned = _planned(step, request)
                if not planned:
                    continue
                if taken == turns:
                    _check_offered(planned, request)
                    return _turn(planned, turns + 1)
                taken += 1
        return self._answer(request)

    def _answer(self, request: ModelRequest) -> Turn:
        value = self.answer(request) if callable(self.answer) else self.answer
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json")
        offered = {t["function"]["name"] for t in request.tools or ()}
        if FINAL_ANSWER in offered and not isinstance(value, str):
            return calls((FINAL_ANSWER, value, "answer"))
        return reply(value if isinstance(value, str) else json.dumps(value))


def _check_offered(planned: list[tuple[str, dict[str, object]]], request: ModelRequest) -> None:
    """Refuse a plan calling a tool the target does not have: the script was written for
    another target (a module's one ``offline_model`` serves every target in it)."""
    offered = sorted(t["function"]["name"] for t in request.tools or ())
    missing = [tool for tool, _ in planned if tool not in offered]
    if offered and missing:
        raise ConfigError(
            f"ScriptedAgent plans a call of {missing[0]!r}, a tool this target does not have "
            f"(its tools: {', '.join(offered)}): the script was written for another target. "
            "A module's offline_model serves every target in it; give each its own with "
            "offline_model = {'target_name': ScriptedAgent(...), ...}",
            name="offline_model",
        )


def _turn(planned: list[tuple[str, dict[str, object]]], number: int) -> Turn:
    # Ids from the plan's place, not a counter: a replayed run is asked the same.
    return calls(*((tool, args, f"{tool}-{number}-{i}") for i, (tool, args) in enumerate(planned)))


def _planned(step: PlanStep, request: ModelRequest) -> list[tuple[str, dict[str, object]]]:
    # One pair or a list of them: isinstance on the first item tells, not the type checker.
    pairs: Sequence[Any] = [step] if isinstance(step[0], str) else step
    planned = []
    for tool, args_of in pairs:
        made = args_of(request) if callable(args_of) else args_of
        for args in [made] if isinstance(made, Mapping) else made or ():
            planned.append((str(tool), dict(args)))
    return planned


def _progress(request: ModelRequest) -> tuple[int, bool]:
    """Tool turns since the latest user message, and whether a call of the latest failed."""
    turns, failed = 0, False
    for message in request.messages:
        role = message.get("role")
        if role == "user":
            turns, failed = 0, False
        elif role == "assistant" and message.get("tool_calls"):
            failed = False
            if {c["function"]["name"] for c in message["tool_calls"]} != {FINAL_ANSWER}:
                turns += 1
        elif role == "tool":
            failed = failed or str(message.get("content") or "").startswith("ERROR")
    return turns, failed
