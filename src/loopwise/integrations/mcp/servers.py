"""Tools from MCP servers: each tool a server lists becomes an ordinary loopwise :class:`Tool`.

    from loopwise import mcp

    shop = mcp.stdio("python", "shop_server.py", trust_annotations=True)
    agent = Agent(name="investigate", tools=[shop, my_local_tool], ...)

:func:`stdio` (a command started as a subprocess) and :func:`http` (a Streamable HTTP
URL) connect once when declared, list the server's tools and build one :class:`MCPTool`
per tool; the result, an :class:`MCPTools`, is a tool source holding them (and a sequence
of them: ``[*shop]`` spreads it). It goes wherever a ``@tool`` goes (an agent's tools, a
hybrid's planner tools or actions), and its tools through the same validation, gates,
taint and journal. A server that says its tool list changed is listed again when the next
run of an agent holding it starts.

**Effects from annotations, conservatively.** MCP annotations are hints, and the protocol
says a client must not trust the hints of a server it does not trust. So:

* ``trust_annotations=False`` (the default): every hint is ignored. Every tool of the
  server is ``irreversible``, gated by a person (:func:`loopwise.tools.gates.human`) and its
  output untrusted — until the user says otherwise for a tool with an :class:`Override`.
* ``trust_annotations=True`` (a server the user vouches for): ``readOnlyHint: true`` →
  ``read``; not read-only (``false`` or unset, its default) with ``destructiveHint:
  false`` → ``write``; anything else (or no annotations) → ``irreversible`` with a human
  gate. ``openWorldHint`` true or unset → ``untrusted_output``. ``idempotentHint`` is
  informational.

The mapping is decided once, when the tools are declared, and kept in each tool's
:attr:`MCPTool.mapping` (``loopwise check`` shows it); hints a server sends later do not
change it.

**Arguments.** A pydantic model is built from each tool's JSON schema (nested objects,
enums, required properties; unknown properties are refused unless the schema allows
them) and the whole schema is checked with ``jsonschema`` too, before anything is sent
(both in :mod:`loopwise.integrations.mcp.schema`): invalid arguments come back to the model as
``ERROR:`` results like any tool's. The model is shown the server's own schema. A tool
whose schema is not a valid JSON-schema object (or whose name loopwise cannot use) is left
out and listed in :attr:`MCPTools.skipped`.

**Lifecycle.** A run connects to a server when it first calls one of its tools and closes
the connection when it ends or pauses (:attr:`loopwise.core.step.Context.resources`). A run
resumed in another process imports its target module again, which declares the tools
again, and connects anew; results already journaled are replayed, not re-called. The
idempotency key of a ``write``/``irreversible`` call travels in the request's ``_meta``
under :data:`IDEMPOTENCY_KEY`, so a server can make a repeated effect safe.

**Failures.** A server that cannot be started or listed when declared (within
``connect_timeout``) raises :class:`~loopwise.errors.MCPServerError` naming it. A tool
listed badly — a name or listing loopwise cannot use
(:func:`~loopwise.integrations.mcp.listing.checked`), a schema past the limits of
:func:`~loopwise.integrations.mcp.schema.check_limits` (nesting, parts, patterns), even
one nested too deeply for the SDK to read (:mod:`~loopwise.integrations.mcp.wire`,
over stdio and HTTP) — is
left out with why (``loopwise check`` says so), never the server's other tools.
In a run, a tool that reports an error or a protocol error becomes an ``ERROR:`` result;
a call that times out too; a server that will not start, or that dies mid-run, ends the run
with status ``error`` and a detail that names the server (and what it printed on stderr,
for a subprocess).

Needs the optional extra: ``pip install 'loopwise[mcp]'`` (the ``mcp`` SDK, 2.x).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO, TypedDict, Unpack, cast, overload

from pydantic import BaseModel

from loopwise.core.events import Status
from loopwise.core.jsontypes import JSONObject, JSONValue
from loopwise.core.result import Halt
from loopwise.core.shape import ToolShape
from loopwise.errors import ConfigError, MCPServerError, ToolError
from loopwise.integrations.mcp.connection import Connection, NotStarted, Opener, blocking, reason
from loopwise.integrations.mcp.elicit import AskedCall, answers, push_declined
from loopwise.integrations.mcp.listing import checked, tools_page
from loopwise.integrations.mcp.mapping import Override, ToolMapping, map_annotations, tool_mapping
from loopwise.integrations.mcp.results import MCPToolError, value_of
from loopwise.integrations.mcp.schema import (
    OverLimits,
    Unusable,
    apply_hints,
    args_model,
    check_limits,
    schema_validator,
    wraps_result,
)
from loopwise.integrations.mcp.wire import rereading
from loopwise.tools.arguments import ToolArgumentsError
from loopwise.tools.gates import human
from loopwise.tools.source import ToolSource
from loopwise.tools.tool import Arguments, Effect, Tool

if TYPE_CHECKING:
    from mcp import Client
    from mcp.client.session import IncomingMessage
    from mcp.client.session import MessageHandlerFnT as OnMessage
    from mcp.types import CallToolResult, InputRequiredResult, InputResponses, RequestParamsMeta
    from mcp.types import Tool as ListedTool

    from loopwise.core.step import Context

__all__ = [
    "IDEMPOTENCY_KEY",
    "MCPTool",
    "MCPTools",
    "Override",
    "ServerOptions",
    "ToolMapping",
    "http",
    "map_annotations",
    "stdio",
]

IDEMPOTENCY_KEY = "loopwise/idempotency_key"
"""The ``_meta`` entry of a ``tools/call`` request that carries a call's idempotency key."""

