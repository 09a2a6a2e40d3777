"""The Python source of a graduated workflow: :func:`workflow_source` writes a
:class:`~loopwise.evidence.graduate.dataflow.Plan` as a module a person reads, edits and commits.

The module imports only ``loopwise`` (and ``loopwise.testing`` for its offline model) and
the agent's own module, by name. Its nodes call :class:`loopwise.Graduated` — the agent as
the workflow uses it: each tool looked up by its exact name, so its effect, gate,
allow-lists, timeout and ``untrusted_output`` are the agent's, called through the executor
the agent's own calls take — and hold only what was learned. It re-exports the agent
module's ``make_deps`` and ``make_eval_deps``, so ``loopwise run``/``eval`` give it the
agent's deps. Every identifier it defines comes from one registry
(:class:`~loopwise.evidence.graduate.naming.Names`: unique per tool and per node, never a
keyword, a builtin or a name of the module's own); every value it writes is a finite
JSON-like literal, and every text from the runs reaches it escaped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from loopwise.evidence.graduate.dataflow import Plan, Rule, Source, Split, StepPlan, TurnPlan
from loopwise.evidence.graduate.naming import (
    Names,
    argument,
    comment,
    doc,
    identifier,
    literal,
    node_doc,
    wrap,
)

__all__ = ["AgentRef", "Header", "workflow_name", "workflow_source"]


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentRef:
    """How the generated module reaches the agent."""

    spec: str
    """The agent's target spec as given."""
    module: str
    """The module to import it from, by name (``order_investigation``, ``pkg.agents``)."""
    name: str
    """The agent's name in it (a module attribute)."""
    offline: bool = False
    """Whether the agent's module has an ``offline_model``."""
    structured_output: bool = False
    """Whether the agent answers with a pydantic model (else text)."""
    deps: tuple[str, ...] = ()
    """The deps factories its module defines (``make_deps``, ``make_eval_deps``): re-exported."""
    gates: dict[str, str] = field(default_factory=dict)
    """Tool → its gate's kind (``human``, ``policy``, ``policy_then_human``; absent: none)."""


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
    """The module's source. Raises :class:`~loopwise.errors.ConfigError` naming the culprit
    when a learned value is no finite literal or an argument name cannot be written."""
    writer = _Writer(agent=agent, names=Names(workflow_name(agent)))
    writer.wire(plan.first, ["begin"])
    edges = [*writer.edges, _edge("answer", writer.answer_after, join=True)]
    source = "\n".join(
        [
            *_docstring(agent, header, writer),
            *_prelude(agent, sorted(writer.tools), routes=writer.routes),
            *_begin(),
            *writer.definitions,
            *_answer(agent),
            *_wiring(agent, edges),
            *_offline(agent),
        ]
    )
    # Two blank lines between definitions at most (no text from the runs holds a raw
    # newline: every one reaches the module escaped).
    return re.sub(r"\n{4,}", "\n\n\n", source)


def workflow_name(agent: AgentRef) -> str:
    """The module-level name of the workflow: ``<agent>_workflow``."""
    return f"{identifier(agent.name)}_workflow"


