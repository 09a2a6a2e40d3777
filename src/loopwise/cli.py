"""The ``loopwise`` command (DESIGN §11). Nothing imports this module.

Exit codes: 0 completed (or nothing wrong); 1 a run ended with another status or
``check`` found errors; 2 a usage or configuration error, printed as one line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import pydantic

from loopwise import runner
from loopwise.cli_analyze import add_analyze_verb
from loopwise.cli_check import add_check_verb
from loopwise.cli_decide import add_decide_verb
from loopwise.cli_eval import add_eval_verb
from loopwise.cli_init import add_init_verb
from loopwise.cli_input import add_input_flags, input_of
from loopwise.cli_options import (
    add_deps_flag,
    add_limit_flags,
    add_structured_mode_flag,
    budget_of,
    interactive,
    load_checked,
    store_help,
    user_output_to_stderr,
)
from loopwise.cli_runs import add_runs_verbs
from loopwise.cli_watch import add_watch_flags, watch_sinks
from loopwise.cli_worker import add_worker_verb
from loopwise.errors import ConfigError, LoopwiseError, StoreError
from loopwise.gates import TerminalApprovals
from loopwise.shape import Kind, describe, mermaid
from loopwise.step import RunResult, Status, needs_model
from loopwise.targets import Target, deps_factory, load_target, model_for

__all__ = ["main"]

Handler = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """A usage mistake: printed as one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _print_result(result: RunResult, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result.to_dict(), default=str))
        return
    print(
        f"run {result.run_id}: {result.status}" + (f" — {result.detail}" if result.detail else "")
    )
    if result.output is not None:
        print(json.dumps(result.to_dict()["output"], indent=2, default=str))
    for p in result.pending:
        print(
            f"waiting for approval {p['approval_id']}: {p['tool']}({json.dumps(p['args'])}) — "
            f"loopwise approve {result.run_id} --approval {p['approval_id']}"
        )
    u = result.usage
    cost = "unknown" if u.cost_usd is None else f"${u.cost_usd:.6f}"
    print(
        f"usage: {u.model_calls} model calls, {u.tool_calls} tool calls, "
        f"{u.total_tokens} tokens, cost {cost}, {u.wall_seconds:.2f}s"
    )


def exit_code(status: Status) -> int:
    """0 for ``completed``, 1 for every other status."""
    return 0 if status is Status.COMPLETED else 1


def _checked_input(target: Target, payload: Any) -> Any:
    """Reject input that cannot match the target's declared pydantic input, before any run."""
    declared = getattr(target.step, "input_type", None)
    if not (isinstance(declared, type) and issubclass(declared, pydantic.BaseModel)):
        return payload
    try:
        declared.model_validate(payload)
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "input"
        raise UsageError(
            f"--input does not match {declared.__name__} of {target.spec}: "
            f"{where}: {first['msg']} ({e.error_count()} error(s))"
        ) from e
    return payload


def _cmd_run(args: argparse.Namespace) -> int:
    payload = input_of(args)
    with user_output_to_stderr(args.json):
        target = load_checked(args.target)
        payload = _checked_input(target, payload)
        wants_model = needs_model(target.step) or args.model
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
    with user_output_to_stderr(args.json), watch_sinks(args) as sinks:
        result = runner.run(
            target.step,
            payload,
            model=model_for(target, args.model, structured_mode=args.structured_mode)
            if wants_model
            else None,
            budget=budget_of(args),
            max_steps=args.max_steps,
            store=args.store or runner.DEFAULT,
            spec=args.target,
            approvals=TerminalApprovals() if interactive(args) else None,
            sinks=sinks,
            stream=args.stream,
            conversation=args.conversation,
            deps=make_deps() if make_deps is not None else None,
        )
    _print_result(result, args.json)
    return exit_code(result.status)


def _enqueue(args: argparse.Namespace, target: Target, payload: Any, wants_model: Any) -> str:
    """``run --queue``: record the run ``queued`` for a worker; its id."""
    return runner.enqueue(
        args.target,
        payload,
        model=model_for(target, args.model).name if wants_model else None,
        budget=budget_of(args),
        max_steps=args.max_steps,
        store=args.store or runner.DEFAULT,
        conversation=args.conversation,
    )


def _print_queued(run_id: str, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"run_id": run_id, "status": "queued"}))
    else:
        print(f"queued run {run_id}: a `loopwise worker` on this store will run it")
    return 0


def _cmd_resume(args: argparse.Namespace) -> int:
    with user_output_to_stderr(args.json), watch_sinks(args) as sinks:
        result = runner.resume(
            args.run_id,
            model=args.model,
            store=args.store or runner.DEFAULT,
            approvals=TerminalApprovals() if interactive(args) else None,
            force=args.force,
            sinks=sinks,
            deps=_given_deps(args.deps),
        )
    _print_result(result, args.json)
    return exit_code(result.status)


def _given_deps(spec: str | None) -> Any:
    """``--deps``'s deps for a resume (without it the run's module gives its own)."""
    make = deps_factory(None, spec) if spec else None
    return make() if make is not None else None


def _add_resume(sub: Any) -> None:
    p = sub.add_parser("resume", help="resume a paused or interrupted run")
    p.add_argument("run_id")
    p.add_argument("--model", help="continue with this model instead of the run's own")
    p.add_argument(
        "--force", action="store_true", help="take over a run whose process is known to be gone"
    )
    add_deps_flag(p)
    p.add_argument("--store", help=store_help)
    add_watch_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=_cmd_resume)


def _add_run(sub: Any) -> None:
    p = sub.add_parser("run", help="run a step on one input")
    p.add_argument("target", help="path/to/module.py:name or package.module:name")
    add_input_flags(p)
    p.add_argument("--model", help="model name, or `scripted` for the offline model")
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
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=_cmd_run)


def _cmd_graph(args: argparse.Namespace) -> int:
    shape = describe(load_target(args.target).step)
    if shape.kind not in (Kind.WORKFLOW, Kind.HYBRID):
        raise UsageError(f"{args.target} is not a workflow: it has no graph to draw")
    print(mermaid(shape), end="")
    return 0


def _add_graph(sub: Any) -> None:
    p = sub.add_parser("graph", help="print a workflow as Mermaid")
    p.add_argument("target", help="path/to/module.py:name or package.module:name")
    p.set_defaults(handler=_cmd_graph)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every verb of DESIGN §11."""
    parser = _Parser(
        prog="loopwise",
        description="Workflows where the steps are known, agents where they are not, hybrids "
        "where a wrong step is expensive — run, gate, evaluate and decide.",
        epilog="Exit codes: 0 completed; 1 another status or check errors; 2 usage errors.",
    )
    sub = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    _add_run(sub)
    _add_graph(sub)
    add_runs_verbs(sub)
    add_decide_verb(sub)
    add_check_verb(sub)
    add_eval_verb(sub)
    add_analyze_verb(sub)
    _add_resume(sub)
    add_worker_verb(sub)
    add_init_verb(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    try:
        args = build_parser().parse_args(argv)
        handler: Handler = args.handler
        return handler(args)
    except (UsageError, ConfigError, StoreError) as e:
        # A store that cannot be opened is a setting to fix too (--store, LOOPWISE_STORE).
        print(f"loopwise: {e}", file=sys.stderr)
        return 2
    except LoopwiseError as e:
        print(f"loopwise: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader left early (`loopwise runs show X | head`): no traceback, and none
        # again when Python flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
