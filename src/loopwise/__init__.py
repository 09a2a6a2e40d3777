"""loopwise: workflows where the steps are known, agents where they are not, hybrids
where a wrong step is expensive — one step interface, one budget, one store, one eval.
"""

from loopwise.agent import Agent, ContextPolicy, LoopDetection
from loopwise.errors import (
    ConfigError,
    GraphError,
    LoopwiseError,
    ModelAPIError,
    ModelNotConfigured,
    StoreError,
    TargetError,
    ToolError,
)
from loopwise.gates import (
    ApprovalRequest,
    Approved,
    Denied,
    Edited,
    Escalate,
    Gate,
    TerminalApprovals,
)
from loopwise.hybrid import (
    Action,
    ActionCatalog,
    ActionResult,
    Hybrid,
    HybridOutput,
    Plan,
    PlanStep,
)
from loopwise.model import Model, ModelRequest, OpenAIModel, ToolCall, Turn, resolve_model
from loopwise.runner import aresume, arun, resume, run
from loopwise.step import (
    Context,
    Event,
    EventType,
    RunOptions,
    RunResult,
    Status,
    Step,
    step,
)
from loopwise.store import RunStore, SQLiteStore
from loopwise.structured import Structured
from loopwise.tools import (
    Bounds,
    Effect,
    IdPattern,
    InDirectory,
    OneOf,
    Tool,
    ToolArgumentsError,
    as_tool,
    tool,
)
from loopwise.usage import Budget, Price, Pricing, Usage
from loopwise.workflow import Workflow

__all__ = [
    "Action",
    "ActionCatalog",
    "ActionResult",
    "Agent",
    "ApprovalRequest",
    "Approved",
    "Bounds",
    "Budget",
    "ConfigError",
    "Context",
    "ContextPolicy",
    "Denied",
    "Edited",
    "Effect",
    "Escalate",
    "Event",
    "EventType",
    "Gate",
    "GraphError",
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
    "Price",
    "Pricing",
    "RunOptions",
    "RunResult",
    "RunStore",
    "SQLiteStore",
    "Status",
    "Step",
    "StoreError",
    "Structured",
    "TargetError",
    "TerminalApprovals",
    "Tool",
    "ToolArgumentsError",
    "ToolCall",
    "ToolError",
    "Turn",
    "Usage",
    "Workflow",
    "aresume",
    "arun",
    "as_tool",
    "resolve_model",
    "resume",
    "run",
    "step",
    "tool",
]
__version__ = "0.1.0"
