"""Tools an agent may call: ``@tool`` over plain functions, effects, allow-lists.

A :class:`Tool` is built ONCE, when it is declared: its name, a description from the
docstring (first paragraph), parameter descriptions (from
``Annotated[..., Field(description=...)]`` or an ``Args:`` docstring section), a pydantic
argument model from the signature, and the strict Chat Completions schema made from it by
``openai``'s own ``pydantic_function_tool``. Calling the model's arguments through
:meth:`Tool.invoke` always validates them first, so nothing runs on arguments the
signature does not allow.

Every tool declares its :class:`Effect` (least power): ``read`` tools observe, ``write``
tools change something that can be undone, ``irreversible`` ones cannot be undone (money,
deletes, mail) and an agent refuses them unless they carry a ``gate``.

Allow-list helpers (:mod:`loopwise.tools.allowlists`) make the valid inputs explicit
and are enforced by pydantic whatever the model sends; where JSON schema can say
it, the schema says it too::

    @tool
    def get_order(order_id: Annotated[str, IdPattern(r"O-\\d{4}")]) -> dict: ...

A parameter named ``ctx`` receives the run's :class:`~loopwise.core.step.Context` (with
``ctx.idempotency_key`` set while a ``write``/``irreversible`` tool runs) and is not part
of the schema. Mistakes in a declaration raise :class:`~loopwise.errors.ToolError`;
bad arguments at call time raise :class:`ToolArgumentsError`.

The options (:class:`ToolOptions`) are declared once, for :func:`tool`, :class:`Tool` and
(but ``localns``) :func:`as_tool`; an unknown one raises ``ToolError`` naming it.
Annotations are resolved with the function's module globals and the ``localns`` option
only: a tool declared inside a function, whose string annotations (``from __future__
import annotations``) name that function's locals, passes ``localns=locals()``. No
caller's frame is read. How a sync function runs off the event loop (and an effect is seen
through a cancellation) is :mod:`loopwise.tools.threads`'.
"""

from __future__ import annotations

import asyncio
import difflib
import enum
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    TypeAlias,
    TypedDict,
    Unpack,
    get_args,
    get_origin,
    get_type_hints,
    overload,
)

import pydantic
from pydantic import BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo

from loopwise.core.concurrency import CarriedExit, carry_exits
from loopwise.core.events import jsonable
from loopwise.core.members import step_member
from loopwise.core.offload import Work
from loopwise.core.shape import ToolShape, describe, parameters_of
from loopwise.core.step import Step
from loopwise.errors import DirectEffectError, ToolError
from loopwise.tools.allowlists import field_note
from loopwise.tools.arguments import validated
from loopwise.tools.threads import in_own_thread, seen_through, to_the_end

if TYPE_CHECKING:
    from loopwise.core.step import Context
    from loopwise.tools.gates import Gate, PolicyFn

__all__ = [
    "Arguments",
    "AsToolOptions",
    "Effect",
    "Tool",
    "ToolOptions",
    "as_tool",
    "require_gate",
    "tool",
]

_NAME_RE = re.compile(r"[a-zA-Z0-9_-]{1,64}")

Arguments: TypeAlias = "str | Mapping[str, object] | BaseModel | None"
"""A call's arguments as given: a model's JSON text, a mapping (code may pass any value
the tool's parameters validate), or a model already validated (``None``: none, as ``{}``)."""


class Effect(enum.StrEnum):
    """What calling a tool does to the world (least power: declare the smallest)."""

    READ = "read"
    WRITE = "write"
    IRREVERSIBLE = "irreversible"


class AsToolOptions(TypedDict, total=False):
    """The options every tool takes, :func:`as_tool`'s too; each may be left out."""

    name: str | None
    """The name the model calls it by (default: the function's or the step's)."""
    effect: Effect | str
    """``read`` (the default), ``write`` or ``irreversible``."""
    untrusted_output: bool
    """Whether its output taints later effects (fetched pages, mail); default ``False``."""
    timeout: float | None
    """Seconds a call may take (default ``None``: no limit)."""
    gate: Gate | PolicyFn | None
    """The gate in front of each call (see :mod:`loopwise.tools.gates`); default none."""


