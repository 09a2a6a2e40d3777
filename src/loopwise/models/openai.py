"""The model port over Chat Completions: one async call in, one assistant :class:`Turn` out.

The port's contract (:class:`Model`, :class:`ModelRequest`, :class:`Turn`...) lives in
:mod:`loopwise.models.port`. :class:`OpenAIModel` speaks to OpenAI and to every
OpenAI-compatible server through ``openai.AsyncOpenAI``; retries with backoff and
timeouts are the SDK's own (``max_retries``, ``timeout``). SDK errors are mapped to
loopwise's in exactly one place, :mod:`loopwise.models.sdk_errors`. Anything with ``name``
and ``async complete(request)`` is a model too — :mod:`loopwise.models.scripted` has the
scripted one.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

import openai
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion
from openai.types.decision import Decision
from openai.types.responses import Response

from loopwise.core.jsontypes import JSONObject
from loopwise.errors import (
    ConfigError,
    DecisionsUnsupported,
    ModelAPIError,
    ModelNotConfigured,
    ResponseFormatRejected,
)
from loopwise.models.background import background_response
from loopwise.models.chat import chat_body, chat_turn
from loopwise.models.clients import pooled
from loopwise.models.options import OpenAIOptions, SentOptions
from loopwise.models.port import (
    APIS,
    DECISION_BACKENDS,
    STRUCTURED_MODES,
    DecisionBackend,
    Model,
    ModelDefaults,
    ModelRequest,
    StructuredMode,
    Turn,
)
from loopwise.models.responses import (
    ResponseEvents,
    as_tools,
    chain_refused,
    response_turn,
    responses_body,
)
from loopwise.models.scripted import ScriptedModel
from loopwise.models.sdk_errors import asks_structured, map_error, sdk_retries

__all__ = [
    "OpenAIModel",
    "api_of",
    "resolve_model",
    "structured_mode_of",
]


class OpenAIModel(ModelDefaults):
    """A Chat Completions model behind ``openai.AsyncOpenAI``.

    ``client`` is injected (build one with your own retries/timeouts) or made from
    ``api_key``/``base_url`` and the ``OPENAI_*`` environment. ``structured_modes``
    remembers, per base URL and model, which structured-output rung the server
    accepted, so a server that rejects ``json_schema`` is asked that way only once;
    ``token_limits`` remembers a server that answered past ``max_completion_tokens``
    (llama-cpp-python's reads only ``max_tokens``), whose limits then go as ``max_tokens``.
    ``client_options`` are more keyword arguments for the client it builds (``headers``,
    ``default_query``...). ``structured_mode`` (or ``LOOPWISE_STRUCTURED_MODE``) pins the
    rung structured calls start at, for a server whose rejections are not recognizable;
    an unknown mode raises :class:`ConfigError`.

    ``api="responses"`` (or ``LOOPWISE_API=responses``) speaks the Responses API
    (``/v1/responses``) instead: the same requests and turns, and a reasoning model's
    reasoning items carried across turns. Nothing is stored server-side by default
    (``store=False``, the reasoning sent back encrypted with each call);
    ``store=True`` chains each call to the previous turn with ``previous_response_id``
    and sends only what came after it, the server holding the rest.

    ``decision_backends`` are the ways a judge may ask this model for probabilities,
    tried in order (default: the Decisions API, then Chat Completions log-probabilities;
    add ``"structured"`` to accept answers of unknown confidence from a server that has
    neither).

    ``options`` (:class:`~loopwise.models.options.OpenAIOptions`) are sent with every
    call: a default output-token limit and one retry with more room for an answer cut
    off at it, the prompt-cache key (by default one per step, from its instructions and
    tools), the service tier.
    """

    def __init__(
        self,
        name: str,
        *,
        client: openai.AsyncOpenAI | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        structured_mode: str | None = None,
        client_options: Mapping[str, Any] | None = None,
        api: str | None = None,
        store: bool = False,
        decision_backends: tuple[DecisionBackend, ...] = ("decisions", "logprobs"),
        options: OpenAIOptions | None = None,
    ) -> None:
        if not name:
            raise ConfigError("model name is empty", name="model")
        unknown = [b for b in decision_backends if b not in DECISION_BACKENDS]
        if unknown or not decision_backends:
            raise ConfigError(
                f"decision_backends: {unknown[0] if unknown else 'none'!r} is not a decision "
                f"backend; known: {', '.join(DECISION_BACKENDS)}",
                name="decision_backends",
            )
        self.name = name
        self.decision_backends = decision_backends
        """How a judge may ask this model for probabilities, best first."""
        self.api = api_of(api)
        self.store = store
        self.options = options or OpenAIOptions()
        if self.options.background and not (self.api == "responses" and store):
            raise ConfigError(
                "background mode needs the Responses API with store=True (the server keeps "
                "the response it generates alone)",
                name="background",
            )
        """What every call sends besides its request (see :class:`OpenAIOptions`)."""
        self._sent = SentOptions(self.options)
        self._tool_forms: tuple[list[dict[str, Any]], list[JSONObject]] | None = None
        self.structured_mode: StructuredMode | None = structured_mode_of(structured_mode)
        if client is None:
            key = api_key or os.environ.get("OPENAI_API_KEY")
            url = base_url or os.environ.get("OPENAI_BASE_URL")
            if key is None and url is None:
                raise ConfigError(
                    f"model {name!r} needs OPENAI_API_KEY (or OPENAI_BASE_URL for a local "
                    "server); pass --model scripted to run offline",
                    name="OPENAI_API_KEY",
                )
            self._settings: dict[str, Any] = {
                "api_key": key or "not-needed",
                "base_url": url,
                "timeout": timeout,
                "max_retries": max_retries,
                **(client_options or {}),
            }
        else:
            self._settings = {}
        self._injected = client
        # Built on first use (see `client`), once per process inside `shared_clients()`.
        self._client: openai.AsyncOpenAI | None = None
        self._pooled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._endpoint: tuple[str, str] | None = None
        self._retry_split: (
            tuple[openai.AsyncOpenAI, openai.AsyncOpenAI, openai.AsyncOpenAI] | None
        ) = None
        self.structured_modes: dict[tuple[str, str], StructuredMode] = {}
        self.token_limits: dict[tuple[str, str], str] = {}
        """Per endpoint, the parameter an output-token limit goes out as when it is not
        ``max_completion_tokens``: ``max_tokens`` once the server answered past it."""

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The SDK client for the running event loop, built on first use.

        A connection pool belongs to the loop that opened it and ``asyncio.run`` closes
        its loop, so a client this model built itself is rebuilt (same settings) when
        used from a new loop; an injected client is the caller's to manage. Inside
        :func:`~loopwise.models.clients.shared_clients` (a worker), every model with these
        settings uses one client, built once.
        """
        if self._injected is not None:
            return self._injected
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if self._client is None or (loop is not None and self._loop not in (None, loop)):
            key = json.dumps(self._settings, sort_keys=True, default=repr)
            self._client, self._pooled = pooled(key, self._build)
            self._loop = loop
        elif self._loop is None:
            self._loop = loop
        return self._client

    def _build(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(**self._settings)

    @property
    def endpoint(self) -> tuple[str, str]:
        """``(base_url, model)``: the key under which structured modes are remembered."""
        # base_url and name never change for a model, and str() of an httpx URL is not free.
        if self._endpoint is None:
            url = str(self.client.base_url)
            # The two APIs of one server may accept different rungs: each is remembered.
            where = url.rstrip("/") + "/responses" if self.api == "responses" else url
            self._endpoint = (where, self.name)
        return self._endpoint

    @property
    def speaks(self) -> JSONObject:
        """The API and store setting a run records (and its resume speaks again)."""
        return {"api": self.api, "api_store": self.store}

    async def aclose(self) -> None:
        """Close the client's pooled connections; call it in the event loop that used them
        (a connection pool belongs to one loop, and ``asyncio.run`` closes its loop).

        Builds nothing: a model used again after it gets a new client on first use. A
        client shared through :func:`~loopwise.models.clients.shared_clients` stays open
        for the block's other runs (the block closes it)."""
        if self._injected is not None:
            await self._injected.close()
            return
        client, pooled_here = self._client, self._pooled
        self._client, self._pooled, self._loop = None, False, None
        if client is not None and not pooled_here:
            await client.close()

    async def complete(self, request: ModelRequest) -> Turn:
        """One Chat Completions call; SDK errors become :class:`ModelAPIError`.

        A request that carries a structured-output feature (a ``response_format``, a
        forced ``tool_choice``) is sent once without SDK retries, so a server that
        rejects the feature (with whatever status: 400, 422, 500, 501) costs one call
        and raises :class:`ResponseFormatRejected`; any other retryable failure of that
        first try is retried by the SDK as usual, with one retry fewer.
        """
        if request.decision is not None:
            return await _decide(self.client, self.name, request)
        own_limit = request.max_output_tokens is None and self.options.max_output_tokens
        if own_limit:
            request = replace(request, max_output_tokens=own_limit)
        turn = await self._once(request)
        more = self.options.retry_cut_off
        if own_limit and more is not None and turn.finish_reason == "length":
            # Cut off at the limit set here: the same call once more, with more room.
            again = await self._once(replace(request, max_output_tokens=more))
            return _spent_too(again, turn)
        return turn

    async def _once(self, request: ModelRequest) -> Turn:
        if self.api == "responses":
            return await self._respond(request)
        turn = await self._send(self._chat_params(request), request, _create)
        limit = request.max_output_tokens
        if limit is not None and turn.output_tokens > limit:
            # llama-cpp-python's server reads only max_tokens: asked for one token as
            # max_completion_tokens it answered 73 (two minutes on 2 cores). Its next
            # calls say max_tokens, which OpenAI refuses beside max_completion_tokens.
            self.token_limits[self.endpoint] = "max_tokens"
        return turn

    def _sent_options(self, request: ModelRequest) -> JSONObject:
        return self._sent.of(request, self.endpoint[0])

    def _chat_params(self, request: ModelRequest) -> dict[str, Any]:
        limit = self.token_limits.get(self.endpoint, "max_completion_tokens")
        return chat_body(request, self.name, self._sent_options(request), limit)

    def responses_params(self, request: ModelRequest, *, chained: bool = True) -> dict[str, Any]:
        """``request`` as the body ``client.responses.create(**body)`` sends, keys in the
        order it sends them (the same bytes on the wire).

        With ``store=True`` it chains to the last turn the server stored and sends only
        what came after it; with no stored turn it sends the whole transcript, reasoning
        items included, and ``chained=False`` (the server refused the chain) too, but for
        reasoning items without their encrypted content (they were the server's).
        """
        return self._responses_body(request, chained=chained)[0]

    def _responses_body(
        self, request: ModelRequest, *, chained: bool = True
    ) -> tuple[dict[str, Any], str | None]:
        tools = self._tools_as_responses(request.tools) if request.tools else None
        sent = self._sent_options(request)
        return responses_body(request, self.name, self.store, tools, sent, chained=chained)

    async def _respond(self, request: ModelRequest) -> Turn:
        """One Responses call; a chain the server refused is sent again whole.

        A stored response expires, is deleted, or lives in another project or region: the
        server answers ``previous_response_id`` with a 404 (or a 400 naming it). loopwise
        holds the whole transcript (reasoning included, encrypted), so it sends that
        instead of failing, and says so in :attr:`Turn.resent`.
        """
        params, whole = self._responses_body(request)
        create: _Create = _create_response
        if self.options.background:
            create = partial(_create_response, poll=self.options.poll_seconds)
        try:
            turn = await self._send(params, request, create)
        except ModelAPIError as e:
            previous = params.get("previous_response_id")
            if previous is None or not chain_refused(e):
                raise
            params, _ = self._responses_body(request, chained=False)
            turn = await self._send(params, request, create)
            whole = f"the server refused previous_response_id {previous!r} (HTTP {e.status_code})"
        turn.stored = self.store if turn.stored is None else turn.stored
        turn.resent = whole
        return turn

    def _tools_as_responses(self, tools: list[dict[str, Any]]) -> list[JSONObject]:
        """``tools`` in Responses form; an agent sends one list every turn, converted once."""
        known = self._tool_forms
        if known is None or known[0] is not tools:
            known = self._tool_forms = (tools, as_tools(tools))
        return known[1]

    async def _send(self, params: dict[str, Any], request: ModelRequest, create: _Create) -> Turn:
        client = self.client
        if asks_structured(request) and client.max_retries > 0:
            first, rest = self._split_retries(client)
            try:
                return await create(first, params, request, self.name)
            except ModelAPIError as e:
                if isinstance(e, ResponseFormatRejected) or not sdk_retries(e.__cause__):
                    raise
                client = rest
        return await create(client, params, request, self.name)

    def _split_retries(
        self, client: openai.AsyncOpenAI
    ) -> tuple[openai.AsyncOpenAI, openai.AsyncOpenAI]:
        """``client`` without retries, and with one retry fewer (copies made once per client)."""
        if self._retry_split is None or self._retry_split[0] is not client:
            self._retry_split = (
                client,
                client.with_options(max_retries=0),
                client.with_options(max_retries=client.max_retries - 1),
            )
        return self._retry_split[1], self._retry_split[2]


def _spent_too(turn: Turn, earlier: Turn) -> Turn:
    """``turn`` counting the tokens of the ``earlier`` call it replaced (both were billed)."""
    turn.input_tokens += earlier.input_tokens
    turn.output_tokens += earlier.output_tokens
    turn.reasoning_tokens += earlier.reasoning_tokens
    turn.cached_tokens += earlier.cached_tokens
    return turn


_Chunk = TypeVar("_Chunk")

_Create = Callable[[openai.AsyncOpenAI, dict[str, Any], ModelRequest, str], Awaitable[Turn]]


async def _create(
    client: openai.AsyncOpenAI, params: dict[str, Any], request: ModelRequest, name: str
) -> Turn:
    try:
        if request.on_text is not None:
            completion = await _streamed(client, params, request.on_text)
        else:
            completion = await _posted(client, params)
    except openai.OpenAIError as e:
        raise map_error(e, request) from e
    except json.JSONDecodeError as e:  # a 2xx body that is not JSON: the SDK lets it through
        raise ModelAPIError(f"model API returned malformed JSON: {e}") from e
    return chat_turn(completion, name)


async def _create_response(
    client: openai.AsyncOpenAI,
    params: dict[str, Any],
    request: ModelRequest,
    name: str,
    poll: float | None = None,
) -> Turn:
    try:
        if poll is not None:  # background mode: posted, then polled until done
            response = await background_response(client, params, poll)
        elif request.on_text is not None:
            response = await _streamed_response(client, params, request.on_text)
        else:
            # responses.create() without its parameter transform, as _posted explains.
            options: openai.RequestOptions = {"security": {"bearer_auth": True}}
            response = await client.post(
                "/responses", cast_to=Response, body=params, options=options
            )
    except openai.OpenAIError as e:
        raise map_error(e, request) from e
    except json.JSONDecodeError as e:
        raise ModelAPIError(f"model API returned malformed JSON: {e}") from e
    return response_turn(response, name)


async def _streamed_response(
    client: openai.AsyncOpenAI, params: dict[str, Any], on_text: Callable[[str], None]
) -> Response:
    """A streamed Responses call: ``response.output_text.delta`` events go to ``on_text``,
    and the final event's response (its items complete) is the turn."""
    events = ResponseEvents(on_text)
    stream = await client.responses.create(**params, stream=True)
    async with stream:
        async for event in _chunks(stream):
            events.handle(event)
    return events.response()


async def _posted(client: openai.AsyncOpenAI, params: dict[str, Any]) -> ChatCompletion:
    """``chat.completions.create(**params)`` without the SDK's parameter transform.

    The port's messages and tools are already in wire form, and the transform walks the
    whole transcript on every call, so a long run paid more per call as it grew. The
    request goes through the client's own ``post`` (what ``create`` calls): same bytes on
    the wire (a test compares them), the client's retries, timeouts, auth and typed
    errors, and the answer parsed into a ``ChatCompletion`` as ``create`` parses it.
    """
    options: openai.RequestOptions = {"security": {"bearer_auth": True}}  # as create() does
    return await client.post(
        "/chat/completions", cast_to=ChatCompletion, body=params, options=options
    )


async def _streamed(
    client: openai.AsyncOpenAI, params: dict[str, Any], on_text: Callable[[str], None]
) -> ChatCompletion:
    """A streamed call (``stream=True``): each text delta goes to ``on_text`` as it arrives,
    and the SDK's own accumulator assembles the chunks (tool calls split across them
    included) into the completion a plain call returns, so the turn is the same."""
    state = ChatCompletionStreamState()
    finished = False
    stream = await client.chat.completions.create(
        **params, stream=True, stream_options={"include_usage": True}
    )
    async with stream:
        async for chunk in _chunks(stream):
            state.handle_chunk(chunk)
            for choice in chunk.choices:
                if choice.index == 0:
                    finished = finished or choice.finish_reason is not None
                    if choice.delta.content:
                        on_text(choice.delta.content)
    if not finished:
        # A cut-off stream must not pass for a short answer.
        raise ModelAPIError("the model's stream ended before its answer did (no finish reason)")
    return state.get_final_completion()


async def _chunks(stream: AsyncIterable[_Chunk]) -> AsyncIterator[_Chunk]:
    """The stream's chunks; a transport error past the SDK's own mapping (the connection
    broke mid-stream, a chunk that is not JSON) becomes :class:`ModelAPIError`."""
    chunks = aiter(stream)
    while True:
        try:
            chunk = await anext(chunks)
        except StopAsyncIteration:
            return
        except openai.OpenAIError:
            raise
        except Exception as e:
            raise ModelAPIError(f"model API stream broke off: {type(e).__name__}: {e}") from e
        yield chunk


async def _decide(client: openai.AsyncOpenAI, name: str, request: ModelRequest) -> Turn:
    """One Decisions API call (what ``client.decisions.create`` sends); a server without the route
    raises :class:`DecisionsUnsupported`, other failures as every call does."""
    body = request.decision or {}
    try:
        # decisions.create() without its parameter transform, as _posted explains: the
        # same body (model, input, questions) through the client's own post.
        options: openai.RequestOptions = {"security": {"bearer_auth": True}}
        params = {"model": name, "input": body["input"], "questions": body["questions"]}
        decided = await client.post("/decisions", cast_to=Decision, body=params, options=options)
    except openai.APIStatusError as e:
        if e.status_code in (404, 405, 501):
            raise DecisionsUnsupported(
                f"the server has no Decisions API (HTTP {e.status_code} on /decisions)",
                status_code=e.status_code,
                body=e.response.text,
            ) from e
        raise map_error(e, request) from e
    except openai.OpenAIError as e:
        raise map_error(e, request) from e
    except json.JSONDecodeError as e:
        raise ModelAPIError(f"model API returned malformed JSON: {e}") from e
    usage = decided.usage
    return Turn(
        decision=[answer.model_dump(mode="json") for answer in decided.answers],
        input_tokens=usage.input_tokens if usage else 0,
        output_tokens=usage.output_tokens if usage else 0,
        model=decided.model or name,
    )


def structured_mode_of(value: str | None) -> StructuredMode | None:
    """``value``, else ``LOOPWISE_STRUCTURED_MODE``, checked against the ladder's rungs.

    Raises :class:`ConfigError` naming the setting and the known modes.
    """
    chosen = value or os.environ.get("LOOPWISE_STRUCTURED_MODE") or None
    if chosen is None:
        return None
    for mode in STRUCTURED_MODES:
        if chosen == mode:
            return mode
    setting = "structured_mode" if value else "LOOPWISE_STRUCTURED_MODE"
    raise ConfigError(
        f"{setting}: unknown structured-output mode {chosen!r}; "
        f"known (strongest first): {', '.join(STRUCTURED_MODES)}",
        name=setting,
    )


def api_of(value: str | None) -> str:
    """``value``, else ``LOOPWISE_API``, else ``chat``, checked against :data:`APIS`.

    Raises :class:`ConfigError` naming the setting and the known APIs.
    """
    chosen = value or os.environ.get("LOOPWISE_API") or "chat"
    if chosen in APIS:
        return chosen
    setting = "api" if value else "LOOPWISE_API"
    raise ConfigError(f"{setting}: unknown API {chosen!r}; known: {', '.join(APIS)}", name=setting)


def resolve_model(
    name: str | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    structured_mode: str | None = None,
    api: str | None = None,
    store: bool = False,
    options: OpenAIOptions | None = None,
) -> Model:
    """The model named by ``name`` or ``LOOPWISE_MODEL``; ``"scripted"`` is the offline one.

    ``structured_mode`` pins an OpenAI model's structured-output rung, ``api`` picks its
    API, ``store`` its Responses store setting and ``options`` its call options (see
    :class:`OpenAIModel`); the first two are checked even for the scripted model, so
    a mistyped setting fails offline too. Raises :class:`ModelNotConfigured` when neither
    names a model: nothing falls back silently to a fake.
    """
    chosen = name or os.environ.get("LOOPWISE_MODEL")
    if not chosen:
        raise ModelNotConfigured()
    if chosen == "scripted":
        api_of(api)
        return ScriptedModel()
    return OpenAIModel(
        chosen,
        api_key=api_key,
        base_url=base_url,
        structured_mode=structured_mode,
        api=api,
        store=store,
        options=options,
    )
