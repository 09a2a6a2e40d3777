"""The approvals inbox mounted in a team's own app: a real FastAPI app with its own
sign-in (Starlette's session middleware) mounts ``loopwise.asgi_inbox`` under
``/approvals``; the approver's name is the signed-in user. Over HTTP (httpx's ASGI
transport, the app in this process) a signed-in person decides a pending approval, on
SQLite and on PostgreSQL; a request with no user is refused and records nothing; a
cross-site POST is refused; every link, form and redirect of the mounted pages carries
the prefix. The WSGI app is mounted the same way (httpx's WSGI transport with a
``SCRIPT_NAME``), with the user from a trusted header.

FastAPI, Starlette's session middleware (itsdangerous) are the dev extra's; httpx comes
with the openai SDK.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from html import unescape
from typing import Any
from urllib.parse import urlencode
from wsgiref.util import shift_path_info

import httpx2 as httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse
from starlette.middleware.sessions import SessionMiddleware

import loopwise
from loopwise import gates
from loopwise.store.open import open_store
from loopwise.testing import ScriptedModel, call, reply

HOST = "ops.example"
SECRET = "the app's own secret"


@loopwise.tool(effect="irreversible", gate=gates.human())
def refund(order_id: str, amount_cents: int) -> str:
    """Refund an order."""
    return f"refunded {amount_cents} on {order_id}"


def _respond(request: loopwise.ModelRequest) -> Any:
    if any(m["role"] == "tool" for m in request.messages):
        return reply("refunded")
    return call("refund", {"order_id": "O-7", "amount_cents": 4200}, id="c1")


DESK = loopwise.Agent(name="desk", tools=[refund])


def _paused(store: str | None = None) -> str:
    """A run paused at its refund, in ``store`` (``None``: ``$LOOPWISE_STORE``)."""
    where = loopwise.DEFAULT if store is None else store
    paused = loopwise.run(DESK, "refund O-7", model=ScriptedModel(_respond), store=where)
    assert paused.status == "awaiting_approval"
    return paused.run_id


def mounted_app(store: str | None, *, hosts: tuple[str, ...] = (HOST,)) -> FastAPI:
    """A team's app: its own sign-in (a session cookie), the inbox under /approvals."""
    app = FastAPI()
    app.add_middleware(SessionMiddleware, secret_key=SECRET)

    @app.get("/login")
    def login(request: Request, user: str) -> RedirectResponse:
        request.session["user"] = user  # (a real app checks a password or an SSO first)
        return RedirectResponse("/approvals/", status_code=303)

    def signed_in(scope: dict[str, Any]) -> str | None:
        user: str | None = Request(scope).session.get("user")
        return user

    inbox = loopwise.asgi_inbox(store, decider=signed_in, allowed_hosts=hosts, secret=SECRET)
    app.mount("/approvals", inbox)
    return app


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"http://{HOST}")


def _form(page: str) -> dict[str, str]:
    """The first decision form's hidden fields, as the browser would post them."""
    form = re.search(r"<form method='post' action='([^']*)' class='decide'>(.*?)</form>", page)
    assert form, page
    fields = dict(re.findall(r"type='hidden' name='(\w+)' value='([^']*)'", form.group(2)))
    return {k: unescape(v) for k, v in fields.items()} | {"action": form.group(1)}


def _status(store: str | None, run_id: str) -> tuple[str, str | None]:
    with open_store(store) as st:
        (approval,) = st.approvals(run_id)
    return approval.status, approval.decided_by


def _run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


def test_a_signed_in_person_decides_in_the_mounted_inbox(store_at: str) -> None:
    run_id = _paused(store_at)
    app = mounted_app(store_at)

    async def test() -> None:
        async with _client(app) as client:
            signed = await client.get("/login", params={"user": "Ann Lee"}, follow_redirects=True)
            assert signed.status_code == 200 and str(signed.url) == f"http://{HOST}/approvals/"
            page = signed.text
            assert "deciding as <strong>Ann Lee</strong>" in page and "name='by'" not in page
            assert f"run <a href='/approvals/runs/{run_id}'>{run_id}</a>" in page
            form = _form(page)
            action = form.pop("action")
            assert action == "/approvals/decide"
            done = await client.post(action, data={**form, "decision": "approve"})
            assert done.status_code == 303, done.text
            assert done.headers["location"].startswith("/approvals/?decided=")
            notice = (await client.get(done.headers["location"])).text
            assert f"c1 of run {run_id}: approved by Ann Lee" in notice
            assert "a `loopwise worker` on this store continues it" in notice

    _run(test)
    assert _status(store_at, run_id) == ("approved", "Ann Lee")
    resumed = loopwise.resume(run_id, step=DESK, model=ScriptedModel(_respond), store=store_at)
    assert resumed.status == "completed" and resumed.output == "refunded"


