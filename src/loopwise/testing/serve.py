"""Serve a scripted model over HTTP for the command line: ``python -m loopwise.testing.serve``.

``python -m loopwise.testing.serve flow.py:offline_model`` starts a
:class:`~loopwise.testing.FakeChatServer` on 127.0.0.1 answering from that model, prints
``serving http://127.0.0.1:PORT/v1`` as its first line and the two variables that point
``loopwise`` (or any ``openai`` client) at it, and runs until interrupted::

    $ python -m loopwise.testing.serve agent.py:investigate --port 8765 &
    serving http://127.0.0.1:8765/v1
    export OPENAI_BASE_URL=http://127.0.0.1:8765/v1 OPENAI_API_KEY=fake-key
    $ OPENAI_BASE_URL=http://127.0.0.1:8765/v1 OPENAI_API_KEY=fake-key \\
        loopwise run agent.py:investigate --model fake-model --input-text "..."

``SPEC`` is ``path.py:name`` or ``package.module:name`` naming a scripted model
(``ScriptedModel``, ``ScriptedAgent``, a scripted judge), a list of turns, a function of
the request, or a target — whose module's ``offline_model`` then answers, as
``--model scripted`` would. With no ``:name`` the module's ``offline_model`` is served.
Nothing leaves 127.0.0.1; the server answers every model name.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Sequence

from loopwise.core.step import Step
from loopwise.errors import LoopwiseError
from loopwise.models.scripted import ScriptedModel
from loopwise.running.targets import Target, defined, import_module_of, model_for
from loopwise.testing._fakeserver import FakeChatServer

__all__ = ["main", "scripted_from"]


def scripted_from(spec: str) -> ScriptedModel:
    """The scripted model ``spec`` names (see the module docs); raises
    :class:`~loopwise.errors.LoopwiseError` subclasses with a one-line reason."""
    module_part, _, name = spec.partition(":")
    module = import_module_of(module_part, spec, what="model")
    obj = defined(module, name or "offline_model")
    if obj is None:
        raise LoopwiseError(f"{spec}: {module_part} defines no {name or 'offline_model'!r}")
    try:  # the module's own code runs here: whatever it raises is one line
        if isinstance(obj, Step):
            obj = model_for(Target(spec=spec, step=obj, module=module), "scripted")
        elif callable(obj) and not isinstance(obj, ScriptedModel) and not name:
            obj = obj()  # offline_model as a zero-argument factory
    except LoopwiseError:
        raise
    except Exception as e:
        what = "its offline_model" if isinstance(obj, Step) else f"{name or 'offline_model'}()"
        raise LoopwiseError(f"{spec}: {what} raised {type(e).__name__}: {e}") from None
    if isinstance(obj, ScriptedModel):
        return obj
    if isinstance(obj, list) or callable(obj):
        return ScriptedModel(obj)
    raise LoopwiseError(f"{spec}: {type(obj).__name__} is not a scripted model, a script or a step")


def _port(text: str) -> int:
    """A TCP port, 0-65535 (0: any free one); else a usage error (bind() raised OverflowError)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535; 0 for any free one)")
    return port


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until interrupted; 2 (one line on stderr) when ``SPEC`` cannot be served."""
    parser = argparse.ArgumentParser(
        prog="python -m loopwise.testing.serve",
        description="Serve a scripted model as a Chat Completions server on 127.0.0.1.",
    )
    parser.add_argument("spec", metavar="SPEC", help="path.py:name of a scripted model or target")
    parser.add_argument("--port", type=_port, default=0, help="the port (default: any free one)")
    args = parser.parse_args(argv)
    try:
        scripted = scripted_from(args.spec)
        server = FakeChatServer(scripted, port=args.port).start()
    except (LoopwiseError, OSError) as e:
        print(f"loopwise.testing.serve: {e}", file=sys.stderr)
        return 2
    print(f"serving {server.base_url}", flush=True)
    print(f"export OPENAI_BASE_URL={server.base_url} OPENAI_API_KEY=fake-key", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
