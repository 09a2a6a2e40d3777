"""What every transport of the inbox checks and sends, written once.

``loopwise serve``'s standard-library server (:mod:`loopwise.serve.app`) and the inbox a
team mounts in its own ASGI or WSGI app (:mod:`loopwise.serve.mounted`) answer through
:class:`~loopwise.serve.app.Inbox`; before it they refuse the same requests here (another
method, a ``Host`` not of this inbox, a POST from another origin, a form too large) and
after it they send the same headers (the Content-Security-Policy, ``nosniff``, the CSRF
cookie, ``no-store``): :func:`refused`, :func:`body_length`, :func:`csrf_cookie`,
:func:`form_fields`, :func:`headers`.
"""

from __future__ import annotations

import html
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qs, urlsplit

from loopwise.errors import LoopwiseError

__all__ = [
    "COOKIE",
    "CSP",
    "MAX_BODY",
    "Answer",
    "body_length",
    "csrf_cookie",
    "failure",
    "form_fields",
    "headers",
    "host_name",
    "is_loopback",
    "plain",
    "refused",
]

CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
"""The Content-Security-Policy of every answer."""

COOKIE = "loopwise_csrf"
"""The per-browser cookie the forms' CSRF token is made from."""

MAX_BODY = 256 * 1024
"""The largest form taken (a bigger one is refused with 413, unread)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What the inbox answers, whatever carries it."""

    status: int
    body: str
    content_type: str = "text/html; charset=utf-8"
    location: str | None = None
    cookie: str | None = None


def plain(text: str) -> str:
    """A page of one escaped line (a refusal, an error)."""
    return (
        "<!doctype html><meta charset='utf-8'><title>loopwise</title>"
        f"<p>{html.escape(text, quote=True)}</p>"
    )


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` stays on this machine (``127.0.0.0/8``, ``::1``)."""
    try:
        return host.lower() == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port, lowercased (``[::1]:80`` → ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def refused(
    method: str, header: Callable[[str], str | None], allowed: frozenset[str]
) -> Answer | None:
    """Why a request is refused before the inbox reads it, or ``None``.

    ``header(name)`` gives a request header. Only GET and POST are answered (405); the
    ``Host`` must be a loopback name or one of ``allowed`` (421: a page cannot reach the
    inbox through DNS rebinding, whose requests carry the attacker's name); a POST that
    says where it comes from (``Origin``) must come from this inbox's own origin (403).
    """
    if method not in {"GET", "POST"}:
        return Answer(405, plain("method not allowed"))
    host = host_name(header("Host") or "")
    if not host or (host not in allowed and not is_loopback(host)):
        return Answer(421, plain("this server does not answer to that name (Host)"))
    origin = header("Origin")
    if method == "POST" and origin is not None and urlsplit(origin).netloc != header("Host"):
        return Answer(403, plain("a form from another site cannot decide here"))
    return None


def body_length(header: str | None) -> int | Answer:
    """The bytes a form's ``Content-Length`` announces, or why the form is refused
    unread (not a size: 400; over :data:`MAX_BODY`: 413)."""
    try:
        length = int(header or 0)
    except ValueError:
        length = -1
    if length < 0:  # read(-1) would read until the client closes
        return Answer(400, plain("the form's Content-Length is not a size"))
    if length > MAX_BODY:
        return Answer(413, plain("the form is too large"))
    return length


def form_fields(raw: bytes) -> dict[str, str]:
    """A URL-encoded form's fields (the first value of each; blank ones kept)."""
    text = raw.decode("utf-8", "replace")
    return {k: v[0] for k, v in parse_qs(text, keep_blank_values=True).items()}


def csrf_cookie(header: str | None) -> str | None:
    """The CSRF cookie in a ``Cookie`` header, if the browser sent one."""
    try:
        jar = SimpleCookie(header or "")
    except CookieError:
        return None
    morsel = jar.get(COOKIE)
    return morsel.value if morsel is not None and morsel.value else None


def failure(e: Exception) -> Answer:
    """The answer to a request the inbox failed on: a page that says why, never a reset
    connection."""
    if isinstance(e, LoopwiseError):
        return Answer(500, plain(f"the store could not be read: {e}"))
    return Answer(500, plain(f"the inbox failed: {type(e).__name__}: {e}"))


def headers(
    answer: Answer, *, length: int, cookie_path: str = "/", secure: bool = False
) -> list[tuple[str, str]]:
    """The headers of ``answer`` (its body ``length`` bytes long): with the CSP, ``nosniff``,
    ``no-store`` and, when it sets one, the CSRF cookie (``HttpOnly``, ``SameSite=Strict``,
    under ``cookie_path``; ``Secure`` when served over HTTPS)."""
    sent = [
        ("Content-Type", answer.content_type),
        ("Content-Length", str(length)),
        ("Content-Security-Policy", CSP),
        ("X-Content-Type-Options", "nosniff"),
        # same-origin, not no-referrer: under no-referrer a browser sends `Origin: null`
        # with the form, which the origin check must refuse.
        ("Referrer-Policy", "same-origin"),
        ("Cache-Control", "no-store"),
    ]
    if answer.location:
        sent.append(("Location", answer.location))
    if answer.cookie:
        flags = f"Path={cookie_path}; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")
        sent.append(("Set-Cookie", f"{COOKIE}={answer.cookie}; {flags}"))
    return sent
