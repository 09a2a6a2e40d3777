"""Workflows: declaring, validating, routing, fan-out/fan-in, failures, budget, drawing."""

from __future__ import annotations

import asyncio
import enum
import textwrap
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel

import loopwise
from loopwise import (
    Budget,
    Context,
    EventType,
    GraphError,
    Halt,
    ModelRequest,
    Status,
    Workflow,
)
from loopwise.cli.main import main
from loopwise.models.port import Turn
from loopwise.testing import ScriptedModel


class Ticket(BaseModel):
    subject: str
    kind: Literal["bug", "question", "praise"]


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


@loopwise.step
def parse(raw: dict[str, Any]) -> Ticket:
    return Ticket.model_validate(raw)


@loopwise.step
def to_text(ticket: Ticket) -> str:
    return ticket.subject


@loopwise.step
def shout(text: str) -> str:
    return text.upper()


@loopwise.step
def count(n: int) -> int:
    return n + 1


def _recorder(name: str, log: list[str], result: Any = None) -> loopwise.FunctionStep:
    async def body(value: Any) -> Any:
        log.append(name)
        return name if result is None else result

    return loopwise.step(name=name)(body)


def _node_events(result: loopwise.RunResult, kind: EventType) -> list[str]:
    return [e.step for e in result.events if e.type is kind]


def _triage(log: list[str], *, bug: str, question: str) -> Workflow:
    """parse, then a route on ``kind`` to recorders ``bug``/``question`` (default
    ``thanks``), then shout."""
    return (
        Workflow("triage")
        .then(parse)
        .route(
            "kind",
            {"bug": _recorder(bug, log), "question": _recorder(question, log)},
            default=_recorder("thanks", log),
        )
        .then(shout)
    )


def test_chain_runs_every_node_through_the_context() -> None:
    wf = Workflow("chain").then(parse).then(to_text).then(shout)
    result = loopwise.run(wf, {"subject": "printer on fire", "kind": "bug"})
    assert result.status == "completed"
    assert result.output == "PRINTER ON FIRE"
    assert result.steps == 3
    assert _node_events(result, EventType.STEP_FINISHED)[:3] == [
        "chain/parse",
        "chain/to_text",
        "chain/shout",
    ]
    finished = [e for e in result.events if e.step == "chain/to_text"][-1]
    assert finished.data["output"] == "printer on fire"
    assert finished.data["usage"]["model_calls"] == 0


def test_a_workflow_is_a_step_with_types() -> None:
    wf = Workflow("typed", input_type=Ticket).then(to_text).then(shout)
    assert isinstance(wf, loopwise.Step)
    assert wf.input_type is Ticket and wf.output_type is str
    assert not wf.needs_model
    # A dict input is validated into the declared pydantic input type.
    assert loopwise.run(wf, {"subject": "hi", "kind": "praise"}).output == "HI"
    bad = loopwise.run(wf, {"subject": "hi", "kind": "rant"})
    assert bad.status == "error" and "Ticket" in (bad.detail or "")
    # Not an object at all: refused too, not run as if it were a Ticket.
    text = loopwise.run(wf, "just a string")
    assert text.status == "error" and "does not match Ticket" in (text.detail or "")
    assert text.steps == 0


# Validation: each error names the node.


def test_type_mismatch_raises_when_declared() -> None:
    with pytest.raises(GraphError) as caught:
        Workflow("w").then(to_text).then(count)
    assert caught.value.node == "count"
    assert "takes int but 'to_text' gives str" in str(caught.value)


def test_type_mismatch_of_the_workflow_input() -> None:
    with pytest.raises(GraphError) as caught:
        Workflow("w", input_type=int).then(shout)
    assert caught.value.node == "shout" and "workflow input" in str(caught.value)


def test_any_and_subclasses_and_dicts_into_models_match() -> None:
    @loopwise.step
    def anything(x: Any) -> Any:
        return x

    class Special(Ticket):
        pass

    @loopwise.step
    def special(raw: dict[str, Any]) -> Special:
        return Special.model_validate(raw)

    Workflow("ok").then(to_text).then(anything).then(count)
    Workflow("ok2").then(special).then(to_text).validate()
    Workflow("ok3").then(anything).then(parse).validate()


def test_cycle_is_named() -> None:
    log: list[str] = []
    wf = Workflow("w")
    wf.add("a", _recorder("a", log)).add("b", _recorder("b", log), after=["a"])
    wf.connect("b", "a")
    errors = wf.validation_errors()
    assert any("cycle" in str(e) and e.node in {"a", "b"} for e in errors)
    with pytest.raises(GraphError, match="cycle"):
        wf.validate()


