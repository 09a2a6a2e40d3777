"""A real Chat Completions server on 127.0.0.1 for integration tests and benchmarks.

:class:`FakeChatServer` listens on an ephemeral port and speaks just enough HTTP/1.1
(keep-alive, ``Content-Length`` and chunked bodies) for ``openai.AsyncOpenAI`` to talk to
it, so tests exercise the real client: its serialization, its retries, its error mapping.
It runs on its own asyncio loop in a background thread — one task per connection, no
thread per request — so a thousand concurrent connections are cheap.

Answers come from a :class:`~loopwise.models.scripted.ScriptedModel`: one given as it is
(a ``ScriptedAgent``, a target's ``offline_model``), or one made of the same script rules
(a list consumed in order, a function of the request, or none for offline auto answers).
A :class:`Fault` as a script entry injects a failure instead of an answer; ``reject``
makes the server refuse structured-output modes with a plain 400, and ``profile`` makes it
answer the way one real server does (:mod:`loopwise.testing._serverprofiles`: llama-cpp-python's
500 on ``json_schema`` and its demand for string ``content``, vLLM's tool-choice errors,
Ollama ignoring ``tool_choice``, LM Studio refusing ``json_object``...). Each HTTP request
consumes one entry, so an SDK retry after a fault takes the next one. A request with
``stream: true`` gets the same answer as server-sent events, its text and tool-call
arguments cut into pieces (the calls of one turn interleaved). The HTTP it speaks is
:mod:`loopwise.testing._fakehttp`'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import threading
import time
from collections.abc import Collection, Iterable
from types import TracebackType

from loopwise.core.jsontypes import JSONObject, JSONValue, json_object
from loopwise.errors import ConfigError
from loopwise.models.decided import decision_turn
from loopwise.models.openai import OpenAIModel
from loopwise.models.options import OpenAIOptions
from loopwise.models.port import ModelRequest, Turn
from loopwise.models.scripted import (
    Fault,
    Responder,
    ScriptAnswer,
    ScriptedModel,
    ScriptEntry,
    as_turn,
    auto_respond,
    pieces,
    priced,
    schema_of,
)
from loopwise.testing._fakehttp import error, http, json_body, media, objects, parse_head, read_body
from loopwise.testing._fakeresponses import FakeResponses, IssuedCallIds
from loopwise.testing._serverprofiles import (
    FEATURES,
    PROFILES,
    Rejection,
    ServerProfile,
    arguments_as_objects,
)

__all__ = ["FakeChatServer"]

REJECTABLE = FEATURES
"""What ``reject`` may name (see :data:`loopwise.testing._serverprofiles.FEATURES`)."""


class FakeChatServer:
    """A local Chat Completions server; see the module docstring.

    ``script`` is a :class:`~loopwise.models.scripted.ScriptedModel` script whose entries may
    also be :class:`Fault`; ``latency`` delays every answer; ``hold_until=N`` answers no
    chat request until N are in flight at once (a client's concurrency proven without
    timing: fewer than N concurrent requests time out); ``reject`` names request
    features to refuse with HTTP 400 (``json_schema``, ``json_object_schema``,
    ``json_object``, ``tool_choice``...); ``profile`` (a name in ``PROFILES`` or a
    :class:`ServerProfile`) reproduces one real server's quirks. Use it as a context
    manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self,
        script: ScriptedModel | Iterable[ScriptEntry] | Responder | None = None,
        *,
        latency: float = 0.0,
        hold_until: int = 0,
        reject: Collection[str] = (),
        profile: str | ServerProfile | None = None,
        decisions: bool = True,
        logprobs: bool = True,
        port: int = 0,
    ) -> None:
        unknown = sorted(set(reject) - REJECTABLE)
        if unknown:
            raise ConfigError(
                f"reject: unknown mode {unknown[0]!r}; known: {sorted(REJECTABLE)}", name="reject"
            )
        self.profile = _profile(profile, reject)
        self.responses = FakeResponses(reject=_expand(reject))
        """The Responses API endpoint (``/v1/responses``): the reasoning items it checked."""
        self.scripted: ScriptedModel = (
            script if isinstance(script, ScriptedModel) else ScriptedModel(script, name="")
        )
        """What answers: the scripted model given (a ``ScriptedAgent``, a scripted judge...),
        or one made of the list, function or ``None`` (auto answers) given."""
        self.latency = latency
        self.hold_until = hold_until
        self.decisions = decisions
        """Whether it serves the Decisions API (``POST /v1/decisions``); else 404."""
        self.logprobs = logprobs
        """Whether a completion asked for ``logprobs`` carries the turn's."""
        self._gathered = asyncio.Event()
        self.call_ids = IssuedCallIds()
        """The call ids this server gave out, and those requests named that it never did
        (``call_ids.foreign``: a client renamed them)."""
        self.requests: list[JSONObject] = []
        """Every chat request body received, parsed, in arrival order."""
        self.request_bytes: list[int] = []
        """The size on the wire of each of :attr:`requests` (its body, in bytes)."""
        self.errors: list[str] = []
        """Why the server answered 500 on its own (a script that ran out, a bad entry)."""
        self.connections = 0
        """Connections accepted so far (keep-alive means far fewer than requests)."""
        self.in_flight = 0
        """Chat requests being answered right now."""
        self.peak_in_flight = 0
        """The most chat requests ever answered at once (proves client concurrency)."""
        self.dead = False
        """Whether a ``Fault(crash=True)`` killed the server."""
        self.port = port
        """The port it listens on (``0`` until started: any free one, unless given)."""
        self._writers: set[asyncio.StreamWriter] = set()
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._startup_error: BaseException | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: what ``OPENAI_BASE_URL`` should be."""
        return f"http://127.0.0.1:{self.port}/v1"

    def model(
        self,
        name: str = "fake-model",
        *,
        max_retries: int = 0,
        timeout: float = 30.0,
        api: str | None = None,
        store: bool = False,
        options: OpenAIOptions | None = None,
        **client_options: object,
    ) -> OpenAIModel:
        """An :class:`~loopwise.models.openai.OpenAIModel` pointed at this server (no SDK retries by
        default, so failure tests stay fast). ``client_options`` go to
        ``openai.AsyncOpenAI`` (headers, ...). The model builds its own client, so it
        survives several ``loopwise.run`` calls (each its own event loop). ``api``,
        ``store`` and ``options`` are the model's (``api="responses"`` speaks to
        ``/v1/responses``)."""
        return OpenAIModel(
            name,
            api_key="fake-key",
            base_url=self.base_url,
            max_retries=max_retries,
            timeout=timeout,
            client_options=client_options,
            api=api,
            store=store,
            options=options,
        )

    def start(self) -> FakeChatServer:
        """Start serving in a background thread; returns once the port is bound."""
        if self._thread is not None:
            return self
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._main, args=(ready,), name="loopwise-fake-chat", daemon=True
        )
        self._thread.start()
        ready.wait()
        if self._startup_error is not None:
            self._thread.join()
            self._thread = None
            raise self._startup_error
        return self

    def stop(self) -> None:
        """Close every connection and stop the thread."""
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._thread = None

    def __enter__(self) -> FakeChatServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _main(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(self._serve, "127.0.0.1", self.port, backlog=4096)
            )
            self.port = self._server.sockets[0].getsockname()[1]
        except BaseException as e:  # surfaced by start() in the caller's thread
            self._startup_error = e
            loop.close()
            ready.set()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(self._shutdown())
        loop.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _crash(self) -> None:
        """Stop accepting connections and drop the open ones, as a dead process would."""
        self.dead = True
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: requests in order until the client closes (keep-alive)."""
        self.connections += 1
        if self.dead:
            writer.close()
            return
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method, path, headers = parse_head(head)
                body = await read_body(reader, headers)
                response = await self._respond(method, path, body)
                if response is None:
                    break
                writer.write(response)
                await writer.drain()
                if headers.get(b"connection", b"").lower() == b"close":
                    break
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        except asyncio.CancelledError:
            # Only stop() cancels; finishing normally keeps asyncio's connection callback
            # (which calls task.exception()) from logging a spurious error.
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _respond(self, method: bytes, path: bytes, body: bytes) -> bytes | None:
        route = path.rstrip(b"/")
        chat = route.endswith(b"/chat/completions")
        if method == b"POST" and (chat or route.endswith(b"/responses")):
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            try:
                if self.in_flight >= self.hold_until:
                    self._gathered.set()
                await self._gathered.wait()
                if self.latency:
                    await asyncio.sleep(self.latency)
                if chat:
                    return await self._chat(body)
                return await self.responses.answer(body, _Host(self), http)
            finally:
                self.in_flight -= 1
        held = self.responses.held(method.decode(), route.decode(), http)
        if held is not None:  # a background response polled or cancelled
            return held
        if method == b"POST" and path.rstrip(b"/").endswith(b"/decisions") and self.decisions:
            return await self._decide(body)
        if method == b"GET" and path.rstrip(b"/").endswith(b"/models"):
            listing = {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}
            return http(200, json.dumps(listing).encode())
        return error(404, f"no route {method.decode()} {path.decode()}")

    async def _chat(self, body: bytes) -> bytes | None:
        payload = json_body(body)
        if isinstance(payload, str):
            return error(400, payload)
        self.requests.append(payload)
        self.request_bytes.append(len(body))
        self.call_ids.check(_named_calls(payload.get("messages")))
        refusal = self.profile.rejection(payload)
        if refusal is not None:
            return http(refusal.status, json.dumps(refusal.body).encode())
        request = _to_request(self.profile.adapt(payload))
        try:
            entry = self.scripted.script_entry(request)
        except Exception as e:
            self.errors.append(f"{type(e).__name__}: {e}")
            return error(500, f"FakeChatServer script failed: {type(e).__name__}: {e}")
        if isinstance(entry, Fault):
            return await self._fault(entry, request, payload)
        return http(200, self._completion(entry, request, payload), media=media(payload))

    def _completion(
        self,
        entry: ScriptAnswer,
        request: ModelRequest,
        payload: JSONObject,
        *,
        empty: bool = False,
    ) -> bytes:
        turn: Turn = priced(as_turn(entry), request, "")
        for call in turn.tool_calls:
            self.call_ids.issue(call.id)
        # A response message always carries `content` and `refusal`, null when absent.
        message = {**turn.to_message(), "content": turn.text, "refusal": turn.refusal}
        choice: JSONObject = {"index": 0, "message": message, "finish_reason": turn.finish_reason}
        doc: JSONObject = {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": turn.model or str(payload.get("model", "fake-model")),
            "choices": [] if empty else [choice],
            # The tier it served on: what was asked (or what the script says it was).
            "service_tier": turn.service_tier or payload.get("service_tier") or "default",
            "usage": {
                "prompt_tokens": turn.input_tokens,
                "completion_tokens": turn.output_tokens,
                "total_tokens": turn.input_tokens + turn.output_tokens,
                "prompt_tokens_details": {"cached_tokens": turn.cached_tokens},
                "completion_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
            },
        }
        if payload.get("logprobs") and self.logprobs and turn.logprobs and not empty:
            choice["logprobs"] = _logprobs_doc(turn.logprobs)
        if self.profile.arguments_as_object:
            doc = arguments_as_objects(doc)
        if payload.get("stream"):
            return _event_stream(
                doc, usage=bool(json_object(payload.get("stream_options")).get("include_usage"))
            )
        return json.dumps(doc).encode()

    async def _decide(self, body: bytes) -> bytes | None:
        """``POST /v1/decisions``: the script's entry as a Decisions API answer."""
        payload = json_body(body)
        if isinstance(payload, str):
            return error(400, payload)
        self.requests.append(payload)
        request = _decision_request(payload)
        try:
            entry: object = self.scripted.script_entry(request)
        except Exception as e:
            self.errors.append(f"{type(e).__name__}: {e}")
            return error(500, f"FakeChatServer script failed: {type(e).__name__}: {e}")
        if isinstance(entry, Fault):
            if entry.status >= 400 or entry.disconnect or entry.crash or entry.body is not None:
                return await self._fault(entry, request, payload)
            entry = entry.answer
        turn = priced(decision_turn(entry, request), request, "")
        doc = {
            "answers": turn.decision or [],
            "model": turn.model or str(payload.get("model", "fake-model")),
            "usage": {
                "input_tokens": turn.input_tokens,
                "input_tokens_details": {"cache_write_tokens": 0, "cached_tokens": 0},
                "output_tokens": turn.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": turn.input_tokens + turn.output_tokens,
            },
        }
        return http(200, json.dumps(doc).encode())

    async def _fault(
        self, fault: Fault, request: ModelRequest, payload: JSONObject
    ) -> bytes | None:
        if fault.delay:
            await asyncio.sleep(fault.delay)
        if fault.crash:
            self._crash()
            return None
        if fault.disconnect:
            return None
        if fault.body is not None:
            raw = fault.body
            body = (
                raw
                if isinstance(raw, bytes)
                else (raw if isinstance(raw, str) else json.dumps(raw)).encode()
            )
            return http(fault.status, body, fault.headers)
        if fault.status >= 400:
            return error(
                fault.status, f"FakeChatServer fault: HTTP {fault.status}", headers=fault.headers
            )
        answer = fault.answer if fault.answer is not None else auto_respond(request)
        body = self._completion(answer, request, payload, empty=fault.empty_choices)
        if fault.truncated_json:
            body = body[: len(body) // 2]
        return http(fault.status, body, fault.headers, media=media(payload))


class _Host:
    """What the Responses endpoint uses of its server: the record, the script, a crash."""

    def __init__(self, server: FakeChatServer) -> None:
        self.requests = server.requests
        self.errors = server.errors
        self.call_ids = server.call_ids
        self.script_entry = server.scripted.script_entry
        self.crash = server._crash


def _profile(profile: str | ServerProfile | None, reject: Collection[str]) -> ServerProfile:
    """The profile to serve with: a named or given one, or plain 400s for ``reject``."""
    if isinstance(profile, ServerProfile):
        chosen = profile
    elif profile is not None:
        if profile not in PROFILES:
            raise ConfigError(
                f"profile: unknown server profile {profile!r}; known: {sorted(PROFILES)}",
                name="profile",
            )
        chosen = PROFILES[profile]
    else:
        chosen = ServerProfile(name="openai", source="OpenAI's Chat Completions API")
    if not reject:
        return chosen
    rejects = {**chosen.rejects, **{f: _plain_rejection(f) for f in _expand(reject)}}
    return dataclasses.replace(chosen, rejects=rejects)


def _expand(reject: Collection[str]) -> set[str]:
    # "tool_choice" has always meant any forced choice: a named function or "required".
    names = set(reject)
    return names | {"tool_choice_required"} if "tool_choice" in names else names


def _plain_rejection(feature: str) -> Rejection:
    """The 400 an OpenAI-like server sends for a feature it does not support."""
    if feature.startswith("tool_choice"):
        message = "Invalid parameter: this server does not support a forced 'tool_choice'."
        param = "tool_choice"
    elif feature == "strict":
        message, param = "Invalid parameter: 'strict' is not supported by this server.", "strict"
    else:
        kind = "json_object" if feature == "json_object_schema" else feature
        message = (
            f"Invalid parameter: 'response_format' of type '{kind}'"
            + (" with a 'schema'" if feature == "json_object_schema" else "")
            + " is not supported by this server."
        )
        param = "response_format"
    error: JSONObject = {
        "message": message,
        "type": "invalid_request_error",
        "param": param,
        "code": None,
    }
    return Rejection(status=400, body={"error": error})


def _named_calls(messages: object) -> list[object]:
    """The call ids a Chat Completions transcript names (its calls and tool results)."""
    named: list[object] = []
    for m in messages if isinstance(messages, list) else ():
        if not isinstance(m, dict):
            continue
        named += [c.get("id") for c in m.get("tool_calls") or () if isinstance(c, dict)]
        if m.get("role") == "tool":
            named.append(m.get("tool_call_id"))
    return named


def _to_request(payload: JSONObject) -> ModelRequest:
    """The request body as the :class:`ModelRequest` a script sees."""
    fmt, tools, choice = (payload.get(k) for k in ("response_format", "tools", "tool_choice"))
    temperature = payload.get("temperature")
    cap = payload.get("max_completion_tokens") or payload.get("max_tokens")
    request = ModelRequest(
        messages=objects(payload.get("messages")),
        tools=None if tools is None else objects(tools),
        tool_choice=choice if isinstance(choice, str | dict) else None,
        response_format=fmt if isinstance(fmt, dict) else None,
        temperature=temperature if isinstance(temperature, int | float) else None,
        max_output_tokens=cap if isinstance(cap, int) else None,
    )
    # The schema the scripted model would take from the same response_format.
    request.output_schema = schema_of(request)
    return request


def _decision_request(payload: JSONObject) -> ModelRequest:
    """A Decisions API body as the :class:`ModelRequest` a script sees (its ``input``
    messages as the transcript, the body itself as ``decision``)."""
    given = payload.get("input")
    if isinstance(given, str):
        messages: list[JSONObject] = [{"role": "user", "content": given}]
    else:
        messages = [
            {**m, "role": "system" if m.get("role") == "developer" else m.get("role")}
            for m in objects(given)
        ]
    body: JSONObject = {"input": given, "questions": payload.get("questions") or []}
    return ModelRequest(messages=messages, decision=body)


def _logprobs_doc(tokens: list[dict[str, float]]) -> JSONObject:
    """A turn's per-token alternatives as Chat Completions' ``choice.logprobs``."""
    content: list[JSONValue] = []
    for alternatives in tokens:
        ranked = sorted(alternatives.items(), key=lambda kv: -kv[1])
        top: list[JSONValue] = [{"token": t, "logprob": lp, "bytes": None} for t, lp in ranked]
        first = json_object(top[0]) if top else {"token": "", "logprob": 0.0, "bytes": None}
        content.append({**first, "top_logprobs": top})
    return {"content": content, "refusal": None}


def _event_stream(doc: JSONObject, *, usage: bool) -> bytes:
    """A completion as the server-sent events of ``stream=true``: the text in pieces, each
    tool call's id and name first and then its arguments in pieces, the calls of one turn
    interleaved (clients must reassemble them by index), the finish reason, the usage when
    ``stream_options.include_usage`` asked for it, then ``[DONE]``."""
    head: JSONObject = {
        "id": doc["id"],
        "object": "chat.completion.chunk",
        "created": doc["created"],
        "model": doc["model"],
        "service_tier": doc["service_tier"],
    }
    chunks: list[JSONObject] = []
    for choice in objects(doc["choices"]):
        chunks += [
            {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
            for delta in _deltas(json_object(choice["message"]))
        ]
        end: JSONObject = {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}
        chunks.append({**head, "choices": [end]})
    if usage:
        chunks.append({**head, "choices": [], "usage": doc["usage"]})
    events = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks]
    return ("".join(events) + "data: [DONE]\n\n").encode()


def _deltas(message: JSONObject) -> list[JSONObject]:
    deltas: list[JSONObject] = [{"role": "assistant"}]
    if message.get("content") is not None:
        deltas += [{"content": piece} for piece in pieces(str(message["content"]))]
    if message.get("refusal") is not None:
        deltas.append({"refusal": message["refusal"]})
    calls = objects(message.get("tool_calls"))
    for i, call in enumerate(calls):
        named: JSONObject = {"name": json_object(call["function"])["name"], "arguments": ""}
        deltas.append(
            {"tool_calls": [{"index": i, "id": call["id"], "type": "function", "function": named}]}
        )
    parts = [_argument_pieces(json_object(call["function"]).get("arguments")) for call in calls]
    for round_ in itertools.zip_longest(*parts):
        for i, piece in enumerate(round_):
            if piece is not None:
                deltas.append({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    return deltas


def _argument_pieces(arguments: object) -> list[str]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return pieces(text) if text else []
