"""What of a transcript is sent: context policies and a conversation's history.

The transcript only grows and every turn re-sends it. Two policies shorten what is sent
(never what is stored):

* :class:`ContextPolicy` compacts old tool results, within a run and across the runs of
  a conversation (the instructions, the user messages and every assistant turn stay
  whole);
* :class:`SummarizingPolicy` replaces the older runs of a conversation with a summary a
  model wrote (a recorded ``model_call`` of a ``summary`` step, counted by the run's
  budget), keeping the most recent runs whole.

A conversation (``loopwise.run(agent, message, conversation=ID)``) is a sequence of runs
of one agent; each run's :class:`History` is the earlier runs of its conversation, which
the agent sends before its new message. The history is rebuilt from the stored event
logs (:func:`logged_messages`), the one record of what was said: the user message (the
run's input), each assistant turn as the model gave it, and each tool result as the
model read it. Untrusted text anywhere in an earlier run taints the new one
(:attr:`History.taint`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from loopwise.core.events import Event, EventType, Status, jsonable
from loopwise.core.jsontypes import JSONMapping, JSONObject, json_list, json_object
from loopwise.core.members import StepDefaults
from loopwise.core.result import Halt
from loopwise.core.shape import Kind, Shape
from loopwise.core.step import Context
from loopwise.errors import ConfigError, ConversationError
from loopwise.models.port import Message, ModelRequest, Turn, message_chars

__all__ = [
    "SUMMARY_STEP",
    "ContextPolicy",
    "History",
    "PriorRun",
    "SummarizingPolicy",
    "check_conversation_id",
    "logged_messages",
    "own_ids",
    "user_text",
]

SUMMARY_STEP = "summary"
"""The name of the step a :class:`SummarizingPolicy` writes its summary in."""

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
_CALL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""A call id a server chose that is used as it is (OpenAI's ``call_...`` and most others)."""


def check_conversation_id(conversation: object) -> str:
    """``conversation`` when it is a usable id (1–128 letters, digits, ``._:@-``, starting
    with a letter or digit); :class:`ConversationError` (``bad-id``) otherwise."""
    if not isinstance(conversation, str) or not _ID.fullmatch(conversation):
        shown = repr(conversation)
        # An id may be anything a client sent: the one-line error quotes its start only.
        shown = shown if len(shown) <= 60 else f"{shown[:57]}..."
        raise ConversationError(
            f"conversation id {shown} is malformed: use 1-128 letters, digits, "
            "'.', '_', ':', '@' or '-', starting with a letter or digit",
            conversation=str(conversation)[:200],
            code="bad-id",
        )
    return conversation


@dataclass(frozen=True, kw_only=True, slots=True)
class ContextPolicy:
    """Compact old tool results so tokens per step stop growing.

    The instructions, the input and every assistant turn stay whole; only tool results
    older than the last ``keep_last`` are shortened, and only in what is sent (the
    agent's own transcript keeps them). In a conversation the earlier runs' results count
    too, so a follow-up sends the newest ``keep_last`` results whole, whichever run they
    came from.
    """

    keep_last: int = 3
    """Tool results kept whole (the most recent ones)."""
    preview_chars: int = 120
    """Characters of a compacted result kept as a preview."""

    def __post_init__(self) -> None:
        for name, value in (("keep_last", self.keep_last), ("preview_chars", self.preview_chars)):
            _whole_number(value, name, type(self).__name__)

    def apply(self, messages: list[Message]) -> list[Message]:
        """``messages`` with old tool results compacted."""
        return CompactedView(self).update(messages)

    def compact(self, message: Message) -> Message:
        """An old tool result as it is sent: its first ``preview_chars`` characters and
        its size (unchanged when it is that short already)."""
        content = str(message.get("content") or "")
        if len(content) <= self.preview_chars:
            return message
        preview = content[: self.preview_chars]
        note = f"{preview}… [compacted: {len(content)} characters, older result]"
        return {**message, "content": note}


