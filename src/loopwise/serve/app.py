"""``loopwise serve``: the approvals inbox, a small web app over any run store.

Built on the standard library's :class:`http.server.ThreadingHTTPServer`: the app is a
handful of server-rendered pages and one form endpoint, so an ASGI stack would add
dependencies and an event loop beside the store's threads without adding anything the
pages need. The pages are :mod:`loopwise.serve.pages`'s; a decision goes through
:func:`loopwise.running.approvals.decide`, the same path as ``loopwise approve``/``deny``.
The same :class:`Inbox` mounts in a team's own ASGI or WSGI app, behind its sign-in
(:mod:`loopwise.serve.mounted`); the checks below are :mod:`loopwise.serve.guards`'s.

Safe by default:

* it binds to ``127.0.0.1`` unless told otherwise, and on every bind it answers only
  requests whose ``Host`` is a loopback name, the address it is bound to, or a name of
  ``allowed_hosts`` (``--allowed-host``): a web page cannot reach it through DNS
  rebinding, whose requests carry the attacker's name. A wildcard bind (``0.0.0.0``,
  ``::``) has no address of its own a browser would name, so it needs ``allowed_hosts``;
* no GET changes anything; the only POST (``/decide``) needs the CSRF token of the page
  it came from (an HMAC of a per-browser cookie under a per-process secret; the cookie is
  ``SameSite=Strict``) and, when the browser sends one, an ``Origin`` of this server;
* every page carries a strict Content-Security-Policy (no script at all, styles only
  from this origin, forms only to this origin, no framing) and ``nosniff``; everything a
  run holds is escaped (:mod:`loopwise.serve.pages`).

It has **no login of its own**: who decides is the name the approver types (prefilled
with ``--by``), or, with ``--trust-proxy-user HEADER``, the user an authenticating
reverse proxy puts in that header (then the header is required on every decision, and
the server must only be reachable through that proxy). Either name is printed back to
the people who read the run, so one with a control character, line separator or
bidirectional control is refused (HTTP 400, nothing decided; a ``--by`` like that is a
usage error when the server starts): :func:`loopwise.core.names.shown_name_problem`.

With ``resume=True`` the server continues every run of its store whose approvals are all
decided, wherever they were decided, as a worker does (:mod:`loopwise.serve.resuming`);
a decision is recorded whether or not its run can be resumed now. Without it the server
only records decisions, and a ``loopwise worker`` or ``loopwise resume`` continues the run.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from loopwise.core.events import Status, json_value
from loopwise.core.jsontypes import JSONObject
from loopwise.core.names import shown_name_problem
from loopwise.errors import AnswerError, ConfigError, LoopwiseError
from loopwise.running import approvals
from loopwise.serve import guards
from loopwise.serve.guards import Answer as _Answer
from loopwise.serve.guards import host_name
from loopwise.serve.guards import plain as _plain
from loopwise.serve.pages import (
    Form,
    inbox_page,
    run_page,
    runs_page,
    who_resumes,
)
from loopwise.serve.resuming import Resumer
from loopwise.serve.style import STYLESHEET
from loopwise.serve.twins import twins
from loopwise.store.base import QUEUED, RunStore, StoredRun
from loopwise.store.open import open_store

__all__ = [
    "Inbox",
    "ServeSettings",
    "allowed_hosts",
    "make_server",
]

_WILDCARDS = frozenset({"0.0.0.0", "::", "[::]", ""})


def allowed_hosts(settings: ServeSettings) -> frozenset[str]:
    """The ``Host`` names the inbox answers besides loopback ones: the address it is bound
    to (unless a wildcard) and ``settings.allowed_hosts``."""
    named = {host_name(h) for h in settings.allowed_hosts}
    if settings.host not in _WILDCARDS:
        named.add(host_name(settings.host))
    return frozenset(named) | {"localhost"}


_DECISIONS = {"approve": "approved", "deny": "denied"}
_STATUSES = (
    Status.AWAITING_APPROVAL.value,
    "running",
    QUEUED,
    *(s.value for s in Status if s is not Status.AWAITING_APPROVAL),
)
_LISTED = 200
"""The runs list shows the newest this many (of the status chosen)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ServeSettings:
    """How ``loopwise serve`` runs."""

    store: str | None = None
    """The run store (a path or URL; ``None``: ``$LOOPWISE_STORE`` or the default)."""
    host: str = "127.0.0.1"
    """Where to listen (loopback unless told otherwise)."""
    port: int = 8765
    """The port (``0``: any free one; the first line printed says which)."""
    resume: bool = False
    """Resume every run of the store whose approvals are all decided (as a worker does)."""
    by: str | None = None
    """The approver's name the forms are prefilled with."""
    trust_proxy_user: str | None = None
    """A header an authenticating reverse proxy sets to the user's name."""
    read_timeout: float = 30.0
    """Seconds a client may take to send a request (a stalled one must not hold a thread)."""
    allowed_hosts: tuple[str, ...] = ()
    """``Host`` names answered besides loopback ones and the bound address (the names
    people reach a non-loopback inbox by); required for a wildcard bind."""


