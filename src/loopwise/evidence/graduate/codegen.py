"""The Python source of a graduated workflow: :func:`workflow_source` writes a
:class:`~loopwise.evidence.graduate.dataflow.Plan` as a module a person reads, edits and commits.

The module imports only public names (``loopwise``, ``loopwise.testing``) and the agent's own
module, from which it takes the agent's tools
unchanged — their effects, gates, allow-lists and ``untrusted_output`` — and calls them
through :func:`loopwise.call_tools`, the executor the agent's own calls take. Its
state is one dict, ``{"input": ..., "calls": [[{"tool", "args", "result"}, ...], ...]}``
(the turns so far), which is also what each of its structured calls is shown, as JSON
with a ``task`` (``arguments``, ``route``, ``answer``): the protocol
:func:`loopwise.testing.graduated_model` answers offline.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loopwise.evidence.graduate.dataflow import Plan, Rule, Source, Split, StepPlan, TurnPlan

__all__ = ["AgentRef", "Header", "workflow_source"]


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentRef:
    """How the generated module reaches the agent."""

    spec: str
    """The agent's target spec as given."""
    module: str
    """The module to import (``order_investigation``, ``pkg.agents``)."""
    name: str
    """The agent's name in it."""
    folder: str | None = None
    """The agent file's folder relative to the generated file (``None``: a package)."""
    offline: bool = False
    """Whether the agent's module has an ``offline_model``."""
    structured_output: bool = False
    """Whether the agent answers with a pydantic model (else text)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Header:
    """What the docstring says the module was generated from."""

    date: str
    """When (ISO date)."""
    runs: int
    """Runs mined."""
    coverage: float
    """Share of the mined runs on the paths written down."""
    paths: Sequence[tuple[float, str]]
    """(share, path text) of each path written down."""
    held_out: int = 0
    """Runs held out of the mining for the evaluation."""


def workflow_source(plan: Plan, agent: AgentRef, header: Header) -> str:
    """The module's source."""
    writer = _Writer(agent)
    writer.wire(plan.first, ["begin"])
    edges = [*writer.edges, _edge("answer", writer.answer_after, join=True)]
    tools = [f"{_ident(t)} = _TOOLS[{t!r}]" for t in sorted(writer.tools)]
    return "\n".join(
        [
            *_docstring(agent, header, writer.learned, writer.filled),
            *_prelude(agent, routes=writer.routes),
            *tools,
            _HELPERS,
            *writer.definitions,
            *_answer(agent),
            *_wiring(agent, edges),
            *_offline(agent),
        ]
    )


def workflow_name(agent: AgentRef) -> str:
    """The module-level name of the workflow: ``<agent>_workflow``."""
    return f"{_ident(agent.name)}_workflow"