_PAGES = 100
_MAX_TOOLS = 1_000
"""Tools one server may list (each becomes a model and a validator when declared)."""
_ROUNDS = 8
"""Rounds of questions one call may ask before it fails."""


class MCPTool(Tool):
    """A tool of an MCP server, called over the run's connection to it."""

    mapping: ToolMapping
    """How its annotations were mapped (shown by ``loopwise check``)."""

    def __init__(
        self, source: MCPTools, listed: ListedTool, override: Override, *, timeout: float
    ) -> None:
        schema = dict(listed.input_schema)
        validator = schema_validator(schema)
        apply_hints(schema, override.validators, listed.name)
        mapping = tool_mapping(source.server, listed, override, trusted=source.trusted)
        gate = override.gate
        if gate is None and mapping.effect is Effect.IRREVERSIBLE:
            gate = human()
        remote = listed.name
        unwrap = wraps_result(listed.output_schema)

        effect = str(mapping.effect)

        async def call(args: BaseModel, ctx: Context | None) -> JSONValue:
            sent = args.model_dump(mode="json", by_alias=True, exclude_unset=True)
            key = ctx.idempotency_key if ctx is not None else None
            result = await source.call(remote, sent, key, ctx, effect=effect)
            return value_of(result, remote, unwrap)

        call.__doc__ = listed.description
        try:
            super().__init__(
                call,
                name=listed.name,
                description=(listed.description or "").strip(),
                effect=mapping.effect,
                untrusted_output=mapping.untrusted_output,
                timeout=timeout,
                gate=gate,
                args_model=args_model(listed.name, schema, override.validators),
            )
        except ToolError as e:
            raise Unusable(str(e)) from e
        self.schema = {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": schema},
        }
        if not self.description:
            del self.schema["function"]["description"]
        self.mapping = mapping
        self.server = source.server
        """The name of the server the tool comes from."""
        self._validator = validator
        self._skipped = source.skipped

    def describe(self) -> ToolShape:
        """As any tool's, plus the mapping applied and the server's tools left out."""
        return dataclasses.replace(
            super().describe(),
            origin=f"MCP server {self.server!r}: {self.mapping.describe()}",
            left_out=tuple(
                f"MCP server {self.server!r} lists {name!r}, left out: {why}"
                for name, why in sorted(self._skipped.items())
            ),
        )

    def parse(self, arguments: Arguments, *, strict: bool = False) -> BaseModel:
        """Validate like any tool, then against the server's whole JSON schema."""
        args = super().parse(arguments, strict=strict)
        sent = args.model_dump(mode="json", by_alias=True, exclude_unset=True)
        problems = [
            f"{'.'.join(str(p) for p in e.absolute_path) or '(arguments)'}: {e.message}"
            for e in sorted(self._validator.iter_errors(sent), key=lambda e: list(e.path))
        ]
        if problems:
            raise ToolArgumentsError(
                f"invalid arguments for {self.name!r}: " + "; ".join(problems[:5]), tool=self.name
            )
        return args


