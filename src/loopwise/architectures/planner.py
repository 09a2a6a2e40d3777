"""What a hybrid's planner is told and may hold: its system prompt
(:func:`planner_instructions`: the task, the plan format, the catalog), its user message
with the problems of a rejected plan (:func:`planner_request`, :data:`REJECTED`), and
:func:`check_planner`, which refuses a planner holding anything but read tools."""

from __future__ import annotations

import json
from collections.abc import Sequence

from loopwise.architectures.plans import ActionCatalog
from loopwise.core.shape import describe
from loopwise.core.step import Step
from loopwise.errors import ToolError

__all__ = [
    "PLANNER_INSTRUCTIONS",
    "REJECTED",
    "check_planner",
    "planner_instructions",
    "planner_request",
]


PLANNER_INSTRUCTIONS = """\
You are the planner of a propose-then-execute system. You do NOT execute anything: you
propose a plan, code validates it, and actions run later, some only after a human approves.

{task}

Propose a plan as JSON: {{"steps": [...], "reason": "..."}}. Each step has
- "id": a short unique id ("s1", "s2", ...),
- "action": one of the actions below (no other names exist),
- "args": that action's arguments, exactly as the answer's schema gives them,
- "depends_on": ids of steps that must finish first ([] when none),
- "reason": one line saying why the step is needed.
Use as few steps as the task needs (at most {max_steps}). Steps without dependencies may run
at the same time. Only propose actions the facts support. "reason" says in one line why
this plan; when nothing needs doing, propose no steps and say why in "reason".{investigate}

Actions:
{catalog}
"""

_INVESTIGATE = """
First investigate with your read-only tools: look facts up instead of guessing ids,
amounts or addresses. Then answer with the plan."""


def planner_instructions(
    catalog: ActionCatalog, task: str, *, max_steps: int = 10, investigates: bool = False
) -> str:
    """The planner's system prompt: the task, the plan format and the catalog."""
    return PLANNER_INSTRUCTIONS.format(
        task=task.strip(),
        max_steps=max_steps,
        investigate=_INVESTIGATE if investigates else "",
        catalog=catalog.describe(),
    )


REJECTED = "\n\nYour previous plan was rejected; fix these problems:\n"
"""What separates the planner's input from the feedback on a rejected plan."""


def planner_request(task_input: object, feedback: Sequence[str] = ()) -> str:
    """The planner's user message: the input, plus why an earlier plan was rejected."""
    text = task_input if isinstance(task_input, str) else json.dumps(task_input, default=str)
    if not feedback:
        return text
    problems = "\n".join(f"- {line}" for line in feedback)
    return f"{text}{REJECTED}{problems}"


def check_planner(planner: Step, hybrid: str) -> None:
    """Raise :class:`ToolError` when ``planner`` holds a tool that is not ``read``.

    A planner proposes; only the compiled plan acts. An agent planner with a ``write``
    or ``irreversible`` tool could act while "investigating", so it is refused here.
    """
    for shown in describe(planner).tools:  # what the planner declares it holds
        effect = shown.effect or "read"
        if effect != "read":
            name = shown.name
            raise ToolError(
                f"hybrid {hybrid!r}: its planner holds {name!r} ({effect}); a planner may "
                f"hold only read tools — register {name!r} as an action instead",
                tool=name,
            )
