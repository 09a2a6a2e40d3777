"""What a run loaded from its spec takes from the target's module: the examples' conventions.

A target module may define ``offline_model`` (the model ``--model scripted`` means for it)
and ``make_deps()`` (the deps each run gets, :data:`~loopwise.running.targets.DEPS_FACTORY`).
A run started from the CLI, by a worker or resumed in another process is rebuilt from its
recorded spec and model name; these functions pick the step, the model and the deps the way
the run first had them, and close a model made here when the run is done with it.

An eval's sandbox (``make_eval_deps()``) may be a context manager (a
``@contextlib.contextmanager`` function, say, that copies a database into a temporary
folder and removes it): :func:`entered` enters it for one run and leaves it when the run
ends, so a throwaway sandbox is thrown away.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, AbstractContextManager, AsyncExitStack

from loopwise.core.jsontypes import json_str
from loopwise.core.step import Step
from loopwise.errors import ConfigError, TargetError
from loopwise.models.port import Model, model_member
from loopwise.running.targets import (
    EVAL_DEPS_FACTORY,
    defined,
    deps_factory,
    load_target,
    model_for,
)
from loopwise.store.base import StoredRun

__all__ = ["close_model", "entered", "module_deps", "target_and_model"]


def target_and_model(
    row: StoredRun,
    step: Step | None,
    model: Model | str | None,
    mode: str | None = None,
    api: str | None = None,
) -> tuple[Step, Model | None]:
    """The step to run and the model: the one given, else the one the run started with
    (a model made here by name takes the structured-output ``mode``, and the API and store
    setting the run recorded, ``api`` when it recorded none). A given ``api`` or model that
    speaks another API than the run recorded raises :class:`ConfigError`."""
    loaded = None
    if step is None:
        if not row.spec:
            raise ConfigError(
                f"run {row.run_id!r} recorded no target spec; pass the step to resume it "
                "(resume(run_id, step=...))",
                name=row.run_id,
            )
        loaded = load_target(row.spec)
        step = loaded.step
        if step.name != row.target:
            # The name was rebound since the run started (or the file edited): another
            # step must not continue this run's journal and approvals.
            raise TargetError(
                f"run {row.run_id!r} is of step {row.target!r}, but its spec {row.spec!r} "
                f"now loads {step.name!r}; pass the step to resume it (resume(run_id, step=...))",
                name=row.spec,
            )
    if model is not None and not isinstance(model, str):
        speaks = model_member(model, "speaks")
        _same_api(row, api or json_str((speaks or {}).get("api")))
        return step, model
    name = model or row.model
    if name is None:
        return step, None
    _same_api(row, api)
    api = api or row.options.get("api")
    store = bool(row.options.get("api_store", False))
    if loaded is None:
        from loopwise.models.openai import resolve_model  # the SDK loads only when a model is made

        return step, resolve_model(name, structured_mode=mode, api=api, store=store)
    offline = defined(loaded.module, "offline_model")
    if offline is not None and model is None:
        # The run used the target's own offline model (possibly under its own name).
        candidate = model_for(loaded, "scripted")
        if candidate.name == name:
            return step, candidate
    return step, model_for(loaded, name, structured_mode=mode, api=api, store=store)


def _same_api(row: StoredRun, asked: str | None) -> None:
    """Refuse a resume that asks for another API than the run began with (its journal
    holds that API's turns: reasoning items and response ids, or neither)."""
    began = row.options.get("api")
    if asked is not None and began is not None and asked != began:
        raise ConfigError(
            f"run {row.run_id!r} began on the {began!r} API and its journal holds that "
            f"API's turns: resume it with --api {began} (api={began!r}), not {asked!r}",
            name="api",
        )


async def entered(scope: AsyncExitStack, made: object) -> object:
    """The deps a run uses from what a sandbox factory ``made``: a context manager (sync or
    async) is entered in ``scope`` (left when ``scope`` closes, as the run ends) and what it
    yields is the deps; anything else is the deps as it is."""
    if isinstance(made, AbstractAsyncContextManager):
        return await scope.enter_async_context(made)
    if isinstance(made, AbstractContextManager):
        return scope.enter_context(made)
    return made


async def module_deps(row: StoredRun, scope: AsyncExitStack) -> object:
    """The deps a run loaded from its spec gets: its module's ``make_deps()``, or none.

    An eval's run (:attr:`StoredRun.eval_id`) never gets the real ``make_deps()``: it is
    resumed on the module's ``make_eval_deps()`` sandbox (:func:`entered` in ``scope``), and
    a module without one makes resuming it a :class:`ConfigError` asking for its deps
    (``deps=`` / ``--deps``), so a measurement cannot pay out for real on its way to an
    answer."""
    if not row.spec:
        return None
    target = load_target(row.spec)
    if row.eval_id is None:
        make = deps_factory(target)
        return make() if make is not None else None
    sandbox = defined(target.module, EVAL_DEPS_FACTORY)
    if callable(sandbox):
        return await entered(scope, sandbox())
    raise ConfigError(
        f"run {row.run_id} is a run of eval {row.eval_id}: {row.spec} declares no "
        f"{EVAL_DEPS_FACTORY}(), so give the deps it was measured with (--deps / deps=); "
        "loopwise will not resume it on the real make_deps()",
        name="deps",
    )


async def close_model(model: object) -> None:
    """Close the connections of a model resume opened itself (an ``OpenAIModel``)."""
    await model_member(model, "aclose")()
