"""The approvals inbox as an application a team mounts in its own web app.

:func:`asgi_inbox` is an ASGI application (FastAPI, Starlette, Django's ASGI, Quart, any
ASGI server), :func:`wsgi_inbox` a WSGI one (Flask, Django, any WSGI server). Mounted under
a prefix (``app.mount("/approvals", asgi_inbox(store, decider=...))``), it serves the pages
of ``loopwise serve`` — the inbox, a run, the runs list — with every link and form under
that prefix (ASGI ``root_path``, WSGI ``SCRIPT_NAME``), and the same protections: the
``Host`` and ``Origin`` checks, the CSRF token, the strict Content-Security-Policy
(:mod:`loopwise.serve.guards`, shared with ``loopwise serve``).

Who decides comes from the host app: ``decider(request)`` — the ASGI scope or the WSGI
environ, after the host's own middleware ran (its session, its signed-in user) — returns
the signed-in user's name, or ``None``: then every request is refused with 403 and nothing
is read or recorded. The name is recorded as the decider and checked as a typed one is
(:func:`loopwise.core.names.shown_name_problem`).

Neither needs a web framework: both are the plain protocols, written here. The ASGI app
reads the store in worker threads (the store is synchronous), so its event loop never
waits on the database. It records decisions only: a ``loopwise worker`` on the same store
continues each run once its approvals are decided (the pages say so).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import os
from collections.abc import Awaitable, Callable, Iterable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Required, TypedDict
from urllib.parse import parse_qs, quote

from loopwise.errors import ConfigError
from loopwise.serve import guards
from loopwise.serve.app import Inbox, ServeSettings, allowed_hosts
from loopwise.serve.guards import Answer
from loopwise.store.base import RunStore
from loopwise.store.open import shared_store

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

__all__ = ["asgi_inbox", "wsgi_inbox"]

Decider = Callable[[Any], str | Awaitable[str | None] | None]
"""Who decides, from the request (the ASGI scope or the WSGI environ): a name or ``None``."""


class _Scope(TypedDict, total=False):
    """The keys of an ASGI connection scope the inbox reads (an ``http`` or ``lifespan``
    one; any other type is refused)."""

    type: Required[str]
    method: str
    path: str
    root_path: str
    query_string: bytes
    headers: Iterable[tuple[bytes, bytes]]
    scheme: str


class _Message(TypedDict, total=False):
    """An ASGI event received or sent: its ``type`` and the keys the inbox reads or writes."""

    type: Required[str]
    body: bytes
    more_body: bool
    status: int
    headers: list[tuple[bytes, bytes]]
    code: int


_SIGNED_IN = "your app signed in"
_NO_USER = "sign in to decide approvals: this inbox takes who decides from the app's sign-in"


class _Mounted:
    """What the ASGI and the WSGI app share: the inbox, and one request answered."""

    def __init__(
        self,
        store: RunStore | str | os.PathLike[str] | None,
        decider: Decider,
        hosts: Iterable[str],
        secret: str | bytes | None,
    ) -> None:
        if not callable(decider):
            raise ConfigError(
                f"decider must be a callable of the request that returns the signed-in "
                f"user's name, not {decider!r}",
                name="decider",
            )
        settings = ServeSettings(allowed_hosts=tuple(hosts))
        self.inbox = Inbox(_opened(store), settings, secret=_key(secret), user_from=_SIGNED_IN)
        self.decider = decider
        self.allowed = allowed_hosts(settings)

    def answer(
        self,
        method: str,
        path: str,
        *,
        query: str,
        header: Callable[[str], str | None],
        user: str | None,
        root: str,
        body: bytes = b"",
    ) -> Answer:
        """The answer to one request whose checks passed and whose user is known."""
        if not user:
            return Answer(403, guards.plain(_NO_USER))
        cookie = guards.csrf_cookie(header("Cookie"))
        try:
            if method == "GET":
                return self.inbox.get(path, parse_qs(query), cookie, user, root)
            return self.inbox.post(path, guards.form_fields(body), cookie, user, root)
        except Exception as e:  # an answer, never a dropped request
            return guards.failure(e)


def _opened(store: RunStore | str | os.PathLike[str] | None) -> RunStore:
    if store is None or isinstance(store, str | os.PathLike):
        return shared_store(store)  # once per process, closed at exit
    return store


def _key(secret: str | bytes | None) -> bytes | None:
    """The CSRF key from the app's secret (its own use of it: not the secret itself)."""
    if secret is None:
        return None
    raw = secret.encode() if isinstance(secret, str) else secret
    if not raw:
        raise ConfigError(
            "secret is empty: pass the app's secret, or None for one of this process's own",
            name="secret",
        )
    return hashlib.sha256(b"loopwise inbox csrf\0" + raw).digest()


