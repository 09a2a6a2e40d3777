"""Draft a customer announcement, then publish it behind a person: a workflow with a gate.

The steps are known (draft, then publish) and the last one cannot be undone (the
announcement goes out to customers), so this is a workflow whose irreversible node is a
tool behind ``gates.human()``. The run pauses durably at the gate; a person reads the
exact text and approves (or denies) it; the resumed run publishes it exactly once::

    loopwise run workflows/announce.py:announce --model scripted \\
        --input '{"topic": "Maintenance", "notes": "API read-only Sunday 02:00-03:00 UTC."}'
    loopwise pending                     # shows publish(title=..., body=...)
    loopwise approve RUN_ID --by you     # or: loopwise deny RUN_ID --reason "..."
    loopwise resume RUN_ID               # publishes once, then completed

A tool is a workflow node like any step: the node's input is the tool's arguments (here
the drafted ``Announcement``, whose fields are ``publish``'s parameters), and the call
goes through the same executor as an agent's calls — gate, journal, idempotency key.
Published announcements land in the run's :class:`Outbox` (its deps): :func:`make_deps`
gives ``loopwise run``/``resume`` the real one, ``$LOOPWISE_OUTBOX`` (default
``.loopwise/outbox.jsonl``), one line per idempotency key, so an effect interrupted before
it was recorded is not published twice on resume. ``loopwise eval`` publishes into
:func:`make_eval_deps` instead, an empty outbox per run that is removed when the run
ends. Offline (``--model scripted``) :data:`offline_model` drafts the announcement from
the notes as given.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field

import loopwise
from loopwise import Context, ModelRequest, Structured, Turn, Workflow, gates
from loopwise.testing import ScriptedModel, reply


class Notice(BaseModel):
    """What to announce."""

    topic: str
    notes: str


class Announcement(BaseModel):
    """The drafted announcement: exactly ``publish``'s arguments."""

    title: str = Field(description="A short headline, at most 80 characters.")
    body: str = Field(description="Two or three plain sentences for customers.")


draft = Structured(
    "draft",
    output=Announcement,
    instructions=(
        "Write a short announcement for our customers from the topic and notes given "
        "(JSON). Plain words, no marketing; say what changes, when, and what to do."
    ),
)


def _offline_answer(request: ModelRequest) -> Turn:
    """The draft a model would write, made from the notes themselves."""
    given = next(str(m["content"]) for m in request.messages if m["role"] == "user")
    notice = Notice.model_validate_json(given)
    return reply(Announcement(title=notice.topic[:80], body=notice.notes).model_dump())


offline_model = ScriptedModel(_offline_answer, name="scripted")
"""``--model scripted`` uses this: the notes, as they are, stand in for a draft."""


@dataclass(frozen=True)
class Outbox:
    """Where ``publish`` sends announcements (the run's deps): a JSONL file."""

    path: Path


def make_deps() -> Outbox:
    """The real outbox, ``$LOOPWISE_OUTBOX`` (default ``.loopwise/outbox.jsonl``):
    ``loopwise run`` and ``resume`` call it, so a run resumed in another process publishes
    to the same place."""
    return Outbox(Path(os.environ.get("LOOPWISE_OUTBOX", ".loopwise/outbox.jsonl")))


@contextmanager
def make_eval_deps() -> Iterator[Outbox]:
    """The eval's sandbox (``loopwise eval`` uses it): an empty outbox per run in a
    temporary folder, removed when the run ends, so measuring publishes nothing."""
    with tempfile.TemporaryDirectory(prefix="announce-eval-") as scratch:
        yield Outbox(Path(scratch) / "outbox.jsonl")


def _outbox(ctx: Context) -> Path:
    """The run's outbox; a run given no deps publishes to the real one. Deps of any other
    kind are refused: publishing to the real outbox instead would reach customers."""
    if not ctx.has_deps:
        return make_deps().path
    if not isinstance(ctx.deps, Outbox):
        raise TypeError(
            f"publish sends to {__name__}.Outbox deps (make_deps(), make_eval_deps()); this "
            f"run's deps are a {type(ctx.deps).__module__}.{type(ctx.deps).__qualname__}, so it "
            "publishes nothing"
        )
    return ctx.deps.path


@loopwise.tool(effect="irreversible", gate=gates.human())
def publish(
    title: Annotated[str, Field(description="The headline.", max_length=80)],
    body: Annotated[str, Field(description="The text customers read.", max_length=2000)],
    ctx: Context,
) -> str:
    """Publish an announcement to every customer; it cannot be taken back. Use it once the
    draft is final."""
    outbox = _outbox(ctx)
    outbox.parent.mkdir(parents=True, exist_ok=True)
    key = ctx.idempotency_key
    sent = (
        [json.loads(line)["key"] for line in outbox.read_text().splitlines()]
        if (outbox.exists())
        else []
    )
    if key not in sent:  # the idempotency key makes a repeat after a crash harmless
        with outbox.open("a") as f:
            f.write(json.dumps({"key": key, "title": title, "body": body}) + "\n")
    return f"published {title!r}"


announce = (
    Workflow(
        "announce",
        input_type=Notice,
        description="Draft a customer announcement; a person approves it before it is published.",
    )
    .then(draft)
    .then(publish)
)
