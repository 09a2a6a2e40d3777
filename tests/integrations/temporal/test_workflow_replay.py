"""Runs in flight survive a change: the committed histories of the canonical examples on
Temporal (``histories/`` beside this file, written by ``_histories.py``) replay against
today's workflow code without a non-determinism error. No server: a replayer reads them.

A change that makes one fail changes what a run in flight does when a worker picks it up
again: deploy it under a new task queue (docs/guides/temporal.md), and write the histories
again.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from loopwise.integrations.temporal.codec import DATA_CONVERTER
from loopwise.integrations.temporal.worker import sandbox
from loopwise.integrations.temporal.workflow import LoopwiseRun
from tests.support import ROOT

HERE = Path(__file__).parent
HISTORIES = sorted((HERE / "histories").glob("*.json"))


def test_there_is_a_history_of_each_canonical_example() -> None:
    assert [h.stem for h in HISTORIES] == ["order_investigation", "refund_desk", "ticket_triage"]


@pytest.mark.parametrize("history", HISTORIES, ids=[h.stem for h in HISTORIES])
def test_a_committed_history_replays(history: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the runs were started with specs relative to the checkout
    replayer = Replayer(
        workflows=[LoopwiseRun], workflow_runner=sandbox(), debug_mode=True,
        data_converter=DATA_CONVERTER,
    )  # fmt: skip
    loaded = WorkflowHistory.from_json(history.stem, history.read_text())
    result = asyncio.run(replayer.replay_workflow(loaded, raise_on_replay_failure=False))
    assert result.replay_failure is None, result.replay_failure


def test_a_history_that_took_another_path_fails_to_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The refund desk's history, told that it ran the ticket triage: the loop now asks the
    # model where the history has the desk's tool call, and the replayer must say so.
    monkeypatch.chdir(ROOT)
    data = json.loads((HERE / "histories" / "refund_desk.json").read_text())
    started = data["events"][0]["workflowExecutionStartedEventAttributes"]
    begin = started["input"]["payloads"][0]
    args = json.loads(base64.b64decode(begin["data"]))
    args["spec"] = "workflows/ticket_triage.py:triage"
    args["input"] = {"subject": "Charged twice", "body": "Two charges."}
    begin["data"] = base64.b64encode(json.dumps(args).encode()).decode()
    replayer = Replayer(
        workflows=[LoopwiseRun], workflow_runner=sandbox(), debug_mode=True,
        data_converter=DATA_CONVERTER,
    )  # fmt: skip
    loaded = WorkflowHistory.from_json("changed", json.dumps(data))
    result = asyncio.run(replayer.replay_workflow(loaded, raise_on_replay_failure=False))
    assert "Nondeterminism" in repr(result.replay_failure)


def test_large_payloads_travel_compressed_and_small_or_older_ones_as_they_are() -> None:
    from temporalio.api.common.v1 import Payload

    from loopwise.integrations.temporal.codec import ENCODING, SMALL, Compressed

    transcript = json.dumps([{"role": "tool", "content": "item 7 is fine"}] * 200).encode()
    big = Payload(metadata={"encoding": b"json/plain"}, data=transcript)
    small = Payload(metadata={"encoding": b"json/plain"}, data=b'{"kind": "bug"}')
    codec = Compressed()
    sent = asyncio.run(codec.encode([big, small]))
    assert sent[0].metadata["encoding"] == ENCODING and len(sent[0].data) < len(transcript) // 10
    assert sent[1] == small and len(small.data) <= SMALL
    assert asyncio.run(codec.decode(sent)) == [big, small]
    assert asyncio.run(codec.decode([big])) == [big]  # written before the codec: as it is
