"""How a run ends: :class:`Halt`, raised inside it, and :class:`RunResult`, returned.

A guardrail deep in a nested step cannot return a status through the step's typed output,
so it raises :class:`Halt`; :func:`loopwise.core.execute.execute` turns that into the run's
:class:`RunResult`, never into an exception. Both are re-exported by :mod:`loopwise.core.step`.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass, field
from typing import Any

from loopwise.core.events import Event, Status, jsonable
from loopwise.core.jsontypes import JSONObject
from loopwise.core.usage import Usage

__all__ = ["Halt", "RunResult"]


class Halt(Exception):
    """Ends the whole run with ``status``; raised by guardrails inside nested steps.

    A step of yours may raise it too, to end the run with a status instead of an error
    (``raise loopwise.Halt(Status.REFUSED, "the model declined")``): the run's result
    has that status and ``detail``, and ``output`` when given.
    """

    def __init__(
        self,
        status: Status,
        detail: str,
        *,
        output: object = None,
        pending: list[Any] | None = None,
    ) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail
        self.output = output
        self.pending = pending or []
        """The approval requests a run ``awaiting_approval`` waits on."""


@dataclass(kw_only=True, repr=False)
class RunResult:
    """How a run ended and what it produced; its ``repr`` is a one-line summary."""

    run_id: str
    """The run's id (the store's key)."""
    status: Status
    """How it ended."""
    output: Any = None
    """The target step's output when ``completed`` (partial results otherwise, if any)."""
    usage: Usage = field(default_factory=Usage)
    """Tokens, calls, cost and wall time of the whole run."""
    steps: int = 0
    """Steps taken (agent turns, workflow nodes)."""
    events: list[Event] = field(default_factory=list)
    """The ordered event log: the transcript of the run."""
    detail: str | None = None
    """Why the run did not complete, in one line."""
    pending: list[Any] = field(default_factory=list)
    """Undecided approvals when ``awaiting_approval``."""

    @property
    def transcript(self) -> list[Event]:
        """The event log (an alias of :attr:`events`)."""
        return self.events

    def __repr__(self) -> str:
        # Bounded whatever the run's length: asyncio.run formats its task's result (on
        # 3.11, when it restores the Ctrl-C handler), and so do debuggers and logs.
        detail = f", detail={reprlib.repr(self.detail)}" if self.detail else ""
        return (
            f"RunResult(run_id={self.run_id!r}, status={str(self.status)!r}, "
            f"output={reprlib.repr(self.output)}, steps={self.steps}, "
            f"events={len(self.events)}, pending={len(self.pending)}{detail})"
        )

    def to_dict(self) -> JSONObject:
        """The JSON document the CLI prints with ``--json``."""
        return {
            "run_id": self.run_id,
            "status": str(self.status),
            "output": jsonable(self.output),
            "usage": self.usage.to_dict(),
            "steps": self.steps,
            "detail": self.detail,
            "pending": [jsonable(p) for p in self.pending],
        }