def test_a_cycle_error_names_a_real_cycle_and_the_edge_that_closes_it() -> None:
    log: list[str] = []
    wf = Workflow("w").add("a", _recorder("a", log))
    for pred, node in [("a", "b"), ("b", "c"), ("c", "d")]:
        wf.add(node, _recorder(node, log), after=[pred])
    wf.connect("d", "b")  # a -> (b -> c -> d -> b): `a` leads into the cycle, is not on it
    (error,) = wf.validation_errors()
    assert error.code == "cycle" and error.node == "b"
    assert "(b → c → d → b)" in str(error) and "remove the edge d → b" in str(error)


def test_the_schedule_and_validation_agree_with_networkx_on_random_graphs() -> None:
    # The workflow holds its graph in plain dicts with its own cycle, reachability and
    # generation code (running one must not import networkx); the frozen networkx view
    # (`wf.graph`) is the oracle.
    import random

    import networkx as nx

    rng = random.Random(17)
    for _ in range(300):
        log: list[str] = []
        wf = Workflow("w")
        names = [f"n{i}" for i in range(rng.randint(1, 12))]
        for i, name in enumerate(names):
            fewest = 0 if rng.random() < 0.05 else 1  # a node without one is unreachable
            after = rng.sample(names[:i], rng.randint(fewest, min(i, 3))) if i else []
            wf.add(name, _recorder(name, log), after=after)
        for _ in range(rng.choice([0, 0, 1, 2])):
            wf.connect(rng.choice(names), rng.choice(names))
        sinks = [n for n in names if wf.graph.out_degree(n) == 0]
        wf.add("end", _recorder("end", log), after=sinks, join=lambda outputs: outputs)
        g = wf.graph
        errors = wf.validation_errors()
        codes = {e.code for e in errors}
        assert ("cycle" in codes) == (not nx.is_directed_acyclic_graph(g))
        if "cycle" in codes:
            (cycle,) = [e for e in errors if e.code == "cycle"]
            assert any(nx.has_path(g, s, cycle.node) for s in g.successors(cycle.node))
            continue
        start = next(n for n in g if g.in_degree(n) == 0)
        unreached = set(g) - nx.descendants(g, start) - {start}
        assert {e.node for e in errors if e.code == "unreachable"} == unreached
        if not errors:
            assert loopwise.run(wf, 0, store=None).status is Status.COMPLETED
            assert log == [n for generation in nx.topological_generations(g) for n in generation]
    with pytest.raises(nx.NetworkXError, match="Frozen"):
        wf.graph.add_edge("end", "n0")  # a copy: the workflow is declared with its methods


def test_unreachable_node_is_named() -> None:
    log: list[str] = []
    wf = Workflow("w").add("a", _recorder("a", log)).add("lonely", _recorder("b", log))
    (error,) = [e for e in wf.validation_errors() if "unreachable" in str(e)]
    assert error.node == "lonely" and "after=[...]" in str(error)


def test_dangling_route_branch_is_named() -> None:
    log: list[str] = []
    wf = Workflow("w").add("a", _recorder("a", log))
    wf.add_route("pick", lambda v: v, {"x": "gone"}, default="a2", after=["a"])
    wf.add("a2", _recorder("a2", log))
    (error,) = wf.validation_errors()
    assert error.node == "pick" and "'gone'" in str(error) and "dangling" in str(error)


def test_branch_nobody_joins_is_dangling() -> None:
    log: list[str] = []
    wf = Workflow("w").then(_recorder("a", log)).parallel(_recorder("b", log), _recorder("c", log))
    (error,) = wf.validation_errors()
    assert error.node == "c" and "nothing joins" in str(error)
    with pytest.raises(GraphError):
        loopwise.run(wf, None)


def test_route_must_cover_a_literal_or_have_a_default() -> None:
    log: list[str] = []
    bug, other = _recorder("bug", log), _recorder("other", log)
    with pytest.raises(GraphError) as caught:
        Workflow("w").then(parse).route("kind", {"bug": bug})
    assert caught.value.node == "route_kind"
    assert "'question', 'praise'" in str(caught.value) and "default" in str(caught.value)
    Workflow("ok").then(parse).route("kind", {"bug": bug}, default=other).then(shout)


def test_route_key_that_is_not_a_value_is_named() -> None:
    log: list[str] = []
    with pytest.raises(GraphError, match="'bgu'"):
        Workflow("w").then(parse).route("kind", {"bgu": _recorder("x", log)}, default=shout)


def test_route_on_a_missing_field() -> None:
    with pytest.raises(GraphError, match="no such field"):
        Workflow("w").then(parse).route("colour", {"x": shout}, default=shout)


