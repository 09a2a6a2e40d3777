"""The structured-output step: one model call whose answer must validate as a pydantic model.

:class:`Structured` asks the run's model for a JSON answer of a pydantic type and
validates it. A validation failure goes back to the model as a message with the exact
errors, at most ``max_retries`` times; after that the run ends ``invalid_output``. A
refusal (or a content-filter stop) ends the run ``refused``.

Many OpenAI-compatible servers reject strict ``json_schema`` response formats or a forced
``tool_choice``. The step walks a ladder of modes, strongest first::

    json_schema → json_object_schema → json_object → tool → prompt

``json_object_schema`` is ``{"type": "json_object", "schema": {...}}``, the form
llama-cpp-python's server (and others built on llama.cpp grammars) constrains decoding
with; ``json_object`` carries the schema only in the prompt; ``tool`` is one forced
function call; ``prompt`` is instructions alone. The step steps down one rung whenever the
server rejects the current one (:class:`~loopwise.errors.ResponseFormatRejected`: an error
of any status whose body names the feature). The rung that worked is remembered on the
model object, keyed by its ``endpoint`` (base URL, model name), so later calls to that
endpoint start there. A model's ``structured_mode`` (``OpenAIModel(structured_mode=...)``,
``LOOPWISE_STRUCTURED_MODE``, ``--structured-mode``) pins where calls start, for servers
whose rejections are not recognizable: rungs above it are never tried. Every rung
validates with pydantic; ``ModelRequest.output_schema`` always carries the schema so
scripted models can answer any rung.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import pydantic

from loopwise.core.events import Status, jsonable
from loopwise.core.jsontypes import JSONObject
from loopwise.core.members import StepDefaults
from loopwise.core.names import check_name
from loopwise.core.result import Halt
from loopwise.core.shape import Kind, Shape
from loopwise.core.step import Context
from loopwise.errors import ConfigError, ResponseFormatRejected
from loopwise.models.port import (
    STRUCTURED_MODES,
    Message,
    ModelRequest,
    StructuredMode,
    Turn,
    model_member,
    model_name,
)

__all__ = ["LADDER", "Prompt", "Structured", "strip_fence"]

M = TypeVar("M", bound=pydantic.BaseModel)

Prompt = Callable[[Any], str]
"""Renders a single-call step's input as its user message (a structured call's, a
judge's). ``Any``: the function names the input type it takes (``def ask(ticket: Ticket)
-> str``), which a parameter of ``object`` would refuse."""

LADDER: tuple[StructuredMode, ...] = STRUCTURED_MODES
"""The structured-output modes, strongest first."""

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


class _Invalid(Exception):
    """An answer that did not validate; ``feedback`` is what the model is told."""

    def __init__(self, feedback: str) -> None:
        super().__init__(feedback)
        self.feedback = feedback


class Structured(StepDefaults, Generic[M]):
    """A step that returns a validated instance of ``output`` from one model call.

    ``instructions`` become the system message; the input becomes the user message
    (a string as is, anything else as JSON) unless ``prompt`` renders it. Schemas and
    request templates are built once, here. Raises :class:`~loopwise.errors.ConfigError`
    when ``output`` is not a pydantic model class or ``max_retries`` is negative.
    """

    needs_model = True
    """The CLI must give this step a model."""

    def __init__(
        self,
        name: str,
        output: type[M],
        instructions: str,
        *,
        prompt: Prompt | None = None,
        max_retries: int = 2,
    ) -> None:
        check_name(name, what="structured step")
        if not (isinstance(output, type) and issubclass(output, pydantic.BaseModel)):
            raise ConfigError(
                f"structured step {name!r}: output must be a pydantic model class, not {output!r}",
                name=name,
            )
        if max_retries < 0:
            raise ConfigError(f"structured step {name!r}: max_retries must be >= 0", name=name)
        self.name = name
        self.output_type: type[M] = output
        self.instructions = instructions
        self.prompt = prompt
        self.max_retries = max_retries
        self.description = instructions
        self._build_templates(output)

    def _build_templates(self, output: type[M]) -> None:
        """Everything per-call that does not depend on the input, computed once."""
        # Imported when a step is declared: the store's CLI verbs never load the openai SDK.
        from openai.lib._pydantic import to_strict_json_schema

        try:
            self.schema: JSONObject = to_strict_json_schema(output)
        except Exception:  # a type the strict transform cannot handle: send it as is
            self.schema = output.model_json_schema()
        tool_name = re.sub(r"[^a-zA-Z0-9_-]", "_", output.__name__)[:64] or "answer"
        self._tool_name = tool_name
        self._response_format: JSONObject = {
            "type": "json_schema",
            "json_schema": {"name": tool_name, "schema": self.schema, "strict": True},
        }
        function: JSONObject = {"name": tool_name, "parameters": self.schema, "strict": True}
        if output.__doc__ and output.__doc__ != pydantic.BaseModel.__doc__:
            function["description"] = output.__doc__.strip()
        self._tools = [{"type": "function", "function": function}]
        self._tool_choice = {"type": "function", "function": {"name": tool_name}}
        schema_text = json.dumps(self.schema)
        in_prompt = (
            f"{self.instructions}\n\nAnswer with one JSON object that matches this JSON "
            f"schema:\n{schema_text}"
        )
        self._systems: dict[StructuredMode, str] = {
            "json_schema": self.instructions,
            "json_object_schema": in_prompt,
            "json_object": in_prompt,
            "tool": f"{self.instructions}\n\nGive your answer by calling the "
            f"`{tool_name}` function.",
            "prompt": f"{self.instructions}\n\nAnswer with only one JSON object (no prose, "
            f"no code fences) that matches this JSON schema:\n{schema_text}",
        }

    def __repr__(self) -> str:
        return f"<Structured {self.name} -> {self.output_type.__name__}>"

    def describe(self) -> Shape:
        """One structured-output call: no tools, no loop."""
        return Shape(kind=Kind.STRUCTURED, name=self.name)

    async def run(self, input: object, ctx: Context) -> M:
        """Ask for, validate and return the answer; walks the ladder on rejections.

        Ends the run (by raising :class:`~loopwise.core.step.Halt`) with ``invalid_output``
        after ``max_retries`` failed re-asks and with ``refused`` on a refusal.
        """
        user = self.render(input)
        modes = _memory(ctx.model)
        key = endpoint_key(ctx.model)
        remembered = modes.get(key, LADDER[0]) if modes is not None else LADDER[0]
        start = max(LADDER.index(remembered), LADDER.index(_pinned(ctx.model)))
        for mode in LADDER[start:]:
            try:
                return await self._ask(mode, user, ctx, modes, key)
            except ResponseFormatRejected:
                if mode == LADDER[-1]:
                    raise
        raise AssertionError("unreachable: the last rung re-raises")

    def render(self, input: object) -> str:
        """The user message for ``input``: ``prompt(input)``, a string as is, else JSON."""
        return render_input(self.prompt, input)

    async def _ask(
        self,
        mode: StructuredMode,
        user: str,
        ctx: Context,
        modes: dict[tuple[str, str], StructuredMode] | None,
        key: tuple[str, str],
    ) -> M:
        """One rung: ask, validate, re-ask with the errors up to ``max_retries`` times."""
        messages: list[Message] = [
            {"role": "system", "content": self._systems[mode]},
            {"role": "user", "content": user},
        ]
        feedback = ""
        for _attempt in range(self.max_retries + 1):
            turn = await ctx.call_model(self._request(mode, messages))
            if modes is not None:
                modes[key] = mode  # the server accepted this rung: start here next time
            _check_refusal(turn, self.name)
            try:
                return self._parse(mode, turn)
            except _Invalid as e:
                feedback = e.feedback
                messages.extend(self._feedback(mode, turn, feedback))
        raise Halt(
            Status.INVALID_OUTPUT,
            f"{self.name}: output still invalid after {self.max_retries + 1} attempts: "
            f"{_one_line(feedback)}",
        )

    def _request(self, mode: StructuredMode, messages: list[Message]) -> ModelRequest:
        request = ModelRequest(messages=list(messages), output_schema=self.schema)
        if mode == "json_schema":
            request.response_format = self._response_format
        elif mode == "json_object_schema":
            request.response_format = {"type": "json_object", "schema": self.schema}
        elif mode == "json_object":
            request.response_format = {"type": "json_object"}
        elif mode == "tool":
            request.tools = self._tools
            request.tool_choice = self._tool_choice
        return request

    def _parse(self, mode: StructuredMode, turn: Turn) -> M:
        """The validated answer, or :class:`_Invalid` saying exactly what is wrong."""
        if mode == "tool" and turn.tool_calls:
            call = turn.tool_calls[0]
            if call.name != self._tool_name:
                raise _Invalid(f"call the `{self._tool_name}` function, not `{call.name}`")
            raw = call.arguments
        else:
            raw = strip_fence(turn.text or "")
        if not raw.strip():
            raise _Invalid("the answer was empty; reply with one JSON object")
        try:
            return self.output_type.model_validate_json(raw)
        except pydantic.ValidationError as e:
            repaired = _controls_escaped(raw) if _invalid_json(e) else None
            if repaired is None:
                raise _Invalid(_describe(e)) from e
        try:
            return self.output_type.model_validate_json(repaired)
        except pydantic.ValidationError as e:
            raise _Invalid(_describe(e)) from e

    def _feedback(self, mode: StructuredMode, turn: Turn, feedback: str) -> list[Message]:
        """The messages that tell the model why its answer was rejected."""
        note = f"Your answer did not validate: {feedback}"
        if mode == "tool" and turn.tool_calls:
            # Every tool call must be answered by a tool message bound to its id.
            return [
                turn.to_message(),
                *({"role": "tool", "tool_call_id": c.id, "content": note} for c in turn.tool_calls),
            ]
        again = f"{note}\nReply again with only a JSON object that matches the schema."
        return [turn.to_message(), {"role": "user", "content": again}]


def _memory(model: Any) -> dict[tuple[str, str], StructuredMode] | None:
    """The model's per-endpoint rung memory, created on models that lack one."""
    modes = model_member(model, "structured_modes")
    if modes is None:
        try:
            model.structured_modes = modes = {}
        except AttributeError:  # a slotted or frozen model: no memory, start at the top
            return None
    return modes