class MCPTools(ToolSource, Sequence[MCPTool]):
    """The tools of one MCP server, as loopwise tools; build with :func:`stdio` or :func:`http`.

    A :class:`~loopwise.tools.source.ToolSource` (give it whole: ``tools=[server]``) and a
    sequence of :class:`MCPTool` (or spread it: ``tools=[*server]``); :meth:`get` finds one
    by name, :attr:`skipped` says which listed tools were left out and why. When the server
    says its list changed (``notifications/tools/list_changed``, on any connection), the
    next run of an agent holding the source lists the tools again.
    """

    def __init__(self, opener: Opener, shown: str, settings: _Settings) -> None:
        self.server = settings.name or shown
        """The server's name (``name=``, else what it calls itself)."""
        self._named = settings.name is not None
        self.trusted = settings.trust_annotations
        """Whether its annotations are trusted."""
        self.connect_timeout = settings.connect_timeout
        self.opener = opener
        self.skipped: dict[str, str] = {}
        """Listed tools left out, by name: why."""
        self._settings = settings
        self._changed = False
        listed = blocking(self._list)
        self._tools = self._built(listed)

    def _built(self, listed: list[JSONValue]) -> tuple[MCPTool, ...]:
        self.skipped.clear()  # the tools' describe() reads this same dict
        settings = self._settings
        overrides = dict(settings.overrides or {})
        return self._build(listed, overrides, settings.include, settings.timeout)

    def tools(self) -> Sequence[MCPTool]:
        """The server's tools, as last listed."""
        return self._tools

    async def refresh(self) -> bool:
        """List the tools again if the server said they changed since; whether it did."""
        if not self._changed:
            return False
        self._changed = False
        self._tools = self._built(await self._list())
        return True

    async def on_message(self, message: IncomingMessage) -> None:
        """The server's notifications: a changed tool list is listed again by the next run."""
        from mcp.types import ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification):
            self._changed = True

    def _build(
        self,
        listed: list[JSONValue],
        overrides: dict[str, Override],
        include: Iterable[str] | None,
        timeout: float,
    ) -> tuple[MCPTool, ...]:
        tools = checked(listed, self.skipped)
        names = {t.name for t in tools}
        wanted = set(include) if include is not None else names
        for name in sorted((set(overrides) | wanted) - names - set(self.skipped)):
            raise ConfigError(
                f"MCP server {self.server!r} has no tool {name!r} (named in overrides or "
                f"include); it has: {', '.join(sorted(names)) or '(none)'}",
                name=name,
            )
        return tuple(
            built
            for listed_tool in tools
            if listed_tool.name in wanted
            and (built := self._one(listed_tool, overrides, timeout)) is not None
        )

    def _one(
        self, listed: ListedTool, overrides: dict[str, Override], timeout: float
    ) -> MCPTool | None:
        """The tool made from one listing; ``None`` (and why, in :attr:`skipped`) when it
        cannot be used: a schema past the limits or one pydantic cannot model leaves that
        tool out, not the server's others. The limits are checked first, so no tool's
        schema costs more than :data:`~loopwise.integrations.mcp.schema.MAX_NODES` parts
        of work."""
        try:
            check_limits(listed.input_schema)
            return MCPTool(self, listed, overrides.get(listed.name, Override()), timeout=timeout)
        except ConfigError:
            raise  # the user's own override is wrong: say so, do not skip
        except Exception as e:
            if isinstance(e, OverLimits):
                why = f"it is past loopwise's limits: {e}"
            else:
                why = str(e) if isinstance(e, Unusable) else f"{type(e).__name__}: {e}"
            self.skipped[listed.name] = why[:300]
            return None

    async def _list(self) -> list[JSONValue]:
        async with Connection(self) as client:
            info = client.server_info
            if not self._named and info is not None and info.name:
                self.server = info.name
            try:
                return await asyncio.wait_for(self._pages(client), self.connect_timeout)
            except TimeoutError:
                raise MCPServerError(
                    f"MCP server {self.server!r} did not list its tools within "
                    f"{self.connect_timeout}s (no answer the MCP SDK could read)",
                    server=self.server,
                ) from None

    async def _pages(self, client: Client) -> list[JSONValue]:
        found: list[JSONValue] = []
        cursor: str | None = None
        for _ in range(_PAGES):
            page = await tools_page(client, cursor)
            tools = page.get("tools")
            if not isinstance(tools, list):
                raise MCPServerError(
                    f"MCP server {self.server!r} answered tools/list without a list of tools",
                    server=self.server,
                )
            found.extend(tools)
            if len(found) > _MAX_TOOLS:
                raise MCPServerError(
                    f"MCP server {self.server!r} lists more than {_MAX_TOOLS:,} tools; "
                    "take the ones you need from a server that lists fewer",
                    server=self.server,
                )
            next_cursor = page.get("nextCursor")
            if not isinstance(next_cursor, str):
                break
            cursor = next_cursor
        return found

    async def call(
        self,
        tool: str,
        arguments: JSONObject,
        key: str | None,
        ctx: Context | None,
        *,
        effect: str = "irreversible",
    ) -> CallToolResult:
        """Call ``tool`` over the run's connection (opened on first use, closed with the run)."""
        connection: Connection | None = None if ctx is None else ctx.resources.get(self)
        if connection is None:
            connection = Connection(self)
            if ctx is not None:
                ctx.resources[self] = connection
        try:
            client = await connection.open()
        except NotStarted as e:
            raise Halt(Status.ERROR, str(e)) from e
        try:
            return await self._asking(client, tool, arguments, key, (ctx, effect, connection))
        finally:
            if ctx is None:
                await connection.aclose()

    async def _asking(
        self,
        client: Client,
        tool: str,
        arguments: JSONObject,
        key: str | None,
        run: tuple[Context | None, str, Connection],
    ) -> CallToolResult:
        """The call, retried with the run's answers while the server asks questions
        (:mod:`loopwise.integrations.mcp.elicit`)."""
        from mcp.types import InputRequiredResult

        ctx, effect, connection = run
        result = await self._send(client, tool, arguments, key, connection=connection)
        call_key = key or json.dumps([tool, arguments], sort_keys=True, default=str)
        for _ in range(_ROUNDS):
            if not isinstance(result, InputRequiredResult):
                return result
            if ctx is None:
                raise MCPToolError(f"{tool!r} asks a question: only a run can answer it")
            asked = AskedCall(server=self.server, tool=tool, effect=effect, key=call_key)
            answered = await answers(ctx, asked, result.input_requests or {})
            result = await self._send(
                client,
                tool,
                arguments,
                key,
                connection=connection,
                answered=(answered, result.request_state),
            )
        raise MCPToolError(
            f"MCP server {self.server!r} asked for input more than {_ROUNDS} times in one "
            f"call of {tool!r}"
        )

    async def _send(
        self,
        client: Client,
        tool: str,
        arguments: JSONObject,
        key: str | None,
        *,
        connection: Connection,
        answered: tuple[InputResponses | None, str | None] = (None, None),
    ) -> CallToolResult | InputRequiredResult:
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED

        # cast: RequestParamsMeta is open (PEP 728 extra_items), which mypy does not read yet
        meta = cast("RequestParamsMeta", {IDEMPOTENCY_KEY: key}) if key else None
        responses, state = answered
        try:
            return await client.session.call_tool(
                tool,
                arguments,
                meta=meta,
                allow_input_required=True,
                input_responses=responses,
                request_state=state,
            )
        except MCPError as e:
            if e.code != CONNECTION_CLOSED:
                raise MCPToolError(f"MCP server {self.server!r}: {e.message}") from e
            raise Halt(
                Status.ERROR,
                f"MCP server {self.server!r} closed the connection during a call of {tool!r}"
                f"{connection.stderr_tail()}",
            ) from e

    def get(self, name: str) -> MCPTool:
        """The tool named ``name``; raises :class:`~loopwise.errors.ConfigError` naming the
        tools there are."""
        for found in self._tools:
            if found.name == name:
                return found
        known = ", ".join(t.name for t in self._tools) or "(none)"
        raise ConfigError(f"MCP server {self.server!r} has no tool {name!r}; it has: {known}")

    @property
    def mappings(self) -> list[ToolMapping]:
        """How each tool's annotations were mapped."""
        return [t.mapping for t in self._tools]

    @overload
    def __getitem__(self, index: int) -> MCPTool: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[MCPTool]: ...
    def __getitem__(self, index: int | slice) -> MCPTool | Sequence[MCPTool]:
        return self._tools[index]

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[MCPTool]:
        return iter(self._tools)

    def __repr__(self) -> str:
        return f"<MCP server {self.server}: {len(self._tools)} tools>"


