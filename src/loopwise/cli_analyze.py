"""The ``loopwise analyze`` verb: read stored runs, print :func:`loopwise.analyze.analyze`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from loopwise.analyze import TraceAnalysis, analyze
from loopwise.cli_options import store_help
from loopwise.stores import open_existing

__all__ = ["add_analyze_verb", "stored_runs"]


def add_analyze_verb(sub: Any) -> None:
    """Register ``analyze`` on the CLI's subparsers ``sub``."""
    p = sub.add_parser("analyze", help="mine stored agent runs for their tool-call paths")
    p.add_argument("target", nargs="?", help="only runs of this target (spec or step name)")
    p.add_argument("--store", help=store_help)
    p.add_argument("--limit", type=int, default=1000, help="most recent runs to read")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=_cmd_analyze)


def _cmd_analyze(args: argparse.Namespace) -> int:
    runs = stored_runs(args.store, args.target, limit=args.limit)
    result = analyze(runs, target=args.target)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print(_analysis_text(result))
    return 0


def _analysis_text(a: TraceAnalysis) -> str:
    lines = [f"{a.runs} agent run(s) of {a.target or 'every target'}; {len(a.paths)} path(s)"]
    for p in a.paths[:10]:
        statuses = ", ".join(f"{k} {v}" for k, v in p.statuses.items())
        lines.append(f"  {p.share:>4.0%}  {p.runs:>4} run(s)  {p.text}   [{statuses}]")
    if len(a.paths) > 10:
        lines.append(f"  … {len(a.paths) - 10} more")
    lines += ["", f"verdict: {a.verdict} — {a.message}"]
    if a.skeleton:
        lines += ["", a.skeleton]
    return "\n".join(lines)


def stored_runs(
    where: Any, target: str | None = None, *, limit: int = 1000
) -> list[dict[str, Any]]:
    """Runs of ``target`` from the store at ``where`` (a path or URL; ``None``: the default),
    oldest first, as :func:`analyze` takes them.

    ``target`` matches a run's recorded spec (``agents/x.py:investigate``) or its step
    name (``investigate``); ``None`` takes every run. Reads the newest ``limit`` runs.
    """
    store = open_existing(where)
    if store is None:
        return []  # no store yet: no runs (a path that is not a store fails when opened)
    names = {target, target.rsplit(":", 1)[-1]} if target else set()
    with store:
        rows = store.list_runs(limit=limit)
        chosen = [r for r in rows if not names or r.spec in names or r.target in names]
        return [
            {"run_id": r.run_id, "status": r.status, "events": store.events(r.run_id)}
            for r in reversed(chosen)
        ]