def _whole_number(value: object, name: str, kind: str, minimum: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(
            f"{kind}.{name} must be a whole number >= {minimum}, not {value!r}", name=name
        )


class CompactedView:
    """What a policy sends, kept up to date as an append-only transcript grows: each
    message is looked at once and each old result compacted once, so a turn costs the
    same early and late in a long run (re-applying the policy to the whole transcript
    every turn made long runs quadratic)."""

    def __init__(self, policy: ContextPolicy) -> None:
        self._policy = policy
        self._sent: list[Message] = []
        self._whole: deque[int] = deque()  # positions of the results not yet compacted
        self.chars = 0
        """The size of what is sent, as the prompt-size estimate counts it."""

    def update(self, messages: list[Message]) -> list[Message]:
        """The compacted ``messages`` (a fresh list); ``messages`` only grew since the
        last call."""
        if len(messages) < len(self._sent):
            self._sent, self._whole, self.chars = [], deque(), 0
        for message in messages[len(self._sent) :]:
            if message.get("role") == "tool":
                self._whole.append(len(self._sent))
            self._sent.append(message)
            self.chars += message_chars(message)
        while len(self._whole) > self._policy.keep_last:
            old = self._whole.popleft()
            whole, self._sent[old] = self._sent[old], self._policy.compact(self._sent[old])
            self.chars += message_chars(self._sent[old]) - message_chars(whole)
        return list(self._sent)


_SUMMARY_INSTRUCTIONS = (
    "You keep the memory of a conversation between a user and an assistant that uses "
    "tools. Write a concise summary of the conversation below for the assistant to "
    "continue it: the user's questions, the facts found (ids, names, amounts, dates, "
    "statuses, errors) and the answers given. Keep every identifier exactly. Plain text, "
    "no preamble."
)


@dataclass(frozen=True, kw_only=True, slots=True)
class SummarizingPolicy:
    """In a conversation, send a model-written summary instead of the older runs.

    The most recent ``keep_runs`` earlier runs are sent whole; the ones before are
    replaced by a summary written by the run's model in a ``summary`` step (its
    ``model_call`` is recorded with its usage and counted by the run's budget). The
    summary is kept in the run's log and extended by the next run that needs it — each
    run summarizes at most the runs that aged out since (with the summary so far), so its
    cost does not grow with the conversation. ``compact`` also compacts old tool
    results as a :class:`ContextPolicy` does. Stored messages are never changed.
    """

    keep_runs: int = 2
    """Earlier runs of the conversation sent whole (the most recent ones)."""
    compact: ContextPolicy | None = None
    """Compaction of old tool results, within the run and the runs kept whole."""
    instructions: str = _SUMMARY_INSTRUCTIONS
    """The system message of the summary call."""

    def __post_init__(self) -> None:
        _whole_number(self.keep_runs, "keep_runs", type(self).__name__)
        if self.compact is not None and not isinstance(self.compact, ContextPolicy):
            raise ConfigError(
                "SummarizingPolicy.compact must be a ContextPolicy or None, not "
                f"{type(self.compact).__name__}",
                name="compact",
            )

    async def earlier(self, history: History, path: str, ctx: Context) -> list[Message]:
        """The messages sent for ``history``: the kept runs whole; before them, when
        there are older runs, one system message holding their summary."""
        cut = max(len(history.runs) - self.keep_runs, 0)
        older, kept = history.runs[:cut], history.runs[cut:]
        kept_messages = [m for r in kept for m in r.messages(path)]
        if not older:
            return kept_messages
        summary = await self._summary(history.runs, len(older), path, ctx)
        note = f"Summary of the earlier conversation (runs {older[0].run_id}..{older[-1].run_id}):"
        return [{"role": "system", "content": f"{note}\n{summary}"}, *kept_messages]

    async def _summary(self, runs: Sequence[PriorRun], cut: int, path: str, ctx: Context) -> str:
        """The summary of the first ``cut`` runs: stored by an earlier run (any of
        ``runs``), else extended now from the newest stored one."""
        older = runs[:cut]
        covers = [r.run_id for r in older]
        text, done = _latest_summary(runs, f"{path}/{SUMMARY_STEP}", covers)
        if done == len(older):
            return text
        step = _SummaryStep(self.instructions, text, older[done:], path)
        output = await ctx.run_step(step, {"covers": covers, "new": covers[done:]})
        return str(output["summary"])


def _latest_summary(runs: Sequence[PriorRun], at: str, covers: list[str]) -> tuple[str, int]:
    """The newest summary stored in ``runs`` that covers a prefix of ``covers``, and how
    many runs it covers (``("", 0)`` when there is none)."""
    for prior in reversed(runs):
        for event in reversed(prior.events):
            if event.type is not EventType.STEP_FINISHED or event.step != at:
                continue
            output = json_object(event.data.get("output"))
            done = json_list(output.get("covers"))
            if done and done == covers[: len(done)]:
                return str(output.get("summary") or ""), len(done)
    return "", 0


class _SummaryStep(StepDefaults):
    """The step a summary is written in: one model call over the summary so far and the
    runs that aged out since."""

    name = SUMMARY_STEP

    def __init__(self, instructions: str, previous: str, runs: Sequence[PriorRun], path: str):
        self._instructions = instructions
        self._previous = previous
        self._runs = runs
        self._path = path

    def describe(self) -> Shape:
        """Plain code around one model call."""
        return Shape(kind=Kind.FUNCTION, name=self.name)

    async def run(self, input: JSONMapping, ctx: Context) -> JSONObject:
        """Ask the run's model for the summary; the runs it covers (``input["covers"]``, run
        ids) go with it."""
        parts = [f"Summary so far:\n{self._previous}"] if self._previous else []
        parts += [_as_text(m) for r in self._runs for m in r.messages(self._path)]
        request = ModelRequest(
            messages=[
                {"role": "system", "content": self._instructions},
                {"role": "user", "content": "\n".join(parts)},
            ],
            temperature=0.0,
        )
        turn: Turn = await ctx.call_model(request)
        if turn.cut_off is not None:
            # Half a summary would stand for the older runs from now on, their end lost.
            raise Halt(Status.INVALID_OUTPUT, f"{self.name}: {turn.cut_off}")
        return {"summary": turn.text or turn.refusal or "", "covers": input["covers"]}


def _as_text(message: Message) -> str:
    """One message as a line of the text a summary is written from."""
    role = message.get("role")
    content = str(message.get("content") or "")
    if role == "user":
        return f"User: {content}"
    if role == "tool":
        return f"Tool result ({message.get('tool_call_id')}): {content}"
    calls = [
        f"{c['function']['name']}({c['function']['arguments']})"
        for c in message.get("tool_calls") or []
    ]
    said = f"Assistant: {content}" if content else ""
    asked = f"Assistant called: {', '.join(calls)}" if calls else ""
    return "\n".join(p for p in (said, asked) if p) or "Assistant: (no text)"


@dataclass(frozen=True, kw_only=True, slots=True)
class PriorRun:
    """One earlier run of a conversation, as its log has it."""

    run_id: str
    """The run's id."""
    status: str
    """How it ended."""
    input: object
    """The message it answered (the run's input)."""
    events: tuple[Event, ...]
    """Its event log."""

    def messages(self, path: str) -> list[Message]:
        """The user message and what the agent at ``path`` exchanged with its model."""
        return [
            {"role": "user", "content": user_text(self.input)},
            *logged_messages(self.events, path, ended=self.status),
        ]


@dataclass(frozen=True, kw_only=True, slots=True)
class History:
    """The earlier runs of a run's conversation, oldest first."""

    conversation: str
    """The conversation's id."""
    runs: tuple[PriorRun, ...]
    """Its earlier runs, in the order they were sent."""

    def messages(self, path: str) -> list[Message]:
        """Every earlier message, whole (what is sent with no policy)."""
        return [m for r in self.runs for m in r.messages(path)]

    @property
    def taint(self) -> str | None:
        """The first untrusted tool output of the conversation (``tool (call id) in run
        ID``): it reached the model in an earlier run, so it is in this run's transcript."""
        for prior in self.runs:
            for event in prior.events:
                if event.type is EventType.TOOL_RESULT and event.data.get("untrusted"):
                    where = f"{event.data.get('tool')} ({event.data.get('call_id')})"
                    return f"{where} in run {prior.run_id}"
        return None


def user_text(input: object) -> str:
    """An agent's input as the user message it sends (JSON for anything but text)."""
    return input if isinstance(input, str) else json.dumps(jsonable(input))


def own_ids(turn: Turn, seen: set[str], turns: int, invocation: int) -> Turn:
    """``turn`` with call ids no earlier call of this run of the agent used (``seen``,
    updated).

    Approvals, journal keys and idempotency keys are bound to call ids, so a server that
    numbers calls per turn (``call_0`` every time) must not make a later call inherit an
    earlier one's approval or recorded result. Renaming is a function of the transcript
    (the turn's number, ``turns``, and which run of the agent at this path it is,
    ``invocation``), so a resumed run — and a conversation rebuilding the run from its
    log — renames alike. An id that is not 1-64 letters, digits, ``_`` or ``-`` (a NUL,
    a lone surrogate, ``/``, ``:``, CR/LF, 10,000 characters: anything a server sent) is
    replaced before it keys anything, by ``call_T_I`` (the turn's number, the call's place
    in it), so no id a server chose can break a store, a terminal or a header. The
    server's id is kept as :attr:`~loopwise.models.port.ToolCall.server_id`: requests
    send it back, as the server knows no other.
    """
    if not turn.tool_calls:
        return turn
    renamed = False
    suffix = "" if invocation == 1 else f"@{invocation}"
    calls = []
    for i, c in enumerate(turn.tool_calls, 1):
        own = c.id if _CALL_ID.fullmatch(c.id) else f"call_{turns}_{i}"
        chosen, n = f"{own}{suffix}", 1
        while chosen in seen:
            n += 1
            chosen = f"{own}{suffix}~{turns}" + ("" if n == 2 else f".{n}")
        seen.add(chosen)
        renamed = renamed or chosen != c.id
        # The server's id stays beside loopwise's: requests name the call by it.
        calls.append(
            c if chosen == c.id else dataclasses.replace(c, id=chosen, server_id=c.wire_id)
        )
    # A copy: a scripted model may hand out the same Turn object again.
    return dataclasses.replace(turn, tool_calls=calls) if renamed else turn


def logged_messages(events: Iterable[Event], path: str, *, ended: str = "") -> list[Message]:
    """The assistant turns and tool results the agent at ``path`` logged, as messages.

    Each assistant turn is followed by one ``tool`` message per call, in call order; a
    call with no logged result (its run paused or failed first) is answered with an
    ``ERROR:`` message saying so, as Chat Completions wants every call answered.
    """
    turns: list[tuple[Turn, dict[str, str]]] = []
    seen: set[str] = set()
    for event in events:
        if event.step != path:
            continue
        if event.type is EventType.MODEL_CALL and "turn" in event.data:
            turn = own_ids(Turn.from_dict(json_object(event.data["turn"])), seen, len(turns) + 1, 1)
            turns.append((turn, {}))
        elif event.type is EventType.TOOL_RESULT and turns:
            turns[-1][1][str(event.data.get("call_id"))] = str(event.data.get("content", ""))
    missing = f"ERROR: this call has no result (its run ended {ended or 'before it ran'})"
    messages: list[Message] = []
    for turn, results in turns:
        messages.append(turn.to_message())
        for c in turn.tool_calls:
            content = results.get(c.id, missing)
            messages.append({"role": "tool", "tool_call_id": c.id, "content": content})
    return messages
