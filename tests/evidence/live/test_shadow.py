"""loopwise.Shadow (issue 41): the primary answers, a sampled share of runs also runs the
shadow without effects, and the pair is kept as a live case of the run's target."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pydantic
import pytest

import loopwise
from loopwise import Budget, ConfigError, Shadow, Status
from loopwise.testing import ScriptedModel, call, reply

SPEC = "flow.py:live"


class Label(pydantic.BaseModel):
    category: str


@loopwise.step
def classify(text: str) -> dict[str, str]:
    """The primary: a fixed rule."""
    return {"category": "billing" if "bill" in text else "other"}


@loopwise.tool(effect="write")
def note(text: str, ctx: loopwise.Context) -> str:
    """Write a note about the ticket into the ledger the run's deps are.

    text: what to note
    """
    ctx.deps.append(text)
    return "noted"


def _agent(**kw: Any) -> loopwise.Agent:
    return loopwise.Agent(
        name="agent", tools=[note], output_type=Label, max_steps=kw.pop("max_steps", 4), **kw
    )


def _model(disagree: frozenset[str] = frozenset()) -> ScriptedModel:
    """The shadow agent notes the ticket, then answers as the rule does, except on the
    tickets in ``disagree``."""

    def respond(request: loopwise.ModelRequest) -> Any:
        text = request.user_text()
        if not request.tool_results():
            return call("note", {"text": text})
        rule = "billing" if "bill" in text else "other"
        return reply({"category": "shipping" if text in disagree else rule})

    return ScriptedModel(respond)


TICKETS = [f"ticket {i}: {'my bill' if i % 3 else 'a parcel'}" for i in range(60)]


def _run(step: Any, text: str, **kw: Any) -> loopwise.RunResult:
    return loopwise.run(step, text, spec=SPEC, **kw)


def test_sixty_cases_return_the_primary_and_keep_sixty_pairs_out_of_the_real_deps(
    tmp_path: Path,
) -> None:
    real: list[str] = []
    sandboxes: list[list[str]] = []

    def sandbox() -> list[str]:
        sandboxes.append([])
        return sandboxes[-1]

    live = Shadow("live", classify, _agent(), share=1.0, sandbox=sandbox)
    store = str(tmp_path / "runs.db")
    model = _model(disagree=frozenset(TICKETS[:7]))
    for text in TICKETS:
        alone = loopwise.run(classify, text, store=None)
        shadowed = _run(live, text, model=model, store=store, deps=real)
        assert (shadowed.status, shadowed.output) == (alone.status, alone.output)
        assert shadowed.usage.shadow is not None and shadowed.usage.shadow.model_calls == 2
        assert shadowed.usage.model_calls == 0  # the shadow's calls are apart
    assert real == []  # the shadow's write tool never touched the run's deps
    assert [len(s) for s in sandboxes] == [1] * 60  # each shadow wrote into its own sandbox
    with loopwise.open_store(store) as st:
        cases = st.live_cases([SPEC])
    assert len(cases) == 60
    assert sum(c.agree is False for c in cases) == 7
    first = cases[0]
    assert (first.kind, first.step, first.status) == ("shadow", "live/agent", "completed")
    assert first.input == TICKETS[0] and first.output == {"category": "other"}


def test_the_shadow_leaves_one_step_pair_in_the_log_saying_how_it_ended() -> None:
    live = Shadow("live", classify, _agent(), share=1.0, sandbox=list)
    result = _run(live, "my bill", model=_model(), store=None)
    mine = [e for e in result.events if e.step == "live/agent"]
    assert [str(e.type) for e in mine] == ["step_started", "step_finished"]
    record = mine[1].data["shadow"]
    assert record["status"] == "completed" and record["agree"] is True
    assert record["effects"] == {"note": 1} and record["sandbox"].startswith("sandbox=")
    assert result.usage.to_dict()["shadow"]["model_calls"] == 2
    # nothing of the shadow's own run (its model calls, tool calls) is in the run's log
    assert not [e for e in result.events if str(e.type) in {"model_call", "tool_call"}]


@loopwise.step
def broken(text: str) -> dict[str, str]:
    """A shadow that raises."""
    raise RuntimeError("the shadow broke")


def _looping() -> ScriptedModel:
    return ScriptedModel(lambda request: call("note", {"text": "again"}))


@pytest.mark.parametrize(
    ("shadow", "model", "budget", "status"),
    [
        (broken, None, None, "error"),
        (_agent(), _looping(), None, "stuck"),
        (_agent(), _model(), Budget(max_tokens=1), "budget_exceeded"),
    ],
    ids=["raises", "loops", "over-budget"],
)
def test_a_failing_shadow_leaves_the_primary_completed_and_is_recorded(
    tmp_path: Path, shadow: Any, model: Any, budget: Budget | None, status: str
) -> None:
    live = Shadow("live", classify, shadow, share=1.0, shadow_budget=budget, sandbox=list)
    store = str(tmp_path / "runs.db")
    result = _run(live, "my bill", model=model or _model(), store=store)
    assert (result.status, result.output) == (Status.COMPLETED, {"category": "billing"})
    with loopwise.open_store(store) as st:
        (case,) = st.live_cases([SPEC])
    assert (case.status, case.agree) == (status, None)
    assert case.output == {"category": "billing"} and case.reference is None


def test_a_shadow_cut_off_by_its_time_budget_is_recorded_and_the_primary_stands() -> None:
    @loopwise.step
    async def slow(text: str) -> dict[str, str]:
        import asyncio

        await asyncio.Event().wait()  # never answers
        return {}

    live = Shadow("live", classify, slow, share=1.0, shadow_budget=Budget(max_seconds=0.05))
    result = _run(live, "my bill", store=None)
    assert (result.status, result.output) == (Status.COMPLETED, {"category": "billing"})
    (done,) = [e for e in result.events if e.step == "live/slow" and e.type == "step_finished"]
    assert done.data["shadow"]["status"] == "budget_exceeded"
    assert "max_seconds 0.05" in done.data["shadow"]["detail"]


def test_share_zero_never_shadows_and_a_share_decides_by_the_run_id(tmp_path: Path) -> None:
    ran: list[str] = []

    @loopwise.step
    def counted(text: str) -> dict[str, str]:
        ran.append(text)
        return {"category": "other"}

    never = Shadow("live", classify, counted, share=0.0)
    for i in range(20):
        _run(never, f"t{i}", store=None)
    assert ran == []
    half = Shadow("live", classify, counted, share=0.5)
    ids = [f"run-{i}" for i in range(200)]
    for run_id in ids:
        _run(half, run_id, store=None, run_id=run_id)
    first = list(ran)
    assert 60 < len(first) < 140  # about half
    ran.clear()
    for run_id in ids:  # the same runs decide the same way
        _run(half, run_id, store=None, run_id=run_id)
    assert ran == first


@pytest.mark.parametrize(
    ("kw", "name"),
    [
        ({"share": 1.5}, "share"),
        ({"share": float("nan")}, "share"),
        ({"share": True}, "share"),
        ({"shadow_budget": {"max_tokens": 3}}, "shadow_budget"),
        ({"gates": "ask"}, "gates"),
        ({"agree": "yes"}, "agree"),
    ],
)
def test_a_mistaken_argument_raises_naming_it(kw: dict[str, Any], name: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Shadow("live", classify, _agent(), **kw)
    assert raised.value.name == name


def test_a_shadow_named_as_its_primary_is_refused() -> None:
    with pytest.raises(ConfigError, match="name of its own"):
        Shadow("live", classify, classify)


def test_a_shadow_with_effects_and_no_sandbox_is_refused_as_an_eval_refuses() -> None:
    real: list[str] = []
    live = Shadow("live", classify, _agent(), share=1.0)  # this module has no make_eval_deps
    result = _run(live, "my bill", model=_model(), store=None, deps=real)
    assert (result.status, result.output) == (Status.COMPLETED, {"category": "billing"})
    assert real == []
    (done,) = [e for e in result.events if e.step == "live/agent" and e.type == "step_finished"]
    assert done.data["shadow"]["status"] == "error"
    assert "note" in done.data["shadow"]["detail"] and "sandbox" in done.data["shadow"]["detail"]


def test_a_custom_agreement_judges_the_pair() -> None:
    live = Shadow("live", classify, _agent(), share=1.0, sandbox=list, agree=lambda a, b: 0.2)
    result = _run(live, "my bill", model=_model(), store=None)
    (done,) = [e for e in result.events if e.step == "live/agent" and e.type == "step_finished"]
    assert done.data["live"]["agree"] is False


def test_a_paused_primary_shadows_once_across_resume(tmp_path: Path) -> None:
    ran: list[str] = []

    @loopwise.tool(effect="write", gate=loopwise.gates.human())
    def refund(order: str, ctx: loopwise.Context) -> str:
        """Refund an order.

        order: the order id
        """
        ctx.deps.append(order)
        return "refunded"

    desk = loopwise.Agent(name="desk", tools=[refund], max_steps=4)

    @loopwise.step
    def counted(text: str) -> str:
        ran.append(text)
        return "done"

    def respond(request: loopwise.ModelRequest) -> Any:
        if not request.tool_results():
            return call("refund", {"order": "A1"})
        return reply("done")

    live = Shadow("live", desk, counted, share=1.0)
    store = str(tmp_path / "runs.db")
    ledger: list[str] = []
    paused = _run(live, "refund A1", model=ScriptedModel(respond), store=store, deps=ledger)
    assert paused.status == Status.AWAITING_APPROVAL and ran == []
    loopwise.approve(paused.run_id, store=store)
    again_kw = {"model": ScriptedModel(respond), "store": store, "deps": ledger, "step": live}
    done = loopwise.resume(paused.run_id, **again_kw)
    assert (done.status, ledger, ran) == (Status.COMPLETED, ["A1"], ["refund A1"])
    again = loopwise.resume(paused.run_id, **again_kw)
    assert again.status == Status.COMPLETED and ran == ["refund A1"]
    with loopwise.open_store(store) as st:
        assert len(st.live_cases([SPEC])) == 1


@loopwise.step
def untyped(text: str):  # type: ignore[no-untyped-def]
    """A primary whose output is never restored (no return type): a resume enters it again."""
    return {"category": "billing"}


@pytest.mark.parametrize("primary", [classify, untyped], ids=["restored", "entered-again"])
def test_a_resume_after_a_shadowed_step_does_not_shadow_again(tmp_path: Path, primary: Any) -> None:
    ran: list[str] = []

    @loopwise.step
    def counted(text: str) -> dict[str, str]:
        ran.append(text)
        return {"category": "billing"}

    live = Shadow("live", primary, counted, share=1.0)
    flow = loopwise.Workflow("flow").then(live).then(_halt_once(tmp_path / "once"))
    store = str(tmp_path / "runs.db")
    first = loopwise.run(flow, "my bill", store=store, spec=SPEC)
    assert first.status == Status.ERROR and ran == ["my bill"]
    done = loopwise.resume(first.run_id, store=store, step=flow)
    assert done.status == Status.COMPLETED and ran == ["my bill"]
    assert done.usage.shadow is not None
    with loopwise.open_store(store) as st:
        assert len(st.live_cases([SPEC])) == 1


def _halt_once(marker: Path) -> Any:
    @loopwise.step
    def after(value: dict[str, str]) -> dict[str, str]:
        if not marker.exists():
            marker.touch()
            raise RuntimeError("fails once")
        return value

    return after


def test_the_sandbox_comes_from_the_declaring_modules_make_eval_deps(tmp_path: Path) -> None:
    module = tmp_path / "declared.py"
    module.write_text(
        "import contextlib\n"
        "import loopwise\n"
        "from tests.evidence.live.test_shadow import classify, _agent\n"
        "SANDBOXES = []\n"
        "@contextlib.contextmanager\n"
        "def make_eval_deps():\n"
        "    SANDBOXES.append([])\n"
        "    yield SANDBOXES[-1]\n"
        "    SANDBOXES[-1].append('left')\n"
        "live = loopwise.Shadow('live', classify, _agent(), share=1.0)\n"
    )
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        import declared  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    real: list[str] = []
    result = _run(declared.live, "my bill", model=_model(), store=None, deps=real)
    assert result.status == Status.COMPLETED and real == []
    assert declared.SANDBOXES == [["my bill", "left"]]
    (done,) = [e for e in result.events if e.step == "live/agent" and e.type == "step_finished"]
    assert "make_eval_deps" in done.data["shadow"]["sandbox"]


def test_a_sigkill_during_the_shadow_leaves_no_effect_and_the_primary_exactly_once(
    tmp_path: Path,
) -> None:
    from tests.support.crash import fork, wait

    marker = tmp_path / "killed"

    def paid(where: Path, order: str, key: str | None) -> None:
        with where.open("a") as f:
            f.write(f"{order} {key}\n")

    @loopwise.tool(effect="write")
    def pay(order: str, ctx: loopwise.Context) -> str:
        """Pay an order (once per idempotency key).

        order: the order id
        """
        where: Path = ctx.deps["file"]
        seen = where.read_text().splitlines() if where.exists() else []
        if f"{order} {ctx.idempotency_key}" not in seen:
            paid(where, order, ctx.idempotency_key)
        if where.name.startswith("sandbox") and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), 9)  # killed in the middle of the shadow, after its effect
        return "paid"

    def respond(request: loopwise.ModelRequest) -> Any:
        if not request.tool_results():
            return call("pay", {"order": "A1"})
        return reply("paid")

    sandboxes: list[Path] = []

    def sandbox() -> dict[str, Path]:
        sandboxes.append(tmp_path / f"sandbox-{os.getpid()}-{len(sandboxes)}.txt")
        return {"file": sandboxes[-1]}

    desk = loopwise.Agent(name="desk", tools=[pay], max_steps=4)
    rival = loopwise.Agent(name="rival", tools=[pay], max_steps=4)
    live = Shadow("live", desk, rival, share=1.0, sandbox=sandbox)
    store, ledger = str(tmp_path / "runs.db"), tmp_path / "ledger.txt"
    options = {"model": ScriptedModel(respond), "store": store, "deps": {"file": ledger}}
    pid = fork(lambda: _run(live, "pay A1", run_id="k1", **options) and None)
    status = wait(pid)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9
    assert marker.exists() and ledger.read_text().count("A1") == 1
    done = loopwise.resume("k1", step=live, **options)
    assert (done.status, done.output) == (Status.COMPLETED, "paid")
    assert ledger.read_text().count("A1") == 1  # the primary's effect, exactly once
    # the killed shadow paid into its sandbox only; the resumed run's shadow into a new one
    made = sorted(tmp_path.glob("sandbox-*.txt"))
    assert len(made) == 2 and [p.read_text().count("A1") for p in made] == [1, 1]
    with loopwise.open_store(store) as st:
        (case,) = st.live_cases([SPEC])
    assert case.status == "completed" and case.agree is True


def test_pairs_are_kept_in_either_store(store_at: str) -> None:
    live = Shadow("live", classify, _agent(), share=1.0, sandbox=list)
    model = _model(disagree=frozenset({"ticket b"}))
    for text in ("ticket a", "ticket b"):
        assert _run(live, text, model=model, store=store_at).status == Status.COMPLETED
    with loopwise.open_store(store_at) as st:
        cases = st.live_cases([SPEC])
    assert [(c.input, c.agree) for c in cases] == [("ticket a", True), ("ticket b", False)]


def test_the_shadow_draws_as_its_primary_and_the_shadow_beside_it() -> None:
    from loopwise.core.shape import describe, mermaid

    drawn = mermaid(describe(Shadow("live", classify, _agent(), share=0.25)))
    assert 'classify -->|"shadow, 25% of runs, no effects"| agent' in drawn


@pytest.mark.parametrize("rule", ["deny", "approve"])
def test_the_shadows_gates_are_answered_by_the_eval_rule_never_a_person(
    tmp_path: Path, rule: str
) -> None:
    @loopwise.tool(effect="irreversible", gate=loopwise.gates.human())
    def refund(order: str, ctx: loopwise.Context) -> str:
        """Refund an order.

        order: the order id
        """
        ctx.deps.append(order)
        return "refunded"

    def respond(request: loopwise.ModelRequest) -> Any:
        if not request.tool_results():
            return call("refund", {"order": "A1"})
        return reply({"category": "billing"})

    rival = loopwise.Agent(name="rival", tools=[refund], output_type=Label, max_steps=4)
    sandboxes: list[list[str]] = []

    def sandbox() -> list[str]:
        sandboxes.append([])
        return sandboxes[-1]

    live = Shadow("live", classify, rival, share=1.0, gates=rule, sandbox=sandbox)
    store, real = str(tmp_path / "runs.db"), []
    result = _run(live, "my bill", model=ScriptedModel(respond), store=store, deps=real)
    assert (result.status, real) == (Status.COMPLETED, [])
    with loopwise.open_store(store) as st:
        assert st.pending() == []  # nothing of the shadow waits for a person
    (done,) = [e for e in result.events if e.step == "live/rival" and e.type == "step_finished"]
    if rule == "approve":  # the approved path, measured in the sandbox
        assert sandboxes == [["A1"]] and done.data["shadow"]["effects"] == {"refund": 1}
    else:  # a plain human gate answered deny: no effect to fear, no sandbox made
        assert sandboxes == [] and done.data["shadow"]["effects"] == {}


def test_a_write_reached_through_code_the_review_cannot_see_never_touches_the_real_deps(
    tmp_path: Path,
) -> None:
    # A graduated workflow's nodes call the agent's tools from function steps: the static
    # review of the shadow sees no tool, so the shadow runs on the run's own deps, where
    # no effect may start.
    grad = loopwise.Graduated(_agent(), tools=["note"])

    @loopwise.step
    async def noting(text: str, ctx: loopwise.Context) -> dict[str, str]:
        await grad.call(ctx, grad.start(text), "note", [{"text": text}])
        return {"category": "billing"}

    flow = loopwise.Workflow("graduated").then(noting)
    live = Shadow("live", classify, flow, share=1.0)
    store, real = str(tmp_path / "runs.db"), []
    result = _run(live, "my bill", model=_model(), store=store, deps=real)
    assert (result.status, result.output) == (Status.COMPLETED, {"category": "billing"})
    assert real == []  # the run's own ledger: untouched
    with loopwise.open_store(store) as st:
        (case,) = st.live_cases([SPEC])
    assert case.status == "denied" and "note would take effect outside a sandbox" in str(
        case.detail
    )


def test_a_shadow_that_changes_its_input_changes_neither_the_answer_nor_the_record(
    tmp_path: Path,
) -> None:
    @loopwise.step
    def keep(ticket: dict[str, Any]) -> dict[str, Any]:
        """The primary: answers with the ticket it routed."""
        return {"ticket": ticket, "queue": "billing"}

    @loopwise.step
    def meddle(ticket: dict[str, Any]) -> dict[str, Any]:
        """A shadow that edits its input in place."""
        ticket["body"] = "changed by the shadow"
        ticket.setdefault("tags", []).append("shadow")
        return {"queue": "billing"}

    live = Shadow("live", keep, meddle, share=1.0)
    store = str(tmp_path / "runs.db")
    ticket = {"body": "my bill"}
    result = _run(live, ticket, store=store)
    assert result.output == {"ticket": {"body": "my bill"}, "queue": "billing"}
    assert ticket == {"body": "my bill"}
    with loopwise.open_store(store) as st:
        (case,) = st.live_cases([SPEC])
    assert case.input == {"body": "my bill"} and case.agree is True


def test_an_input_that_cannot_be_copied_is_not_shared_with_the_shadow(tmp_path: Path) -> None:
    import threading

    seen: list[Any] = []

    @loopwise.step
    def answer(ticket: Any) -> str:
        return "ok"

    @loopwise.step
    def look(ticket: Any) -> str:
        seen.append(ticket)
        return "ok"

    live = Shadow("live", answer, look, share=1.0)
    store = str(tmp_path / "runs.db")
    result = _run(live, {"lock": threading.Lock()}, store=store)
    assert (result.status, result.output, seen) == (Status.COMPLETED, "ok", [])
    with loopwise.open_store(store) as st:
        (case,) = st.live_cases([SPEC])
    assert case.status == "error" and "cannot be copied" in str(case.detail)


@pytest.mark.parametrize("answer", ["yes", None, [1], float("nan"), 2.0, -1])
def test_an_agreement_that_is_no_verdict_is_recorded_and_the_primary_stands(
    tmp_path: Path, answer: Any
) -> None:
    live = Shadow("live", classify, _agent(), share=1.0, sandbox=list, agree=lambda o, r: answer)
    store = str(tmp_path / "runs.db")
    result = _run(live, "my bill", model=_model(), store=store)
    assert (result.status, result.output) == (Status.COMPLETED, {"category": "billing"})
    with loopwise.open_store(store) as st:
        (case,) = st.live_cases([SPEC])
    assert (case.status, case.agree) == ("completed", None)
    assert "not true/false or a score in [0, 1]" in str(case.detail)


def test_a_shadows_time_is_not_the_runs_time() -> None:
    # A run with max_seconds=1 whose shadow takes 1.5 s still completes with the primary's
    # output: the shadow has its own budget, and its wall time is counted apart.
    @loopwise.step
    async def slow(text: str) -> dict[str, str]:
        import asyncio

        await asyncio.sleep(1.5)
        return {"category": "billing"}

    @loopwise.step
    def after(label: dict[str, str]) -> str:
        return label["category"]

    flow = loopwise.Workflow("flow", input_type=str, budget=Budget(max_seconds=1))
    flow.then(Shadow("live", classify, slow, share=1.0)).then(after)
    result = _run(flow, "my bill", store=None)
    assert (result.status, result.output) == (Status.COMPLETED, "billing"), result.detail
    assert result.usage.shadow is not None and result.usage.shadow.wall_seconds >= 1.5


def test_two_shadows_of_one_run_never_share_idempotency_keys() -> None:
    keys: list[str | None] = []

    @loopwise.tool(effect="write")
    def keep(text: str, ctx: loopwise.Context) -> str:
        """Keep the ticket in the sandbox.

        text: the ticket
        """
        keys.append(ctx.idempotency_key)
        return "kept"

    def agent() -> loopwise.Agent:
        return loopwise.Agent(name="agent", tools=[keep], max_steps=3)

    def respond(request: loopwise.ModelRequest) -> Any:
        if not request.tool_results():
            return call("keep", {"text": "same"})
        return reply("done")

    sandbox: list[str] = []
    first = Shadow("first", classify, agent(), share=1.0, sandbox=lambda: sandbox,
                   model=ScriptedModel(respond))  # fmt: skip
    second = Shadow("second", classify, agent(), share=1.0, sandbox=lambda: sandbox,
                    model=ScriptedModel(respond))  # fmt: skip
    flow = loopwise.Workflow("flow", input_type=str)
    flow.add("start", loopwise.step(lambda text: text, name="start"))
    flow.add("first", first, after=["start"])
    flow.add("second", second, after=["start"])
    flow.add("both", loopwise.step(_count, name="both"),
             after=["first", "second"], join=dict)  # fmt: skip
    result = _run(flow, "my bill", store=None)
    assert result.status is Status.COMPLETED, result.detail
    assert len(keys) == 2 and keys[0] != keys[1], keys


def _count(parts: dict[str, Any]) -> int:
    return len(parts)
