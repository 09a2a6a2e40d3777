"""The exceptions loopwise raises, one tree so callers can catch by type.

Guardrails never raise: a budget hit or a step limit ends the run with a
:class:`~loopwise.step.Status`. These exceptions are for mistakes a caller must fix
(configuration, declarations) and for infrastructure that stayed down after retries::

    LoopwiseError
    ├── ConfigError            a setting, target or declaration is wrong (``.name`` says which)
    │   ├── ModelNotConfigured no model given and none in the environment
    │   ├── TargetError        a CLI target that cannot be loaded
    │   ├── ToolError          a tool declaration is invalid (``.tool``)
    │   └── GraphError         a workflow graph is invalid (``.node``)
    ├── ModelAPIError          the model API failed after the SDK's retries (``.status_code``)
    │   └── ResponseFormatRejected  the server refused a ``response_format``/``tool_choice``
    └── StoreError             the run store cannot be read or written
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "GraphError",
    "LoopwiseError",
    "ModelAPIError",
    "ModelNotConfigured",
    "ResponseFormatRejected",
    "StoreError",
    "TargetError",
    "ToolError",
]


class LoopwiseError(Exception):
    """Base of every error loopwise raises on purpose."""


class ConfigError(LoopwiseError):
    """A setting, target or declaration is wrong; ``name`` is the culprit when known."""

    def __init__(self, message: str, *, name: str | None = None) -> None:
        super().__init__(message)
        self.name = name


class ModelNotConfigured(ConfigError):
    """No model was given and none is configured in the environment."""

    def __init__(self) -> None:
        super().__init__(
            "no model configured: set LOOPWISE_MODEL (and OPENAI_API_KEY / OPENAI_BASE_URL), "
            "pass --model NAME, or pass --model scripted for the offline scripted model",
            name="model",
        )


class TargetError(ConfigError):
    """A ``path.py:name`` or ``package.module:name`` target cannot be loaded."""


class ToolError(ConfigError):
    """A tool is declared wrongly (bad signature, ungated irreversible effect...)."""

    def __init__(self, message: str, *, tool: str) -> None:
        super().__init__(message, name=tool)
        self.tool = tool


class GraphError(ConfigError):
    """A workflow graph is invalid; ``node`` names where."""

    def __init__(self, message: str, *, node: str | None = None) -> None:
        super().__init__(message, name=node)
        self.node = node


class ModelAPIError(LoopwiseError):
    """The model API failed after the SDK's own retries; ``status_code`` when HTTP said one.

    The message keeps the status, the error type and the first line of the server's
    message; ``body`` is the server's whole error body (it may hold a traceback), which
    the run's final event keeps.
    """

    def __init__(
        self, message: str, *, status_code: int | None = None, body: str | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body


class ResponseFormatRejected(ModelAPIError):
    """The server rejected a structured-output mode: its error (any status) names
    ``response_format``, ``json_schema``, ``tool_choice`` or ``strict``."""


class StoreError(LoopwiseError):
    """The run store cannot be opened, read or written."""
