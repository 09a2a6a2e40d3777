"""The inbox flags two runs asking for the same irreversible action on the same object
(issue 47): over HTTP, on SQLite and on PostgreSQL, escaped like the rest of the page.

The rule is :mod:`loopwise.serve.twins`'s: same tool, same ``…_id`` arguments (or, with
none, identical arguments), pending, irreversible, another run.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

import loopwise
from loopwise import gates
from loopwise.store.open import open_store
from loopwise.testing import ScriptedModel, call, reply
from tests.serve.test_app import serve  # noqa: F401  (the fixture: a running inbox and its client)

HOSTILE = "<b>O-9</b>"


@loopwise.tool(effect="irreversible", gate=gates.human())
def issue_refund(order_id: str, amount_cents: int) -> str:
    """Refund part of an order."""
    return "refunded"


@loopwise.tool(effect="irreversible", gate=gates.human())
def close_case(case_id: str | None, text: str) -> str:
    """Close a case (or, without one, the current one)."""
    return "closed"


@loopwise.tool(effect="write", gate=gates.human())
def add_note(order_id: str, text: str) -> str:
    """Note something on an order."""
    return "noted"


@loopwise.tool(effect="irreversible", gate=gates.human())
def wipe(disk: str) -> str:
    """Wipe a disk."""
    return "wiped"


def _paused(tool: str, args: dict[str, Any]) -> str:
    """A run paused on one gated call of ``tool``."""

    def respond(request: loopwise.ModelRequest) -> Any:
        done = any(m["role"] == "tool" for m in request.messages)
        return reply("done") if done else call(tool, args, id="c1")

    agent = loopwise.Agent(name="desk", tools=[issue_refund, close_case, add_note, wipe])
    result = loopwise.run(agent, "go", model=ScriptedModel(respond))
    assert result.status == "awaiting_approval"
    return result.run_id


def _hints(page: str) -> list[str]:
    return re.findall(r"<p class='twin' role='note'>(.*?)</p>", page)


def test_two_runs_refunding_one_order_are_flagged_on_both_pages(
    serve: Any,  # noqa: F811
    store_at: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOOPWISE_STORE", store_at)
    first = _paused("issue_refund", {"order_id": "O-1003", "amount_cents": 4000})
    _, client = serve(by="lead")
    assert _hints(client.get("/").body) == []  # one run alone asks nothing twice
    # The same order for another amount; other orders, a write, other arguments: not twins.
    second = _paused("issue_refund", {"order_id": "O-1003", "amount_cents": 18900})
    _paused("issue_refund", {"order_id": "O-2000", "amount_cents": 4000})
    _paused("add_note", {"order_id": "O-1003", "text": "hi"})
    _paused("add_note", {"order_id": "O-1003", "text": "hi"})
    _paused("wipe", {"disk": "sda"})
    _paused("wipe", {"disk": "sdb"})
    inbox = client.get("/").body
    assert inbox.count("<article class='approval'") == 7
    assert sorted(_hints(inbox)) == sorted(
        f"<strong>Same action twice:</strong> another run (<a href='/runs/{other}'>{other}"
        "</a>) asks for the same issue_refund on order O-1003"
        for other in (first, second)
    )
    # The hint sits in the card of the run it warns about, naming the other run.
    card = re.search(rf"<article class='approval' id='a-{first}-[^']*'>.*?</article>", inbox, re.S)
    assert card is not None and f"href='/runs/{second}'" in card.group(0)
    # The run page says it too, from the newest page of pending approvals.
    assert _hints(client.get(f"/runs/{first}").body) == [
        f"<strong>Same action twice:</strong> another run (<a href='/runs/{second}'>{second}"
        "</a>) asks for the same issue_refund on order O-1003"
    ]
    # Once the other run's refund is decided, neither page flags it any more.
    with open_store(None) as st:
        asked = st.pending(second)[0].approval_id
    assert client.decide(run_id=second, approval_id=asked, decision="approve").status == 303
    assert _hints(client.get("/").body) == []
    assert _hints(client.get(f"/runs/{first}").body) == []


def test_identical_calls_without_an_id_are_flagged_and_every_part_is_escaped(
    serve: Any,  # noqa: F811
) -> None:
    first = _paused("wipe", {"disk": "sda"})
    second = _paused("wipe", {"disk": "sda"})
    third = _paused("issue_refund", {"order_id": HOSTILE, "amount_cents": 1})
    fourth = _paused("issue_refund", {"order_id": HOSTILE, "amount_cents": 2})
    _, client = serve(by="lead")
    inbox = client.get("/").body
    hints = _hints(inbox)
    assert len(hints) == 4 and "<b>" not in inbox
    assert (
        f"another run (<a href='/runs/{second}'>{second}</a>) asks for the same wipe "
        "with the same arguments" in inbox
    )
    assert f"(<a href='/runs/{first}'>{first}</a>)" in inbox
    escaped = "on order &lt;b&gt;O-9&lt;/b&gt;"
    assert sum(escaped in h for h in hints) == 2
    run_page = client.get(f"/runs/{third}").body
    assert "<b>" not in run_page and escaped in run_page and f"/runs/{fourth}'" in run_page


def test_a_null_id_names_no_object_and_a_long_one_is_shown_cut(serve: Any) -> None:  # noqa: F811
    _paused("close_case", {"case_id": None, "text": "done"})
    _paused("close_case", {"case_id": None, "text": "fixed"})
    long_id = "C-" + "7" * 5_000
    _paused("close_case", {"case_id": long_id, "text": "a"})
    _paused("close_case", {"case_id": long_id, "text": "b"})
    _, client = serve(by="lead")
    hints = _hints(client.get("/").body)
    assert len(hints) == 2  # the two without a case are no twins: their texts differ
    assert all(f"on case C-{'7' * 57}…" in h and len(h) < 400 for h in hints), hints
