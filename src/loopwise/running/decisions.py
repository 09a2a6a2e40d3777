"""Approving and denying from Python: :func:`approve` and :func:`deny`, the CLI's checks.

``loopwise approve``/``deny`` and these two functions choose the approvals a decision
applies to the same way (:func:`choose`) and record each through
:func:`loopwise.running.approvals.decide`, so a test or a script decides exactly as a person
at the terminal does:

* with no ``approval=``, the run's only pending approval (several pending: name one, or
  ``all_pending=True``);
* a run that paused before and asks again is refused unless the approval is named (a
  listing from before may have shown another ask);
* ``seen_hash=`` binds the decision to the arguments the decider saw; ``args=`` approves
  edited arguments, checked against the tool's schema and policies (a policy reading
  ``ctx.deps`` gets ``deps=``, else the target module's ``make_deps()``) of the run's step:
  ``step=`` when given (as ``resume(step=...)``), else the one its spec loads, else the
  one of the run's name that the running script (``__main__``) defines;
* a denial needs a reason;
* ``by`` (default: the OS user) names who decides: it is printed back to the people who
  read the run, so a control character, line separator or bidirectional control in it
  is refused (``DecisionError``, ``name="by"``, ``code="bad-name"``).

Every refusal raises (:class:`~loopwise.errors.ConfigError` for an unknown run or approval
or an ambiguous choice, :class:`~loopwise.errors.DecisionError` for a decision the checks
refuse) and records nothing. Deciding does not continue the run: call
:func:`loopwise.resume` (or let a ``loopwise worker`` take it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from loopwise.errors import ConfigError
from loopwise.running.approvals import asked_again, check_decider, decide
from loopwise.store.base import EventLog, RunStore, StoredApproval
from loopwise.store.open import require_folder, shared_store
from loopwise.tools.audit import os_user

if TYPE_CHECKING:
    from loopwise.core.step import Step

__all__ = ["approve", "choose", "decide_pending", "deny"]


def approve(
    run_id: str,
    *,
    approval: str | None = None,
    all_pending: bool = False,
    by: str | None = None,
    reason: str | None = None,
    args: Mapping[str, object] | None = None,
    seen_hash: str | None = None,
    store: str | os.PathLike[str] | RunStore | None = None,
    deps: object = None,
    step: Step | None = None,
) -> list[StoredApproval]:
    """Approve a pending approval of run ``run_id`` (``args=``: with edited arguments, any
    mapping of JSON data: a ``dict[str, object]`` built before the call fits); the
    approvals decided. ``store`` is a path, URL or store object (default: the default
    store, ``$LOOPWISE_STORE`` or ``.loopwise/runs.db``). The checks: the module docstring.

    A policy judging an edit gets a context whose ``deps`` are ``deps`` or, without them,
    what the run's target module's ``make_deps()`` makes (as
    :func:`loopwise.approvals.decide` and ``loopwise approve --deps``; used only when an
    edit is checked, never stored: the run gets its own deps when it resumes). ``step``
    is the run's step an edit is checked against, for a run that recorded no spec (a step
    of a script's ``__main__`` is found without it)."""
    return decide_pending(
        _store(store),
        run_id,
        "approved",
        approval=approval,
        all_pending=all_pending,
        by=by,
        reason=reason,
        edited_args=args,
        seen_hash=seen_hash,
        deps=deps,
        step=step,
    )


def deny(
    run_id: str,
    *,
    reason: str,
    approval: str | None = None,
    all_pending: bool = False,
    by: str | None = None,
    seen_hash: str | None = None,
    store: str | os.PathLike[str] | RunStore | None = None,
) -> list[StoredApproval]:
    """Deny a pending approval of run ``run_id``, saying why (the model or planner reads
    ``reason``); the approvals decided. Checks as :func:`approve`."""
    return decide_pending(
        _store(store),
        run_id,
        "denied",
        approval=approval,
        all_pending=all_pending,
        by=by,
        reason=reason,
        seen_hash=seen_hash,
    )


def decide_pending(
    store: RunStore,
    run_id: str,
    decision: str,
    *,
    approval: str | None = None,
    all_pending: bool = False,
    by: str | None = None,
    reason: str | None = None,
    edited_args: Mapping[str, object] | None = None,
    seen_hash: str | None = None,
    deps: object = None,
    step: Step | None = None,
) -> list[StoredApproval]:
    """Record ``decision`` on the approvals :func:`choose` picks; the decided approvals
    (``deps`` and ``step``: what an edit is judged with, as :func:`decide`'s)."""
    by = check_decider(by or os_user())
    chosen = choose(store, run_id, approval=approval, all_pending=all_pending, seen_hash=seen_hash)
    if edited_args is not None and len(chosen) != 1:
        raise ConfigError("edited arguments are for one approval: name it", name="args")
    return [
        decide(
            store,
            run_id,
            a.approval_id,
            decision=decision,
            by=by,
            reason=reason,
            edited_args=edited_args,
            seen_hash=seen_hash,
            deps=deps,
            step=step,
        )
        for a in chosen
    ]


def choose(
    store: RunStore,
    run_id: str,
    *,
    approval: str | None = None,
    all_pending: bool = False,
    seen_hash: str | None = None,
) -> list[StoredApproval]:
    """The approvals a decision applies to: the one named, or the run's only pending one
    (every one with ``all_pending``) when no listing from before could have shown others."""
    store.get_run(run_id)
    if all_pending and seen_hash:
        raise ConfigError("a seen hash binds one approval: drop all", name="seen_hash")
    if approval:
        found = store.approval(run_id, approval)
        if found is None:
            raise ConfigError(f"run {run_id!r} has no approval {approval!r}", name=approval)
        return [found]
    waiting = store.pending(run_id)
    if not waiting:
        decided = "; ".join(
            f"{a.approval_id} was {a.status} by {a.decided_by}" for a in store.approvals(run_id)
        )
        raise ConfigError(
            f"run {run_id!r} has no pending approval" + (f" ({decided})" if decided else ""),
            name=run_id,
        )
    if len(waiting) > 1 and not all_pending:
        ids = ", ".join(a.approval_id for a in waiting)
        raise ConfigError(
            f"run {run_id!r} has {len(waiting)} pending approvals ({ids}); name one with "
            "--approval ID (approval=), or pass --all (all_pending=True)",
            name=run_id,
        )
    if not seen_hash:
        _refuse_later_asks(store, run_id, waiting)
    return waiting


def _refuse_later_asks(store: EventLog, run_id: str, waiting: list[StoredApproval]) -> None:
    """An unnamed decision must not reach an ask that a listing from an earlier pause of
    the run did not show (the run was resumed and asked again since)."""
    events = store.events(run_id)
    later = [a for a in waiting if asked_again(a, events)]
    if not later:
        return
    names = "; ".join(f"{a.approval_id}: {a.tool}({_clip(json.dumps(a.args), 80)})" for a in later)
    raise ConfigError(
        f"run {run_id!r} paused before and now asks again ({names}); a listing from "
        "before may have shown another ask, so nothing was decided: name it with --approval "
        "ID (approval=) and --seen-hash HASH from `loopwise pending` (seen_hash=)",
        name=run_id,
    )


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _store(store: str | os.PathLike[str] | RunStore | None) -> RunStore:
    """A store object as given, else this process's shared store for a path or URL
    (``None``: the default store), kept open as :func:`loopwise.run` keeps it."""
    if store is None or isinstance(store, str | os.PathLike):
        require_folder(store)  # a mistyped path: an error, not a store made to find no run
        return shared_store(store)
    return store