@dataclass
class _Writer:
    """Walks the plan, writing one definition per node and collecting the edges."""

    agent: AgentRef
    definitions: list[str] = field(default_factory=list)
    edges: list[str] = field(default_factory=list)
    learned: list[str] = field(default_factory=list)
    filled: list[str] = field(default_factory=list)
    names: set[str] = field(default_factory=lambda: {"begin", "answer"})
    answer_after: list[str] = field(default_factory=list)
    tools: set[str] = field(default_factory=set)
    routes: bool = False

    def unique(self, base: str) -> str:
        name, n = _ident(base), 2
        while name in self.names:
            name, n = f"{_ident(base)}_{n}", n + 1
        self.names.add(name)
        return name

    def wire(self, node: TurnPlan | Split | None, after: list[str]) -> None:
        """Write ``node`` and what follows it, after the nodes ``after``; end at answer."""
        if node is None:
            self.answer_after.extend(after)
        elif isinstance(node, Split):
            self.split(node, after)
        else:
            self.wire(node.then, self.turn(node, after))

    def turn(self, turn: TurnPlan, after: list[str]) -> list[str]:
        """The turn's nodes (one per tool, concurrent); returns them."""
        made = []
        for step in turn.tools:
            node = self.unique("call_" + step.tool)
            self.definitions += self.tool_node(node, step)
            self.edges.append(_edge(node, after, join=len(after) > 1))
            made.append(node)
        return made

    def split(self, split: Split, after: list[str]) -> None:
        where = "_and_".join(a.removeprefix("call_") for a in after)
        if len(after) > 1:  # a route reads one state: join the concurrent calls first
            joined = self.unique(f"after_{where}")
            self.definitions += _pass_node(joined, f"after {', '.join(after)}")
            self.edges.append(_edge(joined, after, join=True))
            after = [joined]
        route = self.unique(f"route_after_{where}")
        self.routes = True
        self.definitions += self.route_fn(route, split, where)
        targets: dict[str, str] = {}
        for label, first in split.branches.items():
            if first is None:
                targets[label] = "answer"
                continue
            if len(first.tools) == 1:
                made = self.turn(first, [])
                targets[label] = made[0]
            else:
                entry = self.unique(f"branch_{label.replace('+', '_and_')}")
                self.definitions += _pass_node(entry, f"the branch {label!r} starts here")
                self.edges.append(_edge(entry, []))
                targets[label] = entry
                made = self.turn(first, [entry])
            self.wire(first.then, made)
        self.edges.append(_route_edge(route, targets, after))

    def route_fn(self, route: str, split: Split, where: str) -> list[str]:
        labels = list(split.branches)
        literal = "Literal[" + ", ".join(repr(k) for k in labels) + "]"
        counts = ", ".join(f"{k} {split.runs[k]}" for k in labels)
        if split.rule is not None:
            self.learned.append(f"after {where}: {_rule_text(split.rule)}")
            return [
                "",
                "",
                f"async def {route}(state: dict[str, Any]) -> {literal}:",
                f'    """Learned from the runs ({counts}): {_doc(_rule_text(split.rule))}."""',
                *_rule_body(split.rule),
                "",
            ]
        self.filled.append(f"after {where}: which branch ({counts}; no rule separates them)")
        model = f"_{route.title().replace('_', '')}"
        branches = {
            k: [] if v is None else [s.tool for s in v.tools] for k, v in split.branches.items()
        }
        return [
            "",
            "",
            f"class {model}(pydantic.BaseModel):",
            f'    """Which way after {_doc(where)}."""',
            "",
            f"    branch: {literal}",
            "",
            "",
            f"_{route.upper()} = loopwise.Structured(",
            f"    {route!r},",
            f"    {model},",
            "    INSTRUCTIONS + _ROUTE_NOTE,",
            ")",
            "",
            "",
            f"async def {route}(state: dict[str, Any], ctx: loopwise.Context) -> {literal}:",
            f'    """No rule on earlier results separates these paths ({_doc(counts)}): one',
            '    structured routing call decides."""',
            f'    choice = await ctx.run_step(_{route.upper()}, _ask(state, "route", '
            f"branches={branches!r}))",
            "    return choice.branch",
            "",
        ]

    def tool_node(self, node: str, step: StepPlan) -> list[str]:
        tool = _ident(step.tool)
        self.tools.add(step.tool)
        lines = [
            "",
            "",
            "@loopwise.step",
            f"async def {node}(state: dict[str, Any], ctx: loopwise.Context) -> dict[str, Any]:",
        ]
        if step.fanout is not None:
            return [*lines, *self.fanout_body(step, tool)]
        if step.many:
            self.filled.append(f"{step.tool}: every call's arguments (no list proves which)")
            fill = f"_FILL_{tool.upper()}_{node.upper()}"
            self.definitions += _fill_step(fill, step.tool, many=True)
            return [
                *lines,
                f'    """{step.tool}: a structured call gives every call\'s arguments."""',
                f'    filled = await ctx.run_step({fill}, _ask(state, "arguments", '
                f"tool={step.tool!r}, many=True))",
                "    calls = [c.model_dump() for c in filled.calls]",
                f"    results = await _call_each(ctx, {tool}, calls)",
                f"    return _with(state, {step.tool!r}, calls, results)",
                "",
            ]
        args, notes = self.single_args(step)
        doc = f'    """{step.tool}: ' + _doc("; ".join(notes) or "no arguments") + '."""'
        body = [doc]
        if step.filled:
            fill = f"_FILL_{node.upper()}"
            self.definitions += _fill_step(fill, step.tool, names=step.filled)
            body.append(
                f'    filled = await ctx.run_step({fill}, _ask(state, "arguments", '
                f"tool={step.tool!r}))"
            )
            args.insert(0, "        **filled.model_dump(),")
        return [
            *lines,
            *body,
            "    args = {",
            *args,
            "    }",
            f"    results = await call_tools(ctx, [({tool}, args)])",
            f"    return _with(state, {step.tool!r}, [args], results)",
            "",
        ]

    def single_args(self, step: StepPlan) -> tuple[list[str], list[str]]:
        lines, notes = [], []
        for name, source in sorted(step.bound.items()):
            lines.append(f"        {name!r}: {_read(source)},")
            notes.append(f"{name} = {source.text}")
            self.learned.append(f"{step.tool}.{name} = {source.text} (in all {step.runs} runs)")
        for name, value in sorted(step.constants.items()):
            lines.append(f"        {name!r}: {value!r},")
            notes.append(f"{name} = {value!r} in every run")
            self.learned.append(
                f"{step.tool}.{name} = {value!r} (the same in all {step.runs} runs)"
            )
        for name in step.filled:
            notes.append(f"{name} filled by a structured call")
            self.filled.append(f"{step.tool}.{name}")
        return lines, notes

    def fanout_body(self, step: StepPlan, tool: str) -> list[str]:
        fan = step.fanout
        assert fan is not None
        pairs = [f"{n!r}: item.get({f!r})" for n, f in sorted(fan.fields.items())]
        pairs += [f"{n!r}: {v!r}" for n, v in sorted(step.constants.items())]
        which = "item"
        condition = ""
        if fan.when is not None:
            key, values = fan.when
            which = f"item whose {key} is one of {values!r}"
            condition = f" if item.get({key!r}) in {values!r}"
        taken = ", ".join(f"{n} = item[{f!r}]" for n, f in sorted(fan.fields.items()))
        self.learned.append(
            f"{step.tool}: one call per {which} of {fan.over.text}; {taken} "
            f"(in all {step.runs} runs)"
        )
        return [
            f'    """{step.tool} for {_doc(f"{which} of {fan.over.text} ({taken})")}."""',
            f"    items = {_read(fan.over)} or []",
            f"    calls = [{{{', '.join(pairs)}}} for item in items{condition}]",
            f"    results = await _call_each(ctx, {tool}, calls)",
            f"    return _with(state, {step.tool!r}, calls, results)",
            "",
        ]


