"""The refund desk fits a small server: its planner sends each schema once (the first
request fits a 4,096-token context with room for the answer), and a server's
context-length refusal ends the run ``budget_exceeded`` saying how much was sent."""

from __future__ import annotations

import json
import sys

import pytest

import loopwise
from loopwise import Status
from loopwise.models.port import ModelRequest
from loopwise.testing import FakeChatServer, Fault
from tests.support import ROOT

sys.path.insert(0, str(ROOT / "workflows"))

import refund_desk

COMPLAINT = "Order O-1003 arrived broken and I want my money back."
BUDGET_BYTES = 9_000
"""The first request's bytes: ~2,250 tokens at ~4 bytes a token (a real tokenizer counts
more on JSON, ~1.3× in the llama.cpp run of the issue), so a 4,096-token server holds it
with room for a plan. It was 12,497 bytes when every schema was sent three times."""


def test_the_refund_desks_first_planner_call_fits_a_4096_token_server() -> None:
    with FakeChatServer(refund_desk._respond) as server, refund_desk.make_eval_deps() as books:
        result = loopwise.run(
            refund_desk.refund_desk, COMPLAINT, model=server.model(), store=None, deps=books
        )
        first, size = server.requests[0], server.request_bytes[0]
    assert result.status is Status.AWAITING_APPROVAL, result.detail
    assert size <= BUDGET_BYTES, f"the first planner request is {size:,} bytes"
    estimate = ModelRequest(messages=first["messages"], tools=first["tools"]).prompt_chars() // 4
    assert estimate * 1.3 + 500 < 4_096  # a real tokenizer's count, plus a plan's answer
    text = json.dumps(first)
    # Each argument schema once: not in the instructions, not inlined beside its $ref.
    assert text.count('"Amount to refund, in the order') == 1
    assert "args schema" not in first["messages"][0]["content"]
    assert "issue_refund [irreversible]" in first["messages"][0]["content"]


@pytest.mark.parametrize(
    "error",
    [
        {"message": "This model's maximum context length is 4096 tokens.",
         "type": "invalid_request_error", "code": "context_length_exceeded"},
        {"code": 400, "message": "the request exceeds the available context size",
         "type": "exceed_context_size_error", "n_prompt_tokens": 4204, "n_ctx": 4096},
    ],
)  # fmt: skip
def test_a_context_length_refusal_ends_budget_exceeded_with_the_tokens_sent(
    error: dict[str, object],
) -> None:
    fault = Fault(status=400, body={"error": error})
    with FakeChatServer([fault]) as server, refund_desk.make_eval_deps() as books:
        result = loopwise.run(
            refund_desk.refund_desk, COMPLAINT, model=server.model(), store=None, deps=books
        )
    assert result.status is Status.BUDGET_EXCEEDED, result.detail
    detail = result.detail or ""
    assert "the model's context was exceeded: the request sent about" in detail
    assert "tokens (loopwise's estimate" in detail
    if "n_ctx" in error:
        assert "the server counted 4,204 tokens, its context holds 4,096" in detail
    (finished,) = [e for e in result.events if e.type == "run_finished"]
    assert finished.data["error_type"] == "context-length-exceeded"
    assert finished.data["sent_tokens"] > 1_000