@dataclass
class _Writer:
    """Walks the plan, writing one definition per node and collecting the edges."""

    agent: AgentRef
    names: Names
    definitions: list[str] = field(default_factory=list)
    edges: list[str] = field(default_factory=list)
    learned: list[str] = field(default_factory=list)
    filled: list[str] = field(default_factory=list)
    decided: list[str] = field(default_factory=list)
    answer_after: list[str] = field(default_factory=list)
    tools: set[str] = field(default_factory=set)
    routes: bool = False

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
            node = self.names.unique("call_" + step.tool)
            self.definitions += self.tool_node(node, step)
            self.edges.append(_edge(node, after, join=len(after) > 1))
            made.append(node)
        return made

    def split(self, split: Split, after: list[str]) -> None:
        where = "_and_".join(a.removeprefix("call_") for a in after)
        if len(after) > 1:  # a route reads one state: join the concurrent calls first
            joined = self.names.unique(f"after_{where}")
            self.definitions += _pass_node(joined, f"after {', '.join(after)}")
            self.edges.append(_edge(joined, after, join=True))
            after = [joined]
        route = self.names.unique(f"route_after_{where}")
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
                entry = self.names.unique(f"branch_{label.replace('+', '_and_')}")
                self.definitions += _pass_node(entry, f"the branch {label!r} starts here")
                self.edges.append(_edge(entry, []))
                targets[label] = entry
                made = self.turn(first, [entry])
            self.wire(first.then, made)
        self.edges.append(_route_edge(route, targets, after))

    def route_fn(self, route: str, split: Split, where: str) -> list[str]:
        labels = list(split.branches)
        kind = "Literal[" + ", ".join(literal(k, f"a branch after {where}") for k in labels) + "]"
        counts = ", ".join(f"{k} {split.runs[k]}" for k in labels)
        if split.rule is not None:
            self.learned.append(f"after {where}: {_rule_text(split.rule)}")
            return [
                "",
                "",
                f"async def {route}(state: dict[str, Any]) -> {kind}:",
                *node_doc(f"Learned from the runs ({counts}): {_rule_text(split.rule)}."),
                *_rule_body(split.rule, where),
                "",
            ]
        self.filled.append(f"after {where}: which branch ({counts}; no rule separates them)")
        router = self.names.unique(f"_{route.upper()}")
        branches = {
            k: [] if v is None else [s.tool for s in v.tools] for k, v in split.branches.items()
        }
        shown = literal(branches, f"the branches after {where}")
        return [
            "",
            "",
            f"{router} = AGENT.router(",
            f"    {literal(route, route)},",
            f"    {literal(labels, route)},",
            ")",
            "",
            "",
            f"async def {route}(state: dict[str, Any], ctx: loopwise.Context) -> {kind}:",
            f'    """No rule on earlier results separates these paths ({doc(counts)}): one',
            '    structured routing call decides."""',
            f"    branch: {kind} = await AGENT.route(ctx, {router}, state, {shown})",
            "    return branch",
            "",
        ]

    def tool_node(self, node: str, step: StepPlan) -> list[str]:
        self.tools.add(step.tool)
        name = literal(step.tool, "a tool name")
        lines = [
            "",
            "",
            "@loopwise.step",
            f"async def {node}(state: dict[str, Any], ctx: loopwise.Context) -> dict[str, Any]:",
        ]
        person = self.person_note(step)
        if step.fanout is not None:
            return [*lines, *self.fanout_body(step, name, person)]
        if step.many:
            self.filled.append(f"{step.tool}: every call's arguments (no list proves which)")
            fill = self.names.unique(f"_FILL_{node.upper()}")
            self.definitions += [
                "",
                "",
                f"{fill} = AGENT.many_filler({literal('fill_' + step.tool, step.tool)}, {name})",
            ]
            return [
                *lines,
                f'    """{doc(step.tool)}: a structured call gives every call\'s arguments."""',
                *person,
                f"    calls = await AGENT.fill_many(ctx, {fill}, state, {name})",
                f"    return await AGENT.call(ctx, state, {name}, calls)",
                "",
            ]
        args, notes = self.single_args(step)
        body = [*node_doc(f"{step.tool}: {'; '.join(notes) or 'no arguments'}."), *person]
        if step.filled:
            fill = self.names.unique(f"_FILL_{node.upper()}")
            wanted = literal(list(step.filled), f"the arguments of {step.tool}")
            self.definitions += [
                "",
                "",
                f"{fill} = AGENT.filler(",
                f"    {literal('fill_' + step.tool, step.tool)},",
                f"    {name},",
                f"    {wanted},",
                ")",
            ]
            args.insert(0, f"        **await AGENT.fill(ctx, {fill}, state, {name}),")
        return [
            *lines,
            *body,
            "    args: dict[str, Any] = {",
            *args,
            "    }",
            f"    return await AGENT.call(ctx, state, {name}, [args])",
            "",
        ]

    def person_note(self, step: StepPlan) -> list[str]:
        """Comment lines on calls a person decided: why nothing of theirs was learned."""
        if not step.persons and not step.edited:
            return []
        how = ", ".join(f"{k} {v}" for k, v in sorted(step.persons.items()))
        gate = self.agent.gates.get(step.tool)
        edited = ", ".join(step.edited)
        self.decided.append(
            f"{step.tool}: a person decided calls ({how})"
            + (f"; edited {edited}: filled, never learned" if edited else "")
        )
        text = (
            f"A person decided {step.tool} calls in the mined runs ({how}). What a person "
            "decided is not learned: "
            + (
                f"{edited} (edited by a person) is filled by a structured call, and "
                if edited
                else ""
            )
            + f"the tool's own gate ({gate or 'none'}) judges every call as it judged the "
            "agent's, so a person is asked again wherever the agent would have asked one."
        )
        return [f"    # {line}" for line in wrap(comment(text), 84)]

    def single_args(self, step: StepPlan) -> tuple[list[str], list[str]]:
        lines, notes = [], []
        for name, source in sorted(step.bound.items()):
            key = argument(name, step.tool)
            lines.append(f"        {key}: {_read(source)},")
            notes.append(f"{name} = {source.text}")
            self.learned.append(f"{step.tool}.{name} = {source.text} (in all {step.runs} runs)")
        for name, value in sorted(step.constants.items()):
            key = argument(name, step.tool)
            lines.append(f"        {key}: {literal(value, f'{step.tool}.{name}')},")
            notes.append(f"{name} = {value!r} in every run")
            self.learned.append(
                f"{step.tool}.{name} = {value!r} (the same in all {step.runs} runs)"
            )
        for name in step.filled:
            argument(name, step.tool)
            notes.append(f"{name} filled by a structured call")
            self.filled.append(f"{step.tool}.{name}")
        return lines, notes

    def fanout_body(self, step: StepPlan, name: str, person: list[str]) -> list[str]:
        fan = step.fanout
        assert fan is not None
        what = f"{step.tool}'s fan-out"
        pairs = [
            f"{argument(n, step.tool)}: item.get({literal(f, what)})"
            for n, f in sorted(fan.fields.items())
        ]
        pairs += [
            f"{argument(n, step.tool)}: {literal(v, f'{step.tool}.{n}')}"
            for n, v in sorted(step.constants.items())
        ]
        which = "item"
        condition = ""
        if fan.when is not None:
            key, values = fan.when
            which = f"item whose {key} is one of {values!r}"
            condition = f" if item.get({literal(key, what)}) in {literal(values, what)}"
        taken = ", ".join(f"{n} = item[{f!r}]" for n, f in sorted(fan.fields.items()))
        self.learned.append(
            f"{step.tool}: one call per {which} of {fan.over.text}; {taken} "
            f"(in all {step.runs} runs)"
        )
        return [
            *node_doc(f"{step.tool} for {which} of {fan.over.text} ({taken})."),
            *person,
            f"    items = {_read(fan.over)} or []",
            "    calls = [",
            f"        {{{', '.join(pairs)}}}",
            "        for item in items",
            *([f"       {condition}"] if condition else []),
            "    ]",
            f"    return await AGENT.call(ctx, state, {name}, calls)",
            "",
        ]


