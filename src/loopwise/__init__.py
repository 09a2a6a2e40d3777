"""loopwise: workflows where the steps are known, agents where they are not, hybrids
where a wrong step is expensive — one step interface, one budget, one store, one eval.
"""

import importlib
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # The documented submodules, as `from loopwise import gates` names them (typed).
    from loopwise.architectures import hybrid as hybrid
    from loopwise.architectures.agent import Agent, LoopDetection
    from loopwise.architectures.cascade import AskPerson, Cascade, Weighed
    from loopwise.architectures.graduated import Graduated
    from loopwise.architectures.history import ContextPolicy, SummarizingPolicy
    from loopwise.architectures.hybrid import Hybrid, HybridOutput
    from loopwise.architectures.judge import Judge, Ruling
    from loopwise.architectures.plan_run import ActionResult
    from loopwise.architectures.planner import REJECTED
    from loopwise.architectures.plans import Action, ActionCatalog, Plan, PlanContext, PlanStep
    from loopwise.architectures.structured import Structured
    from loopwise.architectures.workflow import Workflow
    from loopwise.core.events import Event, EventType, Status, TextDelta
    from loopwise.core.function_step import step
    from loopwise.core.options import (
        ApprovalHandler,
        ModelLike,
        ResumeOverrides,
        RunOptions,
        RunOverrides,
    )
    from loopwise.core.result import Halt, RunResult
    from loopwise.core.step import Context, Step
    from loopwise.core.usage import Budget, Price, Pricing, Usage
    from loopwise.errors import (
        ConfigError,
        ConversationError,
        DecisionError,
        DirectEffectError,
        GraphError,
        JudgeError,
        LoopwiseError,
        ModelAPIError,
        ModelNotConfigured,
        ProbabilitiesMissing,
        StoreError,
        TargetError,
        ToolError,
    )
    from loopwise.evidence.check import Finding, check
    from loopwise.evidence.decide import Decision, decide
    from loopwise.evidence.evals.dataset import Case, field_match, load_dataset
    from loopwise.evidence.evals.harness import (
        EvalOptions,
        EvalReport,
        EvalTarget,
        aevaluate,
        evaluate,
    )
    from loopwise.evidence.graduate.analyze import TraceAnalysis, analyze
    from loopwise.evidence.graduate.graduate import Graduation, graduate
    from loopwise.evidence.live.shadow import Shadow
    from loopwise.evidence.sweeps.points import Sweep, SweepPoint
    from loopwise.evidence.sweeps.sweep import asweep, sweep
    from loopwise.integrations import otel as otel
    from loopwise.integrations.mcp import servers as mcp
    from loopwise.models.openai import OpenAIModel, resolve_model
    from loopwise.models.options import OpenAIOptions
    from loopwise.models.port import Model, ModelRequest, ToolCall, ToolResult, Turn
    from loopwise.running import approvals as approvals
    from loopwise.running.decisions import approve, deny
    from loopwise.running.runner import aresume, arun, enqueue, resume, run
    from loopwise.running.stream import RunStream, astream, astream_resume
    from loopwise.serve.mounted import asgi_inbox, wsgi_inbox
    from loopwise.store.base import RunStore, StoredApproval, StoredRun
    from loopwise.store.open import DEFAULT, StoreLike, open_store
    from loopwise.store.postgres import PostgresStore
    from loopwise.store.sqlite import SQLiteStore
    from loopwise.tools import calls as calls
    from loopwise.tools import gates as gates
    from loopwise.tools.allowlists import Bounds, IdPattern, InDirectory, OneOf
    from loopwise.tools.arguments import ToolArgumentsError
    from loopwise.tools.calls import call_tools
    from loopwise.tools.gates import Gate, policy, policy_then_human
    from loopwise.tools.handlers import TerminalApprovals
    from loopwise.tools.tool import Effect, Tool, as_tool, tool
    from loopwise.tools.verdicts import ApprovalRequest, Approved, Denied, Edited, Escalate