class Inbox:
    """The app: routes requests to pages and decisions over one open store."""

    def __init__(
        self,
        store: RunStore,
        settings: ServeSettings,
        *,
        secret: bytes | None = None,
        user_from: str | None = None,
    ) -> None:
        """``secret`` signs the CSRF tokens (default: one of this process's own);
        ``user_from`` says where the decider's name comes from when it is not typed
        (``"in the X-User header"``; default: the proxy header of ``settings``)."""
        self.store = store
        self.settings = settings
        self._secret = secret if secret is not None else secrets.token_bytes(32)
        header = settings.trust_proxy_user
        self._user_from = user_from or (f"in the {header} header" if header else None)
        self._resumer: Resumer | None = None

    def start(self) -> None:
        """With ``resume``, start resuming the store's decided runs (once listening)."""
        if self.settings.resume and self._resumer is None:
            self._resumer = Resumer(self.store)

    def token(self, cookie: str) -> str:
        """The CSRF token a page served with ``cookie`` carries in its forms."""
        return hmac.new(self._secret, cookie.encode(), hashlib.sha256).hexdigest()

    def get(
        self,
        path: str,
        query: dict[str, list[str]],
        cookie: str | None,
        user: str | None = None,
        root: str = "",
    ) -> _Answer:
        """Answer a GET (never changes anything); ``user`` is who the proxy or the host app
        says decides, ``root`` the (URL-quoted) path the inbox is mounted under."""
        fresh = cookie or secrets.token_urlsafe(24)
        set_cookie = None if cookie else fresh
        if path == "/static/inbox.css":
            return _Answer(200, STYLESHEET, "text/css; charset=utf-8")
        if path == "/":
            notice = _notice(self.store, query.get("decided", [""])[0], self.settings.resume)
            form = Form(
                csrf=self.token(fresh),
                by=self.settings.by,
                fixed_by=self._proxy_user(user),
                notice=notice,
                root=root,
            )
            try:
                page = self._inbox(form, after=query.get("after", [None])[0])
            except ConfigError as e:  # a cursor that is none: this page's link, mistyped
                return _Answer(400, _plain(str(e)), cookie=set_cookie)
            return _Answer(200, page, cookie=set_cookie)
        if path == "/runs":
            chosen = query.get("status", [None])[0] or None
            runs = self.store.list_runs(limit=_LISTED, status=chosen)
            page = runs_page(runs, _STATUSES, chosen, root=root)
            return _Answer(200, page, cookie=set_cookie)
        if path.startswith("/runs/") and path.count("/") == 2:
            return self._run(unquote(path.removeprefix("/runs/")), root)
        return _Answer(404, _plain("no such page"))

    def _inbox(self, form: Form, after: str | None = None) -> str:
        # A page at a time: at a million runs the whole inbox was 23 MB and 3-7 s.
        page = self.store.pending_page(after=after)
        shown = approvals.views(self.store, page.approvals)
        # Compared within the page shown: the hint costs no query (loopwise.serve.twins).
        same = twins(page.approvals, page.approvals)
        return inbox_page(
            shown, form, total=page.total, older=page.next, paged=bool(after), twins=same
        )

    def _run(self, run_id: str, root: str) -> _Answer:
        try:
            run = self.store.get_run(run_id)
        except ConfigError:
            return _Answer(404, _plain(f"no run {run_id!r}"))
        events = self.store.events(run_id)
        rows = self.store.approvals(run_id)
        plan = approvals.plan_items(events, rows)
        asking = [a for a in rows if a.status == "pending" and a.effect == "irreversible"]
        # Against the newest page of pending approvals: one indexed query, any store size.
        same = twins(asking, self.store.pending_page().approvals) if asking else {}
        page = run_page(
            run, plan, rows, events, resuming=self.settings.resume, root=root, twins=same
        )
        return _Answer(200, page)

    def post(
        self, path: str, form: dict[str, str], cookie: str | None, user: str | None, root: str = ""
    ) -> _Answer:
        """Answer the one POST: a decision, checked before anything is recorded (``user``
        and ``root`` as for :meth:`get`)."""
        if path != "/decide":
            return _Answer(404, _plain("no such form"))
        if not cookie or not hmac.compare_digest(form.get("csrf", ""), self.token(cookie)):
            return _Answer(403, _plain("the form's CSRF token is missing or wrong: reload"))
        run_id, approval_id = form.get("run_id", ""), form.get("approval_id", "")
        if not form.get("args_hash"):
            # The decision is bound to the arguments the person saw (the CLI may omit it).
            return _Answer(400, _plain("the form does not say which arguments you saw: reload"))
        try:
            by = self._who(form, user)
            edited = _edited(form.get("args"))
            done = approvals.decide(
                self.store,
                run_id,
                approval_id,
                # Exactly the two buttons: a form without one must not approve.
                decision=_DECISIONS.get(form.get("decision", ""), "missing"),
                by=by,
                reason=form.get("reason", "").strip() or None,
                edited_args=edited,
                seen_hash=form["args_hash"],
            )
        except LoopwiseError as e:
            status = 409 if e.code in {"stale", "not-pending"} else 400
            page = self._inbox(
                Form(
                    csrf=self.token(cookie),
                    by=_kept_name(form.get("by")) or self.settings.by,
                    fixed_by=self._proxy_user(user),
                    error=(run_id, approval_id, _on_the_page(e)),
                    notice=None,
                    root=root,
                )
            )
            return _Answer(status, page)
        if self._resumer is not None and not self.store.pending(done.run_id):
            self._resumer.look()
        # Ids are model text (a call id may hold CR/LF): quoted, they stay one header line.
        decided = urlencode({"decided": f"{done.run_id}/{done.approval_id}"})
        return _Answer(303, "", location=f"{root}/?{decided}")

    def _proxy_user(self, user: str | None) -> str | None:
        """Who the proxy (or the host app) says decides (shown instead of a name to type),
        when it says."""
        where = self._user_from
        if where is None:
            return None
        if isinstance(user, _NotUtf8):
            return f"(the user {where} is not UTF-8: decisions are refused)"
        return user or f"(no user {where}: decisions are refused)"

    def _who(self, form: dict[str, str], user: str | None) -> str:
        where = self._user_from
        if where is not None:
            if not user:
                raise ConfigError(
                    f"no user {where}: decisions come through the authenticating proxy",
                    name="by",
                )
            if isinstance(user, _NotUtf8):
                raw = user.encode("latin-1")
                shown = repr(raw) if len(raw) <= 80 else f"{raw[:80]!r}…"
                raise ConfigError(
                    f"the user {where}, {shown}, is not UTF-8; nothing was decided",
                    name="by",
                    code="bad-name",
                )
            problem = shown_name_problem(user)
            if problem is not None:
                raise ConfigError(
                    f"the user {where}, {user!r}, {problem}; nothing was decided",
                    name="by",
                    code="bad-name",
                )
            return user
        by = form.get("by", "").strip() or (self.settings.by or "")
        if not by:
            raise ConfigError("say who decides: enter your name", name="by")
        # Not cut to a length: a cut name is not what was typed (the rule refuses it).
        return approvals.check_decider(by)

    def wait_for_resumes(self, timeout: float | None = None) -> bool:
        """With ``resume``, wait until every run decided so far that this server can take
        has ended or paused again (for tests, shutdown); ``False`` if ``timeout`` passed."""
        return self._resumer.wait(timeout) if self._resumer is not None else True

    def close(self) -> None:
        """Stop resuming: the runs in hand finish or pause first (the store stays open)."""
        if self._resumer is not None:
            self._resumer.close()


