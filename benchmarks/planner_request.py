"""What the refund desk's planner sends per call: bytes on the wire and tokens.

    .venv/bin/python benchmarks/planner_request.py [--json]

Runs ``workflows/refund_desk.py:refund_desk`` once against the local ``FakeChatServer``
(its offline responder; the run pauses at its gates) and prints, for each planner call,
the request body's size in bytes and its size in tokens by the estimate the library's
budget uses (``ModelRequest.prompt_chars() // 4``), and by tiktoken's ``o200k_base`` when
tiktoken is installed. A 4,096-token server must hold the first call plus the answer.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "workflows"))
os.environ.setdefault("LOOPWISE_SHOP_DB", str(Path(tempfile.mkdtemp()) / "shop.db"))

import refund_desk  # noqa: E402

import loopwise  # noqa: E402
from loopwise.models.port import ModelRequest  # noqa: E402
from loopwise.testing import FakeChatServer  # noqa: E402

COMPLAINT = "Order O-1003 arrived broken and I want my money back."


def _tiktoken(payload: dict[str, Any]) -> int | None:
    try:
        import tiktoken
    except ImportError:
        return None
    text = json.dumps(payload["messages"]) + json.dumps(payload.get("tools") or [])
    return len(tiktoken.get_encoding("o200k_base").encode(text))


def measure() -> list[dict[str, Any]]:
    """One row per planner call of one run: bytes, estimated tokens, tiktoken's count."""
    with FakeChatServer(refund_desk._respond) as server:
        loopwise.run(
            refund_desk.refund_desk,
            COMPLAINT,
            model=server.model(),
            store=None,
            deps=refund_desk.make_eval_deps(),
        )
        rows = []
        for n, (payload, size) in enumerate(
            zip(server.requests, server.request_bytes, strict=True), 1
        ):
            request = ModelRequest(messages=payload["messages"], tools=payload.get("tools"))
            rows.append(
                {
                    "call": n,
                    "bytes": size,
                    "estimated_tokens": request.prompt_chars() // 4,
                    "tiktoken_o200k": _tiktoken(payload),
                }
            )
        return rows


def main() -> None:
    rows = measure()
    if "--json" in sys.argv:
        print(json.dumps(rows, indent=2))
        return
    print("call  bytes   est. tokens  tiktoken")
    for r in rows:
        tik = "-" if r["tiktoken_o200k"] is None else f"{r['tiktoken_o200k']:,}"
        print(f"{r['call']:>4}  {r['bytes']:>6,}  {r['estimated_tokens']:>11,}  {tik:>8}")


if __name__ == "__main__":
    main()
