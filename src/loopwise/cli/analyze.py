"""The ``loopwise analyze`` verb: read stored runs, print
:func:`loopwise.evidence.graduate.analyze.analyze`."""

from __future__ import annotations

import argparse
import json

from loopwise.cli.options import Verbs, store_help
from loopwise.core.events import Status
from loopwise.core.names import counted
from loopwise.errors import TargetError
from loopwise.evidence.graduate.analyze import RunRecord, TraceAnalysis, analyze
from loopwise.evidence.graduate.mining import load_runs, newest_runs
from loopwise.running.targets import Target, load_target
from loopwise.store.open import open_existing, require_folder

__all__ = ["add_analyze_verb", "stored_runs"]


def add_analyze_verb(sub: Verbs) -> None:
    """Register ``analyze`` on the CLI's subparsers ``sub``."""
    p = sub.add_parser("analyze", help="mine stored agent runs for their tool-call paths")
    p.add_argument("target", nargs="?", help="only runs of this target (spec or step name)")
    p.add_argument("--store", help=store_help)
    p.add_argument("--limit", type=int, default=1000, help="most recent runs to read")
    p.add_argument(
        "--status",
        type=_statuses,
        default=("completed",),
        help="count runs that ended so (comma-separated, or `all`; default completed)",
    )
    p.add_argument("--model", help="count only runs that started with this model")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(handler=_cmd_analyze)


def _cmd_analyze(args: argparse.Namespace) -> int:
    runs = stored_runs(args.store, args.target, limit=args.limit)
    result = analyze(runs, target=args.target, statuses=args.status, model=args.model)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print(_analysis_text(result))
    return 0


def _statuses(raw: str) -> tuple[str, ...] | None:
    """``--status``: statuses a run may have ended with, or ``all`` (``None``)."""
    names = tuple(sorted({part.strip() for part in raw.split(",") if part.strip()}))
    if names == ("all",):
        return None
    unknown = [n for n in names if n not in _ENDINGS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{raw!r}: use `all` or statuses among {', '.join(sorted(_ENDINGS))}"
        )
    return names


_ENDINGS = frozenset({*(s.value for s in Status), "running", "queued"})


def _analysis_text(a: TraceAnalysis) -> str:
    which = "every" if a.statuses is None else "/".join(a.statuses)
    model = f" with {a.model}" if a.model else ""
    lines = [
        f"{counted(a.runs, 'agent run')} of {a.target or 'every target'} ({which} runs{model}); "
        f"{len(a.paths)} path(s)"
    ]
    for p in a.paths[:10]:
        statuses = ", ".join(f"{k} {v}" for k, v in p.statuses.items())
        runs = "run " if p.runs == 1 else "runs"
        lines.append(f"  {p.share:>4.0%}  {p.runs:>4} {runs}  {p.text}   [{statuses}]")
    if len(a.paths) > 10:
        lines.append(f"  … {len(a.paths) - 10} more")
    lines += ["", f"verdict: {a.verdict} — {a.message}"]
    if a.skeleton:
        lines += ["", a.skeleton]
    return "\n".join(lines)


def stored_runs(
    where: str | None, target: str | None = None, *, limit: int = 1000
) -> list[RunRecord]:
    """The newest ``limit`` runs of ``target`` from the store at ``where`` (a path or URL;
    ``None``: the default), oldest first, as :func:`analyze` takes them; never an eval's.

    A ``target`` that loads (``agents/x.py:investigate``) takes exactly that agent's runs,
    as ``graduate`` mines them (the same module and name, however the run spelled it: not
    a same-named agent of another module). One that does not load — a bare step name, or
    a module since deleted — matches a run's recorded spec or step name. ``None`` takes
    every run.
    """
    require_folder(where)
    agent = _loadable(target)
    if agent is not None:
        return load_runs(where, agent, limit=limit)
    store = open_existing(where)
    if store is None:
        return []  # no store yet: no runs (a path that is not a store fails when opened)
    names = {target, target.rsplit(":", 1)[-1]} if target else set()
    with store:
        return newest_runs(
            store, lambda r: not names or r.spec in names or r.target in names, limit
        )


def _loadable(target: str | None) -> Target | None:
    """The agent ``target`` names when it is a spec that loads here, else ``None``."""
    if target is None or (":" not in target and not target.endswith(".py")):
        return None
    try:
        return load_target(target)
    except TargetError:
        return None