class ServerOptions(TypedDict, total=False):
    """What :func:`stdio` and :func:`http` take besides how to connect; each may be left out."""

    name: str | None
    """The server's name in messages (default: what it calls itself)."""
    trust_annotations: bool
    """Whether its annotations are trusted (default ``False``; see the module docs)."""
    overrides: dict[str, Override] | None
    """What the user says about single tools, by name."""
    include: Iterable[str] | None
    """An allow-list of tool names to take (default: all)."""
    timeout: float
    """Seconds each call may take (default 60)."""
    connect_timeout: float
    """Seconds each start may take, and the listing when declared (default 30)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Settings:
    """The :class:`ServerOptions` given, with their defaults."""

    name: str | None = None
    trust_annotations: bool = False
    overrides: dict[str, Override] | None = None
    include: Iterable[str] | None = None
    timeout: float = 60.0
    connect_timeout: float = 30.0


def _settings(options: ServerOptions, caller: str) -> _Settings:
    unknown = sorted(set(options) - set(ServerOptions.__optional_keys__))
    if unknown:  # as Python says it for a keyword the function does not take
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
    return _Settings(**options)


def _declared(opener: Opener, shown: str, settings: _Settings) -> MCPTools:
    try:
        return MCPTools(opener, shown, settings)
    except ConfigError:
        raise
    except NotStarted as e:
        raise MCPServerError(str(e), server=shown) from e
    except Exception as e:
        raise MCPServerError(
            f"MCP server {shown!r} could not be listed: {reason(e)}", server=shown
        ) from e


def stdio(
    command: str,
    *args: str,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    **options: Unpack[ServerOptions],
) -> MCPTools:
    """The tools of the MCP server ``command args...`` (started as a subprocess, over stdio).

    Connects once now to list the tools; each run then starts its own subprocess when it
    first needs it. The options are :class:`ServerOptions`: ``name`` names the server in
    messages (default: what it calls itself), ``include`` is an allow-list of tool names to
    take, ``timeout`` bounds each call (seconds), ``connect_timeout`` each start. Raises
    :class:`~loopwise.errors.MCPServerError` when the server cannot be started or listed,
    :class:`~loopwise.errors.ConfigError` for an override or include naming no tool.
    """
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=command, args=list(args), env=env, cwd=cwd)

    async def opener(stack: AsyncExitStack, errlog: TextIO, on_message: OnMessage) -> Client:
        client = Client(
            rereading(stdio_client(params, errlog=errlog)),
            cache=None,
            message_handler=on_message,
            elicitation_callback=push_declined,  # also says: this client answers questions
        )
        return await stack.enter_async_context(client)

    settings = _settings(options, "stdio")
    return _declared(opener, settings.name or " ".join([command, *args]), settings)


def http(
    url: str,
    *,
    headers: dict[str, str] | None = None,
    **options: Unpack[ServerOptions],
) -> MCPTools:
    """The tools of the MCP server at ``url`` (Streamable HTTP); as :func:`stdio` otherwise.

    ``headers`` go with every request (an ``Authorization`` header, say).
    """
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from loopwise.integrations.mcp.wire_http import shallow_answers

    async def opener(stack: AsyncExitStack, errlog: TextIO, on_message: OnMessage) -> Client:
        del errlog  # a remote server's stderr is its own
        hooks = {"response": [shallow_answers]}  # too deep for the SDK: see wire_http
        http_client = await stack.enter_async_context(
            httpx2.AsyncClient(headers=headers, event_hooks=hooks)
        )
        transport = streamable_http_client(url, http_client=http_client)
        client = Client(
            transport, cache=None, message_handler=on_message, elicitation_callback=push_declined
        )
        return await stack.enter_async_context(client)

    settings = _settings(options, "http")
    return _declared(opener, settings.name or url, settings)
