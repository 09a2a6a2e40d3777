"""The verbs that run steps: ``run``, ``resume`` and ``graph`` (DESIGN §11).

Registered by :mod:`loopwise.cli.main`. Usage mistakes (bad ``--input``, input that cannot match
the target's declared input, a target with no graph) raise
:class:`~loopwise.cli.options.UsageError`: one line, exit 2, before any run is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pydantic

from loopwise.cli import temporal
from loopwise.cli.input import add_input_flags, input_of
from loopwise.cli.options import (
    Interrupted,
    UsageError,
    Verbs,
    add_api_flag,
    add_deps_flag,
    add_limit_flags,
    add_structured_mode_flag,
    add_unused_store_flag,
    budget_of,
    given,
    interactive,
    load_checked,
    store_help,
    user_output_to_stderr,
)
from loopwise.cli.watch import TextPrinter, add_watch_flags, watch_sinks
from loopwise.core.events import EventSink, Status
from loopwise.core.execute import new_run_id
from loopwise.core.jsontypes import JSONValue
from loopwise.core.members import step_member
from loopwise.core.names import counted, printable
from loopwise.core.result import RunResult
from loopwise.core.shape import Kind, describe, mermaid
from loopwise.core.step import needs_model
from loopwise.models.port import model_member
from loopwise.running import runner
from loopwise.running.targets import Target, deps_factory, load_target, model_for
from loopwise.store.open import DEFAULT, new_store_folder, require_folder
from loopwise.tools.handlers import TerminalApprovals

__all__ = ["add_graph_verb", "add_resume_verb", "add_run_verb", "exit_code"]


SHORT_OUTPUT = 20
"""Lines of an output printed as they are; a longer one (a hybrid's plan and results)
is cut to this many unless ``-v``: ``--json`` gives the whole result."""


def _print_result(
    result: RunResult, as_json: bool, *, verbose: bool = False, streamed: bool = False
) -> None:
    """The status line first, then what waits for a person, the output (once: not again
    after it streamed), and the usage."""
    if as_json:
        print(json.dumps(result.to_dict(), default=str))
        return
    # The detail (a tool's error, a denial's reason) and ids are model or user text.
    detail = f" — {result.detail}" if result.detail else ""
    print(printable(f"run {result.run_id}: {result.status}{detail}"))
    for p in result.pending:
        print(
            printable(
                f"waiting for approval {p['approval_id']}: {p['tool']}({json.dumps(p['args'])})"
                f" — loopwise approve {result.run_id} --approval {p['approval_id']}"
            )
        )
    if result.output is not None and not streamed:
        lines = json.dumps(result.to_dict()["output"], indent=2, default=str).splitlines()
        if len(lines) > SHORT_OUTPUT and not verbose:
            more = len(lines) - SHORT_OUTPUT
            lines = [*lines[:SHORT_OUTPUT], f"… {more} more line(s): -v prints them, --json all"]
        print("\n".join(lines))
    u = result.usage
    cost = "unknown" if u.cost_usd is None else f"${u.cost_usd:.6f}"
    print(
        f"usage: {counted(u.model_calls, 'model call')}, {counted(u.tool_calls, 'tool call')}, "
        f"{u.total_tokens} tokens, cost {cost}, {u.wall_seconds:.2f}s"
    )


def _streamed(sinks: tuple[EventSink, ...]) -> bool:
    return any(isinstance(s, TextPrinter) and s.printed for s in sinks)


def exit_code(status: Status) -> int:
    """0 for ``completed``, 1 for every other status."""
    return 0 if status is Status.COMPLETED else 1


def _checked_input(target: Target, payload: JSONValue, flag: str) -> JSONValue:
    """Reject input that cannot match the target's declared input type (a pydantic model,
    ``str``, ``int``, ``list[str]``...), before any run, naming the flag it came from."""
    declared = step_member(target.step, "input_type")
    if payload is None or declared is Any or declared is object:
        return payload
    try:
        adapter: pydantic.TypeAdapter[object] = pydantic.TypeAdapter(declared)
    except (pydantic.PydanticSchemaGenerationError, TypeError):
        return payload  # a type pydantic cannot check: the step checks its own input
    try:
        adapter.validate_python(payload)
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "input"
        name = getattr(declared, "__name__", None) or repr(declared)  # getattr: any type form
        raise UsageError(
            f"{flag} does not match {name} of {target.spec}: {where}: {first['msg']} "
            f"({counted(e.error_count(), 'error')}){_input_hint(declared, flag)}"
        ) from e
    return payload


def _input_hint(declared: object, flag: str) -> str:
    if declared is str and flag == "--input":
        return "; pass text with --input-text TEXT, or --input as a JSON string ('\"...\"')"
    if declared is not str and flag == "--input-text":
        return "; --input-text passes plain text: pass JSON with --input"
    return ""


def _cmd_run(args: argparse.Namespace) -> int:
    payload = input_of(args)
    with user_output_to_stderr(args.json):
        target = load_checked(args.target)
        flag = "--input-text" if given(args, "input_text") is not None else "--input"
        payload = _checked_input(target, payload, flag)
        wants_model = needs_model(target.step) or args.model
        if temporal.on_temporal(args.store):
            began = temporal.run(args, target, payload, bool(wants_model))
    if temporal.on_temporal(args.store):
        if isinstance(began, str):
            return _print_queued(began, args.json)
        _print_result(began, args.json, verbose=args.verbose)
        return exit_code(began.status)
    with user_output_to_stderr(args.json):
        if args.queue and args.deps:
            raise UsageError(
                "--deps is not stored with a queued run: a worker makes deps with the target "
                "module's make_deps()"
            )
        make_deps = deps_factory(target, args.deps)
        if args.queue:
            queued = _enqueue(args, target, payload, wants_model)
    if args.queue:
        return _print_queued(queued, args.json)
    _say_new_folder(args.store)
    run_id = new_run_id()  # known before the run starts, for the line a Ctrl-C prints
    with _interrupted(run_id), user_output_to_stderr(args.json), watch_sinks(args) as sinks:
        result = runner.run(
            target.step,
            payload,
            model=model_for(target, args.model, structured_mode=args.structured_mode, api=args.api)
            if wants_model
            else None,
            budget=budget_of(args),
            max_steps=args.max_steps,
            store=args.store or DEFAULT,
            spec=args.target,
            approvals=TerminalApprovals() if interactive(args) else None,
            sinks=sinks,
            stream=args.stream,
            conversation=args.conversation,
            deps=make_deps() if make_deps is not None else None,
            run_id=run_id,
        )
    _print_result(result, args.json, verbose=args.verbose, streamed=_streamed(sinks))
    return exit_code(result.status)


def _say_new_folder(where: str | None) -> None:
    """A run records in its store, made when missing: say so when that makes a folder the
    user named (the default ``.loopwise/`` is made silently, like git's ``.git``)."""
    folder = new_store_folder(where)
    if folder is not None and (where or os.environ.get("LOOPWISE_STORE")):
        print(
            f"loopwise: new store folder {folder} (for {where or '$LOOPWISE_STORE'})",
            file=sys.stderr,
        )


def _enqueue(
    args: argparse.Namespace, target: Target, payload: JSONValue, wants_model: bool
) -> str:
    """``run --queue``: record the run ``queued`` for a worker; its id."""
    model = model_for(target, args.model, api=args.api) if wants_model else None
    return runner.enqueue(
        args.target,
        payload,
        model=model.name if model is not None else None,
        speaks=model_member(model, "speaks") if model is not None else None,
        budget=budget_of(args),
        max_steps=args.max_steps,
        store=args.store or DEFAULT,
        conversation=args.conversation,
    )


def _print_queued(run_id: str, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"run_id": run_id, "status": "queued"}))
    else:
        print(f"queued run {run_id}: a `loopwise worker` on this store will run it")
    return 0


