"""Write the committed Temporal histories test_workflow_replay.py (beside it) replays.

    python tests/integrations/temporal/_histories.py 127.0.0.1:7233

runs each canonical example on the Temporal server at that address through the ``loopwise``
command (a worker of its own, offline models), then saves each run's workflow history as
``histories/<name>.json`` beside it. Run it again when a change to loopwise's loop is meant to
change what a run does (and say so in the changelog: runs in flight would not replay).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OUT = Path(__file__).with_name("histories")
COMPLAINT = '"Order O-1003 arrived broken and I want my money back."'


def _loopwise(store: str, *argv: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "loopwise.cli.main", *argv, "--store", store, "--json"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode not in (0, 1):
        raise SystemExit(f"loopwise {' '.join(argv)}: {done.stderr}")
    return json.loads(done.stdout) if done.stdout.strip() else {}


def _decide(store: str, *argv: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loopwise.cli.main", *argv, "--store", store],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"loopwise {' '.join(argv)}: {done.stderr}")


def _until_status(store: str, run_id: str, wanted: str) -> None:
    for _ in range(600):
        if _loopwise(store, "runs", "show", run_id).get("status") == wanted:
            return
        time.sleep(0.1)
    raise SystemExit(f"run {run_id} never got {wanted}")


def refund_desk(store: str) -> str:
    run_id = _loopwise(
        store, "run", "workflows/refund_desk.py:refund_desk", "--model", "scripted",
        "--input", COMPLAINT,
    )["run_id"]  # fmt: skip
    edit = '{"order_id": "O-1003", "amount_cents": 5000, "reason": "a partial refund"}'
    _decide(store, "approve", run_id, "--approval", "execute.s1", "--args", edit, "--by", "ann")
    _decide(store, "deny", run_id, "--approval", "execute.s2", "--reason", "no mail", "--by", "ann")
    worker = subprocess.Popen(
        [sys.executable, "-m", "loopwise.cli.main", "worker", "--store", store], cwd=ROOT
    )
    try:
        _until_status(store, run_id, "awaiting_approval")
        time.sleep(1)
        _until_status(store, run_id, "awaiting_approval")
        _decide(store, "approve", run_id, "--approval", "execute.s3.recheck", "--by", "ann")
        _until_status(store, run_id, "denied")
    finally:
        worker.terminate()
        worker.wait()
    return run_id


def ticket_triage(store: str) -> str:
    ticket = '{"subject": "Charged twice", "body": "Two charges of $49 on March 3."}'
    return str(
        _loopwise(
            store, "run", "workflows/ticket_triage.py:triage", "--model", "scripted",
            "--input", ticket,
        )["run_id"]
    )  # fmt: skip


def order_investigation(store: str) -> str:
    question = '"Why did customer C-1004\'s last three orders fail?"'
    return str(
        _loopwise(
            store, "run", "agents/order_investigation.py:investigate", "--model", "scripted",
            "--input", question,
        )["run_id"]
    )  # fmt: skip


async def _save(address: str, runs: dict[str, str]) -> None:
    from temporalio.client import Client

    client = await Client.connect(address)
    OUT.mkdir(parents=True, exist_ok=True)
    for name, run_id in runs.items():
        history = await client.get_workflow_handle(run_id).fetch_history()
        (OUT / f"{name}.json").write_text(history.to_json() + "\n")


def main() -> None:
    address = sys.argv[1]
    store = f"temporal://{address}/default?task_queue=histories{os.getpid()}"
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["LOOPWISE_SHOP_DB"] = str(Path(scratch) / "shop.db")
        runs = {
            "refund_desk": refund_desk(store),
            "ticket_triage": ticket_triage(store),
            "order_investigation": order_investigation(store),
        }
    asyncio.run(_save(address, runs))
    print(f"wrote {', '.join(runs)} to {OUT}")


if __name__ == "__main__":
    main()
