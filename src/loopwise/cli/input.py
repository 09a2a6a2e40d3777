"""The input of ``loopwise run``: ``--input`` (JSON) or ``--input-text`` (plain text).

* ``--input JSON`` is any JSON value; ``--input -`` reads one from stdin;
* ``--input @file.json`` reads a JSON file; ``--input @file`` of any other name reads the
  file's text as a string (documents are text: an agent takes it as its question, a
  workflow whose first step takes ``str`` as its input);
* ``--input-text TEXT`` is ``TEXT`` as a string, unquoted; ``--input-text -`` reads the
  whole of stdin as a string, as it is.

Mistakes raise :class:`~loopwise.errors.ConfigError` (one line, exit 2), before any run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from loopwise.cli.options import given, read_json
from loopwise.core.jsontypes import JSONValue
from loopwise.errors import ConfigError

__all__ = ["add_input_flags", "input_of"]

#: What a JSON file is named: ``@name.json`` is parsed, any other ``@file`` is text.
JSON_SUFFIX = ".json"


def add_input_flags(p: argparse.ArgumentParser) -> None:
    """``--input`` and ``--input-text`` (one or the other)."""
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--input",
        help="a JSON value, @file.json, @file.txt (any non-.json file: its text as a string), "
        "or - for JSON on stdin",
    )
    group.add_argument(
        "--input-text",
        metavar="TEXT",
        help="plain text as the input (a string, no JSON quoting); - reads all of stdin",
    )


def input_of(args: argparse.Namespace) -> JSONValue:
    """The run's input from ``--input``/``--input-text`` (``None`` when neither is given)."""
    text = given(args, "input_text")
    if text is not None:
        return _stdin("--input-text", "some text") if text == "-" else text
    raw: str | None = args.input
    if raw is None:
        return None
    if raw == "-":
        return _json(_stdin("--input -", "a JSON value"))
    if raw.startswith("@"):
        path = Path(raw[1:])
        content = _read_file(path)
        return _json(content) if path.suffix.lower() == JSON_SUFFIX else content
    return _json(raw)


def _stdin(flag: str, what: str) -> str:
    text = sys.stdin.read()
    try:
        # stdin decodes bytes that are not UTF-8 to lone surrogates (surrogateescape):
        # refuse them as a binary file is refused, before they reach a model or the store.
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ConfigError(
            f"{flag}: stdin is not UTF-8 text (at character {e.start}); pipe {what} into it",
            name="input",
        ) from e
    if not text.strip():
        raise ConfigError(f"{flag}: stdin is empty; pipe {what} into it", name="input")
    return text


def _read_file(path: Path) -> str:
    if not path.is_file():
        raise ConfigError(f"--input: no such file {path}", name="input")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--input: cannot read {path} as UTF-8 text ({e})", name="input") from e


def _json(text: str) -> JSONValue:
    try:
        return read_json(text, "--input")
    except json.JSONDecodeError as e:
        # Plain words are the usual slip: text has its own flag.
        hint = (
            ""
            if text.lstrip()[:1] in '{["'
            else "; pass text as a JSON string ('\"...\"') or with --input-text TEXT"
        )
        raise ConfigError(
            f"--input is not valid JSON ({e.msg} at line {e.lineno} col {e.colno}){hint}",
            name="input",
        ) from e
