"""The activities of a run on Temporal: its model calls, tool calls and policy judgements.

Each is done in a worker, outside workflow code, with what the workflow cannot hold: the
real model, the tool's function, the run's deps (the target module's ``make_deps()``,
made once per worker process and never sent in a payload). A worker's
:class:`Activities` keeps the targets, models and deps it loaded.

* ``loopwise.load`` — loads a run's target into the worker process (a local activity);
* ``loopwise.model`` — one model call (the request as data, the turn back);
* ``loopwise.tool`` — one tool call, found by name in the run's target, with the run's
  idempotency key and deps; what the tool raises comes back as data (the run reads it
  as an error result, as in a local run), so only a worker's death makes Temporal retry
  it — which the idempotency key makes safe;
* ``loopwise.judge`` — a policy's judgement, a *local* activity: it runs in the worker
  process whose workflow code asked (:func:`remember` hands the work over by token), so
  a policy judging a whole plan judges the plan in hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loopwise.core.events import jsonable
from loopwise.core.execute import new_context
from loopwise.core.offload import Work
from loopwise.core.options import RunOptions
from loopwise.core.result import Halt
from loopwise.core.shape import describe
from loopwise.core.step import Context
from loopwise.errors import ModelAPIError, ToolError, missing_extra
from loopwise.integrations.temporal.messages import Declared, JudgeAnswer, ModelAnswer, ToolAnswer
from loopwise.models.port import Model, ModelRequest, model_member
from loopwise.running.deciding import tools_in
from loopwise.running.targets import Target, deps_factory, load_target, model_for
from loopwise.tools.tool import Tool
from loopwise.tools.verdicts import Approved, Denied, Escalate

try:
    from temporalio import activity
except ImportError as e:
    raise missing_extra("temporal", e, needed_by="loopwise.integrations.temporal") from None

__all__ = ["Activities", "forget", "remember"]

_HANDED: dict[str, Work] = {}
"""Judgements waiting for their local activity, by token (this process's workflows)."""


def remember(token: str, work: Work) -> None:
    """Hand ``work`` to the local activity that will ask for ``token`` (same process)."""
    _HANDED[token] = work


def forget(token: str) -> None:
    """Drop handed work once its activity answered (or was replayed from history)."""
    _HANDED.pop(token, None)


class Activities:
    """One worker's activities and what they loaded (targets, models, deps by spec).

    Each takes its call as ``dict[str, Any]``: Temporal's converter reads that annotation
    at run time (JSON as sent); each answers one of :mod:`.messages`' shapes."""

    def __init__(self) -> None:
        self._targets: dict[str, Target] = {}
        self._models: dict[tuple[str, str], Model] = {}
        self._deps: dict[str, object] = {}

    def all(self) -> list[Callable[..., object]]:
        """The activities to register with a worker."""
        return [self.load, self.model, self.tool, self.judge]

    def _target(self, spec: str) -> Target:
        if spec not in self._targets:
            self._targets[spec] = load_target(spec)
        return self._targets[spec]

    def _context(self, spec: str, run_id: str) -> Context:
        """A context with the run's id and deps (made on first use in this process)."""
        if spec not in self._deps:
            make = deps_factory(self._target(spec))
            self._deps[spec] = make() if make is not None else None
        target = self._target(spec)
        return new_context(target.step, RunOptions(run_id=run_id, deps=self._deps[spec]))

    @activity.defn(name="loopwise.load")
    async def load(self, call: dict[str, Any]) -> Declared:
        """Load a run's target in this process (a local activity: the workflow's own load
        is then an import-cache hit, not an import inside workflow code) and say what the
        run's model declares (``model``: its name), which the loop reads (the structured
        output rung it starts at, the decision backends a judge may use, its endpoint).
        A target or model that cannot be made here is ``{"error": ...}``: the run ends
        ``error`` saying why (a retry would not load it either)."""
        try:
            self._target(call["spec"])
            if call.get("model") is None:
                return {}
            model = self._model(call["spec"], call["model"])
        except Exception as e:
            return {"error": f"{type(e).__name__}: {e}"}
        endpoint = model_member(model, "endpoint")
        return {
            "structured_mode": model_member(model, "structured_mode"),
            "decision_backends": list(model_member(model, "decision_backends")),
            "endpoint": list(endpoint) if endpoint is not None else None,
        }

    def _model(self, spec: str, name: str) -> Model:
        if (spec, name) not in self._models:
            self._models[spec, name] = model_for(self._target(spec), name)
        return self._models[spec, name]

    @activity.defn(name="loopwise.model")
    async def model(self, call: dict[str, Any]) -> ModelAnswer:
        """One model call: ``spec``, ``model`` (its name), ``request`` (as data)."""
        try:
            model = self._model(call["spec"], call["model"])
            turn = await model.complete(ModelRequest(**call["request"]))
        except Exception as e:  # the run ends `error` with it, as a local run does
            return {"error": f"{type(e).__name__}: {e}", "status_code": _status(e)}
        return {"turn": turn.to_dict()}

    @activity.defn(name="loopwise.tool")
    async def tool(self, call: dict[str, Any]) -> ToolAnswer:
        """One tool call: ``spec``, ``tool``, ``args``, ``key``, ``run_id``, ``step``."""
        try:
            found = self._tool(call["spec"], call["tool"])
            args = found.parse(call["args"])
            ctx = self._context(call["spec"], call["run_id"]).child(found.name)
        except Exception as e:
            return {"raised": type(e).__name__, "message": str(e)}
        ctx.path = tuple(p for p in str(call["step"]).split("/") if p)
        ctx.performing = found
        ctx.idempotency_key = call.get("key")
        try:
            value = await found.perform(args, ctx)
        except Halt as halt:
            return {"halt": str(halt.status), "detail": halt.detail}
        except TimeoutError as e:
            return {"timeout": True, "message": str(e)}
        except Exception as e:
            return {"raised": type(e).__name__, "message": str(e)}
        return {"value": jsonable(value)}

    def _tool(self, spec: str, name: str) -> Tool:
        found = {
            id(t.tool): t.tool
            for t in tools_in(describe(self._target(spec).step))
            if t.name == name and isinstance(t.tool, Tool)
        }
        if len(found) != 1:
            raise ToolError(
                f"{spec} has {len(found) or 'no'} tool(s) named {name!r}: a worker finds a "
                "run's tool by its name",
                tool=name,
            )
        return next(iter(found.values()))

    @activity.defn(name="loopwise.judge")
    async def judge(self, call: dict[str, Any]) -> JudgeAnswer:
        """A policy's judgement handed over by ``token`` (a local activity)."""
        work = _HANDED.get(call["token"])
        if work is None:  # not this process's: fail closed
            return {"verdict": "denied", "reason": "the policy's work was not found on this worker"}
        verdict = await work.do(self._context(call["spec"], call["run_id"]))
        if isinstance(verdict, Approved):
            return {"verdict": "approved", "by": verdict.by, "reason": verdict.reason}
        if isinstance(verdict, Escalate):
            return {"verdict": "escalate", "reason": verdict.reason}
        assert isinstance(verdict, Denied)  # a policy's verdict is one of the three
        return {"verdict": "denied", "by": verdict.by, "reason": verdict.reason}


def _status(error: Exception) -> int | None:
    return error.status_code if isinstance(error, ModelAPIError) else None
