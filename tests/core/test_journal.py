"""Keys that no id can spell twice, and ids that cannot break a run (STYLE habit 21).

A journal key, an approval id and an idempotency key are built from ids a model, its
server or a user chose. Each test is a pair of calls (or runs) whose ids would spell the
same key if the parts were joined as text, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

import loopwise
from loopwise import Status, gates, open_store
from loopwise.cli.main import main
from loopwise.testing import ScriptedModel, call, calls, reply
from loopwise.tools.calls import call_tools


def _tool_results(request: loopwise.ModelRequest) -> list[str]:
    return [str(m["content"]) for m in request.messages if m["role"] == "tool"]


def _first_user(request: loopwise.ModelRequest) -> str:
    return next(str(m["content"]) for m in request.messages if m["role"] == "user")


def _ledger_tool(done: list[tuple[str | None, str]], *, gate: Any = None) -> loopwise.Tool:
    """A refund tool that, like a real payment API, does nothing twice under one key."""

    @loopwise.tool(effect="write", gate=gate)
    def refund(order: str, ctx: Any) -> str:
        """Refund an order."""
        key = ctx.idempotency_key
        if any(k == key for k, _ in done):
            return "already done under this key"
        done.append((key, order))
        return f"refunded {order}"

    return refund


def _approve_all(run_id: str, store: str) -> list[str]:
    with open_store(store) as st:
        ids = [p.approval_id for p in st.pending(run_id)]
        for approval_id in ids:
            st.decide(run_id, approval_id, decision="approved", by="alice")
    return ids


def test_two_calls_whose_ids_extend_each_other_both_take_effect(store_at: str) -> None:
    done: list[tuple[str | None, str]] = []
    seen: list[list[str]] = []

    def respond(request: loopwise.ModelRequest) -> Any:
        results = _tool_results(request)
        if results:
            seen.append(results)
            return reply("ok")
        return calls(("refund", {"order": "A"}, "a"), ("refund", {"order": "B"}, "a:call"))

    agent = loopwise.Agent(name="desk", tools=[_ledger_tool(done)])
    result = loopwise.run(agent, "go", model=ScriptedModel(respond), store=store_at)
    assert result.status == Status.COMPLETED
    assert sorted(order for _, order in done) == ["A", "B"]
    assert seen == [["refunded A", "refunded B"]]


def test_an_outer_call_named_like_a_nested_bound_id_is_its_own_call(store_at: str) -> None:
    done: list[tuple[str | None, str]] = []
    refund = _ledger_tool(done, gate=gates.human())
    inner = loopwise.Agent(name="inner", tools=[refund])
    outer = loopwise.Agent(
        name="outer", tools=[refund, loopwise.as_tool(inner, name="helper", description="Helps.")]
    )

    def respond(request: loopwise.ModelRequest) -> Any:
        results = _tool_results(request)
        if _first_user(request) != "go":
            return reply(results[-1]) if results else call("refund", {"order": "N"}, id="c1")
        script = [
            ("helper", {"input": "refund N"}, "h1"),
            # The nested call's bound id, chosen by the outer model for its own refund.
            ("refund", {"order": "O"}, "outer/helper/inner/c1"),
        ]
        if len(results) < len(script):
            name, args, call_id = script[len(results)]
            return call(name, args, id=call_id)
        return reply("; ".join(results))

    model = ScriptedModel(respond)
    run_id = loopwise.run(outer, "go", model=model, store=store_at).run_id
    assert _approve_all(run_id, store_at) == ["outer/helper/inner/c1"]
    paused = loopwise.resume(run_id, step=outer, model=model, store=store_at)
    # The outer refund was not answered by the nested call's approval: it asks for its own.
    assert paused.status == Status.AWAITING_APPROVAL
    (own,) = _approve_all(run_id, store_at)
    assert own != "outer/helper/inner/c1"
    result = loopwise.resume(run_id, step=outer, model=model, store=store_at)
    assert result.status == Status.COMPLETED
    assert [order for _, order in done] == ["N", "O"]
    assert len({key for key, _ in done}) == 2


def test_runs_and_calls_that_would_join_alike_keep_their_own_keys(store_at: str) -> None:
    done: list[tuple[str | None, str]] = []

    def one_refund(order: str, call_id: str) -> ScriptedModel:
        def respond(request: loopwise.ModelRequest) -> Any:
            if _tool_results(request):
                return reply("ok")
            return call("refund", {"order": order}, id=call_id)

        return ScriptedModel(respond)

    agent = loopwise.Agent(name="desk", tools=[_ledger_tool(done)])
    first = loopwise.run(agent, "go", model=one_refund("1", "x:y"), run_id="R", store=store_at)
    assert first.status == Status.COMPLETED
    # Run "R:x" with call "y" would join to the same "R:x:y": a run id has no ":".
    with pytest.raises(loopwise.ConfigError, match="run id"):
        loopwise.run(agent, "go", model=one_refund("2", "y"), run_id="R:x", store=store_at)
    other = loopwise.run(agent, "go", model=one_refund("2", "y"), run_id="R.x", store=store_at)
    assert other.status == Status.COMPLETED
    assert [order for _, order in done] == ["1", "2"]
    assert len({key for key, _ in done}) == 2


_BAD_RUN_IDS = {
    "colon": "R:x",
    "slash": "R/x",
    "nul": "a\x00b",
    "surrogate": "a\ud800b",
    "crlf": "a\r\nb",
    "long": "x" * 10_000,
    "empty": "",
    "space": " R",
}


@pytest.mark.parametrize("bad", list(_BAD_RUN_IDS.values()), ids=list(_BAD_RUN_IDS))
def test_a_run_id_that_cannot_key_a_run_is_refused_before_it_starts(
    store_at: str, bad: str
) -> None:
    agent = loopwise.Agent(name="desk")
    model = ScriptedModel(lambda request: reply("ok"))
    with pytest.raises(loopwise.ConfigError) as raised:
        loopwise.run(agent, "go", model=model, run_id=bad, store=store_at)
    assert raised.value.name == "run_id"
    with pytest.raises(loopwise.ConfigError):
        loopwise.enqueue("desk_target.py:desk", "go", run_id=bad, store=store_at)
    with open_store(store_at) as st:
        assert st.list_runs() == []


class _Answer(BaseModel):
    text: str


def _echo(text: str) -> str:
    return text


@loopwise.tool(effect="write")
def _note(text: str) -> str:
    """Write a note on the case. Call it to record what was decided."""
    return "noted"


# Every place a step or a node is named: each refuses a name no store holds or no
# terminal prints as it is, when it is declared.
_NAMED: dict[str, Any] = {
    "agent": lambda name: loopwise.Agent(name=name),
    "workflow": loopwise.Workflow,
    "node": lambda name: loopwise.Workflow("flow").then(loopwise.step(_echo), name=name),
    "route": lambda name: loopwise.Workflow("flow").add_route(name, "kind", {"a": "x"}),
    "hybrid": lambda name: loopwise.Hybrid(name, actions=[_note]),
    "step": lambda name: loopwise.step(name=name)(_echo),
    "structured": lambda name: loopwise.Structured(name, _Answer, "Answer."),
    "judge": lambda name: loopwise.Judge(name, bool),
    "ask_person": loopwise.AskPerson,
}
_BAD_NAMES = {
    "nul": ("desk\x00", 4),
    "surrogate": ("\ud800", 0),
    "cr": ("de\rsk", 2),
    "lf": ("desk\n", 4),
    "escape": ("\x1b[31mdesk", 0),
    "delete": ("desk\x7f", 4),
    "line-separator": ("de\u2028sk", 2),
    "bidi-override": ("\u202edesk", 0),
}


@pytest.mark.parametrize("where", list(_NAMED))
@pytest.mark.parametrize("bad", list(_BAD_NAMES.values()), ids=list(_BAD_NAMES))
def test_a_name_with_a_control_character_is_refused_where_it_is_declared(
    where: str, bad: tuple[str, int]
) -> None:
    name, at = bad
    with pytest.raises(loopwise.ConfigError) as raised:
        _NAMED[where](name)
    assert raised.value.code == "bad-name"
    assert f"{name[at]!a} at position {at}" in str(raised.value)
    assert str(raised.value).isprintable()


class _OwnStep:
    """A user's own step: a name and ``async run``, checked when it runs."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def run(self, input: Any, ctx: loopwise.Context) -> str:
        return "done"