# Every name loads on first use (PEP 562), so a process pays only for what it touches:
# the store and approval verbs of the CLI (`loopwise pending`) import neither pydantic
# nor the openai SDK nor networkx, and a workflow run never loads the hybrid or the
# deciding API (decide, check, analyze, evals).
_LAZY = {
    **dict.fromkeys(["Agent", "LoopDetection"], "loopwise.architectures.agent"),
    **dict.fromkeys(["TraceAnalysis", "analyze"], "loopwise.evidence.graduate.analyze"),
    **dict.fromkeys(["Finding", "check"], "loopwise.evidence.check"),
    **dict.fromkeys(["Graduation", "graduate"], "loopwise.evidence.graduate.graduate"),
    "Graduated": "loopwise.architectures.graduated",
    **dict.fromkeys(["Sweep", "SweepPoint"], "loopwise.evidence.sweeps.points"),
    **dict.fromkeys(["asweep", "sweep"], "loopwise.evidence.sweeps.sweep"),
    **dict.fromkeys(["Decision", "decide"], "loopwise.evidence.decide"),
    **dict.fromkeys(["ConfigError", "ConversationError", "DecisionError", "DirectEffectError",
                     "GraphError", "JudgeError",
                     "LoopwiseError", "ModelAPIError", "ModelNotConfigured",
                     "ProbabilitiesMissing", "StoreError",
                     "TargetError", "ToolError"], "loopwise.errors"),
    **dict.fromkeys(["Case", "field_match", "load_dataset"], "loopwise.evidence.evals.dataset"),
    **dict.fromkeys(["EvalOptions", "EvalReport", "EvalTarget", "aevaluate", "evaluate"],
                    "loopwise.evidence.evals.harness"),
    **dict.fromkeys(["Event", "EventType", "Status", "TextDelta"], "loopwise.core.events"),
    **dict.fromkeys(["Gate", "policy", "policy_then_human"], "loopwise.tools.gates"),
    **dict.fromkeys(["Action", "ActionCatalog", "Plan", "PlanContext", "PlanStep"],
                    "loopwise.architectures.plans"),
    "REJECTED": "loopwise.architectures.planner",
    "TerminalApprovals": "loopwise.tools.handlers",
    **dict.fromkeys(["ContextPolicy", "SummarizingPolicy"], "loopwise.architectures.history"),
    **dict.fromkeys(["Hybrid", "HybridOutput"], "loopwise.architectures.hybrid"),
    "ActionResult": "loopwise.architectures.plan_run",
    **dict.fromkeys(["Judge", "Ruling"], "loopwise.architectures.judge"),
    **dict.fromkeys(["AskPerson", "Cascade", "Weighed"], "loopwise.architectures.cascade"),
    "Shadow": "loopwise.evidence.live.shadow",
    # The openai SDK loads when a model is made.
    **dict.fromkeys(["OpenAIModel", "resolve_model"], "loopwise.models.openai"),
    "OpenAIOptions": "loopwise.models.options",
    **dict.fromkeys(["Model", "ModelRequest", "ToolCall", "ToolResult", "Turn"],
                    "loopwise.models.port"),
    **dict.fromkeys(["approve", "deny"], "loopwise.running.decisions"),
    # The PostgreSQL store needs the loopwise[postgres] extra (StoreError without it).
    "PostgresStore": "loopwise.store.postgres",
    **dict.fromkeys(["aresume", "arun", "enqueue", "resume", "run"], "loopwise.running.runner"),
    "SQLiteStore": "loopwise.store.sqlite",
    "RunOptions": "loopwise.core.options",
    **dict.fromkeys(["Halt", "RunResult"], "loopwise.core.result"),
    **dict.fromkeys(["Context", "Step"], "loopwise.core.step"),
    "step": "loopwise.core.function_step",
    **dict.fromkeys(["RunStore", "StoredApproval", "StoredRun"], "loopwise.store.base"),
    "open_store": "loopwise.store.open",
    **dict.fromkeys(["RunStream", "astream", "astream_resume"], "loopwise.running.stream"),
    # The approvals inbox mounted in a team's own ASGI/WSGI app (no web framework needed).
    **dict.fromkeys(["asgi_inbox", "wsgi_inbox"], "loopwise.serve.mounted"),
    "Structured": "loopwise.architectures.structured",
    **dict.fromkeys(["Bounds", "IdPattern", "InDirectory", "OneOf"], "loopwise.tools.allowlists"),
    **dict.fromkeys(["Effect", "Tool", "as_tool", "tool"], "loopwise.tools.tool"),
    "ToolArgumentsError": "loopwise.tools.arguments",
    **dict.fromkeys(["Budget", "Price", "Pricing", "Usage"], "loopwise.core.usage"),
    **dict.fromkeys(["ApprovalRequest", "Approved", "Denied", "Edited", "Escalate"],
                    "loopwise.tools.verdicts"),
    "Workflow": "loopwise.architectures.workflow",
    "call_tools": "loopwise.tools.calls",
    **dict.fromkeys(["ApprovalHandler", "ModelLike", "ResumeOverrides", "RunOverrides"],
                    "loopwise.core.options"),
    **dict.fromkeys(["DEFAULT", "StoreLike"], "loopwise.store.open"),
}  # fmt: skip


