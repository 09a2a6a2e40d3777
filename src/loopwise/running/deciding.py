"""The context a policy gets when a person's edit is judged at decision time.

``loopwise approve --args``, the inbox's "Approve edited" and
:func:`loopwise.approvals.decide` judge an edit when the person decides, outside the run.
A policy with a ``ctx`` parameter still gets a :class:`~loopwise.core.step.Context`: the
run's id, the asking step's path and the run's **deps** — those given (``deps=``,
``approve --deps``), else what the target module's ``make_deps()`` makes, the factory
``loopwise resume`` uses. Nothing else of the run is there (no model, no events, no usage):
a policy must judge from the arguments and its deps. One that reads ``ctx.deps`` when
there are none gets a message saying how to give them, and nothing is decided.
"""

from __future__ import annotations

from typing import Any

from loopwise.core.events import Status
from loopwise.core.result import Halt
from loopwise.core.step import Context
from loopwise.running.targets import Target, deps_factory

__all__ = ["deciding_context"]


def deciding_context(run_id: str, step: str, target: Target, deps: Any = None) -> Context[Any]:
    """The context for judging an edit of ``run_id``'s call at ``step`` (its deps are
    ``deps``, else ``target``'s ``make_deps()``, else none)."""
    if deps is None:
        make = deps_factory(target)
        deps = make() if make is not None else None
    return _Deciding(run_id=run_id, path=tuple(step.split("/")), _deps=deps, spec=target.spec)


class _Deciding(Context[Any]):
    """A context at decision time: deps, but no run going on."""

    def __init__(self, *, spec: str, **fields: Any) -> None:
        super().__init__(**fields)
        self.spec = spec

    @property
    def deps(self) -> Any:
        """The deps the decision was given; without any, reading them says how to give
        them (the policy then cannot judge the edit, and nothing is decided)."""
        if self._deps is None:
            raise Halt(
                Status.ERROR,
                "the policy reads ctx.deps and this decision has none: define make_deps() "
                f"in the module of {self.spec}, pass --deps module:function to `loopwise "
                "approve`, or deps= to loopwise.approve or loopwise.approvals.decide",
            )
        return self._deps