def _below(path: str, root: str) -> str:
    """``path`` below the mount (``/approvals/runs/x`` under ``/approvals`` → ``/runs/x``),
    URL-quoted again as the inbox reads it; a path that does not start with ``root`` (a
    server or proxy that stripped it) is already below it."""
    if root and (path == root or path.startswith(root + "/")):
        path = path[len(root) :]
    return quote(path or "/", safe="/")


def _reply(answer: Answer, root: str, secure: bool) -> tuple[int, list[tuple[str, str]], bytes]:
    body = answer.body.encode()
    sent = guards.headers(answer, length=len(body), cookie_path=root or "/", secure=secure)
    return answer.status, sent, body


class _AsgiInbox:
    """The inbox as an ASGI 3 application."""

    def __init__(self, mounted: _Mounted) -> None:
        self._mounted = mounted

    async def __call__(
        self,
        scope: _Scope,
        receive: Callable[[], Awaitable[_Message]],
        send: Callable[[_Message], Awaitable[None]],
    ) -> None:
        if scope["type"] == "lifespan":  # served on its own (uvicorn module:inbox)
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        found: dict[str, str] = {}
        for key, value in scope["headers"]:
            name, text = key.decode("latin-1").lower(), value.decode("latin-1")
            # HTTP/2 may send the cookies as several headers: one Cookie header again.
            found[name] = f"{found[name]}; {text}" if name == "cookie" and name in found else text

        def header(name: str) -> str | None:
            return found.get(name.lower())

        method = scope["method"]
        root = scope.get("root_path", "")
        secure = scope.get("scheme") == "https"
        answer = guards.refused(method, header, self._mounted.allowed)
        if answer is None:
            answer = await self._answer(scope, receive, method, header)
        await _send(send, *_reply(answer, quote(root, safe="/"), secure))

    async def _answer(
        self,
        scope: _Scope,
        receive: Callable[[], Awaitable[_Message]],
        method: str,
        header: Callable[[str], str | None],
    ) -> Answer:
        try:
            user = await _user(self._mounted.decider, scope)
        except Exception as e:  # the host's code: a page that says so
            return guards.failure(e)
        body = b""
        if user and method == "POST":
            read = await _body(receive, header("Content-Length"))
            if isinstance(read, Answer):
                return read
            body = read
        root = scope.get("root_path", "")
        return await asyncio.to_thread(
            functools.partial(
                self._mounted.answer,
                method,
                _below(scope["path"], root),
                query=scope.get("query_string", b"").decode("latin-1"),
                header=header,
                user=user,
                root=quote(root, safe="/"),
                body=body,
            )
        )


async def _user(decider: Decider, request: object) -> str | None:
    """Who the host app says decides: a coroutine function is awaited, a plain function
    runs in a worker thread (it may read a session store)."""
    if inspect.iscoroutinefunction(decider):
        found = await decider(request)
    else:
        found = await asyncio.to_thread(decider, request)
        if inspect.isawaitable(found):
            found = await found
    if found is not None and not isinstance(found, str):
        raise TypeError(f"the decider returned {type(found).__name__}, not a name (str) or None")
    return found


