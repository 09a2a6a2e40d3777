"""loopwise: workflows where the steps are known, agents where they are not, hybrids
where a wrong step is expensive — one step interface, one budget, one store, one eval.
"""

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loopwise.agent import Agent, LoopDetection
    from loopwise.allowlists import Bounds, IdPattern, InDirectory, OneOf
    from loopwise.analyze import TraceAnalysis, analyze
    from loopwise.check import Finding, check
    from loopwise.decide import Decision, decide
    from loopwise.errors import (
        ConfigError,
        ConversationError,
        DecisionError,
        DirectEffectError,
        GraphError,
        LoopwiseError,
        ModelAPIError,
        ModelNotConfigured,
        StoreError,
        TargetError,
        ToolError,
    )
    from loopwise.evals import (
        Case,
        EvalReport,
        EvalTarget,
        aevaluate,
        evaluate,
        field_match,
        load_dataset,
    )
    from loopwise.events import Event, EventType, Status, TextDelta
    from loopwise.gates import Gate
    from loopwise.handlers import TerminalApprovals
    from loopwise.history import ContextPolicy, SummarizingPolicy
    from loopwise.hybrid import (
        Action,
        ActionCatalog,
        ActionResult,
        Hybrid,
        HybridOutput,
        Plan,
        PlanStep,
    )
    from loopwise.model import OpenAIModel, resolve_model
    from loopwise.options import RunOptions
    from loopwise.port import Model, ModelRequest, ToolCall, Turn
    from loopwise.postgres_store import PostgresStore
    from loopwise.result import Halt, RunResult
    from loopwise.runner import aresume, arun, enqueue, resume, run
    from loopwise.sqlite_store import SQLiteStore
    from loopwise.step import Context, Step, step
    from loopwise.store import RunStore, StoredApproval, StoredRun
    from loopwise.stores import open_store
    from loopwise.stream import RunStream, astream, astream_resume
    from loopwise.structured import Structured
    from loopwise.tools import Effect, Tool, ToolArgumentsError, as_tool, tool
    from loopwise.usage import Budget, Price, Pricing, Usage
    from loopwise.verdicts import ApprovalRequest, Approved, Denied, Edited, Escalate
    from loopwise.workflow import Workflow

# Every name loads on first use (PEP 562), so a process pays only for what it touches:
# the store and approval verbs of the CLI (`loopwise pending`) import neither pydantic
# nor the openai SDK nor networkx, and a workflow run never loads the hybrid or the
# deciding API (decide, check, analyze, evals).
_LAZY = {
    **dict.fromkeys(["Agent", "LoopDetection"], "loopwise.agent"),
    **dict.fromkeys(["TraceAnalysis", "analyze"], "loopwise.analyze"),
    **dict.fromkeys(["Finding", "check"], "loopwise.check"),
    **dict.fromkeys(["Decision", "decide"], "loopwise.decide"),
    **dict.fromkeys(["ConfigError", "ConversationError", "DecisionError", "DirectEffectError",
                     "GraphError",
                     "LoopwiseError", "ModelAPIError", "ModelNotConfigured", "StoreError",
                     "TargetError", "ToolError"], "loopwise.errors"),
    **dict.fromkeys(["Case", "EvalReport", "EvalTarget", "aevaluate", "evaluate",
                     "field_match", "load_dataset"], "loopwise.evals"),
    **dict.fromkeys(["Event", "EventType", "Status", "TextDelta"], "loopwise.events"),
    "Gate": "loopwise.gates",
    "TerminalApprovals": "loopwise.handlers",
    **dict.fromkeys(["ContextPolicy", "SummarizingPolicy"], "loopwise.history"),
    **dict.fromkeys(["Action", "ActionCatalog", "ActionResult", "Hybrid", "HybridOutput",
                     "Plan", "PlanStep"], "loopwise.hybrid"),
    # The openai SDK loads when a model is made.
    **dict.fromkeys(["OpenAIModel", "resolve_model"], "loopwise.model"),
    **dict.fromkeys(["Model", "ModelRequest", "ToolCall", "Turn"], "loopwise.port"),
    # The PostgreSQL store needs the loopwise[postgres] extra (StoreError without it).
    "PostgresStore": "loopwise.postgres_store",
    **dict.fromkeys(["aresume", "arun", "enqueue", "resume", "run"], "loopwise.runner"),
    "SQLiteStore": "loopwise.sqlite_store",
    "RunOptions": "loopwise.options",
    **dict.fromkeys(["Halt", "RunResult"], "loopwise.result"),
    **dict.fromkeys(["Context", "Step", "step"], "loopwise.step"),
    **dict.fromkeys(["RunStore", "StoredApproval", "StoredRun"], "loopwise.store"),
    "open_store": "loopwise.stores",
    **dict.fromkeys(["RunStream", "astream", "astream_resume"], "loopwise.stream"),
    "Structured": "loopwise.structured",
    **dict.fromkeys(["Bounds", "IdPattern", "InDirectory", "OneOf"], "loopwise.allowlists"),
    **dict.fromkeys(["Effect", "Tool", "ToolArgumentsError", "as_tool", "tool"],
                    "loopwise.tools"),
    **dict.fromkeys(["Budget", "Price", "Pricing", "Usage"], "loopwise.usage"),
    **dict.fromkeys(["ApprovalRequest", "Approved", "Denied", "Edited", "Escalate"],
                    "loopwise.verdicts"),
    "Workflow": "loopwise.workflow",
}  # fmt: skip


