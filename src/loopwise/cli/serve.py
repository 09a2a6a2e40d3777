"""The ``serve`` verb: the approvals inbox in the browser (:mod:`loopwise.serve.app`).

Registered by :mod:`loopwise.cli.main`. Prints ``serving http://HOST:PORT`` as its first
line (the port it got when ``--port 0``), then serves until SIGINT/SIGTERM. An address
that is taken, or a store that cannot be opened, is a usage error (exit 2, one line).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from loopwise.cli import temporal
from loopwise.cli.options import UsageError, Verbs, store_help
from loopwise.errors import ConfigError
from loopwise.serve.app import ServeSettings, make_server
from loopwise.serve.guards import is_loopback
from loopwise.store.open import require_folder

__all__ = ["add_serve_verb"]


def _cmd_serve(args: argparse.Namespace) -> int:
    require_folder(args.store)  # a mistyped path would serve an empty inbox
    settings = ServeSettings(
        store=args.store,
        host=args.host,
        port=args.port,
        resume=args.resume,
        by=args.by,
        trust_proxy_user=args.trust_proxy_user,
        allowed_hosts=tuple(args.allowed_host or ()),
    )
    store = None
    if temporal.on_temporal(args.store):
        if args.resume:
            raise UsageError(
                "--resume: a run on Temporal goes on by itself once decided (a `loopwise "
                "worker` on the store continues it)"
            )
        store = temporal.open_runs(args.store)
    try:
        server, url = make_server(settings, store=store)
    except OSError as e:
        raise ConfigError(f"cannot listen on {args.host}:{args.port}: {e.strerror}") from e
    print(f"serving {url()}", flush=True)
    if not is_loopback(args.host):
        print(
            f"loopwise serve: listening on {args.host}, beyond this machine; the inbox has "
            "no login of its own (see README: put it behind an authenticating proxy)",
            file=sys.stderr,
            flush=True,
        )

    def stop(signum: int, frame: FrameType | None) -> None:
        # shutdown() waits for serve_forever to return: call it from another thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()  # with --resume, the runs in hand finish or pause first
        server.app.store.close()
    return 0


def _port(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0-65535, not {value}")
    return value


def add_serve_verb(sub: Verbs) -> None:
    """Register ``serve`` on the CLI's subparsers."""
    p = sub.add_parser("serve", help="the approvals inbox in the browser")
    p.add_argument("--store", help=store_help)
    p.add_argument("--host", default="127.0.0.1", help="where to listen (default 127.0.0.1)")
    p.add_argument(
        "--port", type=_port, default=8765, help="the port (default 8765; 0: any free one)"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="resume every run of the store once all its approvals are decided, wherever "
        "they were decided, as a worker does (else only record decisions)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        metavar="NAME",
        help="a name people reach the inbox by (repeatable); any other Host is refused. "
        "Loopback names and the --host address are allowed anyway; a wildcard --host "
        "(0.0.0.0, ::) needs at least one",
    )
    p.add_argument("--by", help="the approver's name the forms are prefilled with")
    p.add_argument(
        "--trust-proxy-user",
        metavar="HEADER",
        help="take the approver's name from this header, set by an authenticating proxy",
    )
    p.set_defaults(handler=_cmd_serve)
