"""What live traffic says of a decision: :func:`live_report` (``loopwise check``'s ``live``)
and :func:`drift_finding` (its warning).

A :class:`~loopwise.evidence.live.shadow.Shadow` keeps one pair per shadowed run in the run
store (:class:`~loopwise.store.base.LiveCase`); a pair whose shadow completed is a case,
and a case whose outputs do not agree a disagreement. Over a window (``--live-window``,
default the last 7 days) the disagreements ``k`` of ``n`` cases bound the live
disagreement rate exactly (one-sided Clopper–Pearson at ``1 − delta``, as the certified
sweep bounds its error: :mod:`loopwise.evidence.evals.bounds`). It is judged against a
bound: the ``alpha`` of the last certificate (the newest sweep that certified a threshold,
in the eval store under the target's name or the name of the step it shadows; a newer sweep
that certified nothing — "escalate every case" — withdraws no requirement, and the bound
says it came after), else ``--max-error``:

* ``drift`` — the lower bound is above it: the evidence says live traffic disagrees more
  than the decision allowed (a warning naming the numbers, the window and the command that
  re-runs the decision);
* ``ok`` — the upper bound is at or below it;
* ``uncertain`` — neither: too few cases to say (or no bound to judge against).

The claim is agreement between the two steps on sampled live traffic, not correctness: a
shadow is a reference, not a label (people's decisions are: ``kind == "person"``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Literal

from loopwise.core.events import now_iso
from loopwise.core.jsontypes import JSONObject, json_number
from loopwise.core.since import since_instant
from loopwise.errors import TargetError
from loopwise.evidence.check import Finding, Level
from loopwise.evidence.evals.bounds import (
    cases_to_bound,
    cases_to_bound_rate,
    clopper_pearson_lower,
    clopper_pearson_upper,
)
from loopwise.evidence.evals.history import history_key, last_eval
from loopwise.store.base import EvalHistory, LiveCase, LiveEvidence

__all__ = [
    "DEFAULT_WINDOW",
    "LiveReport",
    "aliases",
    "drift_finding",
    "live_report",
    "spellings",
    "window_start",
]

DEFAULT_WINDOW = "7d"
"""The window ``check`` reads live cases over without ``--live-window``."""

Verdict = Literal["ok", "uncertain", "drift"]


def window_start(window: str, *, now: datetime | None = None) -> str | None:
    """The first instant of ``window`` (ISO-8601 UTC): ``30m``, ``24h``, ``7d``, ``2w`` back
    from ``now``, an ISO date or time as given, or ``None`` for ``all``. Anything else
    raises :class:`ConfigError` (``name="live-window"``)."""
    return since_instant(window, flag="--live-window", now=now)


@dataclass(frozen=True, kw_only=True, slots=True)
class LiveReport:
    """The live disagreement of a target over a window, and its verdict."""

    cases: int
    """Shadowed runs whose shadow completed (each a pair that agrees or not)."""
    disagreements: int
    """Of those, pairs that did not agree."""
    rate: float | None
    """``disagreements / cases`` (``None`` with no case)."""
    upper_bound: float
    """The disagreement rate is at most this at ``1 - delta`` (exact, Clopper–Pearson)."""
    lower_bound: float
    """... and at least this."""
    verdict: Verdict
    """``ok``, ``uncertain`` or ``drift`` (see the module docs)."""
    since: str | None
    """Where the window starts (ISO-8601 UTC; ``None``: all cases kept)."""
    bound: float | None
    """What the rate is judged against (``None``: nothing to judge against)."""
    bound_from: str | None
    """Where the bound comes from (the certificate's target and eval, or ``--max-error``)."""
    delta: float
    """The bounds hold with probability ``1 - delta``."""
    failed: int
    """Shadows that did not complete (refused, raised, looped, over budget): no case."""
    needed: int | None
    """About how many cases, at the rate seen, would bound it under ``bound``
    (``uncertain`` only; ``None`` when none would: the rate is at or above it)."""

    def to_dict(self) -> JSONObject:
        """``check --json``'s ``live``: ``{"cases", "disagreements", "rate", "upper_bound",
        "verdict", "since", ...}``."""
        return asdict(self)


def live_report(
    live: LiveEvidence,
    history: EvalHistory | None,
    spec: str,
    *,
    aliases: tuple[str, ...] = (),
    also: tuple[str, ...] = (),
    window: str = DEFAULT_WINDOW,
    max_error: float | None = None,
    delta: float = 0.1,
) -> LiveReport | None:
    """The live report of the target ``spec`` (or its ``aliases``: :func:`aliases`) from the
    live cases in ``live`` (``None`` when it has none ever), judged against the newest
    certificate of ``spec`` or of a step it shadows (``also``: their specs) in ``history``,
    else ``max_error``."""
    names = list(dict.fromkeys(n for s in (spec, *aliases) for n in spellings(live, s)))
    if not names:
        return None
    since = window_start(window)
    kept = live.live_cases(names, since=since, kind="shadow")
    judged = [c for c in kept if c.agree is not None]
    n, k = len(judged), sum(c.agree is False for c in judged)
    bound, source = _bound(history, (spec, *also), max_error)
    lower = clopper_pearson_lower(k, n, 1 - delta)
    upper = clopper_pearson_upper(k, n, 1 - delta)
    verdict = _verdict(lower, upper, bound)
    return LiveReport(
        cases=n,
        disagreements=k,
        rate=None if n == 0 else k / n,
        upper_bound=upper,
        lower_bound=lower,
        verdict=verdict,
        since=since if since is not None else _oldest(kept),
        bound=bound,
        bound_from=source,
        delta=delta,
        failed=len(kept) - n,
        needed=_needed(k, n, bound, delta) if verdict == "uncertain" else None,
    )


def spellings(live: LiveEvidence, spec: str) -> list[str]:
    """How the store may have recorded the target ``spec``: as given, by its history key,
    or as any recorded target naming the same file (a run started as ``./flow.py:x``)."""
    key = history_key(spec)
    return [t for t in live.live_targets() if t in (spec, key) or history_key(t) == key]


def aliases(spec: str) -> tuple[str, ...]:
    """The other spellings of the target ``spec`` names, as a run may have recorded it:
    ``module:name`` for each name its module gives the step, and the module alone when
    that means the same step."""
    # Here, not at the top: every verb of the command line loads this module (check's
    # flags), and loading targets loads the run machinery the store verbs do without.
    from loopwise.running.targets import load_target

    try:
        target = load_target(spec)
    except TargetError:  # nothing loads by that name: it is only spelled as given
        return ()
    module_part = spec.partition(":")[0]
    found = [f"{module_part}:{k}" for k, v in vars(target.module).items() if v is target.step]
    try:
        alone = load_target(module_part).step is target.step
    except TargetError:  # the module exposes several steps: alone it names none
        alone = False
    return tuple(n for n in dict.fromkeys([*found, *([module_part] if alone else [])]) if n != spec)


def _bound(
    history: EvalHistory | None, specs: tuple[str, ...], max_error: float | None
) -> tuple[float | None, str | None]:
    """The ``alpha`` of the newest certificate among ``specs``' last sweeps (a swept
    cascade's summary keeps it in its ``calibration``) and where it is from, else
    ``max_error``."""
    found: list[tuple[str, str, JSONObject]] = []
    for spec in specs:
        if history is None:
            break
        before, newer = now_iso(), None
        while last := last_eval(history, spec, dataset=None, before=before, having="calibration"):
            certified = last.get("calibration", {}).get("certified")
            if isinstance(certified, dict):
                where = f"{spec} (eval {last['eval_id']}"
                after = "" if newer is None else f"; the newer sweep, eval {newer}, certified none"
                found.append((str(last["created_at"]), f"{where}{after})", certified))
                break
            # A sweep that certified nothing does not lift the requirement an older one met.
            newer = newer or str(last["eval_id"])
            before = _just_before(str(last["created_at"]))
    if found:
        _, where, certified = max(found, key=lambda f: f[0])
        return json_number(certified["alpha"]), f"the certificate of {where}"
    if max_error is not None:
        return max_error, "--max-error"
    return None, None


def _just_before(at: str) -> str:
    """The instant just before ``at`` (ISO-8601), to read the history from there on."""
    return (datetime.fromisoformat(at) - timedelta(microseconds=1)).isoformat()


def _verdict(lower: float, upper: float, bound: float | None) -> Verdict:
    if bound is None:
        return "uncertain"
    if lower > bound:
        return "drift"
    return "ok" if upper <= bound else "uncertain"


def _needed(k: int, n: int, bound: float | None, delta: float) -> int | None:
    """About how many cases, at the rate seen, would bound it under ``bound`` (``None``: no
    bound, or a rate at or above it, which more cases would show as drift instead)."""
    if bound is None:
        return None
    return cases_to_bound_rate(k / n, bound, delta) if n else cases_to_bound(bound, delta)


def _oldest(cases: list[LiveCase]) -> str | None:
    return min((c.created_at for c in cases), default=None)


def drift_finding(report: LiveReport, spec: str, rerun: str) -> Finding | None:
    """The warning of a ``drift`` verdict (``None`` otherwise): the numbers, the window and
    ``rerun``, the command that re-runs the decision."""
    if report.verdict != "drift" or report.bound is None:
        return None
    window = f"since {report.since}" if report.since else "over every case kept"
    confidence = f"{1 - report.delta:.0%}"
    return Finding(
        level=Level.WARNING,
        code="live-drift",
        where=spec,
        message=(
            f"live traffic disagrees more than the decision allowed: {report.disagreements} of "
            f"{report.cases} shadowed cases {window} disagree ({report.rate:.1%}; at least "
            f"{report.lower_bound:.1%} at {confidence}), above the {report.bound:.1%} of "
            f"{report.bound_from}"
        ),
        fix=f"re-run the decision on live cases: {rerun}",
    )