def _read(source: Source) -> str:
    what = source.text
    base = (
        "state['input']"
        if not source.tool
        else f"AGENT.result(state, {literal(source.tool, what)})"
    )
    return base + "".join(f"[{literal(k, what)}]" for k in source.path)


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


def _rule_body(rule: Rule, where: str) -> list[str]:
    what = f"the condition after {where}"
    if rule.item_field is not None:
        ((label, values),) = rule.branches.items()
        return [
            f"    items = {_read(rule.source)} or []",
            f"    if any(item.get({literal(rule.item_field, what)}) in {literal(values, what)} "
            "for item in items):",
            f"        return {literal(label, what)}",
            f"    return {literal(rule.default, what)}",
        ]
    lines = [f"    value = {_read(rule.source)}"]
    for label, values in rule.branches.items():
        if label != rule.default:
            lines += [
                f"    if value in {literal(values, what)}:",
                f"        return {literal(label, what)}",
            ]
    return [*lines, f"    return {literal(rule.default, what)}  # and any value no run showed"]


def _pass_node(name: str, what: str) -> list[str]:
    return [
        "",
        "",
        "@loopwise.step",
        f"def {name}(state: dict[str, Any]) -> dict[str, Any]:",
        f'    """{doc(what[0].upper() + what[1:])} (the calls next to it run concurrently)."""',
        "    return state",
        "",
    ]


def _edge(node: str, after: list[str], *, join: bool = False) -> str:
    if not after:  # a route's branch: the route leads here
        return f"_W.add({node!r}, {node})"
    joined = ", join=AGENT.join" if join else ""
    return f"_W.add({node!r}, {node}, after={after!r}{joined})"


def _route_edge(route: str, targets: dict[str, str], after: list[str]) -> str:
    return "\n".join(
        [
            "_W.add_route(",
            f"    {route!r},",
            f"    {route},",
            f"    {literal(targets, route)},",
            f"    after={after!r},",
            ")",
        ]
    )


