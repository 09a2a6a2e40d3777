"""How to run a step: :class:`RunOptions`, and their merging and checking before a run."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Protocol, TypeAlias, TypedDict

from loopwise.core.events import EventSink
from loopwise.core.jsontypes import JSONObject
from loopwise.core.usage import Budget, Pricing
from loopwise.errors import ConfigError
from loopwise.models.port import Model

__all__ = [
    "ApprovalDecider",
    "ApprovalHandler",
    "ModelLike",
    "ResumeOverrides",
    "RunOptions",
    "RunOverrides",
    "check_options",
    "check_run_id",
    "merge_options",
]


class ApprovalDecider(Protocol):
    """An approval handler object: ``decide(request)`` (sync or async) returns a verdict
    (``Approved``/``Denied``/``Edited``), ``True``/``False``/a reason, or ``None``
    (undecided) for an :class:`~loopwise.tools.verdicts.ApprovalRequest`."""

    def decide(self, request: Any, /) -> object: ...


ApprovalHandler: TypeAlias = ApprovalDecider | Callable[[Any], object] | None
"""An approval handler: an object with ``decide(request)``, or a function of the
:class:`~loopwise.tools.verdicts.ApprovalRequest` (sync or async) returning what
:class:`ApprovalDecider` returns. Declared in the kernel so a context names what it carries
without importing the tools layer (the request is typed there); :mod:`loopwise.tools.handlers`
asks it."""

ModelLike: TypeAlias = Model | str | None
"""A model: a :class:`~loopwise.models.port.Model` (the OpenAI-compatible model, the scripted
one, your own), or a name ``resolve_model`` turns into one (``"gpt-4o-mini"``,
``"scripted"``); ``None`` for the configured default."""

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(kw_only=True)
class RunOptions:
    """How to run a step; every field is optional.

    ``loopwise.arun``, ``run``, ``aresume``, ``resume`` and ``astream`` all take one as
    ``options`` and the same fields as keyword arguments (``arun(step, x, model=...)``),
    which win over the object's.
    """

    model: ModelLike = None
    """A :class:`~loopwise.models.openai.Model`, or a model name resolved by ``resolve_model``."""
    budget: Budget | None = None
    """Overrides the step's own ``budget`` limit by limit."""
    max_steps: int | None = None
    """Overrides agents' own ``max_steps`` for this run."""
    run_id: str | None = None
    """The id to use (a fresh one by default)."""
    pricing: Pricing = field(default_factory=Pricing)
    """The price table."""
    sinks: tuple[EventSink, ...] = ()
    """Extra event sinks (the store adds its own)."""
    approvals: ApprovalHandler = None
    """The approval handler for gates."""
    replay: dict[str, JSONObject] = field(default_factory=dict)
    """Journaled results to replay (set by resume)."""
    clock: Callable[[], float] = time.monotonic
    """The monotonic clock."""
    conversation: str | None = None
    """The conversation this run is a message of: the run continues the history of the
    conversation's earlier runs (an agent target only; needs a run store). A new id
    starts a conversation."""
    deps: Any = None
    """The run's dependencies (clients, accounts, a ledger): ``ctx.deps`` in its steps,
    tools and policies, ``request.deps`` in an in-process model. Never stored: a resume
    in another process is given them again (``deps=``, ``--deps``, or the target module's
    ``make_deps()``)."""
    safety_identifier: str | None = None
    """Who the run is for, as the calling application names its end user (a stable hash
    of their account id, never derived from the content): sent as OpenAI's
    ``safety_identifier`` on every model call of the run, recorded with the run and kept
    by its resumes. At most 64 characters."""
    stream: bool = False
    """Ask the model to stream its answers: each piece of text goes, as a
    :class:`TextDelta`, to the sinks that have a ``text`` method (``astream`` yields them);
    what is recorded is the same as without streaming."""


class ResumeOverrides(TypedDict, total=False):
    """:class:`RunOptions`'s fields but ``run_id``, as keyword arguments of ``resume``,
    ``aresume`` and ``astream_resume`` (the run already has its id). Each has
    :class:`RunOptions`'s meaning."""

    model: ModelLike
    budget: Budget | None
    max_steps: int | None
    pricing: Pricing
    sinks: tuple[EventSink, ...]
    approvals: ApprovalHandler
    replay: dict[str, JSONObject]
    clock: Callable[[], float]
    conversation: str | None
    deps: Any
    safety_identifier: str | None
    stream: bool


class RunOverrides(ResumeOverrides, total=False):
    """:class:`RunOptions`'s fields as keyword arguments (``loopwise.run(step, x, model=...)``)
    of ``run``, ``arun`` and ``astream``, beside their own keywords."""

    run_id: str | None


_OPTION_NAMES = frozenset(f.name for f in fields(RunOptions))


def merge_options(
    options: RunOptions | None, overrides: Mapping[str, Any], *, also: str = ""
) -> RunOptions:
    """``options`` with ``overrides`` applied; an unknown name raises :class:`ConfigError`
    listing the known ones (plus ``also``, the caller's own keyword arguments)."""
    unknown = sorted(set(overrides) - _OPTION_NAMES)
    if unknown:
        known = ", ".join(sorted(_OPTION_NAMES)) + (f", {also}" if also else "")
        raise ConfigError(f"unknown run option {unknown[0]!r}; known: {known}", name=unknown[0])
    if options is None:
        return RunOptions(**dict(overrides))
    return replace(options, **overrides) if overrides else options


def check_run_id(run_id: object) -> str:
    """``run_id`` when a user may choose it: 1-128 letters, digits, ``.``, ``_`` or ``-``,
    starting with a letter or digit. Else :class:`ConfigError` (``name="run_id"``): a run
    id keys the run's events, approvals and idempotency keys, and is typed on command
    lines and put in URLs, so no ``:``, ``/``, control character or lone surrogate."""
    if isinstance(run_id, str) and _RUN_ID.fullmatch(run_id):
        return run_id
    shown = ascii(run_id)
    shown = shown if len(shown) <= 60 else f"{shown[:57]}..."
    raise ConfigError(
        f"run id {shown} is malformed: use 1-128 letters, digits, '.', '_' or '-', "
        "starting with a letter or digit",
        name="run_id",
    )


def check_options(opts: RunOptions) -> None:
    """Raise :class:`ConfigError` naming an option of the wrong kind, before the run starts."""
    steps = opts.max_steps
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ConfigError(f"max_steps must be a whole number >= 1, not {steps!r}", name="max_steps")
    if opts.budget is not None and not isinstance(opts.budget, Budget):
        raise ConfigError(
            f"budget must be a loopwise.Budget, not {type(opts.budget).__name__}", name="budget"
        )
    who = opts.safety_identifier
    if who is not None and (not isinstance(who, str) or not who.strip() or len(who) > 64):
        raise ConfigError(
            f"safety_identifier must be 1-64 characters naming the end user, not {who!r}",
            name="safety_identifier",
        )
    model = opts.model
    # getattr: the check of the model contract itself, on whatever the user passed.
    if not (model is None or isinstance(model, str) or callable(getattr(model, "complete", None))):
        raise ConfigError(
            f"model must be a model name or an object with async complete(request), "
            f"not {type(model).__name__}",
            name="model",
        )
