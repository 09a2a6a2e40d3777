"""Crash-and-resume helpers shared by the exactly-once tests (store/test_sql.py and more).

A child process runs a step and SIGKILLs itself from an event sink at event N; the
parent approves what waits and resumes in further children until the run completes,
then compares the effects (recorded once per idempotency key) with a clean run's.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import loopwise
from loopwise import gates, open_store
from loopwise.testing import ScriptedModel


class KillAt:
    """An event sink that SIGKILLs its process at event ``seq``, once (a marker file says)."""

    def __init__(self, seq: int, marker: Path) -> None:
        self.seq = seq
        self.marker = marker

    def record(self, run_id: str, event: loopwise.Event) -> None:
        if event.seq == self.seq and not self.marker.exists():
            self.marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)


def fork(child: Callable[[], None]) -> int:
    """Run ``child`` in a forked process (exit 1 if it raised); the child's pid."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            child()
        except BaseException:
            code = 1
        os._exit(code)
    return pid


def wait(pid: int, timeout: float = 30.0) -> int:
    """The child's wait status; kills it (and fails) if it hangs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("child process hung")


def record_effect(directory: Path, kind: str, n: int, key: str) -> str:
    """Log the attempt, and record the effect once per idempotency ``key``."""
    with (directory / "attempts.txt").open("a") as f:
        f.write(key + "\n")
    done = directory / "effects.jsonl"
    seen = [json.loads(x)["key"] for x in done.read_text().splitlines()] if done.exists() else []
    if key not in seen:
        with done.open("a") as f:
            f.write(json.dumps({"key": key, "n": n, "kind": kind}) + "\n")
    return f"{kind} {n}"


def effect_tools(workdir: dict[str, Path]) -> tuple[loopwise.Tool, loopwise.Tool]:
    """``record`` (a write its policy passes) and ``pay`` (irreversible, a person decides),
    each recording its effect in ``workdir["dir"]`` once per idempotency key."""

    @loopwise.tool(effect="write", gate=gates.policy(lambda a: True))
    def record(n: int, ctx: Any) -> str:
        """Record n (once per idempotency key)."""
        return record_effect(workdir["dir"], "record", n, ctx.idempotency_key)

    @loopwise.tool(effect="irreversible", gate=gates.human())
    def pay(n: int, ctx: Any) -> str:
        """Pay n (once per idempotency key), after a person approves."""
        return record_effect(workdir["dir"], "pay", n, ctx.idempotency_key)

    return record, pay


def effects(directory: Path, run_id: str) -> list[tuple[str, str, int]]:
    """The recorded effects as (key without the run id, kind, n), sorted."""
    rows = [json.loads(x) for x in (directory / "effects.jsonl").read_text().splitlines()]
    return sorted((r["key"].removeprefix(f"{run_id}:"), r["kind"], r["n"]) for r in rows)


def drive(
    step: loopwise.Step,
    db: Path | str,
    run_id: str,
    kill: KillAt,
    respond: Any,
    *,
    deny: Callable[[Any], bool] = lambda approval: False,
) -> None:
    """Run in a child process, then resume in children until done, approving what waits
    (denying what ``deny`` says of the approval)."""
    for attempt in range(8):

        def child(first: bool = attempt == 0) -> None:
            model = ScriptedModel(respond)
            if first:
                loopwise.run(step, "go", model=model, store=db, run_id=run_id, sinks=(kill,))
            else:
                loopwise.resume(run_id, step=step, model=model, store=db, sinks=(kill,))

        wait(fork(child))
        with open_store(db) as store:
            for waiting in store.pending(run_id):
                if deny(waiting):
                    store.decide(
                        run_id, waiting.approval_id, decision="denied", by="t", reason="no"
                    )
                else:
                    store.decide(run_id, waiting.approval_id, decision="approved", by="t")
            if store.get_run(run_id).status == "completed":
                return
    raise AssertionError(f"{run_id} did not complete")


def approve_all(run_id: str, by: str = "alice") -> list[str]:
    """Approve every pending approval of ``run_id`` in the default store; their ids."""
    with open_store() as store:
        ids = [p.approval_id for p in store.pending(run_id)]
        for approval_id in ids:
            store.decide(run_id, approval_id, decision="approved", by=by)
    return ids