@contextmanager
def _interrupted(run_id: str) -> Iterator[None]:
    """Ctrl-C during a run: one line naming the run (recorded ``cancelled``), exit 130."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(
            f"interrupted: run {run_id} is recorded cancelled; continue it with: "
            f"loopwise resume {run_id}"
        ) from None


def _cmd_resume(args: argparse.Namespace) -> int:
    require_folder(args.store)
    if temporal.on_temporal(args.store):
        raise UsageError(
            "a run on Temporal resumes by itself once decided: start `loopwise worker --store "
            f"{args.store or '$LOOPWISE_STORE'}` if none is running"
        )
    with _interrupted(args.run_id), user_output_to_stderr(args.json), watch_sinks(args) as sinks:
        result = runner.resume(
            args.run_id,
            model=args.model,
            structured_mode=args.structured_mode,
            api=args.api,
            store=args.store or DEFAULT,
            approvals=TerminalApprovals() if interactive(args) else None,
            force=args.force,
            sinks=sinks,
            deps=_given_deps(args.deps),
        )
    _print_result(result, args.json, verbose=args.verbose)
    return exit_code(result.status)


def _given_deps(spec: str | None) -> object:
    """``--deps``'s deps for a resume (without it the run's module gives its own)."""
    make = deps_factory(None, spec) if spec else None
    return make() if make is not None else None


def add_resume_verb(sub: Verbs) -> None:
    """``resume``: continue a paused or interrupted run."""
    p = sub.add_parser("resume", help="resume a paused or interrupted run")
    p.add_argument("run_id")
    p.add_argument("--model", help="continue with this model instead of the run's own")
    add_api_flag(p)
    add_structured_mode_flag(p)
    p.add_argument(
        "--force", action="store_true", help="take over a run whose process is known to be gone"
    )
    add_deps_flag(p)
    p.add_argument("--store", help=store_help)
    add_watch_flags(p)
    _add_output_flags(p)
    p.set_defaults(handler=_cmd_resume)


def _add_output_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help=f"print the whole output (a longer one is cut at {SHORT_OUTPUT} lines)",
    )


def add_run_verb(sub: Verbs) -> None:
    """``run``: run a step on one input."""
    p = sub.add_parser("run", help="run a step on one input")
    p.add_argument("target", help="path/to/module.py:name or package.module:name")
    add_input_flags(p)
    p.add_argument("--model", help="model name, or `scripted` for the offline model")
    add_api_flag(p)
    add_structured_mode_flag(p)
    add_deps_flag(p)
    p.add_argument("--store", help=store_help)
    p.add_argument(
        "--conversation",
        metavar="ID",
        help="continue this conversation's history (an agent target; a new id starts one)",
    )
    add_limit_flags(p, "the run")
    add_watch_flags(p, stream=True)
    p.add_argument(
        "--queue", action="store_true", help="record the run for a `loopwise worker` to run"
    )
    _add_output_flags(p)
    p.set_defaults(handler=_cmd_run)


def _cmd_graph(args: argparse.Namespace) -> int:
    shape = describe(load_target(args.target).step)
    if shape.kind not in (Kind.WORKFLOW, Kind.HYBRID, Kind.AGENT):
        raise UsageError(
            f"{args.target} is not a workflow, agent or hybrid: it has no graph to draw"
        )
    print(mermaid(shape), end="")
    return 0


def add_graph_verb(sub: Verbs) -> None:
    """``graph``: print a workflow, agent or hybrid as Mermaid."""
    p = sub.add_parser("graph", help="print a workflow, agent or hybrid as Mermaid")
    p.add_argument("target", help="path/to/module.py:name or package.module:name")
    add_unused_store_flag(p)
    p.set_defaults(handler=_cmd_graph)
