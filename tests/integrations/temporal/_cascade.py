"""A cascade whose unsure side asks a person (test_workflow.py beside it): the judge is
torn between ``bug`` and ``refund`` on every input, so a person picks."""

from __future__ import annotations

from typing import Any

import loopwise
from loopwise import AskPerson, Cascade, Judge, Ruling
from loopwise.testing import ScriptedModel, reply


@loopwise.step
async def answer(ruling: Ruling) -> str:  # type: ignore[type-arg]
    """The sure side: answer from the ruling."""
    return f"sure:{ruling.answer}:{ruling.backend}"


desk = Cascade(
    "desk", Judge("kind", ["refund", "bug", "other"]), sure=answer, unsure=AskPerson(),
    threshold=0.8,
)  # fmt: skip


def offline_model() -> ScriptedModel:
    def respond(request: loopwise.ModelRequest) -> Any:
        if request.decision is not None:
            return {"kind": {"bug": 0.5, "refund": 0.3}}
        return reply("unused")

    return ScriptedModel(respond)
