"""The exceptions loopwise raises, one tree so callers can catch by type.

Guardrails never raise: a budget hit or a step limit ends the run with a
:class:`~loopwise.core.step.Status`. These exceptions are for mistakes a caller must fix
(configuration, declarations) and for infrastructure that stayed down after retries::

    LoopwiseError                   .code
    ├── ConfigError                 config      a setting, target or declaration is wrong
    │   │                                       (``.name`` says which); bad-name (a
    │   │                                       step's or node's name no store holds)
    │   ├── ModelNotConfigured      model-not-configured
    │   ├── TargetError             target      a CLI target that cannot be loaded
    │   ├── ToolError               tool        a tool declaration is invalid (``.tool``);
    │   │   │                       ungated-irreversible, unknown-option
    │   │   └── DirectEffectError   direct-effect  a write/irreversible tool called around
    │   │                                       its gate (``tool(...)``, ``.invoke``)
    │   ├── ConversationError       conversation  a message a conversation cannot take
    │   │                                       (``.conversation``): bad-id, not-an-agent,
    │   │                                       no-store, other-target, busy, paused,
    │   │                                       superseded, unknown
    │   ├── MCPServerError          mcp-server  an MCP server cannot be started or listed
    │   │                                       (``.server``)
    │   ├── JudgeError              judge       a judge or a cascade is declared wrongly
    │   │                                       (``.name``): no-labels, duplicate-labels,
    │   │                                       unsupported-type, threshold, no-backend,
    │   │                                       not-a-label (a person's pick in code)
    │   ├── MissingExtra            missing-extra  an optional extra is not installed
    │   │                                       (``.extra``: what to ``pip install``)
    │   ├── DecisionError           decision    a decision on an approval is refused, and
    │   │   │                                   it stays pending; unknown-approval,
    │   │   │                                   not-pending, stale, not-editable,
    │   │   │                                   invalid-args, policy-denied, cannot-judge,
    │   │   │                                   no-reason, no-target, bad-name (``by``
    │   │   │                                   holds a control character), run-ended
    │   │   └── AnswerError         invalid-args  an answer (a label pick, an elicitation)
    │   │                                       does not match its question's schema
    │   └── GraphError              graph       a workflow graph is invalid (``.node``);
    │                               bad-name, empty, cycle, unreachable, dangling-branch,
    │                               unrouted-node, type-mismatch, unknown-branch,
    │                               non-exhaustive-route, unknown-route-field
    ├── ToolArgumentsError          error       a call's arguments are not JSON or fail the
    │                                           tool's validation (``.tool``); the executor
    │                                           answers the model with it, a direct call
    │                                           raises it (:mod:`loopwise.tools.arguments`)
    ├── ModelAPIError               model-api   the model API failed after the SDK's
    │   │                                       retries (``.status_code``)
    │   ├── ResponseFormatRejected  response-format-rejected
    │   ├── ContextLengthExceeded   context-length-exceeded  the request is longer than
    │   │                                       the model's context (``.sent_tokens``)
    │   ├── DecisionsUnsupported    decisions-unsupported  the server has no Decisions API
    │   └── ProbabilitiesMissing    no-probabilities  the server sent no log-probabilities
    │                                       where a judge needs them
    └── StoreError                  store       the run store cannot be opened, read or
                                    written; bad-url, unreachable,
                                    foreign, newer-schema, lease-lost, missing,
                                    temporal (a verb that does not run on Temporal)

Catch by type; where a caller must tell errors of one type apart, branch on ``.code``
(a stable identifier, never the message text, which may be reworded). The codes are typed:
each class's ``code`` is a ``Literal`` of its own (:data:`StoreCode`, :data:`GraphCode`...),
:data:`ErrorCode` all of them, so a misspelt code is a type error where it is raised or
compared.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = [
    "AnswerError",
    "ConfigCode",
    "ConfigError",
    "ContextLengthExceeded",
    "ConversationCode",
    "ConversationError",
    "DecisionCode",
    "DecisionError",
    "DecisionsUnsupported",
    "DirectEffectError",
    "ErrorCode",
    "GraphCode",
    "GraphError",
    "JudgeCode",
    "JudgeError",
    "LoopwiseError",
    "MCPServerError",
    "MissingExtra",
    "ModelAPICode",
    "ModelAPIError",
    "ModelNotConfigured",
    "ProbabilitiesMissing",
    "ResponseFormatRejected",
    "StoreCode",
    "StoreError",
    "TargetError",
    "ToolCode",
    "ToolError",
    "missing_extra",
]

ConfigCode = Literal["config", "bad-name"]
"""The codes a :class:`ConfigError` raised as itself carries."""
ToolCode = Literal["tool", "ungated-irreversible", "unknown-option", "direct-effect"]
"""The codes of a :class:`ToolError` (``direct-effect``: a :class:`DirectEffectError`)."""
ConversationCode = Literal[
    "conversation",
    "bad-id",
    "not-an-agent",
    "no-store",
    "other-target",
    "busy",
    "paused",
    "superseded",
    "unknown",
]
"""The codes of a :class:`ConversationError`."""
DecisionCode = Literal[
    "decision",
    "unknown-approval",
    "not-pending",
    "stale",
    "not-editable",
    "invalid-args",
    "policy-denied",
    "cannot-judge",
    "no-reason",
    "no-target",
    "bad-name",
    "run-ended",
]
"""The codes of a :class:`DecisionError` (``invalid-args``: also an :class:`AnswerError`)."""
JudgeCode = Literal[
    "judge",
    "no-labels",
    "duplicate-labels",
    "unsupported-type",
    "threshold",
    "no-backend",
    "not-a-label",
]
"""The codes of a :class:`JudgeError`."""
GraphCode = Literal[
    "graph",
    "bad-name",
    "empty",
    "cycle",
    "unreachable",
    "dangling-branch",
    "unrouted-node",
    "type-mismatch",
    "unknown-branch",
    "non-exhaustive-route",
    "unknown-route-field",
]
"""The codes of a :class:`GraphError`."""
ModelAPICode = Literal[
    "model-api",
    "response-format-rejected",
    "context-length-exceeded",
    "decisions-unsupported",
    "no-probabilities",
]
"""The codes of a :class:`ModelAPIError`, one per subclass."""
StoreCode = Literal[
    "store",
    "bad-url",
    "unreachable",
    "foreign",
    "newer-schema",
    "lease-lost",
    "missing",
    "temporal",
]
"""The codes of a :class:`StoreError`."""
ErrorCode = Literal[
    "error",
    "model-not-configured",
    "target",
    "mcp-server",
    "missing-extra",
    ConfigCode,
    ToolCode,
    ConversationCode,
    DecisionCode,
    JudgeCode,
    GraphCode,
    ModelAPICode,
    StoreCode,
]
"""Every code a loopwise error carries: a typo where one is made or compared is a type
error. The strings are a contract (a run's ``error_type``, ``--json`` outputs)."""


class LoopwiseError(Exception):
    """Base of every error loopwise raises on purpose."""

    code: ErrorCode = "error"
    """What went wrong, as a stable identifier to branch on (see the tree above)."""


class ConfigError(LoopwiseError):
    """A setting, target or declaration is wrong; ``name`` is the culprit when known."""

    code: ErrorCode = "config"

    def __init__(
        self, message: str, *, name: str | None = None, code: ConfigCode | None = None
    ) -> None:
        super().__init__(message)
        self.name = name
        if code is not None:
            self.code = code


class ModelNotConfigured(ConfigError):
    """No model was given and none is configured in the environment."""

    code = "model-not-configured"

    def __init__(self) -> None:
        super().__init__(
            "no model configured: set LOOPWISE_MODEL (and OPENAI_API_KEY / OPENAI_BASE_URL), "
            "pass --model NAME, or pass --model scripted for the offline scripted model",
            name="model",
        )


class TargetError(ConfigError):
    """A ``path.py:name`` or ``package.module:name`` target cannot be loaded."""

    code = "target"


class ToolError(ConfigError):
    """A tool is declared wrongly (bad signature, ungated irreversible effect...)."""

    code: ToolCode = "tool"

    def __init__(self, message: str, *, tool: str, code: ToolCode | None = None) -> None:
        super().__init__(message, name=tool)
        self.tool = tool
        if code is not None:
            self.code = code


class DirectEffectError(ToolError):
    """A ``write``/``irreversible`` tool was called directly (``tool(...)``,
    ``tool.invoke(...)``), which would skip its gate, journal and idempotency key."""

    code = "direct-effect"


class ConversationError(ConfigError):
    """A conversation cannot take this message or request; ``conversation`` names it.

    ``code`` says why: ``bad-id`` (malformed id), ``not-an-agent`` (only agents hold
    conversations), ``no-store`` (a conversation lives in a run store), ``other-target``
    (the conversation belongs to another step), ``busy`` (another message of it is being
    answered), ``paused`` (its last run waits for approvals), ``superseded`` (a later
    message was sent after this run) or ``unknown`` (no such conversation stored).
    """

    code: ConversationCode = "conversation"

    def __init__(
        self, message: str, *, conversation: str, code: ConversationCode | None = None
    ) -> None:
        super().__init__(message, name=conversation)
        self.conversation = conversation
        if code is not None:
            self.code = code


class MCPServerError(ConfigError):
    """An MCP server whose tools are declared cannot be started or listed; ``server`` names it."""

    code = "mcp-server"

    def __init__(self, message: str, *, server: str) -> None:
        super().__init__(message, name=server)
        self.server = server


class MissingExtra(ConfigError):
    """An optional extra is not installed: ``extra`` is what to install
    (``pip install 'loopwise[EXTRA]'``), ``name`` the module that is missing. Raised when
    the module that needs it is imported (:mod:`loopwise.integrations.otel`,
    :mod:`loopwise.integrations.mcp.servers`, :mod:`loopwise.store.postgres`)."""

    code = "missing-extra"

    def __init__(self, message: str, *, extra: str, name: str | None = None) -> None:
        super().__init__(message, name=name)
        self.extra = extra


def missing_extra(extra: str, error: ImportError, *, needed_by: str) -> MissingExtra:
    """The one way an extra is missing: ``raise missing_extra("otel", e, needed_by=...)``
    in the ``except ImportError as e`` around the extra's imports."""
    return MissingExtra(
        f"{needed_by} needs the {extra} extra: pip install 'loopwise[{extra}]' "
        f"({error.name or error} is not installed)",
        extra=extra,
        name=error.name,
    )


class DecisionError(ConfigError):
    """A decision on an approval is refused when it is made; the approval stays pending.

    ``code`` says why: ``unknown-approval``, ``not-pending`` (decided already),
    ``stale`` (the arguments changed since the decider looked), ``not-editable`` (a
    whole-plan approval), ``invalid-args`` (edited arguments fail the tool's schema),
    ``policy-denied`` (the policy refuses the edited arguments), ``no-target`` (the run's
    target cannot be loaded to check an edit), ``bad-name`` (who decides, ``by``, holds a
    control character, line separator or bidirectional control), ``cannot-judge`` (the
    policy could not judge the edit), ``no-reason`` (a denial that must say why does not),
    ``run-ended`` (the run ended with another status, a branch's failure say, while the
    approval waited: it is closed; a resume asks it again if the run gets there).
    """

    code: DecisionCode = "decision"

    def __init__(
        self, message: str, *, name: str | None = None, code: DecisionCode | None = None
    ) -> None:
        super().__init__(message, name=name)
        if code is not None:
            self.code = code


class AnswerError(DecisionError):
    """An answer to a question (a person's pick of a cascade's labels, an MCP server's
    elicitation) does not match the question's schema; nothing is recorded.

    ``problem`` says what is wrong and ``schema`` is the schema the answer must match, so
    where the answer is given (the CLI's ``--args``, the inbox's form) can say how to
    answer there; the message says it for the CLI and Python.
    """

    code = "invalid-args"

    def __init__(self, message: str, *, problem: str, schema: dict[str, Any]) -> None:
        super().__init__(message, name="args")
        self.problem = problem
        self.schema = schema


class JudgeError(ConfigError):
    """A judge (a calibrated decision step) or a cascade is declared or configured wrongly;
    ``name`` is the culprit (the judge, a field, a label, ``threshold``, the model).

    ``code`` says why: ``no-labels``, ``duplicate-labels``, ``unsupported-type`` (a field
    that is not a choice, a predicate or a score), ``threshold`` (outside [0, 1]) or
    ``no-backend`` (the model offers no way to answer with probabilities that fits) or
    ``not-a-label`` (a person's pick, in code, that is none of the labels).
    """

    code: JudgeCode = "judge"

    def __init__(
        self, message: str, *, name: str | None = None, code: JudgeCode | None = None
    ) -> None:
        super().__init__(message, name=name)
        if code is not None:
            self.code = code


class GraphError(ConfigError):
    """A workflow graph is invalid; ``node`` names where."""

    code: GraphCode = "graph"

    def __init__(
        self, message: str, *, node: str | None = None, code: GraphCode | None = None
    ) -> None:
        super().__init__(message, name=node)
        self.node = node
        if code is not None:
            self.code = code


class ModelAPIError(LoopwiseError):
    """The model API failed after the SDK's own retries; ``status_code`` when HTTP said one.

    The message keeps the status, the error type and the first line of the server's
    message; ``body`` is the server's whole error body (it may hold a traceback), which
    the run's final event keeps.
    """

    code: ModelAPICode = "model-api"

    def __init__(
        self, message: str, *, status_code: int | None = None, body: str | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body


class ResponseFormatRejected(ModelAPIError):
    """The server rejected a structured-output mode: its error (any status) names
    ``response_format``, ``json_schema``, ``tool_choice`` or ``strict``."""

    code = "response-format-rejected"


class ContextLengthExceeded(ModelAPIError):
    """The server refused the request as longer than the model's context (an HTTP 400
    saying ``context_length_exceeded``, "maximum context length" or llama.cpp's
    ``exceed_context_size_error``). A run it happens in ends ``budget_exceeded``, its
    detail saying how many tokens were sent.
    """

    code = "context-length-exceeded"

    def __init__(
        self,
        message: str,
        *,
        sent_tokens: int,
        status_code: int | None = None,
        body: str | None = None,
    ) -> None:
        super().__init__(message, status_code=status_code, body=body)
        self.sent_tokens = sent_tokens
        """loopwise's estimate of the request's tokens (~4 characters a token)."""


class DecisionsUnsupported(ModelAPIError):
    """The server has no Decisions API (``/v1/decisions`` answered 404, 405 or 501, or its
    error names the route); a judge steps down to log-probabilities."""

    code = "decisions-unsupported"


class ProbabilitiesMissing(ModelAPIError):
    """The server answered a judge's question without the log-probabilities it asked
    for (no ``logprobs``, or none of the label tokens among them): the answer's
    confidence cannot be known, and is never guessed."""

    code = "no-probabilities"


class StoreError(LoopwiseError):
    """The run store cannot be opened, read or written.

    ``code`` tells apart the causes a caller may handle: ``bad-url`` (an unknown scheme
    or a malformed URL), ``unreachable`` (the server does not answer or refuses the
    login), ``foreign`` (the database holds another program's tables), ``newer-schema``
    (upgrade loopwise), ``lease-lost`` (another process took the run over); ``store``
    for the rest.
    A missing PostgreSQL extra is a :class:`MissingExtra`.
    """

    code: StoreCode = "store"

    def __init__(self, message: str, *, code: StoreCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
