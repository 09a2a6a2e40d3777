"""The engine seam: the outside-world work of a run, handed to whoever runs it.

A run's own loop (an agent's turns, a workflow's graph, a hybrid's plan) is pure
bookkeeping; what touches the world is a tool's effect and a policy's judgement (which may
read a database). Left alone (:attr:`Context.offload <loopwise.core.step.Context.offload>`
``None``), loopwise does that work in place, as it always has. A durable-execution engine
(Temporal, :mod:`loopwise.integrations.temporal`) sets :attr:`offload` to its own function
and runs each :class:`Work` where it keeps the result (an activity): the tool-call executor
(:mod:`loopwise.tools.calls`, through ``Tool.perform``, which only it calls for an effect)
hands it every tool's call with its idempotency key, and
:meth:`Gate.run_policy <loopwise.tools.gates.Gate.run_policy>` every policy's judgement.
A sync ``@step`` runs in place under an engine (workflow code has no threads).

loopwise's own in-process tools (an agent's ``final_answer``, a step given as a tool with
``as_tool``, whose nested model calls and tools are offloaded one by one) say so with
``Tool.in_process`` and are never handed over.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from loopwise.core.jsontypes import JSONObject

__all__ = ["Offload", "Work", "WorkKind"]

WorkKind = Literal["effect", "judgement"]
"""``effect``: a tool runs (a ``read`` tool too: it reads the world); ``judgement``: a
gate's policy (or a plan action's) judges arguments."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Work:
    """One piece of outside-world work a run hands to its engine."""

    kind: WorkKind
    """What it is."""
    tool: str
    """The tool it is for (the tool that runs, or whose arguments are judged)."""
    args: JSONObject
    """The validated arguments, as JSON data."""
    effect: str
    """The tool's effect (``read``, ``write``, ``irreversible``)."""
    key: str | None
    """The idempotency key of an effect (run id + call id; ``None`` for a ``read``)."""
    step: str
    """The step path the work is done for."""
    do: Callable[[Any], Awaitable[Any]]
    """The work itself, done in the context given (a :class:`~loopwise.core.step.Context`,
    typed ``Any`` as the context names this module; ``None``: none): an engine that runs
    it in the process that asked (a local activity) passes a context holding the run's
    deps and, for an effect, :attr:`key` as its idempotency key; one that runs it
    elsewhere finds the tool by :attr:`tool` and ignores this."""


Offload = Callable[[Work], Awaitable[Any]]
"""An engine's hook: do ``work`` (where the engine keeps its result) and return what
:attr:`Work.do` returns, or raise what it raises."""
