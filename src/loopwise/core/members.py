"""The optional members of a step, declared with their defaults: :class:`StepDefaults`.

A :class:`~loopwise.core.step.Step` is a ``name`` and ``async run(input, ctx)``, nothing
more: the runtime-checkable protocol stays that small, so a user's own object with those
two is a step, and ``isinstance(obj, Step)`` means what it always meant. What the library
also reads from a step, when the step has it, is declared here once, with the value a step
that says nothing stands for:

- ``input_type`` / ``output_type``: what the step takes and gives (``Any``: unsaid);
- ``budget``: the step's own :class:`~loopwise.core.usage.Budget` (``None``: none);
- ``needs_model``: whether running it needs a model (``True``: assume it does).

The library's steps inherit :class:`StepDefaults` and read these as attributes. Code that
takes any step (a user's included) reads one with :func:`step_member`, the one place the
library looks up a member a step may lack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, get_args, overload

if TYPE_CHECKING:
    from loopwise.core.usage import Budget

__all__ = ["StepDefaults", "StepMember", "step_member"]

StepMember = Literal["input_type", "output_type", "budget", "needs_model"]
"""The optional members of a step (what :func:`step_member` reads)."""


class StepDefaults:
    """The optional members of :class:`~loopwise.core.step.Step`, with their defaults.

    A base class, not part of the protocol: the library's steps inherit it (and override
    what they know), a user's step may inherit it too, and one that does not is still a
    step (:func:`step_member` gives it these defaults).
    """

    __slots__ = ()

    input_type: Any = Any
    """The type of the step's input (``Any``: unsaid; a workflow's graph checks skip it)."""
    output_type: Any = Any
    """The type of the step's output (``Any``: unsaid)."""
    budget: Budget | None = None
    """The step's own limits, merged with the run's (``None``: none of its own)."""

    @property
    def needs_model(self) -> bool:
        """Whether running the step needs a model (plain code says ``False``; a class
        attribute or a property of a subclass overrides it)."""
        return True


# getattr: the defaults, read once from the one place they are declared.
_DEFAULTS: dict[str, object] = {
    name: getattr(StepDefaults(), name) for name in get_args(StepMember)
}


@overload
def step_member(step: object, name: Literal["needs_model"]) -> bool: ...
@overload
def step_member(step: object, name: Literal["budget"]) -> Budget | None: ...
@overload
def step_member(step: object, name: Literal["input_type", "output_type"]) -> Any: ...
def step_member(step: object, name: StepMember) -> object:
    """``step``'s optional member ``name``, or its declared default (:class:`StepDefaults`)
    when the step does not have it (a user's plain step)."""
    # getattr: the one read of a member a step may lack; what it stands for when it is
    # missing is declared once, on StepDefaults.
    return getattr(step, name, _DEFAULTS[name])
