"""Server profiles: the quirks of real OpenAI-compatible servers, for :class:`FakeChatServer`.

A :class:`ServerProfile` says how one real server answers the request features loopwise
sends: which it rejects (with that server's status and error body), which it ignores,
what it demands of messages, and how it shapes tool calls. ``FakeChatServer(profile=...)``
applies it before the script answers, so the model port's handling of that server is
tested through the real ``openai`` client. Every profile names its source: a run against
the real server (``make compat``) or the server's own documentation and issue tracker.

Features a profile may reject or ignore (:data:`FEATURES`): ``json_schema``,
``json_object_schema`` (``{"type": "json_object", "schema": ...}``), ``json_object``,
``tool_choice`` (a forced named function), ``tool_choice_required``, ``tool_choice_auto``
(``"auto"``, or tools with no ``tool_choice``, which servers default to auto) and
``strict``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from loopwise.core.jsontypes import JSONMapping, JSONObject, JSONValue, json_object
from loopwise.testing._fakehttp import objects

__all__ = [
    "FEATURES",
    "PROFILES",
    "Rejection",
    "ServerProfile",
    "arguments_as_objects",
    "features_of",
]

FEATURES = frozenset(
    {
        "json_schema",
        "json_object_schema",
        "json_object",
        "tool_choice",
        "tool_choice_required",
        "tool_choice_auto",
        "strict",
    }
)
"""The request features a profile can reject or ignore."""


@dataclass(frozen=True, kw_only=True)
class Rejection:
    """How a server refuses one feature: the HTTP status and the exact body it sends."""

    status: int
    """The HTTP status (servers use 400, 422, 500, 501)."""
    body: JSONValue
    """The response body, sent as JSON."""


@dataclass(frozen=True, kw_only=True)
class ServerProfile:
    """The quirks of one real server (see the module docstring)."""

    name: str
    """A short name (``FakeChatServer(profile="llama-cpp-python")``)."""
    source: str
    """Where the behaviour was established: a run against the server, its docs or issues."""
    rejects: Mapping[str, Rejection] = field(default_factory=dict)
    """Feature → how the server refuses it."""
    ignores: frozenset[str] = frozenset()
    """Features the server accepts and silently drops (the script never sees them)."""
    assistant_content: Rejection | None = None
    """Set when an assistant message without a string ``content`` (missing, null or a
    list of parts) fails the server's chat template: how it fails."""
    arguments_as_object: bool = False
    """Tool-call arguments come back as a JSON object instead of a JSON string."""
    tools_need_choice: bool = False
    """Tools sent without a ``tool_choice`` are dropped before the model sees them (the
    server reads a missing choice as "no tools"; OpenAI's default with tools is "auto")."""
    drops: frozenset[str] = frozenset()
    """Request parameters the server does not know and silently drops (the script never
    sees them): llama-cpp-python's drops ``max_completion_tokens``, so its answer runs on."""

    def rejection(self, payload: JSONMapping) -> Rejection | None:
        """How the server refuses ``payload``, or ``None`` when it accepts it."""
        for feature in sorted(features_of(payload)):
            if feature in self.rejects:
                return self.rejects[feature]
        if self.assistant_content is not None and _content_not_string(payload):
            return self.assistant_content
        return None

    def adapt(self, payload: JSONMapping) -> JSONObject:
        """``payload`` with the ignored features dropped (what the server acts on)."""
        adapted = {k: v for k, v in payload.items() if k not in self.drops}
        if self.tools_need_choice and adapted.get("tool_choice") is None:
            adapted.pop("tools", None)
        if not self.ignores:
            return adapted
        present = features_of(payload) & self.ignores
        if present & {"tool_choice", "tool_choice_required", "tool_choice_auto"}:
            adapted.pop("tool_choice", None)
        if present & {"json_schema", "json_object_schema", "json_object"}:
            adapted.pop("response_format", None)
        if "strict" in present:
            adapted["tools"] = [_without_strict(t) for t in objects(adapted.get("tools"))]
        return adapted


def features_of(payload: JSONMapping) -> set[str]:
    """The features of :data:`FEATURES` a request body uses."""
    found: set[str] = set()
    fmt = payload.get("response_format")
    if isinstance(fmt, dict):
        kind = fmt.get("type")
        if kind == "json_schema":
            found.add("json_schema")
            if json_object(fmt.get("json_schema")).get("strict"):
                found.add("strict")
        elif kind == "json_object":
            found.add("json_object_schema" if "schema" in fmt else "json_object")
    choice = payload.get("tool_choice")
    if isinstance(choice, dict):
        found.add("tool_choice")
    elif choice == "required":
        found.add("tool_choice_required")
    elif payload.get("tools") and choice in (None, "auto"):
        found.add("tool_choice_auto")
    if any(json_object(t.get("function")).get("strict") for t in objects(payload.get("tools"))):
        found.add("strict")
    return found


def _content_not_string(payload: JSONMapping) -> bool:
    return any(
        m.get("role") == "assistant" and not isinstance(m.get("content"), str)
        for m in objects(payload.get("messages"))
    )


def _without_strict(tool: JSONObject) -> JSONObject:
    function = {k: v for k, v in json_object(tool.get("function")).items() if k != "strict"}
    return {**tool, "function": function}


def _llama_cpp_python_error(message: str) -> JSONObject:
    # llama-cpp-python's server answers any exception in a route with a 500 whose message
    # carries the exception text and the server's own traceback.
    return {
        "error": {
            "message": f"{message}\nTraceback (most recent call last):\n"
            '  File "/srv/venv/lib/python3.11/site-packages/llama_cpp/server/errors.py", '
            "line 171, in custom_route_handler\n    response = await original_route_handler"
            "(request)\n",
            "type": "internal_server_error",
            "param": None,
            "code": None,
        }
    }