def _pinned(model: object) -> StructuredMode:
    """The rung a model pins calls to start at (its ``structured_mode``), else the top."""
    mode = model_member(model, "structured_mode")
    return mode if mode in LADDER else LADDER[0]


def endpoint_key(model: object) -> tuple[str, str]:
    """What is remembered per server is keyed by: the model's ``endpoint`` (base URL, model
    name), else ``("", its name)``."""
    endpoint = model_member(model, "endpoint")
    if isinstance(endpoint, tuple) and len(endpoint) == 2:
        return (str(endpoint[0]), str(endpoint[1]))
    return ("", model_name(model) or "")


def _check_refusal(turn: Turn, name: str) -> None:
    if turn.refusal:
        raise Halt(Status.REFUSED, f"{name}: the model refused: {_one_line(turn.refusal)}")
    if turn.finish_reason == "content_filter":
        raise Halt(Status.REFUSED, f"{name}: the answer was stopped by the content filter")


def strip_fence(text: str) -> str:
    """``text`` without the code fence models answering in prompted mode often wrap JSON
    in (unchanged when there is none)."""
    match = _FENCE.match(text)
    return match.group(1) if match else text


def _invalid_json(error: pydantic.ValidationError) -> bool:
    return any(item["type"] == "json_invalid" for item in error.errors(include_url=False))


def _controls_escaped(raw: str) -> str | None:
    """``raw`` re-serialized when only raw control characters inside its strings kept it
    from being JSON, else ``None``.

    llama-cpp-python's grammar for JSON strings (``[^"\\]``) lets a newline or a tab into a
    string unescaped, so a constrained answer that is right in every other way fails a
    strict parser, and a re-ask cannot help: the same grammar allows it again. The value
    is re-encoded (not validated in Python mode) so JSON-mode validation rules still apply.
    """
    try:
        return json.dumps(json.loads(raw, strict=False))
    except (ValueError, RecursionError):  # not JSON for another reason, or nested too deep
        return None


def _describe(error: pydantic.ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False)[:10]:
        where = ".".join(str(p) for p in item["loc"]) or "(root)"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def render_input(prompt: Prompt | None, input: object) -> str:
    """The user message for ``input``: ``prompt(input)``, a string as is, else JSON (one
    rule for every single-call step: a structured call, a judge)."""
    if prompt is not None:
        return prompt(input)
    if isinstance(input, str):
        return input
    if isinstance(input, pydantic.BaseModel):
        return input.model_dump_json()
    return json.dumps(jsonable(input))
