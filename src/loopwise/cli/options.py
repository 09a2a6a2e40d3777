"""What several verbs of the command line share: limit flags, ``--store`` help, loading a
target, keeping user output off a ``--json`` stdout, reading JSON given as a flag.

Used by :mod:`loopwise.cli.main` and its verb modules (``cli_*``). Usage mistakes raise
:class:`~loopwise.errors.ConfigError` or :class:`argparse.ArgumentTypeError` (one line, exit 2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

from loopwise.core.jsontypes import JSONValue
from loopwise.errors import ConfigError

if TYPE_CHECKING:
    from loopwise.core.usage import Budget, Price
    from loopwise.running.targets import Target

# The run kernel's modules (events, usage, the model port) are imported where a flag needs
# them: the store verbs share this module, and a fresh `loopwise pending` pays for every
# module it loads (tests/cli/test_main.py lists what it must not).

__all__ = [
    "EVAL_STORE",
    "EVAL_STORE_ENV",
    "MAX_JSON_DEPTH",
    "Interrupted",
    "UsageError",
    "add_api_flag",
    "add_deps_flag",
    "add_limit_flags",
    "add_structured_mode_flag",
    "add_unused_store_flag",
    "budget_of",
    "count",
    "eval_store",
    "eval_store_help",
    "interactive",
    "load_checked",
    "price_per_mtok",
    "read_json",
    "seconds",
    "store_help",
    "store_value",
    "user_output_to_stderr",
]


class UsageError(Exception):
    """A usage mistake: printed as one line, exit 2."""


class Interrupted(Exception):
    """Ctrl-C: printed as one line, exit 130 (as a shell reports an interrupted command)."""


class Parser(argparse.ArgumentParser):
    """The command's parsers: a usage mistake is a :class:`UsageError`, not argparse's exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


Verbs: TypeAlias = "argparse._SubParsersAction[Parser]"
"""Where a verb adds its parser (``parser.add_subparsers()``'s answer)."""


store_help = (
    "run store: a path, sqlite:///path or postgresql://... "
    "(default $LOOPWISE_STORE or .loopwise/runs.db)"
)


EVAL_STORE = ".loopwise/eval.db"
"""Where ``loopwise eval`` keeps its runs and history without ``--store``."""
EVAL_STORE_ENV = "LOOPWISE_EVAL_STORE"
"""Overrides :data:`EVAL_STORE` (a path or a PostgreSQL URL)."""

eval_store_help = (
    f"a path, sqlite:///path or postgresql://... (default ${EVAL_STORE_ENV}, else eval.db "
    f"beside a SQLite $LOOPWISE_STORE, else {EVAL_STORE})"
)


def eval_store() -> str:
    """The eval store without ``--store`` (``loopwise eval`` writes it, ``check`` reads it):
    ``$LOOPWISE_EVAL_STORE``, else ``eval.db`` beside a SQLite ``$LOOPWISE_STORE``, else
    :data:`EVAL_STORE`."""
    if os.environ.get(EVAL_STORE_ENV):
        return os.environ[EVAL_STORE_ENV]
    runs = os.environ.get("LOOPWISE_STORE", "")
    if runs and "://" not in runs:
        return str(Path(runs).with_name("eval.db"))
    return EVAL_STORE


def add_unused_store_flag(p: argparse.ArgumentParser) -> None:
    """``--store`` on a verb that reads no runs (``graph``, ``decide``, ``init``): every
    verb takes it, so one set of flags (a script's, a Makefile's) fits every command. The
    value is checked like everywhere (an unknown scheme exits 2), never opened."""
    p.add_argument(
        "--store", type=store_value, help="accepted like on every verb; this one reads no runs"
    )


def store_value(raw: str) -> str:
    """A ``--store`` value, checked (an unknown scheme exits 2) and returned as given."""
    from loopwise.store.open import store_location

    store_location(raw)  # a malformed URL raises StoreError: one line, exit 2
    return raw


def add_structured_mode_flag(p: argparse.ArgumentParser) -> None:
    """``--structured-mode``: pin the structured-output rung of the ``--model``'s server."""
    from loopwise.models.port import STRUCTURED_MODES

    p.add_argument(
        "--structured-mode",
        choices=STRUCTURED_MODES,
        help="start structured calls at this rung (default $LOOPWISE_STRUCTURED_MODE, or "
        "the top of the ladder): for servers whose rejections are not recognizable",
    )


def add_api_flag(p: argparse.ArgumentParser) -> None:
    """``--api``: which OpenAI API the ``--model`` speaks."""
    from loopwise.models.port import APIS

    p.add_argument(
        "--api",
        choices=APIS,
        help="the OpenAI API of the model: chat (Chat Completions) or responses (the "
        "Responses API, /v1/responses); default $LOOPWISE_API, else chat",
    )