def _doc(text: str) -> str:
    """``text`` safe inside a generated docstring: values come from stored tool results,
    and a result holding three quotes must not end the docstring and become code."""
    return text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


def _read(source: Source) -> str:
    base = "state['input']" if not source.tool else f"_result(state, {source.tool!r})"
    return base + "".join(f"[{k!r}]" for k in source.path)


def _rule_text(rule: Rule) -> str:
    if rule.item_field is not None:
        ((label, values),) = rule.branches.items()
        return (
            f"{label} when any item of {rule.source.text} has {rule.item_field} among "
            f"{values!r}, else {rule.default}"
        )
    parts = [
        f"{label} when {rule.source.text} is one of {values!r}"
        for label, values in rule.branches.items()
        if label != rule.default
    ]
    return "; ".join(parts) + f"; else {rule.default}"


def _rule_body(rule: Rule) -> list[str]:
    if rule.item_field is not None:
        ((label, values),) = rule.branches.items()
        return [
            f"    items = {_read(rule.source)} or []",
            f"    if any(item.get({rule.item_field!r}) in {values!r} for item in items):",
            f"        return {label!r}",
            f"    return {rule.default!r}",
        ]
    lines = [f"    value = {_read(rule.source)}"]
    for label, values in rule.branches.items():
        if label != rule.default:
            lines += [f"    if value in {values!r}:", f"        return {label!r}"]
    return [*lines, f"    return {rule.default!r}  # and any value no run showed"]


def _fill_step(name: str, tool: str, *, names: Sequence[str] = (), many: bool = False) -> list[str]:
    ident = _ident(tool)
    shape = f"_calls_of({ident})" if many else f"_arguments_of({ident}, {list(names)!r})"
    return [
        "",
        "",
        f"{name} = loopwise.Structured(",
        f"    {('fill_' + tool)!r},",
        f"    {shape},",
        f"    INSTRUCTIONS + _fill_note({ident}),",
        ")",
    ]


def _pass_node(name: str, doc: str) -> list[str]:
    return [
        "",
        "",
        "@loopwise.step",
        f"def {name}(state: dict[str, Any]) -> dict[str, Any]:",
        f'    """{_doc(doc[0].upper() + doc[1:])} (the calls next to it run concurrently)."""',
        "    return state",
        "",
    ]