def test_route_on_an_enum_returned_by_a_function() -> None:
    log: list[str] = []

    def colour(text: str) -> Color:
        return Color.GREEN if "GO" in text else Color.RED

    red, green = _recorder("red", log), _recorder("green", log)
    with pytest.raises(GraphError, match="'green'"):
        Workflow("w").then(shout).route(colour, {Color.RED: red})
    wf = Workflow("ok").then(shout).route(colour, {Color.RED: red, "green": green})
    assert loopwise.run(wf, "go now").output == "green"
    assert log == ["green"]


def test_builder_graphs_are_checked_before_running() -> None:
    wf = Workflow("w").add("text", to_text).add("n", count, after=["text"])
    (error,) = wf.validation_errors()
    assert error.node == "n"
    with pytest.raises(GraphError):
        loopwise.run(wf, Ticket(subject="s", kind="bug"))


def test_declaration_mistakes_raise_at_once() -> None:
    wf = Workflow("w").add("a", shout)
    with pytest.raises(GraphError, match="already exists"):
        wf.add("a", shout)
    with pytest.raises(GraphError, match="not declared yet"):
        wf.add("b", shout, after=["nope"])
    with pytest.raises(GraphError, match="not a step"):
        wf.add("c", print, after=["a"])  # type: ignore[arg-type]
    assert Workflow("empty").validation_errors()[0].node is None


# Running: branches, joins, concurrency, failures, budget.


def test_only_the_chosen_branch_runs() -> None:
    log: list[str] = []
    wf = _triage(log, bug="engineers", question="support")
    result = loopwise.run(wf, {"subject": "how?", "kind": "question"})
    assert result.status == "completed" and result.output == "SUPPORT"
    assert log == ["support"]
    started = _node_events(result, EventType.STEP_STARTED)
    assert "triage/engineers" not in started and "triage/thanks" not in started
    route = next(e for e in result.events if e.step == "triage/route_kind" and "output" in e.data)
    assert route.data["output"]["branch"] == "support"
    assert result.steps == 4
    log.clear()
    assert loopwise.run(wf, {"subject": "<3", "kind": "praise"}).output == "THANKS"
    assert log == ["thanks"]


def test_parallel_branches_overlap_and_join_as_a_dict() -> None:
    active, peak = [0], [0]
    both_in = asyncio.Event()

    def branch(name: str) -> loopwise.FunctionStep:
        async def body(text: str) -> str:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            if active[0] == 2:
                both_in.set()
            # Each branch waits until the other has started: only concurrency finishes this.
            await asyncio.wait_for(both_in.wait(), timeout=5)
            active[0] -= 1
            return f"{name}:{text}"

        return loopwise.step(name=name)(body)

    @loopwise.step
    def merge(parts: dict[str, str]) -> str:
        return " + ".join(f"{k}={v}" for k, v in sorted(parts.items()))

    wf = Workflow("fan").then(shout).parallel(branch("left"), branch("right")).then(merge)
    result = loopwise.run(wf, "x")
    assert result.status == "completed", result.detail
    assert peak[0] == 2
    assert result.output == "left=left:X + right=right:X"


def test_join_function_shapes_the_join_input() -> None:
    wf = Workflow("w").then(shout).parallel(a=shout, b=_recorder("b", [], result="b!"))
    wf.then(shout, name="final", join=lambda parts: parts["a"] + parts["b"])
    assert loopwise.run(wf, "x").output == "XB!"


def test_builder_with_forward_route_targets_and_merge() -> None:
    log: list[str] = []
    wf = Workflow("plan")
    wf.add("start", _recorder("start", log, result={"go": True}))
    wf.add_route("decide", "go", {True: "yes", False: "no"}, after=["start"])
    wf.add("yes", _recorder("yes", log))
    wf.add("no", _recorder("no", log))
    wf.add("end", shout, after=["yes", "no"])
    assert wf.validation_errors() == []
    result = loopwise.run(wf, None)
    assert result.output == "YES" and log == ["start", "yes"]


def test_a_workflow_can_be_a_node() -> None:
    inner = Workflow("inner").then(to_text).then(shout)
    outer = Workflow("outer").then(parse).then(inner).then(_recorder("done", [], result="ok"))
    result = loopwise.run(outer, {"subject": "nested", "kind": "bug"})
    assert result.status == "completed" and result.output == "ok"
    assert "outer/inner/shout" in _node_events(result, EventType.STEP_FINISHED)


def test_a_failing_node_ends_the_run_with_a_status() -> None:
    cancelled: list[str] = []

    @loopwise.step
    async def slow(text: str) -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append("slow")
            raise
        return text

    @loopwise.step
    async def broken(text: str) -> str:
        raise RuntimeError("disk full")

    wf = Workflow("w").then(shout).parallel(slow, broken).then(lambda_join)
    result = loopwise.run(wf, "x")
    assert result.status == "error"
    assert result.detail == "node broken: RuntimeError: disk full"
    assert cancelled == ["slow"]