def test_a_request_with_no_signed_in_user_is_refused_and_records_nothing() -> None:
    run_id = _paused()
    app = mounted_app(None)

    async def test() -> None:
        async with _client(app) as signed, _client(app) as stranger:
            page = (await signed.get("/login", params={"user": "ann"}, follow_redirects=True)).text
            form = _form(page)
            action = form.pop("action")
            for path in ("/approvals/", f"/approvals/runs/{run_id}", "/approvals/runs"):
                refused = await stranger.get(path)
                assert refused.status_code == 403 and "sign in" in refused.text
                assert run_id not in refused.text and "set-cookie" not in refused.headers
            # The signed-in browser's own form and CSRF cookie, without its session.
            stolen = {"Cookie": f"loopwise_csrf={signed.cookies['loopwise_csrf']}"}
            posted = await stranger.post(
                action, data={**form, "decision": "approve"}, headers=stolen
            )
            assert posted.status_code == 403 and "sign in" in posted.text

    _run(test)
    assert _status(None, run_id) == ("pending", None)


def test_the_host_apps_user_is_checked_like_a_typed_name() -> None:
    run_id = _paused()
    names = iter(["ann", "ann\u202egnp.exe"])

    async def decider(scope: dict[str, Any]) -> str | None:  # a coroutine decider is awaited
        return next(names) if scope["method"] == "GET" else "ann\u202egnp.exe"

    app = FastAPI()
    app.mount("/approvals", loopwise.asgi_inbox(None, decider=decider, allowed_hosts=[HOST]))

    async def test() -> None:
        async with _client(app) as client:
            form = _form((await client.get("/approvals/")).text)
            action = form.pop("action")
            posted = await client.post(action, data={**form, "decision": "approve"})
            assert posted.status_code == 400
            assert "the user your app signed in, &#x27;ann\\u202egnp.exe&#x27;" in posted.text

    _run(test)
    assert _status(None, run_id) == ("pending", None)


def test_a_cross_site_post_is_refused() -> None:
    run_id = _paused()
    app = mounted_app(None)

    async def test() -> None:
        async with _client(app) as client:
            page = (await client.get("/login", params={"user": "ann"}, follow_redirects=True)).text
            form = _form(page)
            action = form.pop("action")
            decision = {**form, "decision": "approve"}
            evil = await client.post(
                action, data=decision, headers={"Origin": "https://evil.example"}
            )
            assert evil.status_code == 403 and "another site" in evil.text
            untokened = await client.post(action, data={**decision, "csrf": ""})
            assert untokened.status_code == 403 and "CSRF" in untokened.text
            rebound = await client.get("/approvals/", headers={"Host": "evil.example"})
            assert rebound.status_code == 421  # DNS rebinding: another name is not answered
            assert (await client.put(action)).status_code == 405
            ours = await client.post(action, data=decision, headers={"Origin": f"http://{HOST}"})
            assert ours.status_code == 303

    _run(test)
    assert _status(None, run_id) == ("approved", "ann")


_LINK = re.compile(r"(?:href|action|src)='([^']*)'")


def test_every_link_of_the_mounted_pages_carries_the_prefix() -> None:
    run_id = _paused()
    app = mounted_app(None)

    async def test() -> None:
        async with _client(app) as client:
            await client.get("/login", params={"user": "ann"})
            inbox = await client.get("/approvals/")
            assert inbox.headers["content-security-policy"].startswith("default-src 'none'")
            assert inbox.headers["x-content-type-options"] == "nosniff"
            cookie = inbox.headers["set-cookie"]
            assert "Path=/approvals;" in cookie and "SameSite=Strict" in cookie
            pages = [inbox.text]
            for path in (f"/approvals/runs/{run_id}", "/approvals/runs",
                         "/approvals/runs?status=awaiting_approval"):  # fmt: skip
                answer = await client.get(path)
                assert answer.status_code == 200, path
                pages.append(answer.text)
            links = {link for page in pages for link in _LINK.findall(page)}
            expected = {"/approvals/", "/approvals/runs", "/approvals/decide",
                        "/approvals/static/inbox.css", f"/approvals/runs/{run_id}"}  # fmt: skip
            assert expected <= links
            assert all(link.startswith("/approvals/") for link in links), sorted(links)
            for link in links - {"/approvals/decide"}:
                assert (await client.get(unescape(link))).status_code == 200, link
            assert (
                (await client.get("/approvals/static/inbox.css"))
                .headers["content-type"]
                .startswith("text/css")
            )

    _run(test)