def _on_the_page(e: LoopwiseError) -> str:
    """Why a decision was refused, said for this page: an answer is given in its form."""
    if isinstance(e, AnswerError):
        return (
            f'{e.problem}. Answer under "Edit arguments": a JSON object matching '
            f'{json.dumps(e.schema)[:300]}, then "Approve edited".'
        )
    return str(e)


class _NotUtf8(str):
    """A proxy's user header whose bytes are not UTF-8 (the text is their Latin-1 reading):
    shown as such, and no decision is recorded under it."""

    __slots__ = ()


def _kept_name(typed: str | None) -> str | None:
    """The name typed, to prefill the form shown again, unless it is the name refused."""
    if not typed or shown_name_problem(typed.strip()):
        return None
    return typed


def _edited(raw: str | None) -> JSONObject | None:
    if raw is None:
        return None
    try:
        value = json_value(raw)  # RFC 8259: no NaN, no Infinity
    except (ValueError, RecursionError) as e:  # ValueError: also an int over Python's limit
        raise ConfigError(f"the edited arguments are not valid JSON ({e})", name="args") from e
    if not isinstance(value, dict):
        raise ConfigError("the edited arguments must be a JSON object", name="args")
    return value


def _notice(store: RunStore, decided: str, resuming: bool) -> str | None:
    """What was decided, and what happens next to the run."""
    run_id, _, approval_id = decided.partition("/")
    if not run_id or not approval_id:
        return None
    try:
        found = store.approval(run_id, approval_id)
    except LoopwiseError:
        return None
    if found is None or found.status == "pending":
        return None
    done = f"{found.approval_id} of run {found.run_id}: {found.status} by {found.decided_by}"
    waiting = len(store.pending(run_id))
    if waiting:
        return f"{done}. The run goes on when its {waiting} other pending approval(s) are decided."
    run = store.get_run(run_id)
    if resuming and run.spec:
        return f"{done}. {_resumed(run)}"
    return f"{done}. The run is not resumed here: {who_resumes(run)}"