def _docstring(agent: AgentRef, header: Header, writer: _Writer) -> list[str]:
    name = workflow_name(agent)
    outside = 1 - header.coverage
    decided = writer.decided or ["no call"]
    return [
        f'"""{name}: an agent graduated into a workflow, the agent',
        f"{doc(agent.spec)}.",
        "",
        f"Generated by `loopwise graduate` on {header.date} from {header.runs} completed runs",
        f"of the agent ({header.held_out} more held out to evaluate it); the paths written",
        f"down cover {header.coverage:.0%} of the mined runs, and {outside:.0%} of them took",
        "other paths, which this workflow does not take:",
        *(f"    {share:>4.0%}  {doc(text)}" for share, text in header.paths),
        "",
        "Learned from the runs (code, no model call):",
        *_listed(writer.learned or ["nothing"]),
        "Filled by a structured call (shown the input and the results so far):",
        *_listed([*writer.filled, "the answer"]),
        "Decided by a person in the runs (never learned; the tool's own gate asks again):",
        *_listed(decided),
        "",
        "The agent's own tools run unchanged (effects, gates, allow-lists, timeouts,",
        "untrusted output) through loopwise.Graduated, the executor the agent's calls take.",
        "This is a starting point to review, not a deployment: it does only what the stored",
        "runs showed, and a case they never showed (a branch no run took, a value no",
        "condition saw) goes the default way.",
        '"""',
        "",
    ]


def _listed(lines: list[str]) -> list[str]:
    """Docstring lines, each item wrapped at 88 characters and indented."""
    out: list[str] = []
    for line in lines:
        wrapped = wrap(doc(line), 80)
        out += [f"    {wrapped[0]}", *(f"        {more}" for more in wrapped[1:])]
    return out


def _prelude(agent: AgentRef, tools: list[str], *, routes: bool) -> list[str]:
    lines = [
        "from __future__ import annotations",
        "",
        "from typing import Any, Literal" if routes else "from typing import Any",
        "",
        "import loopwise",
        "",
        f"from {agent.module} import {agent.name} as _agent",
    ]
    lines += [f"from {agent.module} import {d}" for d in agent.deps]
    exported = [workflow_name(agent), *agent.deps, *(["offline_model"] if agent.offline else [])]
    shown = literal(tools, "the tool names")
    return [
        *lines,
        "",
        "# The agent module's deps factories (re-exported: `loopwise run` and `eval` give",
        "# the workflow the agent's deps), the workflow and its offline model.",
        f"__all__ = {sorted(exported)!r}",
        "",
        "# The agent's own tools, each looked up by its exact name: effects, gates,",
        "# allow-lists, timeouts and untrusted output are the agent's.",
        "AGENT = loopwise.Graduated(",
        "    _agent,",
        f"    tools={shown},",
        ")",
    ]


def _begin() -> list[str]:
    return [
        "",
        "",
        "@loopwise.step",
        "def begin(question: Any) -> dict[str, Any]:",
        '    """The run\'s state: its input and the turns of calls made so far."""',
        "    return AGENT.start(question)",
    ]


def _answer(agent: AgentRef) -> list[str]:
    if agent.structured_output:
        kind, body = "Any", ["    return await AGENT.answer(ctx, _ANSWER, state)"]
    else:
        kind = "str"
        body = ["    text: str = await AGENT.answer(ctx, _ANSWER, state)", "    return text"]
    return [
        "",
        "",
        "_ANSWER = AGENT.answerer()",
        "",
        "",
        "@loopwise.step",
        f"async def answer(state: dict[str, Any], ctx: loopwise.Context) -> {kind}:",
        '    """The final answer, as the agent gives it, by one structured call."""',
        *body,
        "",
    ]


def _wiring(agent: AgentRef, edges: list[str]) -> list[str]:
    name = workflow_name(agent)
    described = literal(f"The agent {agent.name} graduated: its mined paths, as code.", name)
    return [
        "",
        f"{name} = _W = loopwise.Workflow(",
        f"    {name!r},",
        "    input_type=_agent.input_type,",
        f"    description={described},",
        "    budget=_agent.budget,",
        ")",
        '_W.add("begin", begin)',
        *[e for e in edges if e],
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
        "    from loopwise.testing import graduated_model",
        "",
        f"    from {agent.module} import offline_model as agent_model",
        "",
        "    return graduated_model(agent_model)",
        "",
    ]
