"""loopwise: workflows where the steps are known, agents where they are not, hybrids
where a wrong step is expensive — one step interface, one budget, one store, one eval.
"""

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
from loopwise.usage import Budget, Price, Pricing, Usage
from loopwise.workflow import Workflow

__all__ = [
    "Budget",
    "ConfigError",
    "Context",
    "Event",
    "EventType",
    "GraphError",
    "LoopwiseError",
    "Model",
    "ModelAPIError",
    "ModelNotConfigured",
    "ModelRequest",
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
    "ToolCall",
    "ToolError",
    "Turn",
    "Usage",
    "Workflow",
    "arun",
    "resolve_model",
    "run",
    "step",
]
__version__ = "0.1.0"