def _resumed(run: StoredRun) -> str:
    """How the run stands now that this server takes it to resume."""
    if run.status in {Status.AWAITING_APPROVAL.value, "running"}:
        return "This inbox is resuming the run now."
    if run.status == Status.ERROR.value:
        return (
            f"The run could not be resumed: {run.detail}. The decision is kept: once that "
            f"is fixed, run: loopwise resume {run.run_id}"
        )
    return f"The run has ended: {run.status}."


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "loopwise"
    sys_version = ""

    def setup(self) -> None:
        # Without a timeout a client that sends less than its Content-Length, or nothing,
        # holds its thread (and socket) for ever.
        super().setup()
        self.connection.settimeout(self.server.app.settings.read_timeout)

    def log_message(self, format: str, *args: object) -> None:  # quiet: the CLI prints one line
        return

    def do_GET(self) -> None:
        if not self._checked():
            return
        url = urlsplit(self.path)
        cookie = guards.csrf_cookie(self.headers.get("Cookie"))
        try:
            answer = self.server.app.get(
                url.path, parse_qs(url.query), cookie, self._proxy_header()
            )
        except Exception as e:  # an answer, never a reset connection
            answer = guards.failure(e)
        self._send(answer)

    def do_POST(self) -> None:
        if not self._checked():
            return
        try:
            self._post()
        except OSError:
            raise  # the client stalled or left: its connection is closed, nothing to answer
        except Exception as e:  # an answer, never a reset connection
            self._send(guards.failure(e))

    def _post(self) -> None:
        length = guards.body_length(self.headers.get("Content-Length"))
        if isinstance(length, _Answer):
            self._send(length)
            return
        fields = guards.form_fields(self.rfile.read(length))
        cookie = guards.csrf_cookie(self.headers.get("Cookie"))
        user = self._proxy_header()
        self._send(self.server.app.post(urlsplit(self.path).path, fields, cookie, user))

    def _proxy_header(self) -> str | None:
        header = self.server.app.settings.trust_proxy_user
        value = self.headers.get(header) if header else None
        if value is None:
            return None
        # http.server reads header bytes as Latin-1; a proxy sends a name as UTF-8, whose
        # bytes 0x80-0x9f would read as control characters (and the name refused).
        try:
            return value.encode("latin-1").decode("utf-8")
        except UnicodeError:  # refused when it decides, never read as Latin-1 instead
            return _NotUtf8(value)

    def do_PUT(self) -> None:
        self._checked()

    do_DELETE = do_PATCH = do_PUT

    def _checked(self) -> bool:
        """Whether the request passes :func:`loopwise.serve.guards.refused` (else the
        refusal is sent)."""
        refusal = guards.refused(self.command, self.headers.get, self.server.allowed)
        if refusal is not None:
            self._send(refusal)
        return refusal is None

    def _send(self, answer: _Answer) -> None:
        body = answer.body.encode()
        self.send_response(answer.status, HTTPStatus(answer.status).phrase)
        for name, value in guards.headers(answer, length=len(body)):
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # The default backlog (5) resets connections when a team decides at once.
    request_queue_size = 128

    def __init__(self, app: Inbox) -> None:
        self.app = app
        self.allowed = allowed_hosts(app.settings)
        super().__init__((app.settings.host, app.settings.port), _Handler)

    def server_close(self) -> None:
        """Close the socket and stop resuming runs (those in hand finish or pause)."""
        super().server_close()
        self.app.close()


def make_server(
    settings: ServeSettings, *, store: RunStore | None = None
) -> tuple[_Server, Callable[[], str]]:
    """The HTTP server (not yet serving) and a function giving its URL.

    ``store`` is used as given, else the store ``settings.store`` names is opened.
    Raises :class:`~loopwise.errors.ConfigError` for a wildcard bind without
    ``allowed_hosts`` or a ``by`` no decision may record (``code="bad-name"``),
    :class:`~loopwise.errors.StoreError` when the store cannot be opened and
    :class:`OSError` when the address is taken.
    """
    if settings.host in _WILDCARDS and not settings.allowed_hosts:
        raise ConfigError(
            f"listening on {settings.host or 'every address'} needs --allowed-host NAME "
            "(the names people reach the inbox by; any other Host is refused against DNS "
            "rebinding)",
            name="allowed_hosts",
        )
    problem = shown_name_problem(settings.by) if settings.by is not None else None
    if problem is not None:
        raise ConfigError(f"--by {settings.by!r} {problem}", name="by", code="bad-name")
    app = Inbox(store if store is not None else open_store(settings.store), settings)
    server = _Server(app)
    app.start()

    def url() -> str:
        host, port = str(server.server_address[0]), int(server.server_address[1])
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}"

    return server, url