def _edge(node: str, after: list[str], *, join: bool = False) -> str:
    if not after:  # a route's branch: the route leads here
        return f"_W.add({node!r}, {node})"
    joined = ", join=_join" if join else ""
    return f"_W.add({node!r}, {node}, after={after!r}{joined})"


def _route_edge(route: str, targets: dict[str, str], after: list[str]) -> str:
    return f"_W.add_route({route!r}, {route}, {targets!r}, after={after!r})"


def _docstring(agent: AgentRef, header: Header, learned: list[str], filled: list[str]) -> list[str]:
    name = workflow_name(agent)
    return [
        f'"""{name}: the agent {_doc(agent.spec)} graduated into a workflow.',
        "",
        f"Generated by `loopwise graduate` on {header.date} from {header.runs} completed runs",
        f"of the agent ({header.held_out} more held out to evaluate it); the paths written",
        f"down cover {header.coverage:.0%} of the mined runs:",
        *(f"    {share:>4.0%}  {_doc(text)}" for share, text in header.paths),
        "",
        "Learned from the runs (code, no model call):",
        *(f"    {_doc(line)}" for line in learned or ["nothing"]),
        "Filled by a structured call (shown the input and the results so far):",
        *(f"    {_doc(line)}" for line in [*filled, "the answer"]),
        "",
        "The agent's own tools run unchanged (effects, gates, allow-lists, untrusted output)",
        "through loopwise.calls.call_tools. This is a starting point to review, not a",
        "deployment: it does only what the stored runs showed, and a case they never",
        "showed (a branch no run took, a value no condition saw) goes the default way.",
        '"""',
        "",
    ]


def _prelude(agent: AgentRef, *, routes: bool) -> list[str]:
    lines = [
        "from __future__ import annotations",
        "",
        "import json",
    ]
    if agent.folder is not None:
        lines += ["import sys", "from pathlib import Path"]
    lines += [
        "from typing import Any, Literal" if routes else "from typing import Any",
        "",
        "import pydantic",
        "",
        "import loopwise",
        "from loopwise import call_tools",
        "",
    ]
    if agent.folder is not None:
        lines += [
            "# The agent's folder, so its module (and the modules beside it) import by name.",
            f"_FOLDER = str((Path(__file__).resolve().parent / {agent.folder!r}).resolve())",
            "if _FOLDER not in sys.path:",
            "    sys.path.insert(0, _FOLDER)",
            "",
        ]
    noqa = "  # noqa: E402" if agent.folder is not None else ""
    lines += [
        f"from {agent.module} import {agent.name} as _agent{noqa}",
        "",
        "# The agent's own tools, unchanged: effects, gates, allow-lists, untrusted output.",
        "_TOOLS = _agent.tool_map",
        "INSTRUCTIONS = _agent.instructions",
    ]
    return lines


