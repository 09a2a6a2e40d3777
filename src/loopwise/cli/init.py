"""The ``loopwise init`` verb: write a starter project, or the canonical examples the guides
use (:mod:`loopwise.evidence.scaffold`), and say what to run in it. Mistakes (an unknown
kind, files in the way) exit 2 in one line."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from loopwise.cli.options import Verbs, add_unused_store_flag
from loopwise.evidence.scaffold import EXAMPLES, KINDS, TEMPLATES, init_examples, init_project

__all__ = ["add_init_verb"]


def add_init_verb(sub: Verbs) -> None:
    """Register ``init`` on the CLI's subparsers ``sub``."""
    p = sub.add_parser(
        "init",
        help="write a small runnable project: a workflow, an agent, a hybrid, or one task "
        "as a workflow and an agent to compare (compare); or the examples the guides use "
        "(examples: workflows/ and agents/)",
    )
    p.add_argument(
        "kind",
        choices=(*KINDS, "examples"),
        help="what to start from (`loopwise decide` says), or the guides' examples",
    )
    p.add_argument("directory", nargs="?", default=".", help="where (default: here)")
    p.add_argument("--force", action="store_true", help="overwrite files that exist")
    add_unused_store_flag(p)
    p.set_defaults(handler=_cmd_init)


def _cmd_init(args: argparse.Namespace) -> int:
    root = Path(args.directory)
    if args.kind == "examples":
        written = init_examples(root, force=args.force)
        folders = ", ".join(f"{f}/" for f in EXAMPLES.folders)
        print(f"wrote the canonical examples in {root}: {folders} ({len(written)} files)")
        commands = EXAMPLES.commands()
    else:
        written = init_project(args.kind, root, force=args.force)
        template = TEMPLATES[args.kind]
        print(f"wrote {template.title} in {root}: {', '.join(p.name for p in written)}")
        commands = template.commands()
    print("next (offline, no key needed):")
    if root.resolve() != Path.cwd().resolve():
        print(f"  $ cd {shlex.quote(str(root))}")
    for command in commands:
        print(f"  $ {command}")
    print(
        "then use a real model: set OPENAI_API_KEY (and OPENAI_BASE_URL for another "
        "server) and pass --model NAME instead of --model scripted"
    )
    return 0