def given(args: argparse.Namespace, option: str, default: object = None) -> Any:
    """The value of ``option`` on the command line, or ``default`` for a verb whose parser
    does not declare it: helpers shared by verbs read a flag only some of them have, and a
    ``Namespace`` holds exactly what its verb declared."""
    # getattr: argparse's Namespace is a bag of the verb's own flags (a test's stand-in too).
    return getattr(args, option, default)


def interactive(args: argparse.Namespace) -> bool:
    """Whether gates may ask on this terminal (a TTY both ways and no ``--json``)."""
    return not given(args, "json", False) and sys.stdin.isatty() and sys.stdout.isatty()


@contextmanager
def user_output_to_stderr(as_json: bool) -> Iterator[None]:
    """While user code runs (a target's import, its steps and tools), send what it prints
    to stderr when ``--json`` promises one document on stdout."""
    if not as_json:
        yield
        return
    with redirect_stdout(sys.stderr):
        yield


def count(least: int, most: int = 10**9) -> Callable[[str], int]:
    """An argparse type: a whole number from ``least`` to ``most`` (a billion unless told:
    past that a store's integer overflows, and no page or run count means it)."""

    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            value = least - 1
        if not least <= value <= most:
            raise argparse.ArgumentTypeError(
                f"{raw[:40]!r} is not a whole number from {least} to {most:,}"
            )
        return value

    return parse


def _amount(unit: str) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not value >= 0 or value == float("inf"):  # also refuses nan
            raise argparse.ArgumentTypeError(f"{raw!r} is not an amount of {unit} >= 0")
        return value

    return parse


_usd = _amount("USD")
#: An argparse type: seconds, a finite amount >= 0.
seconds = _amount("seconds")


def price_per_mtok(raw: str) -> Price:
    """An argparse type: ``IN,OUT``, USD per million input and output tokens."""
    from loopwise.core.usage import Price

    parts = raw.split(",")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(
            f"{raw!r}: give USD per million input and output tokens as IN,OUT (e.g. 0.2,0.6)"
        )
    return Price(input=_usd(parts[0].strip()), output=_usd(parts[1].strip()))


def add_limit_flags(p: argparse.ArgumentParser, scope: str) -> None:
    """``--max-steps``, ``--max-tokens``, ``--max-cost``: validated as they are parsed."""
    p.add_argument("--max-steps", type=count(1), help=f"override the step limit of {scope}")
    p.add_argument("--max-tokens", type=count(0), help=f"token budget for {scope}")
    p.add_argument("--max-cost", type=_usd, help=f"USD budget for {scope}")


def add_deps_flag(p: argparse.ArgumentParser) -> None:
    """``--deps module:function``: where each run's deps come from (README: Dependencies)."""
    p.add_argument(
        "--deps",
        metavar="MODULE:FUNCTION",
        help="make each run's deps with this function of no arguments (module:function or "
        "file.py:function; default: the target module's make_deps(), if any)",
    )


def budget_of(args: argparse.Namespace) -> Budget | None:
    """The budget the limit flags ask for (``None`` when neither is given)."""
    if args.max_tokens is None and args.max_cost is None:
        return None
    from loopwise.core.usage import Budget

    return Budget(max_tokens=args.max_tokens, max_cost_usd=args.max_cost)


def load_checked(spec: str) -> Target:
    """Load a target and, for a workflow, validate its graph now: a graph error is a
    usage error (exit 2) before any run is recorded, not a failed run."""
    # Imported here, as the verbs that load targets need them: the store verbs share
    # this module and must start without pydantic (see loopwise.cli.main).
    from loopwise.architectures.workflow import Workflow
    from loopwise.running.targets import load_target

    target = load_target(spec)
    if isinstance(target.step, Workflow):
        target.step.validate()
    return target


MAX_JSON_DEPTH = 100
"""The deepest nesting of arrays and objects a JSON flag (``--input``, ``--args``) accepts."""


def read_json(text: str, flag: str) -> JSONValue:
    """``text`` parsed as the JSON value of ``flag``, bounded before any run sees it.

    Valid JSON can still be unreadable: an integer longer than Python's ``int`` digit
    limit, or nesting deep enough that a recursive walk (the store recording the input,
    the hash binding an approval) runs out of stack. Raises ``json.JSONDecodeError`` for
    text that is not JSON (callers word that one themselves), :class:`ConfigError` for
    nesting deeper than :data:`MAX_JSON_DEPTH` or a number too long to read.
    """
    from loopwise.core.events import json_value, nests_deeper_than

    try:
        value = json_value(text)
    except json.JSONDecodeError:
        raise
    except RecursionError as e:
        raise _too_deep(flag) from e
    except ValueError as e:  # an integer past Python's digit limit for int()
        reason = str(e).split(":")[0]
        raise ConfigError(f"{flag} holds a number too long to read ({reason})", name=flag) from e
    if nests_deeper_than(value, MAX_JSON_DEPTH):
        raise _too_deep(flag)
    return value


def _too_deep(flag: str) -> ConfigError:
    message = f"{flag} nests arrays/objects deeper than {MAX_JSON_DEPTH} levels"
    return ConfigError(message, name=flag)
