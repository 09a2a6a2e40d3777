"""The ``loopwise`` command (DESIGN §11). Nothing imports this module.

Exit codes: 0 completed (or nothing wrong); 1 a run ended with another status or
``check`` found errors; 2 a usage or configuration error, printed as one line (a
control character in it, from a stored name or reason, shown as an escape).

Each verb lives in a ``cli_*`` module that this one imports only when that verb is asked
for: an approver's ``loopwise pending`` must not wait for the model stack (pydantic,
the openai SDK, networkx) to load.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from loopwise.cli.options import Interrupted, Parser, UsageError, Verbs
from loopwise.core.names import printable
from loopwise.errors import ConfigError, LoopwiseError, StoreError

__all__ = ["main"]

Handler = Callable[[argparse.Namespace], int]

#: Each verb, in the order ``loopwise --help`` lists them, and the ``module:function``
#: that registers it on the subparsers (one function may register several verbs).
VERBS: dict[str, str] = {
    "run": "loopwise.cli.run:add_run_verb",
    "graph": "loopwise.cli.run:add_graph_verb",
    **dict.fromkeys(["runs", "pending", "approve", "deny"], "loopwise.cli.runs:add_runs_verbs"),
    "decide": "loopwise.cli.decide:add_decide_verb",
    "check": "loopwise.cli.check:add_check_verb",
    "eval": "loopwise.cli.eval:add_eval_verb",
    "analyze": "loopwise.cli.analyze:add_analyze_verb",
    "graduate": "loopwise.cli.graduate:add_graduate_verb",
    "resume": "loopwise.cli.run:add_resume_verb",
    "worker": "loopwise.cli.worker:add_worker_verb",
    "init": "loopwise.cli.init:add_init_verb",
    "serve": "loopwise.cli.serve:add_serve_verb",
}


def _register(sub: Verbs, where: str) -> None:
    module, function = where.split(":")
    getattr(importlib.import_module(module), function)(sub)  # getattr: a verb's module, by name


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The argument parser with every verb of DESIGN §11, or only ``verb``'s (with the
    verbs its module registers beside it): parsing that verb's arguments is the same."""
    parser = Parser(
        prog="loopwise",
        description="Workflows where the steps are known, agents where they are not, hybrids "
        "where a wrong step is expensive — run, gate, evaluate and decide.",
        epilog="Exit codes: 0 completed; 1 another status or check errors; 2 usage errors.",
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="verb", required=True, parser_class=Parser)
    wanted = [VERBS[verb]] if verb in VERBS else VERBS.values()
    for where in dict.fromkeys(wanted):
        _register(sub, where)
    return parser


class _Version(argparse.Action):
    """``--version``: the installed version, looked up only when asked (reading the
    package metadata costs every other verb's start-up a few milliseconds)."""

    def __init__(self, option_strings: Sequence[str], dest: str) -> None:
        help = "show program's version number and exit"  # argparse's own words
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> NoReturn:
        print(f"loopwise {_version()}")  # on stdout, as argparse's own version action
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("loopwise")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    try:
        given = sys.argv[1:] if argv is None else list(argv)
        # The verb comes first (the only options before it are --help and --version);
        # anything else, such as a mistyped verb, gets the whole parser and its verbs.
        args = build_parser(given[0] if given else None).parse_args(given)
        handler: Handler = args.handler
        return handler(args)
    except (UsageError, ConfigError, StoreError) as e:
        # A store that cannot be opened is a setting to fix too (--store, LOOPWISE_STORE).
        print(printable(f"loopwise: {e}"), file=sys.stderr)
        return 2
    except LoopwiseError as e:
        print(printable(f"loopwise: {type(e).__name__}: {e}"), file=sys.stderr)
        return 1
    except (Interrupted, KeyboardInterrupt) as e:
        print(f"loopwise: {e or 'interrupted'}", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader left early (`loopwise runs show X | head`): no traceback, and none
        # again when Python flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