@loopwise.step
def lambda_join(parts: dict[str, str]) -> str:
    return ",".join(parts)


def _spends(name: str) -> loopwise.FunctionStep:
    async def body(text: str, ctx: Context) -> str:
        turn = await ctx.call_model(ModelRequest(messages=[{"role": "user", "content": text}]))
        return str(turn.text)

    return loopwise.step(name=name)(body)


def test_the_run_budget_covers_every_node() -> None:
    model = ScriptedModel(lambda request: Turn(text="ok", input_tokens=60, output_tokens=0))
    wf = Workflow("w").then(_spends("one")).then(_spends("two")).then(_spends("three"))
    result = loopwise.run(wf, "hi", model=model, budget=Budget(max_tokens=100))
    assert result.status == "budget_exceeded"
    assert result.usage.model_calls == 2
    assert "w/three" not in _node_events(result, EventType.STEP_STARTED)
    assert loopwise.run(wf, "hi", model=model).usage.model_calls == 3


def test_halt_from_a_node_keeps_its_status() -> None:
    # A Halt raised by a node (a guardrail) ends the run with its own status.
    @loopwise.step
    def guard(text: str) -> str:
        raise Halt(Status.REFUSED, "the model declined")

    result = loopwise.run(Workflow("w").then(shout).then(guard), "x")
    assert result.status == Status.REFUSED and result.detail == "the model declined"


def test_to_mermaid_draws_nodes_routes_and_labels() -> None:
    log: list[str] = []
    wf = _triage(log, bug="eng", question="help")
    chart = wf.to_mermaid()
    assert chart.startswith("%% workflow triage\nflowchart TD\n")
    assert 'route_kind{"route_kind: kind?"}' in chart
    assert 'route_kind -->|"bug"| eng' in chart
    assert 'route_kind -->|"default"| thanks' in chart
    assert "eng --> shout" in chart


def _write_module(tmp_path: Path) -> Path:
    path = tmp_path / "flows.py"
    path.write_text(
        textwrap.dedent(
            """
            import loopwise
            from loopwise import Workflow

            @loopwise.step
            def upper(text: str) -> str:
                return text.upper()

            flow = Workflow("flow").then(upper)
            """
        )
    )
    return path


def test_cli_graph_prints_mermaid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write_module(tmp_path)
    assert main(["graph", f"{path}:flow"]) == 0
    assert 'flowchart TD\n    upper["upper"]' in capsys.readouterr().out
    assert main(["graph", f"{path}:upper"]) == 2
    assert "is not a workflow" in capsys.readouterr().err


def test_parallel_nodes_report_their_own_usage_not_their_siblings() -> None:
    def asker(name: str, calls: int) -> Any:
        async def ask(x: Any, ctx: loopwise.Context) -> int:
            for _ in range(calls):
                await ctx.call_model(ModelRequest(messages=[{"role": "user", "content": name}]))
            return calls

        return loopwise.step(name=name)(ask)

    @loopwise.step
    def total(parts: dict[str, int]) -> int:
        return sum(parts.values())

    @loopwise.step
    def start(x: Any) -> Any:
        return x

    flow = Workflow("fan").then(start).parallel(asker("one", 1), asker("three", 3)).then(total)
    result = loopwise.run(flow, "go", model=ScriptedModel(lambda r: "ok"), store=None)
    assert result.output == 4 and result.usage.model_calls == 4
    own = {
        e.step.rsplit("/", 1)[-1]: e.data["usage"]["model_calls"]
        for e in result.events
        if e.type == "step_finished"
    }
    assert own["one"] == 1 and own["three"] == 3 and own["fan"] == 4


def test_parallel_without_a_node_to_fan_out_from_raises_at_declaration() -> None:
    with pytest.raises(GraphError, match=r"start it with then\(step\)") as caught:
        Workflow("w").parallel(a=shout, b=_recorder("b", []))
    assert caught.value.node == "a"


def test_a_plain_function_in_the_chained_api_is_a_graph_error_naming_it() -> None:
    def undecorated(x: str) -> str:
        return x

    for declare in (
        lambda: Workflow("w").then(undecorated),  # type: ignore[arg-type]
        lambda: Workflow("w").then(shout).parallel(undecorated, shout),  # type: ignore[arg-type]
        lambda: Workflow("w").then(shout).route(len, {1: undecorated}),  # type: ignore[arg-type]
    ):
        with pytest.raises(GraphError, match="not a step; decorate") as caught:
            declare()
        assert caught.value.node == "undecorated"