class _Package(types.ModuleType):
    """The package, keeping ``loopwise.check`` the function when its module is imported.

    ``step``, ``decide``, ``check`` and ``analyze`` are both functions exported here and
    modules named for them; importing a submodule binds it on its package, which would
    replace the function (``import loopwise.check`` then ``loopwise.check(step)``
    failing). Import those modules' other names with ``from loopwise.check import Finding``.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SAME_NAME and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


_SAME_NAME = frozenset({"step", "decide", "check", "analyze"})
sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    """Load an exported name, or a submodule (``loopwise.gates``), on first access."""
    module = _LAZY.get(name)
    if module is None:
        return _submodule(name)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def _submodule(name: str) -> types.ModuleType:
    qualified = f"{__name__}.{name}"
    if name.startswith("__"):  # a tool probing for a dunder, never a module
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return importlib.import_module(qualified)
    except ModuleNotFoundError as e:
        if e.name != qualified:
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


__all__ = [
    "Action",
    "ActionCatalog",
    "ActionResult",
    "Agent",
    "ApprovalRequest",
    "Approved",
    "Bounds",
    "Budget",
    "Case",
    "ConfigError",
    "Context",
    "ContextPolicy",
    "ConversationError",
    "Decision",
    "DecisionError",
    "Denied",
    "DirectEffectError",
    "Edited",
    "Effect",
    "Escalate",
    "EvalReport",
    "EvalTarget",
    "Event",
    "EventType",
    "Finding",
    "Gate",
    "GraphError",
    "Halt",
    "Hybrid",
    "HybridOutput",
    "IdPattern",
    "InDirectory",
    "LoopDetection",
    "LoopwiseError",
    "Model",
    "ModelAPIError",
    "ModelNotConfigured",
    "ModelRequest",
    "OneOf",
    "OpenAIModel",
    "Plan",
    "PlanStep",
    "PostgresStore",
    "Price",
    "Pricing",
    "RunOptions",
    "RunResult",
    "RunStore",
    "RunStream",
    "SQLiteStore",
    "Status",
    "Step",
    "StoreError",
    "StoredApproval",
    "StoredRun",
    "Structured",
    "SummarizingPolicy",
    "TargetError",
    "TerminalApprovals",
    "TextDelta",
    "Tool",
    "ToolArgumentsError",
    "ToolCall",
    "ToolError",
    "TraceAnalysis",
    "Turn",
    "Usage",
    "Workflow",
    "aevaluate",
    "analyze",
    "aresume",
    "arun",
    "as_tool",
    "astream",
    "astream_resume",
    "check",
    "decide",
    "enqueue",
    "evaluate",
    "field_match",
    "load_dataset",
    "open_store",
    "resolve_model",
    "resume",
    "run",
    "step",
    "tool",
]
__version__ = "0.1.0"