_HELPERS = '''
_ROUTE_NOTE = (
    "\\n\\nYou are one step of a fixed workflow. From the input and the tool results "
    "so far (JSON below), choose which branch comes next."
)


def _fill_note(tool: loopwise.Tool) -> str:
    return (
        f"\\n\\nYou are one step of a fixed workflow. From the input and the tool results so "
        f"far (JSON below), give the arguments of the `{tool.name}` call: {tool.description}"
    )


def _arguments_of(tool: loopwise.Tool, names: list[str]) -> type[pydantic.BaseModel]:
    """The tool's own argument fields (with their allow-lists) that a model fills."""
    fields = tool.args_model.model_fields
    chosen: dict[str, Any] = {n: (fields[n].annotation, fields[n]) for n in names}
    return pydantic.create_model(f"{tool.name}_arguments", **chosen)


def _calls_of(tool: loopwise.Tool) -> type[pydantic.BaseModel]:
    """Every call's arguments, for a tool called a number of times the model decides."""
    one = _arguments_of(tool, list(tool.args_model.model_fields))
    return pydantic.create_model(f"{tool.name}_calls", calls=(list[one], ...))


def _ask(state: dict[str, Any], task: str, **more: Any) -> str:
    """What a structured call is shown: the input and the calls so far, as JSON."""
    shown = {"task": task, **more, "input": state["input"], "calls": state["calls"]}
    return json.dumps(shown, default=str)


async def _call_each(
    ctx: loopwise.Context, tool: loopwise.Tool, calls: list[dict[str, Any]]
) -> list[Any]:
    """One call of ``tool`` per arguments, as one batch (concurrent) through the executor;
    no more calls than the agent allowed in one turn."""
    if len(calls) > _agent.max_tool_calls:
        raise loopwise.Halt(
            loopwise.Status.ERROR,
            f"{tool.name}: {len(calls)} calls in one turn, more than the agent's "
            f"max_tool_calls ({_agent.max_tool_calls})",
        )
    return await call_tools(ctx, [(tool, args) for args in calls]) if calls else []


def _result(state: dict[str, Any], tool: str) -> Any:
    """The latest result of ``tool`` in this run."""
    for turn in reversed(state["calls"]):
        for call in reversed(turn):
            if call["tool"] == tool:
                return call["result"]
    raise LookupError(f"no result of {tool} yet")


def _with(
    state: dict[str, Any], tool: str, calls: list[dict[str, Any]], results: list[Any]
) -> dict[str, Any]:
    """The state with one more turn: these calls and their results."""
    done = [{"tool": tool, "args": a, "result": r} for a, r in zip(calls, results, strict=True)]
    return {**state, "calls": [*state["calls"], done]}


def _join(parts: dict[str, Any]) -> dict[str, Any]:
    """After concurrent nodes: the calls each made, as one turn."""
    states = list(parts.values())
    if len(states) == 1:
        return states[0]
    turn = [call for s in states for call in s["calls"][-1]]
    return {**states[0], "calls": [*states[0]["calls"][:-1], turn]}


@loopwise.step
def begin(question: Any) -> dict[str, Any]:
    """The run's state: its input and the turns of calls made so far."""
    return {"input": question, "calls": []}
'''


def _answer(agent: AgentRef) -> list[str]:
    if agent.structured_output:
        model, ret, take = "_agent.output_type", "Any", "written"
        pre: list[str] = []
    else:
        model, ret, take = "_Answer", "str", "written.answer"
        pre = [
            "",
            "",
            "class _Answer(pydantic.BaseModel):",
            '    """The final answer."""',
            "",
            "    answer: str",
        ]
    return [
        *pre,
        "",
        "",
        "_ANSWER = loopwise.Structured(",
        '    "write_answer",',
        f"    {model},",
        '    INSTRUCTIONS + "\\n\\nYou are the last step of a fixed workflow: write the final "',
        '    "answer from the input and the tool results (JSON below).",',
        ")",
        "",
        "",
        "@loopwise.step",
        f"async def answer(state: dict[str, Any], ctx: loopwise.Context) -> {ret}:",
        '    """The final answer, as the agent gives it, by one structured call."""',
        '    written = await ctx.run_step(_ANSWER, _ask(state, "answer"))',
        f"    return {take}",
        "",
    ]


def _wiring(agent: AgentRef, edges: list[str]) -> list[str]:
    name = workflow_name(agent)
    body = [e for e in edges if e]
    return [
        "",
        f"{name} = _W = loopwise.Workflow(",
        f"    {name!r},",
        "    input_type=_agent.input_type,",
        f'    description="The agent {agent.name} graduated: its mined paths, as code.",',
        "    budget=_agent.budget,",
        ")",
        '_W.add("begin", begin)',
        *body,
        "",
    ]


def _offline(agent: AgentRef) -> list[str]:
    if not agent.offline:
        return []
    return [
        "",
        "def offline_model() -> loopwise.Model:",
        '    """`--model scripted`: the agent\'s own offline model answers this workflow\'s',
        '    calls (asked, at each one, what the agent would do there)."""',
        f"    from {agent.module} import offline_model as agent_model",
        "    from loopwise.testing import graduated_model",
        "",
        "    return graduated_model(agent_model)",
        "",
    ]


def _ident(text: str) -> str:
    ident = re.sub(r"\W", "_", text) or "step"
    return ident if not ident[0].isdigit() else f"_{ident}"


def relative_folder(agent_file: Path, out: Path) -> str:
    """The agent file's folder relative to the folder of ``out``."""
    return os.path.relpath(agent_file.resolve().parent, out.resolve().parent)
