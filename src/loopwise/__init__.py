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
from loopwise.model import Model, ModelRequest, OpenAIModel, ToolCall, Turn, resolve_model
from loopwise.step import (
    Context,
    Event,
    EventType,
    RunOptions,
    RunResult,
    Status,
    Step,
    arun,
    run,
    step,
)
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
    "Agent",
    "Bounds",
    "Budget",
    "ConfigError",
    "Context",
    "ContextPolicy",
    "Effect",
    "Event",
    "EventType",
    "GraphError",
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
    "Price",
    "Pricing",
    "RunOptions",
    "RunResult",
    "Status",
    "Step",
    "StoreError",
    "Structured",
    "TargetError",
    "Tool",
    "ToolArgumentsError",
    "ToolCall",
    "ToolError",
    "Turn",
    "Usage",
    "Workflow",
    "arun",
    "as_tool",
    "resolve_model",
    "run",
    "step",
    "tool",
]
__version__ = "0.1.0"