async def _body(receive: Callable[[], Awaitable[_Message]], length: str | None) -> bytes | Answer:
    """The request's body, up to :data:`~loopwise.serve.guards.MAX_BODY` (a chunked one
    too), or why it is refused."""
    announced = guards.body_length(length)
    if isinstance(announced, Answer):
        return announced
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return Answer(400, guards.plain("the client left before sending the form"))
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > guards.MAX_BODY:
            return Answer(413, guards.plain("the form is too large"))
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _send(
    send: Callable[[_Message], Awaitable[None]],
    status: int,
    headers: list[tuple[str, str]],
    body: bytes,
) -> None:
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(
    receive: Callable[[], Awaitable[_Message]],
    send: Callable[[_Message], Awaitable[None]],
) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


class _WsgiInbox:
    """The inbox as a WSGI (PEP 3333) application."""

    def __init__(self, mounted: _Mounted) -> None:
        self._mounted = mounted

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> list[bytes]:
        def header(name: str) -> str | None:
            key = name.upper().replace("-", "_")
            found = environ.get(key if key in {"CONTENT_LENGTH", "CONTENT_TYPE"} else f"HTTP_{key}")
            return str(found) if found is not None else None

        # PEP 3333: paths are the request's bytes read as Latin-1.
        root = quote(str(environ.get("SCRIPT_NAME", "")).encode("latin-1"), safe="/")
        path = str(environ.get("PATH_INFO", "")).encode("latin-1").decode("utf-8", "replace")
        method = str(environ["REQUEST_METHOD"])
        answer = guards.refused(method, header, self._mounted.allowed)
        if answer is None:
            answer = self._answer(environ, method, path, root, header)
        status, headers, body = _reply(answer, root, environ.get("wsgi.url_scheme") == "https")
        start_response(f"{status} {HTTPStatus(status).phrase}", headers)
        return [body]

    def _answer(
        self,
        environ: WSGIEnvironment,
        method: str,
        path: str,
        root: str,
        header: Callable[[str], str | None],
    ) -> Answer:
        try:
            user = self._mounted.decider(environ)
            if user is not None and not isinstance(user, str):
                raise TypeError(
                    f"the decider returned {type(user).__name__}, not a name (str) or None"
                )
        except Exception as e:  # the host's code: a page that says so
            return guards.failure(e)
        body = b""
        if user and method == "POST":
            length = guards.body_length(header("Content-Length"))
            if isinstance(length, Answer):
                return length
            body = environ["wsgi.input"].read(length)
        return self._mounted.answer(
            method,
            quote(path or "/", safe="/"),
            query=str(environ.get("QUERY_STRING", "")),
            header=header,
            user=user,
            root=root,
            body=body,
        )


def asgi_inbox(
    store: RunStore | str | os.PathLike[str] | None,
    *,
    decider: Decider,
    allowed_hosts: Iterable[str] = (),
    secret: str | bytes | None = None,
) -> Callable[..., Awaitable[None]]:
    """The approvals inbox as an ASGI application, to mount in a FastAPI/Starlette app:
    ``app.mount("/approvals", loopwise.asgi_inbox(store, decider=signed_in))``.

    ``store`` is a store object or a path/URL (``None``: ``$LOOPWISE_STORE`` or
    ``.loopwise/runs.db``), opened once per process. ``decider(scope)`` (a function or a
    coroutine function) returns the signed-in user's name, or ``None`` to refuse the
    request (403). ``allowed_hosts`` are the names people reach the app by (``Host``
    headers answered besides loopback ones; any other gets 421). ``secret`` signs the
    forms' CSRF tokens: pass the app's secret when several processes serve the app (each
    process otherwise signs with its own, and a form posted to another is refused).
    """
    return _AsgiInbox(_Mounted(store, decider, allowed_hosts, secret))


def wsgi_inbox(
    store: RunStore | str | os.PathLike[str] | None,
    *,
    decider: Callable[[WSGIEnvironment], str | None],
    allowed_hosts: Iterable[str] = (),
    secret: str | bytes | None = None,
) -> WSGIApplication:
    """The approvals inbox as a WSGI application, to mount in a Flask/Django app (e.g.
    werkzeug's ``DispatcherMiddleware(app.wsgi_app, {"/approvals": inbox})``).

    As :func:`asgi_inbox`, with ``decider(environ)`` a plain function.
    """
    return _WsgiInbox(_Mounted(store, decider, allowed_hosts, secret))