# The documented submodules, reached as attributes of the package (``from loopwise import
# gates``, ``loopwise.mcp.stdio(...)``): each is the module that defines its names, loaded
# on first access like every other name here. They are not import paths of their own
# (``import loopwise.gates`` fails): a type checker sees them through the imports above.
_PUBLIC_MODULES = {
    "approvals": "loopwise.running.approvals",
    "calls": "loopwise.tools.calls",
    "gates": "loopwise.tools.gates",
    "hybrid": "loopwise.architectures.hybrid",
    "mcp": "loopwise.integrations.mcp.servers",
    "otel": "loopwise.integrations.otel",
}


# Hidden from type checkers: a module __getattr__ they see answers every name, so a
# misspelt one (loopwise.Agnet) would type-check as Any; they read the imports above.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        """Load an exported name, or a documented submodule (``loopwise.gates``), on first
        access."""
        home = _PUBLIC_MODULES.get(name)
        if home is not None:
            value: Any = importlib.import_module(home)
            globals()[name] = value
            return value
        module = _LAZY.get(name)
        if module is None:
            return _submodule(name)
        # getattr: a lazy export, by name
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The public names, so a REPL or an IDE completes them before any has loaded."""
    return sorted({*__all__, *_PUBLIC_MODULES, "testing", "__version__"})


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
    "DEFAULT",
    "REJECTED",
    "Action",
    "ActionCatalog",
    "ActionResult",
    "Agent",
    "ApprovalHandler",
    "ApprovalRequest",
    "Approved",
    "AskPerson",
    "Bounds",
    "Budget",
    "Cascade",
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
    "EvalOptions",
    "EvalReport",
    "EvalTarget",
    "Event",
    "EventType",
    "Finding",
    "Gate",
    "Graduated",
    "Graduation",
    "GraphError",
    "Halt",
    "Hybrid",
    "HybridOutput",
    "IdPattern",
    "InDirectory",
    "Judge",
    "JudgeError",
    "LoopDetection",
    "LoopwiseError",
    "Model",
    "ModelAPIError",
    "ModelLike",
    "ModelNotConfigured",
    "ModelRequest",
    "OneOf",
    "OpenAIModel",
    "OpenAIOptions",
    "Plan",
    "PlanContext",
    "PlanStep",
    "PostgresStore",
    "Price",
    "Pricing",
    "ProbabilitiesMissing",
    "ResumeOverrides",
    "Ruling",
    "RunOptions",
    "RunOverrides",
    "RunResult",
    "RunStore",
    "RunStream",
    "SQLiteStore",
    "Shadow",
    "Status",
    "Step",
    "StoreError",
    "StoreLike",
    "StoredApproval",
    "StoredRun",
    "Structured",
    "SummarizingPolicy",
    "Sweep",
    "SweepPoint",
    "TargetError",
    "TerminalApprovals",
    "TextDelta",
    "Tool",
    "ToolArgumentsError",
    "ToolCall",
    "ToolError",
    "ToolResult",
    "TraceAnalysis",
    "Turn",
    "Usage",
    "Weighed",
    "Workflow",
    "aevaluate",
    "analyze",
    "approvals",
    "approve",
    "aresume",
    "arun",
    "as_tool",
    "asgi_inbox",
    "astream",
    "astream_resume",
    "asweep",
    "call_tools",
    "calls",
    "check",
    "decide",
    "deny",
    "enqueue",
    "evaluate",
    "field_match",
    "gates",
    "graduate",
    "hybrid",
    "load_dataset",
    "mcp",
    "open_store",
    "otel",
    "policy",
    "policy_then_human",
    "resolve_model",
    "resume",
    "run",
    "step",
    "sweep",
    "tool",
    "wsgi_inbox",
]
__version__ = "0.1.0"