def test_the_wsgi_inbox_mounts_under_its_script_name() -> None:
    run_id = _paused()

    def from_proxy(environ: dict[str, Any]) -> str | None:
        user: str | None = environ.get("HTTP_X_FORWARDED_USER")
        return user

    inbox = loopwise.wsgi_inbox(None, decider=from_proxy, allowed_hosts=[HOST])

    def host_app(environ: dict[str, Any], start_response: Any) -> Any:
        # A host app's mount (werkzeug's DispatcherMiddleware does the same): the prefix
        # moves from PATH_INFO to SCRIPT_NAME.
        if shift_path_info(environ) != "approvals":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"the host app's own page"]
        return inbox(environ, start_response)

    transport = httpx.WSGITransport(app=host_app)
    with httpx.Client(transport=transport, base_url=f"http://{HOST}") as client:
        assert client.get("/approvals/").status_code == 403
        client.headers["X-Forwarded-User"] = "Bo"
        page = client.get("/approvals/").text
        assert f"href='/approvals/runs/{run_id}'" in page
        form = _form(page)
        action = form.pop("action")
        evil = client.post(action, data=form, headers={"Origin": "http://evil.example"})
        assert evil.status_code == 403
        denial = urlencode({**form, "decision": "deny", "reason": "no"})
        typed = {"Content-Type": "application/x-www-form-urlencoded"}
        done = client.post(action, content=denial, headers=typed)
        assert done.status_code == 303 and done.headers["location"].startswith("/approvals/?")
    assert _status(None, run_id) == ("denied", "Bo")


def test_a_decider_that_is_not_a_callable_is_refused_when_mounted() -> None:
    with pytest.raises(loopwise.ConfigError, match="decider must be a callable") as e:
        loopwise.asgi_inbox(None, decider="ann")  # type: ignore[arg-type]
    assert e.value.name == "decider"
    with pytest.raises(loopwise.ConfigError, match="secret is empty"):
        loopwise.wsgi_inbox(None, decider=lambda environ: "ann", secret=b"")


async def _call(app: Any, method: str, path: str, headers: list[tuple[str, str]],
                body: bytes = b"") -> tuple[int, dict[str, str], str]:  # fmt: skip
    """One request through the bare ASGI protocol, no framework: the app mounted at
    /approvals by a server's ``root_path``."""
    scope = {
        "type": "http", "method": method, "path": path, "root_path": "/approvals",
        "query_string": b"", "scheme": "https", "server": (HOST, 443),
        "headers": [(k.lower().encode(), v.encode()) for k, v in [("Host", HOST), *headers]],
    }  # fmt: skip
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start, content = sent
    found = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], found, content["body"].decode()


def test_the_asgi_protocol_alone_serves_it_and_reads_split_cookies() -> None:
    run_id = _paused()
    app = loopwise.asgi_inbox(None, decider=lambda scope: "ann", allowed_hosts=[HOST])

    async def test() -> None:
        status, headers, page = await _call(app, "GET", "/approvals/", [])
        assert status == 200 and f"href='/approvals/runs/{run_id}'" in page
        # Over HTTPS the CSRF cookie is Secure.
        assert headers["set-cookie"].endswith("Path=/approvals; HttpOnly; SameSite=Strict; Secure")
        cookie = headers["set-cookie"].split(";")[0]
        status, _, page = await _call(app, "GET", "/approvals/", [("Cookie", cookie)])
        form = _form(page)
        body = urlencode({**form, "decision": "approve"}).encode()
        # HTTP/2 may send the cookies as several headers.
        split = [("Cookie", cookie), ("Cookie", "theme=dark"), ("Content-Length", str(len(body)))]
        status, headers, _ = await _call(app, "POST", "/approvals/decide", split, body)
        assert status == 303 and headers["location"].startswith("/approvals/?decided=")

    _run(test)
    assert _status(None, run_id) == ("approved", "ann")