def test_a_users_own_step_with_a_control_character_is_refused_before_it_is_stored(
    store_at: str,
) -> None:
    own = _OwnStep("desk\ud800")
    with pytest.raises(loopwise.ConfigError) as raised:
        loopwise.run(own, "go", store=store_at)
    assert raised.value.code == "bad-name"
    helper = loopwise.as_tool(own, name="helper", description="Helps with the case.")

    def respond(request: loopwise.ModelRequest) -> Any:
        results = _tool_results(request)
        return reply(results[-1]) if results else call("helper", {"input": "go"}, id="h1")

    agent = loopwise.Agent(name="desk", tools=[helper])
    result = loopwise.run(agent, "go", model=ScriptedModel(respond), store=store_at)
    assert "'\\ud800' at position 4" in str(result.output)
    with open_store(store_at) as st:
        (row,) = st.list_runs()
        assert row.run_id == result.run_id


@pytest.mark.parametrize("name", ["café", "中文", "👩‍👩‍👧 desk", "x:y", "50% off", "a.b-c_d"])
def test_ordinary_unicode_names_run_and_are_stored_as_they_are(store_at: str, name: str) -> None:
    agent = loopwise.Agent(name=name)
    flow = loopwise.Workflow(f"flow {name}").then(agent)
    result = loopwise.run(flow, "go", model=ScriptedModel(lambda r: reply("ok")), store=store_at)
    assert result.status == Status.COMPLETED
    with open_store(store_at) as st:
        steps = {e.step for e in st.events(result.run_id)}
    assert f"flow {name}/{name}" in steps


