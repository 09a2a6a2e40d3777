"""What a workflow ``loopwise graduate`` wrote calls: :class:`Graduated`, the agent it came
from as its nodes use it.

A graduated workflow's state is one dict, ``{"input": ..., "calls": [[{"tool", "args",
"result"}, ...], ...]}`` — the run's input and the turns of tool calls so far — which is
also what each of its structured calls is shown, as JSON with a ``task`` (``arguments``,
``route``, ``answer``): the protocol :func:`loopwise.testing.graduated_model` answers
offline. Every tool call goes through :func:`~loopwise.tools.calls.call_tools` with the
agent's own tool object, looked up by its exact name: its effect, gate, allow-lists,
timeout and ``untrusted_output`` are the agent's, and no more calls run in one turn than
the agent allowed. This module is the generated code's library: the generated file holds
only what was learned.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeGuard, cast

import pydantic
from typing_extensions import TypeForm

from loopwise.architectures.agent import Agent
from loopwise.architectures.structured import Structured
from loopwise.core.events import Status
from loopwise.core.journal import Journal
from loopwise.core.result import Halt
from loopwise.core.step import Context
from loopwise.errors import ConfigError
from loopwise.tools.calls import call_tools
from loopwise.tools.tool import Arguments, Tool

__all__ = ["Graduated"]

_STEP = (
    "\n\nYou are one step of a fixed workflow. From the input and the tool results so far "
    "(JSON below), "
)


class Graduated:
    """The agent a workflow was graduated from, as the workflow's nodes use it: its tools
    (by exact name), its instructions and its limits, and the state the nodes pass on.

    ``tools`` are the names of the tools the workflow calls. Raises
    :class:`~loopwise.errors.ConfigError` naming the first one the agent no longer has (a
    tool renamed or removed since the workflow was generated): graduate again.
    """

    def __init__(self, agent: Agent, *, tools: Sequence[str]) -> None:
        if not isinstance(agent, Agent):
            raise ConfigError(f"Graduated needs the agent, not {type(agent).__name__}")
        self.agent = agent
        for name in tools:
            self.tool(name)  # each one there now: a renamed tool fails at import, by name

    @property
    def instructions(self) -> str:
        """The agent's instructions, which every structured call of the workflow starts with."""
        return self.agent.instructions

    def tool(self, name: str) -> Tool:
        """The agent's tool ``name``: the very object its own calls use (looked up when
        called, so a tool source the agent lists again at a run's start is current).
        Raises :class:`~loopwise.errors.ConfigError` when the agent has no such tool."""
        known = self.agent.tool_map
        found = known.get(name)
        if found is None:
            have = ", ".join(sorted(known)) or "(none)"
            raise ConfigError(
                f"the workflow graduated from agent {self.agent.name!r} calls its tool "
                f"{name!r}, which the agent no longer has (its tools: {have}); renamed or "
                "removed since: run `loopwise graduate` again",
                name=name,
            )
        return found

    @staticmethod
    def start(question: object) -> dict[str, object]:
        """The state of a new run: its input and no calls yet."""
        return {"input": question, "calls": []}

    @staticmethod
    def ask(state: Mapping[str, object], task: str, **more: object) -> str:
        """What a structured call is shown: the task, the input and the calls so far, as JSON."""
        shown = {"task": task, **more, "input": state["input"], "calls": state["calls"]}
        return json.dumps(shown, default=str)

    @staticmethod
    def result(state: Mapping[str, Any], tool: str) -> Any:
        """The latest result of ``tool`` in this run; :class:`LookupError` when it has none.

        ``Any``, as the state is: the generated code reads into a result by the keys its
        runs showed (``AGENT.result(state, "get_order")["amount"]``)."""
        for turn in reversed(state["calls"]):
            for call in reversed(turn):
                if call["tool"] == tool:
                    return call["result"]
        raise LookupError(f"no result of {tool!r} yet")

    async def call(
        self,
        ctx: Context,
        state: Mapping[str, Any],
        tool: str,
        calls: Sequence[Arguments],
    ) -> dict[str, object]:
        """Make ``tool``'s calls (one per arguments dict) as one batch through the executor
        — validated, gated, journaled and keyed like the agent's — and return the state with
        them as one more turn. More calls than the agent's ``max_tool_calls`` end the run
        ``error``."""
        found = self.tool(tool)
        limit = self.agent.max_tool_calls
        if len(calls) > limit:
            raise Halt(
                Status.ERROR,
                f"{tool}: {len(calls)} calls in one turn, more than the agent's "
                f"max_tool_calls ({limit})",
            )
        # Once per workflow in the run, as the agent's calls are once per agent run: a node
        # renamed (the module is code a team edits) never repeats an effect on resume.
        scope = Journal.key(ctx.step_path.rpartition("/")[0], "graduated")
        made = [(found, args) for args in calls]
        results = await call_tools(ctx, made, once_in=scope) if calls else []
        done = [
            {"tool": tool, "args": args, "result": r}
            for args, r in zip(calls, results, strict=True)
        ]
        return {**state, "calls": [*state["calls"], done]}

    @staticmethod
    def join(parts: Mapping[str, Any]) -> dict[str, Any]:
        """After concurrent nodes (a workflow ``join``): the calls each made, as one turn."""
        states = [dict(s) for s in parts.values()]
        if len(states) == 1:
            return states[0]
        turn = [call for s in states for call in s["calls"][-1]]
        return {**states[0], "calls": [*states[0]["calls"][:-1], turn]}

    def filler(
        self, name: str, tool: str, arguments: Sequence[str]
    ) -> Structured[pydantic.BaseModel]:
        """A structured call giving ``arguments`` of one ``tool`` call, with the tool's own
        argument fields (their types and allow-lists)."""
        found = self.tool(tool)
        model = _fields_of(found, list(arguments), f"{tool}_arguments")
        return Structured(name, model, self.instructions + _fill_note(found))

    def many_filler(self, name: str, tool: str) -> Structured[pydantic.BaseModel]:
        """A structured call giving the arguments of every call of ``tool`` in one turn."""
        found = self.tool(tool)
        one = _fields_of(found, list(found.args_model.model_fields), f"{tool}_arguments")
        listed: TypeForm[object] = list[one]  # type: ignore[valid-type]  # a model made at run time
        model = pydantic.create_model(f"{tool}_calls", calls=(listed, ...))
        return Structured(name, model, self.instructions + _fill_note(found))

    async def fill(
        self,
        ctx: Context,
        filler: Structured[pydantic.BaseModel],
        state: Mapping[str, object],
        tool: str,
    ) -> dict[str, Any]:
        """Run ``filler`` (:meth:`filler`) on the run so far: the arguments it gives (the
        tool's argument model dumped: values of its fields' own types)."""
        filled = await ctx.run_step(filler, self.ask(state, "arguments", tool=tool))
        return dict(filled.model_dump())

    async def fill_many(
        self,
        ctx: Context,
        filler: Structured[pydantic.BaseModel],
        state: Mapping[str, object],
        tool: str,
    ) -> list[dict[str, Any]]:
        """Run ``filler`` (:meth:`many_filler`): every call's arguments."""
        filled = await ctx.run_step(filler, self.ask(state, "arguments", tool=tool, many=True))
        return [dict(c.model_dump()) for c in filled.calls]

    def router(self, name: str, branches: Sequence[str]) -> Structured[pydantic.BaseModel]:
        """A structured call choosing one of ``branches`` (``{"branch": label}``)."""
        model = pydantic.create_model(
            f"{name}_choice",
            __doc__="Which branch comes next.",
            branch=(_literal(tuple(branches)), ...),
        )
        return Structured(
            name, model, self.instructions + _STEP + "choose which branch comes next."
        )

    async def route(
        self,
        ctx: Context,
        router: Structured[pydantic.BaseModel],
        state: Mapping[str, object],
        branches: Mapping[str, object],
    ) -> Any:
        """Run ``router`` (:meth:`router`); the label of the branch it chose (one of its
        ``Literal``: ``Any``, so the generated route's ``Literal`` annotation holds it).
        ``branches`` maps each label to the tools its branch calls first (what the model
        is shown)."""
        choice = await ctx.run_step(router, self.ask(state, "route", branches=branches))
        return choice.branch

    def answerer(self, name: str = "write_answer") -> Structured[pydantic.BaseModel]:
        """The structured call writing the final answer as the agent gives it (its
        ``output_type``, or ``{"answer": str}`` for an agent that answers with text)."""
        output = self.agent.output_type
        model = output if _is_model(output) else _Answer
        note = (
            "\n\nYou are the last step of a fixed workflow: write the final answer from the "
            "input and the tool results (JSON below)."
        )
        return Structured(name, model, self.instructions + note)

    async def answer(
        self, ctx: Context, answerer: Structured[pydantic.BaseModel], state: Mapping[str, object]
    ) -> Any:
        """Run ``answerer`` (:meth:`answerer`): the answer, as the agent's output type (text
        for an agent that answers with text): ``Any``, as the generated ``answer`` node
        annotates it with that type."""
        written = await ctx.run_step(answerer, self.ask(state, "answer"))
        return written.answer if isinstance(written, _Answer) else written