class ToolOptions(AsToolOptions, total=False):
    """The options of :func:`tool` and :class:`Tool`, declared once for both.

    Besides :class:`AsToolOptions`: ``description`` and ``localns``.
    """

    description: str | None
    """What the tool does and when to call it (default: the docstring's first paragraph)."""
    localns: Mapping[str, object] | None
    """Names to resolve the function's annotations with, besides its module's globals: for
    a tool declared inside a function whose annotations name that function's locals under
    ``from __future__ import annotations`` (``@tool(localns=locals())``)."""


_OPTIONS = frozenset(ToolOptions.__required_keys__ | ToolOptions.__optional_keys__)


def _check_options(options: Mapping[str, object], name: str | None) -> None:
    """Raise :class:`~loopwise.errors.ToolError` naming an option no tool takes (and the
    tool, when its name is known yet: ``@tool(...)`` before the function is not)."""
    for option in sorted(set(options) - _OPTIONS):
        close = difflib.get_close_matches(option, _OPTIONS, n=1)
        meant = f" (did you mean {close[0]!r}?)" if close else ""
        where = f"tool {name!r}" if name else f"@tool({option}=...)"
        raise ToolError(
            f"{where}: unknown option {option!r}{meant}; the options are: "
            + ", ".join(sorted(_OPTIONS)),
            tool=name or "",
            code="unknown-option",
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class _Doc:
    summary: str
    params: dict[str, str]


def _parse_docstring(doc: str) -> _Doc:
    """The first paragraph, and parameter lines of a Google-style ``Args:`` section."""
    paragraphs = re.split(r"\n\s*\n", doc.strip(), maxsplit=1)
    summary = " ".join(paragraphs[0].split()) if doc.strip() else ""
    if summary.startswith(("Args:", "Arguments:", "Parameters:")):
        summary = ""
    params: dict[str, str] = {}
    section = re.search(
        r"^\s*(?:Args|Arguments|Parameters):\s*\n(.*?)(?:^\s*\w[\w ]*:\s*$|\Z)",
        doc,
        re.M | re.S,
    )
    if section:
        current = None
        for line in section.group(1).splitlines():
            match = re.match(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line)
            if match:
                current = match.group(1)
                params[current] = match.group(2).strip()
            elif current and line.strip():
                params[current] = f"{params[current]} {line.strip()}"
    return _Doc(summary=summary, params=params)


def _own_description(hint: object) -> str | None:
    """The description an ``Annotated[..., Field(description=...)]`` hint gives itself."""
    if get_origin(hint) is not Annotated:
        return None
    found = [m.description for m in get_args(hint)[1:] if isinstance(m, FieldInfo)]
    return next((d for d in reversed(found) if d), None)


def _description(hint: object, doc: str | None) -> str | None:
    """A parameter's description when the tool must set it, or ``None`` (pydantic's own
    stands): the docstring's unless the hint has its own, with an allow-list's note added
    (pydantic applies a field's description after the helper's hint, dropping the note)."""
    own = _own_description(hint)
    note = field_note(hint)
    if note is not None and (own or doc):
        return f"{own or doc} {note}"
    return doc if doc and not own else None


def _arg_fields(
    fn: Callable[..., object], name: str, doc: _Doc, localns: Mapping[str, object] | None
) -> tuple[dict[str, Any], bool]:
    """Pydantic field definitions from ``fn``'s signature, and whether it takes ``ctx``."""
    try:
        # The function's own globals, plus only what the caller passed: no frame is read.
        hints = get_type_hints(fn, localns=dict(localns or {}), include_extras=True)
    except NameError as e:
        raise ToolError(
            f"tool {name!r}: cannot resolve its annotations ({e}); a name local to the "
            "function that declares the tool is not seen from its module: pass it, "
            "@tool(localns=locals()) or tool(fn, localns={...})",
            tool=name,
        ) from e
    except TypeError as e:
        raise ToolError(f"tool {name!r}: cannot resolve its annotations ({e})", tool=name) from e
    fields: dict[str, Any] = {}  # pydantic's field definitions: (a type form, a default)
    takes_ctx = False
    for param in inspect.signature(fn).parameters.values():
        if param.name == "ctx":
            takes_ctx = True
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ToolError(
                f"tool {name!r}: parameter {param.name!r} must be a plain or keyword parameter "
                "(no *args, **kwargs or positional-only)",
                tool=name,
            )
        if param.name not in hints:
            raise ToolError(
                f"tool {name!r}: parameter {param.name!r} has no type annotation; annotate it "
                "so its arguments can be validated",
                tool=name,
            )
        hint = hints[param.name]
        default = ... if param.default is param.empty else param.default
        described = _description(hint, doc.params.get(param.name))
        if described is not None:
            # No default given is no default set: a default in the hint's own Field stands.
            given = {} if default is ... else {"default": default}
            fields[param.name] = (hint, Field(description=described, **given))
        else:
            fields[param.name] = (hint, default)
    return fields, takes_ctx


class Tool:
    """A function the model may call; see the module docstring. Build with :func:`tool`."""

    step: Step | None = None
    """The step this tool runs, for a step given as a tool (:func:`as_tool`)."""
    in_process: bool = False
    """Whether it is loopwise's own work inside the run (an agent's ``final_answer``, a
    step given as a tool), which an engine never offloads (:mod:`loopwise.core.offload`)."""

    def __init__(
        self,
        fn: Callable[..., object],
        *,
        args_model: type[BaseModel] | None = None,
        **options: Unpack[ToolOptions],
    ) -> None:
        """A tool over ``fn`` with the :class:`ToolOptions` given (``args_model``: take these
        arguments as they are, for a function ``async fn(args, ctx)``, as :func:`as_tool`)."""
        if not callable(fn) or isinstance(fn, Step):  # a @step function is callable too
            raise _not_a_function(fn)
        self.fn: Callable[..., Any] = fn  # the user's function: sync, or async to be awaited
        self.name = options.get("name") or fn.__name__
        _check_options(options, self.name)
        if not isinstance(self.name, str) or not _NAME_RE.fullmatch(self.name):
            # fullmatch: `$` would let a trailing newline through
            raise ToolError(
                f"tool name {self.name!r} must be 1-64 letters, digits, '_' or '-' (no "
                "whitespace or control character)",
                tool=str(self.name),
            )
        effect = options.get("effect", Effect.READ)
        try:
            self.effect = Effect(effect)
        except ValueError as e:
            raise ToolError(
                f"tool {self.name!r}: effect {effect!r} is not one of read, write, irreversible",
                tool=self.name,
            ) from e
        doc = _parse_docstring(inspect.getdoc(fn) or "")
        description = options.get("description")
        self.description = description if description is not None else doc.summary
        """What the tool does and when to call it (empty when undocumented: ``check`` warns)."""
        self.untrusted_output = options.get("untrusted_output", False)
        timeout = options.get("timeout")
        if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
            raise ToolError(
                f"tool {self.name!r}: timeout must be seconds > 0 (or None), not {timeout!r}",
                tool=self.name,
            )
        self.timeout = timeout
        self.gate = options.get("gate")
        self._is_async = inspect.iscoroutinefunction(fn)
        # With an explicit args_model the function is ``async fn(args, ctx)`` (as_tool).
        self._takes_args_model = args_model is not None
        self._takes_ctx = True
        if args_model is None:
            fields, self._takes_ctx = _arg_fields(fn, self.name, doc, options.get("localns"))
            args_model = pydantic.create_model(
                f"{self.name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
            )
        self.args_model: type[BaseModel] = args_model
        self.schema: dict[str, Any] = _function_schema(self.name, self.description, args_model)
        """The Chat Completions tool entry (strict JSON schema), built once."""
        self.__doc__ = fn.__doc__

    def parse(self, arguments: Arguments, *, strict: bool = False) -> BaseModel:
        """Validate raw model arguments; raises :class:`ToolArgumentsError` saying what is wrong.

        ``strict`` reads them as pydantic's strict mode reads JSON (a person's edit): a
        boolean or a text is no number (``true`` is not ``1``, ``"5000"`` not ``5000``) and a
        number is no text, so what was typed is exactly what runs.
        """
        if isinstance(arguments, self.args_model):
            return arguments
        if isinstance(arguments, BaseModel):
            arguments = arguments.model_dump()
        return validated(self.args_model, arguments, self.name, strict=strict)

    async def invoke(self, arguments: Arguments, ctx: Context | None = None) -> object:
        """Validate ``arguments`` and run a ``read`` tool (sync ones in a worker thread).

        Raises :class:`ToolArgumentsError` for bad arguments, ``TimeoutError`` when
        :attr:`timeout` passes, and whatever the function raises. A ``write`` or
        ``irreversible`` tool is not run this way (it raises
        :class:`~loopwise.errors.DirectEffectError`): its effects go through a run — an
        agent's tool, a hybrid's action or a workflow node — where its gate, journal and
        idempotency key apply.
        """
        self._refuse_direct("invoke()")
        return await self.perform(self.parse(arguments), ctx)

    async def perform(self, args: BaseModel, ctx: Context | None) -> object:
        """Run the tool on validated ``args`` with its timeout: no gate, no journal.

        The tool-call executor (:mod:`loopwise.tools.calls`) calls this after the gate, in
        the context it made for the call. A ``read`` tool may be performed directly; a
        ``write`` or ``irreversible`` one called anywhere else (``ctx`` ``None``, or any
        context but its call's) raises :class:`~loopwise.errors.DirectEffectError` naming
        the tool, and nothing runs: its effect would skip its gate, journal and
        idempotency key.

        In a run whose engine takes its outside-world work (:mod:`loopwise.core.offload`),
        the call is handed to it with its idempotency key, unless the tool is
        :attr:`in_process`.
        """
        if self.effect is not Effect.READ and (ctx is None or ctx.performing is not self):
            self._refuse_direct("perform() outside the tool-call executor")
        if ctx is not None and ctx.offload is not None and not self.in_process:
            work = Work(
                kind="effect", tool=self.name, args=jsonable(args), effect=str(self.effect),
                key=ctx.idempotency_key, step=ctx.step_path, do=partial(self._perform, args),
            )  # fmt: skip
            return await ctx.offload(work)
        return await self._perform(args, ctx)

    async def _perform(self, args: BaseModel, ctx: Context | None) -> object:
        """Run the tool here, with its timeout (an engine's :class:`Work` does this)."""
        if self.timeout is None:
            return await self._call(args, ctx)
        # Both ways below await the call in a task of its own (asyncio.wait_for does on 3.11).
        coro = carry_exits(self._call(args, ctx))
        try:
            if self._in_thread() and self.effect is not Effect.READ:
                return await seen_through(coro, self.timeout)
            return await asyncio.wait_for(coro, self.timeout)
        except TimeoutError as e:
            raise TimeoutError(f"tool {self.name!r} timed out after {self.timeout}s") from e
        except CarriedExit as e:
            raise e.error from None  # sys.exit() in the tool: the run's, not the event loop's

    def _in_thread(self) -> bool:
        """Whether :meth:`_call` runs the function in a thread (a sync function of its own)."""
        return not (self._takes_args_model or self._is_async)

    async def _call(self, args: BaseModel, ctx: Context | None) -> object:
        if self._takes_args_model:
            return await self.fn(args, ctx)
        kwargs = dict(vars(args))  # the fields of the tool's own args model (extra="forbid")
        if self._takes_ctx:
            kwargs["ctx"] = ctx
        if self._is_async:
            return await self.fn(**kwargs)
        if self.timeout is not None:
            return await in_own_thread(self.fn, kwargs)
        if self.effect is not Effect.READ:
            return await to_the_end(self.fn, kwargs)
        return await asyncio.to_thread(self.fn, **kwargs)

    def __call__(self, *args: object, **kwargs: object) -> Any:
        """Call the wrapped function of a ``read`` tool directly (no validation): handy in
        tests. A ``write``/``irreversible`` tool raises
        :class:`~loopwise.errors.DirectEffectError` (test its function as ``tool.fn``)."""
        self._refuse_direct("a direct call")
        return self.fn(*args, **kwargs)

    def _refuse_direct(self, how: str) -> None:
        if self.effect is Effect.READ:
            return
        raise DirectEffectError(
            f"tool {self.name!r} is {self.effect}: {how} would skip its gate, journal and "
            f"idempotency key; run it as a workflow node (Workflow(...).then({self.name})), "
            "an agent's tool or a hybrid's action (or call its function, .fn, in a unit test)",
            tool=self.name,
        )

    def describe(self) -> ToolShape:
        """What the model and ``loopwise check`` see of this tool (and of the step it runs)."""
        return ToolShape(
            name=self.name,
            description=self.description,
            effect=self.effect.value,
            gated=self.gate is not None,
            untrusted=self.untrusted_output,
            parameters=parameters_of(self.schema["function"].get("parameters", {})),
            step=None if self.step is None else describe(self.step),
            tool=self,
        )

    def __repr__(self) -> str:
        return f"<tool {self.name} ({self.effect})>"


def _function_schema(name: str, description: str, model: type[BaseModel]) -> dict[str, Any]:
    # Imported when a tool is declared: the store's CLI verbs never load the openai SDK.
    from openai import pydantic_function_tool

    entry = pydantic_function_tool(model, name=name, description=description or name)
    # A plain dict (the SDK's wrapper carries the model class), JSON-ready for any sink.
    function = dict(entry["function"])
    if not description:
        function.pop("description", None)
    return {"type": "function", "function": function}


def require_gate(tool: Tool, *, holder: str, fix: str) -> None:
    """Refuse an ``irreversible`` ``tool`` that has no gate: :class:`ToolError` with code
    ``ungated-irreversible``, its message led by ``holder`` (who holds it) and ended by
    ``fix`` (how to give it one). Every holder of tools asks this one check."""
    if tool.effect is Effect.IRREVERSIBLE and tool.gate is None:
        raise ToolError(
            f"{holder}tool {tool.name!r} is irreversible and has no gate; {fix}",
            tool=tool.name,
            code="ungated-irreversible",
        )


def _not_a_function(obj: object) -> ToolError:
    """What :func:`tool` says of an object that is not a function: a step (an agent, a
    workflow, a user's own) is made a tool with :func:`as_tool`."""
    if isinstance(obj, Step):
        name = str(obj.name)
        return ToolError(
            f"{name!r} is a step, not a function: make it a tool with "
            "loopwise.as_tool(step, description=...) (say when the model should call it)",
            tool=name,
        )
    kind = type(obj).__name__
    return ToolError(f"a tool wraps a function, not {kind}", tool=kind)


@overload
def tool(fn: Callable[..., object], /, **options: Unpack[ToolOptions]) -> Tool: ...
@overload
def tool(**options: Unpack[ToolOptions]) -> Callable[[Callable[..., object]], Tool]: ...


def tool(
    fn: Callable[..., object] | None = None, /, **options: Unpack[ToolOptions]
) -> Tool | Callable[[Callable[..., object]], Tool]:
    """Make a function a :class:`Tool`: ``@tool``, ``@tool(effect="write", timeout=5)`` or
    ``tool(fn, effect="write")``; the options are :class:`ToolOptions`.

    Annotations are resolved with the function's module globals and, for a tool declared
    inside a function whose annotations name that function's locals (strings, under
    ``from __future__ import annotations``), the ``localns`` given:
    ``@tool(localns=locals())``. Nothing else is looked up (no caller frame is read).

    Raises :class:`~loopwise.errors.ToolError` for an unknown option, an annotation that
    cannot be resolved (naming ``localns=``), a parameter without a type annotation,
    ``*args``/``**kwargs``, an invalid name or an unknown effect, and for something that
    is not a function (a step: make it a tool with :func:`as_tool`).
    """
    if fn is not None:
        return Tool(fn, **options)
    _check_options(options, options.get("name"))  # at the decorator's line
    return lambda f: Tool(f, **options)


def as_tool(step: Step, *, description: str, **options: Unpack[AsToolOptions]) -> Tool:
    """Any step (a workflow, a structured step, an agent) as a tool, run via ``ctx.run_step``.

    A step whose ``input_type`` is a pydantic model takes that model as its arguments;
    any other step takes one argument, ``input``, of its ``input_type`` (``str`` when it
    declares none or ``Any``, as strict function schemas need a type). The options are
    :class:`AsToolOptions`; ``description`` is required (the step has no docstring to
    take it from).
    """
    step_name = options.get("name") or str(step.name)
    input_type = step_member(step, "input_type")
    if input_type in (Any, object):
        # A strict function schema needs a type for every property: an untyped input
        # (a structured step, an untyped workflow) takes the text the model writes.
        input_type = str
    if isinstance(input_type, type) and issubclass(input_type, BaseModel):
        args_model: type[BaseModel] = input_type
        unwrap = False
    else:
        args_model = pydantic.create_model(
            f"{step_name}_arguments",
            __config__=ConfigDict(extra="forbid"),
            input=(input_type, Field(description=f"The input of {step_name}.")),
        )
        unwrap = True

    async def run_step(args: BaseModel, ctx: Context) -> object:
        # getattr: `input` is the one field of a model made at run time (create_model),
        # which no type declares.
        return await ctx.run_step(step, getattr(args, "input") if unwrap else args)  # noqa: B009

    options["name"] = step_name
    wrapped = Tool(run_step, args_model=args_model, description=description, **options)
    # Kept so the step's own description (its tools, its limits) reaches `check`.
    wrapped.step = step
    wrapped.in_process = True  # its own model calls and tools are offloaded one by one
    return wrapped