_HOSTILE_CALL_IDS = {
    "nul": "c\x001",
    "surrogate": "c\udc801",
    "slash": "../c1",
    "colon": "c:1",
    "crlf": "c\r\nSet-Cookie: x=1",
    "escape": "c\x1b[2J\x07",
    "long": "c" * 10_000,
    "empty": "",
}


@pytest.mark.parametrize("hostile", list(_HOSTILE_CALL_IDS.values()), ids=list(_HOSTILE_CALL_IDS))
def test_a_hostile_call_id_is_renamed_and_the_run_resumes(
    store_at: str, hostile: str, capsys: pytest.CaptureFixture[str]
) -> None:
    done: list[tuple[str | None, str]] = []
    refund = _ledger_tool(done, gate=gates.human())

    def respond(request: loopwise.ModelRequest) -> Any:
        results = _tool_results(request)
        return reply(results[-1]) if results else call("refund", {"order": "A"}, id=hostile)

    agent = loopwise.Agent(name="desk", tools=[refund])
    model = ScriptedModel(respond)
    paused = loopwise.run(agent, "go", model=model, store=store_at)
    assert paused.status == Status.AWAITING_APPROVAL
    (approval,) = _approve_all(paused.run_id, store_at)
    assert approval.isascii() and approval.isprintable() and ":" not in approval
    assert "/" not in approval and len(approval) <= 64
    result = loopwise.resume(paused.run_id, step=agent, model=model, store=store_at)
    assert result.status == Status.COMPLETED
    assert result.output == "refunded A" and [order for _, order in done] == ["A"]
    again = loopwise.resume(paused.run_id, step=agent, model=model, store=store_at)
    assert again.status == Status.COMPLETED and len(done) == 1


def test_pending_never_prints_control_characters(capsys: pytest.CaptureFixture[str]) -> None:
    @loopwise.tool(effect="write", gate=gates.human())
    def send(to: str) -> str:
        """Send."""
        return "sent"

    hostile = "\x1b]0;pwned\x07\r\x1b[2K\x00\u202e"
    plan = {"steps": [{"id": "s1", "action": "send", "args": {"to": hostile}, "reason": hostile}]}
    desk = loopwise.Hybrid("desk", actions=[send])
    paused = loopwise.run(desk, "go", model=ScriptedModel(lambda r: reply(json.dumps(plan))))
    assert paused.status == Status.AWAITING_APPROVAL
    assert main(["pending"]) == 0
    out = capsys.readouterr().out
    assert paused.run_id in out and "\\x1b" in out
    assert not any(ch in out for ch in "\x1b\x07\r\x00\u202e"), out


def _approve_until_done(
    result: loopwise.RunResult, step: Any, model: ScriptedModel, store: str
) -> tuple[loopwise.RunResult, list[str]]:
    """Approve every pending call and resume, until the run stops waiting."""
    approvals: list[str] = []
    while result.status == Status.AWAITING_APPROVAL:
        approvals += _approve_all(result.run_id, store)
        result = loopwise.resume(result.run_id, step=step, model=model, store=store)
    return result, approvals