def _vllm_error(message: str) -> JSONObject:
    # vLLM's errors are top-level objects, not nested under "error".
    return {"object": "error", "message": message, "type": "BadRequestError", "param": None,
            "code": 400}  # fmt: skip


LLAMA_CPP_PYTHON = ServerProfile(
    name="llama-cpp-python",
    source="llama-cpp-python 0.3.36 `python -m llama_cpp.server --chat_format "
    "chatml-function-calling` with Gemma 3 270M, as reported in issue 19 (500 naming "
    'response_format on json_schema; content required; tool_choice "required" refused), '
    "also ggml-org/llama.cpp#23463; its 0.3.36 source: server/errors.py answers any "
    "exception with a 500 carrying str(error), the chatml-function-calling template uses "
    'StrictUndefined (a missing content fails) and asserts tool_choice == "auto" (an '
    "empty message); json_object with a schema is its JSON-schema mode "
    "(abetlen/llama-cpp-python#1122); and, measured by make compat on 2026-12-01, tools "
    "sent without a tool_choice never reach the model (the handler's no-choice case "
    "renders the prompt with no tools); and, measured by make compat on 2026-12-02, "
    "max_completion_tokens is dropped (server/types.py has only max_tokens): asked for one "
    "token that way it answered 73",
    rejects={
        "json_schema": Rejection(
            status=500,
            body=_llama_cpp_python_error(
                "1 validation error for CreateChatCompletionRequest\nresponse_format.type\n"
                "  Input should be 'text' or 'json_object' [type=literal_error, "
                "input_value='json_schema', input_type=str]"
            ),
        ),
        # Its chatml-function-calling handler asserts tool_choice == "auto" after the named
        # and "none" cases; the bare AssertionError's text is empty, so nothing is named.
        "tool_choice_required": Rejection(
            status=500,
            body={
                "error": {
                    "message": "",
                    "type": "internal_server_error",
                    "param": None,
                    "code": None,
                }
            },
        ),
    },
    assistant_content=Rejection(
        status=500,
        body=_llama_cpp_python_error("'dict object' has no attribute 'content'"),
    ),
    tools_need_choice=True,
    drops=frozenset({"max_completion_tokens"}),
)

LLAMA_SERVER = ServerProfile(
    name="llama-server",
    source="llama.cpp's llama-server (C++) before JSON-schema support: 500 "
    '"response_format type must be one of "text" or "json_object", but got: json_schema" '
    "(ggml-org/llama.cpp#9522, ikawrakow/ik_llama.cpp#778); tool-call arguments as a JSON "
    "object in some builds (ggml-org/llama.cpp#20198)",
    rejects={
        "json_schema": Rejection(
            status=500,
            body={
                "error": {
                    "code": 500,
                    "message": 'response_format type must be one of "text" or "json_object", '
                    "but got: json_schema",
                    "type": "server_error",
                }
            },
        )
    },
    arguments_as_object=True,
)

VLLM = ServerProfile(
    name="vllm",
    source='vLLM\'s OpenAI server: `tool_choice` "required" refused in versions before 0.8 '
    '(hinthornw/trustcall#29), and tool choice "auto" refused unless the server runs with '
    "--enable-auto-tool-choice and --tool-call-parser (vllm-project/vllm#9986, "
    "langchain4j/langchain4j#3475)",
    rejects={
        "tool_choice_required": Rejection(
            status=400,
            body=_vllm_error(
                "[{'type': 'value_error', 'loc': ('body',), 'msg': 'Value error, "
                '`tool_choice` must either be a named tool, "auto", or "none".\'}]'
            ),
        ),
        "tool_choice_auto": Rejection(
            status=400,
            body=_vllm_error(
                '"auto" tool choice requires --enable-auto-tool-choice and '
                "--tool-call-parser to be set"
            ),
        ),
    },
)

OLLAMA = ServerProfile(
    name="ollama",
    source="Ollama's OpenAI compatibility (docs/api/openai-compatibility.mdx): `tool_choice` "
    "is listed as unsupported and is ignored; response_format json_schema is honoured "
    "(pydantic/pydantic-ai#4160)",
    ignores=frozenset({"tool_choice", "tool_choice_required"}),
)

LM_STUDIO = ServerProfile(
    name="lm-studio",
    source="LM Studio's OpenAI-compatible server: 400 {\"error\": \"'response_format.type' "
    "must be 'json_schema' or 'text'\"} for json_object (lmstudio-ai/lmstudio-bug-tracker#189, "
    "#307)",
    rejects={
        kind: Rejection(
            status=400, body={"error": "'response_format.type' must be 'json_schema' or 'text'"}
        )
        for kind in ("json_object", "json_object_schema")
    },
)

PROFILES: Mapping[str, ServerProfile] = {
    p.name: p for p in (LLAMA_CPP_PYTHON, LLAMA_SERVER, VLLM, OLLAMA, LM_STUDIO)
}
"""The known profiles by name."""


def arguments_as_objects(document: JSONObject) -> JSONObject:
    """A completion whose tool-call arguments are JSON objects, as some servers send them."""
    for choice in objects(document.get("choices")):
        for call in objects(json_object(choice.get("message")).get("tool_calls")):
            function = json_object(call.get("function"))
            arguments = function.get("arguments") or "{}"
            # Broken arguments stay a string, as a server would pass them through.
            with contextlib.suppress(ValueError):
                function["arguments"] = json.loads(str(arguments))
    return document
