"""The executor's values: a :class:`Call` to make, the :class:`CallSettings` it is made with,
and the :class:`Outcome` it came to (its :data:`CallStatus`).

Architectures build calls and read outcomes; :mod:`loopwise.tools.calls` makes the one from
the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from loopwise.tools.gates import Gate, PolicyFn
from loopwise.tools.tool import Arguments
from loopwise.tools.verdicts import Pending

__all__ = ["Call", "CallSettings", "CallStatus", "Outcome"]

CallStatus = Literal["done", "invalid", "unknown", "denied", "failed", "pending", "excess"]
"""What became of a call: ``done`` (it ran, or an identical effect already had),
``invalid`` (its arguments), ``unknown`` (no such tool), ``denied`` (by its gate),
``failed`` (the tool raised or timed out), ``pending`` (a person must decide first) or
``excess`` (over the batch's call cap)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Call:
    """One call to make, as the architecture decided it."""

    name: str
    """The tool's name (as the model wrote it: it may name no tool)."""
    arguments: Arguments
    """Raw JSON text (a model's), a mapping or a pydantic model."""
    call_id: str
    """The id the log and the transcript use for it."""
    bind_id: str
    """The id that binds its approval and idempotency key: unique in the run."""
    key: str
    """The journal key of its result."""
    counted: bool = True
    """Whether it counts as a tool call in the run's usage."""
    policies: tuple[Gate | PolicyFn | None, ...] = ()
    """Extra checks (policies) arguments edited by a person must pass, besides the gate's."""
    once_in: str | None = None
    """A scope (a hybrid run, across its re-plans; an agent's run, across its turns) in
    which a ``write``/``irreversible`` call with these arguments takes effect at most once
    (``None``: no such bound, for calls code makes: it says what it means)."""
    recheck: str | None = None
    """Why a person must decide this call (again) whatever its policy says (a plan step
    after a person edited a step it depends on), or ``None``."""
    edited_by: str | None = None
    """Who edited ``arguments``, when they are a person's edit decided before this call (a
    plan step asked again after its own edit): read strictly, logged and recorded as edited."""
    edited_from: object = None
    """The arguments that edit replaced (with :attr:`edited_by`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CallSettings:
    """How a caller wants its calls made."""

    max_calls: int | None = None
    """Calls of one batch that run; the others get ``ERROR:`` results (``None``: all)."""
    max_output_chars: int | None = None
    """Longer results (and error texts) are truncated with a note."""
    keep_value: bool = False
    """Journal the tool's return value too (a workflow node's output, a plan action's)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    """What one call produced."""

    call: Call
    """The call it answers."""
    status: CallStatus
    """What became of it."""
    content: str
    """What the model reads (``ERROR: ...`` unless ``done``)."""
    reason: str | None = None
    """Why it did not run or how it failed (without the ``ERROR:`` wording)."""
    value: object = None
    """The tool's return value (when ``done``; journaled only with ``keep_value``)."""
    pending: Pending | None = None
    """The request a person must decide (when ``pending``)."""
    edited_by: str | None = None
    """Who edited its arguments, when a person did (it ran with :attr:`ran_with`)."""
    ran_with: object = None
    """The arguments it ran with, when a person edited them (as JSON data)."""

    @property
    def is_error(self) -> bool:
        """Whether the model reads an error."""
        return self.status != "done"