def test_a_nested_step_named_with_key_separators_resumes_each_call_once(store_at: str) -> None:
    # Each resume replays the earlier helper calls without running the nested agent; the
    # next call of the helper must still count on from them (its name is escaped in the
    # log: ':' and '%'), or it would take an earlier call's turns and refund that again.
    done: list[tuple[str | None, str]] = []
    inner = loopwise.Agent(name="in:ner%1", tools=[_ledger_tool(done, gate=gates.human())])
    helper = loopwise.as_tool(inner, name="helper", description="Refunds one order.")
    outer = loopwise.Agent(name="desk", tools=[helper])
    orders = ["A", "B", "C"]

    def respond(request: loopwise.ModelRequest) -> Any:
        results = _tool_results(request)
        if _first_user(request) != "go":
            return (
                reply(results[-1])
                if results
                else call("refund", {"order": _first_user(request)}, id="c1")
            )
        if len(results) < len(orders):
            return call("helper", {"input": orders[len(results)]}, id=f"h{len(results)}")
        return reply("; ".join(results))

    model = ScriptedModel(respond)
    first = loopwise.run(outer, "go", model=model, store=store_at)
    result, approvals = _approve_until_done(first, outer, model, store_at)
    assert result.status == Status.COMPLETED
    assert result.output == "refunded A; refunded B; refunded C"
    assert [order for _, order in done] == orders and len({k for k, _ in done}) == 3
    assert len(approvals) == 3 and len(set(approvals)) == 3


def test_two_steps_whose_names_would_escape_alike_keep_their_own_calls(store_at: str) -> None:
    # "x%3Ay" is how "x:y" is written in a key: unless "%" is escaped too, the second
    # agent's call would be answered by the first's result and approval.
    done: list[tuple[str | None, str]] = []
    refund = _ledger_tool(done, gate=gates.human())
    first_desk = loopwise.Agent(name="x:y", tools=[refund])
    second_desk = loopwise.Agent(name="x%3Ay", tools=[refund])
    flow = loopwise.Workflow("flow").then(first_desk).then(second_desk)
    then = {"A": "B", "B": "all done"}

    def respond(request: loopwise.ModelRequest) -> Any:
        order = _first_user(request)
        if _tool_results(request):
            return reply(then[order])
        return call("refund", {"order": order}, id="c1")

    model = ScriptedModel(respond)
    paused = loopwise.run(flow, "A", model=model, store=store_at)
    result, approvals = _approve_until_done(paused, flow, model, store_at)
    assert result.status == Status.COMPLETED and result.output == "all done"
    assert [order for _, order in done] == ["A", "B"]
    assert approvals == ["flow/x:y/c1", "flow/x%3Ay/c1"]


def test_the_logs_keys_are_spelled_as_the_runs_already_stored_expect() -> None:
    # The keys are a stored format: a run paused by an earlier version resumes by the keys
    # it logged, so they are spelled as they always were. A name's letters, digits, spaces
    # and other printable text read as they are; "%" and ":" are %XX (UTF-8). (A name
    # with a control character or a lone surrogate is refused when it is declared.)
    @loopwise.tool
    def look(n: int) -> str:
        """Look something up."""
        return "seen"

    @loopwise.step
    async def fetch(order: str, ctx: loopwise.Context) -> Any:
        return await call_tools(ctx, [(look, {"n": 1})])

    agent = loopwise.Agent(name="night desk\ue000%:", tools=[look])
    flow = loopwise.Workflow("flow").then(fetch).then(agent)

    def respond(request: loopwise.ModelRequest) -> Any:
        return reply("ok") if _tool_results(request) else call("look", {"n": 2}, id="c1")

    result = loopwise.run(flow, "go", model=ScriptedModel(respond), store=None)
    assert result.status == Status.COMPLETED
    desk = "flow/night desk\ue000%25%3A"
    assert [e.data["key"] for e in result.events if "key" in e.data] == [
        "flow:started:1",
        "flow/fetch:started:1",
        "flow/fetch:calls:1:1:call",
        "flow/fetch:calls:1:1",
        f"{desk}:started:1",
        f"{desk}:model:1",
        f"{desk}:tool:1:c1:call",
        f"{desk}:tool:1:c1",
        f"{desk}:model:2",
    ]