class _Answer(pydantic.BaseModel):
    """The final answer."""

    answer: str


def _is_model(output: object) -> TypeGuard[type[pydantic.BaseModel]]:
    return isinstance(output, type) and issubclass(output, pydantic.BaseModel)


def _literal(labels: tuple[str, ...]) -> TypeForm[object]:
    # cast: a Literal of labels known only at run time is a type form, which a type
    # checker cannot see (to it, a special form).
    return cast("TypeForm[object]", Literal[labels])


def _fill_note(tool: Tool) -> str:
    return _STEP + f"give the arguments of the `{tool.name}` call: {tool.description}"


def _fields_of(tool: Tool, names: list[str], model: str) -> type[pydantic.BaseModel]:
    """The tool's own argument fields ``names`` (with their allow-lists) as a model."""
    fields = tool.args_model.model_fields
    missing = [n for n in names if n not in fields]
    if missing:
        raise ConfigError(
            f"tool {tool.name!r} takes no argument {missing[0]!r} (its arguments: "
            f"{', '.join(fields) or '(none)'}); renamed since: run `loopwise graduate` again",
            name=missing[0],
        )
    chosen: dict[str, Any] = {n: (fields[n].annotation, fields[n]) for n in names}
    return pydantic.create_model(model, **chosen)
