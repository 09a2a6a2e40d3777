"""Cascades: a workflow that answers by a judge when it is sure and hands the rest over.

A :class:`Cascade` is a :class:`~loopwise.architectures.workflow.Workflow` of five nodes::

    judge ─▶ threshold ─▶ side ─┬─ sure ───▶ the sure step (fed the Ruling)
                                └─ unsure ─▶ the unsure step (fed the original input)

* the :class:`~loopwise.architectures.judge.Judge` answers with a
  :class:`~loopwise.architectures.judge.Ruling`;
* ``threshold`` weighs it (:class:`Weighed`): the confidence, the threshold, and which side
  of it the case fell on. Its ``step_finished`` event is the run's record of that
  (``runs show --json``, the eval's sweep read it), and a resumed run takes the side from
  it, so a threshold changed in the code never moves a run that was already weighed;
* ``side`` routes on it: *sure* (the confidence is above the threshold) goes to the sure
  step with the ruling; *unsure* goes to the unsure step — any step (an agent, a
  workflow) fed the input the judge was given — or to :class:`AskPerson`, which asks a
  person to pick the labels (a durable pause, through the approvals every gate uses) and
  continues on the sure step with the person's pick.

An unknown confidence (a judge on the ``structured`` backend) counts as unsure unless
``unknown="sure"``, and the record says so. Both branches run inside the one run: its
budget, taint and once-per-run effect rules hold on either side as on any node.
Mistakes raise at declaration: a threshold outside [0, 1]
(:class:`~loopwise.errors.JudgeError` ``threshold``), a judge that is not one, steps whose
types cannot take what they are fed (:class:`~loopwise.errors.GraphError`).
"""

from __future__ import annotations

import json
import math
from typing import Any, Generic, Literal, TypeVar

import pydantic
from typing_extensions import TypeForm

from loopwise.architectures.judge import Judge, Ruling
from loopwise.architectures.questions import label_text
from loopwise.architectures.wiring import coerce_input, type_name, types_compatible
from loopwise.architectures.workflow import Workflow
from loopwise.core.events import LIVE, EventType, Status, jsonable
from loopwise.core.jsontypes import JSONMapping, JSONObject, JSONValue
from loopwise.core.members import StepDefaults, step_member
from loopwise.core.names import check_name
from loopwise.core.replay import Restorer
from loopwise.core.result import Halt
from loopwise.core.shape import Kind, Shape, describe
from loopwise.core.step import Context, Step, check_step, needs_model
from loopwise.core.usage import Budget, Usage
from loopwise.errors import GraphError, JudgeError
from loopwise.tools.gates import Ask, authorize_all, pause, policy_then_human
from loopwise.tools.verdicts import Denied, Edited, Escalate, Pending

__all__ = ["AskPerson", "Cascade", "Side", "Weighed", "checked_threshold"]

A = TypeVar("A")

Side = Literal["sure", "unsure"]
"""Which side of the threshold a case fell on."""

THRESHOLD_NODE = "threshold"
"""The node that weighs the ruling (its ``step_finished`` output is a :class:`Weighed`)."""
SIDE_NODE = "side"
"""The route node."""


class Weighed(pydantic.BaseModel, Generic[A]):
    """A ruling weighed against a cascade's threshold: what each run records."""

    side: Side
    """``sure`` (the confidence is above the threshold) or ``unsure``."""
    threshold: float
    """The threshold the run used."""
    confidence: float | None
    """The ruling's confidence (``None``: unknown)."""
    unknown: Side
    """How an unknown confidence counts."""
    reason: str
    """Why, in one line (an unknown confidence says so)."""
    ruling: Ruling[A]
    """What the judge answered."""


def checked_threshold(value: object, where: str) -> float:
    """``value`` as a threshold; :class:`JudgeError` (``threshold``) unless a number in [0, 1]."""
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not (0.0 <= float(value) <= 1.0)
        or math.isnan(float(value))
    ):
        raise JudgeError(
            f"{where}: threshold {value!r} is not a number between 0 and 1 (a case is sure "
            "when its confidence is above it)",
            name="threshold",
            code="threshold",
        )
    return float(value)


class _Threshold(StepDefaults):
    """The ``threshold`` node: weigh the ruling; replayed from its record on resume."""

    needs_model = False

    def __init__(self, cascade: str, judge: Judge[object], threshold: float, unknown: Side) -> None:
        self.name = THRESHOLD_NODE
        self.cascade = cascade
        self.threshold = threshold
        self.unknown: Side = unknown
        self.input_type: TypeForm[object] = judge.output_type
        self._weighed: type[Weighed[object]] = Weighed[judge.answer_type]  # type: ignore[name-defined]
        self.output_type: TypeForm[object] = self._weighed
        self._restorer = Restorer(self.output_type)

    async def run(self, ruling: Ruling[object], ctx: Context) -> Weighed[object]:
        confidence = ruling.confidence
        if confidence is None:
            side: Side = self.unknown
            why = ruling.unknown_reason or f"{ruling.backend} backend"
            reason = f"confidence unknown ({why}): counted {self.unknown}" + (
                " (unknown='sure')" if self.unknown == "sure" else ""
            )
        else:
            side = "sure" if ruling.sure(self.threshold) else "unsure"
            rel = ">" if side == "sure" else "<="
            reason = f"confidence {confidence:.4g} {rel} threshold {self.threshold:.4g}"
        return self._weighed(
            side=side,
            threshold=self.threshold,
            confidence=confidence,
            unknown=self.unknown,
            reason=reason,
            ruling=ruling,
        )

    def restorable(self, output: object, recorded: JSONValue) -> bool:
        return self._restorer.exact(output, recorded)

    def restore(self, input: object, recorded: JSONValue) -> object:
        return self._restorer.restore(recorded)

    def describe(self) -> Shape:
        return Shape(kind=Kind.FUNCTION, name=self.name)


class _Fed(StepDefaults):
    """A branch node: the user's step, fed what the cascade gives that side."""

    def __init__(self, inner: Step, feed: Literal["ruling", "input"]) -> None:
        self.inner = inner
        self.name = inner.name
        self.feed = feed
        self.output_type: TypeForm[object] = step_member(inner, "output_type")

    @property
    def needs_model(self) -> bool:
        return needs_model(self.inner)

    async def run(self, value: object, ctx: Context) -> object:
        if isinstance(value, Weighed):
            value = value.ruling if self.feed == "ruling" else value.ruling.input
        elif isinstance(value, Ruling) and self.feed == "input":
            value = value.input
        wanted = step_member(self.inner, "input_type")
        return await self.inner.run(coerce_input(value, wanted, f"node {self.name}"), ctx)

    def describe(self) -> Shape:
        return describe(self.inner)


class AskPerson(StepDefaults):
    """The unsure side of a cascade that asks a person to pick the answer.

    The run pauses ``awaiting_approval`` with one approval (tool ``pick_<judge>``) whose
    arguments are the judge's own answer, one label per question, and whose reason lists
    every label with its probability. Approving as is keeps the judge's answer; approving
    with other arguments (``loopwise approve RUN --args '{"category": "shipping"}'``, the
    inbox's edit, ``loopwise.approve(..., args=...)``) picks other labels — checked against
    the labels when the decision is made, so a label outside them is refused and the
    approval stays pending. Denying ends the run ``denied``. Resumed, the run continues on
    the sure step with the picked answer (a :class:`Ruling` from ``backend="person"``).
    """

    needs_model = False

    def __init__(self, name: str = "ask_person", *, note: str = "") -> None:
        self.name = check_name(name, what="ask_person step")
        self.note = note
        self.description = "a person picks the labels the judge was unsure of"
        self.judge: Judge[object] | None = None

    def bound(self, judge: Judge[object]) -> AskPerson:
        """This step for ``judge``'s questions (a copy: one AskPerson may serve many)."""
        made = AskPerson(self.name, note=self.note)
        made.judge = judge
        made.output_type = judge.output_type
        return made

    def describe(self) -> Shape:
        return Shape(kind=Kind.FUNCTION, name=self.name)

    def schema(self) -> JSONObject:
        """The answer a person gives: one of its labels per question."""
        judge = self._judge()
        return {
            "type": "object",
            "properties": {
                q.name: {"enum": [jsonable(label) for label in q.labels]} for q in judge.questions
            },
            "required": [q.name for q in judge.questions],
            "additionalProperties": False,
        }

    async def run(self, weighed: Weighed[object] | Ruling[object], ctx: Context) -> Ruling[object]:
        judge = self._judge()
        ruling = weighed.ruling if isinstance(weighed, Weighed) else weighed
        suggested = _suggested(judge, ruling)
        said = weighed.reason if isinstance(weighed, Weighed) else "the judge was unsure"
        reason = f"{said}: pick the labels ({probabilities_line(ruling)})"
        note = (
            "Approve to keep the judge's answer, or approve it edited to pick other labels "
            f"({json.dumps(suggested)} changed: `loopwise approve --args`, or the inbox's "
            '"Edit arguments").'
        )
        ask = Ask(
            ctx=ctx,
            tool=f"pick_{judge.name}",
            effect="read",
            args=suggested,
            call_id=ctx.step_path,
            gate=policy_then_human(lambda args: Escalate(reason)),
            note=f"{self.note} {note}" if self.note else note,
            answer_schema=self.schema(),
        )
        (verdict,) = await authorize_all([ask])
        if isinstance(verdict, Pending):
            raise pause([verdict])
        if isinstance(verdict, Denied):
            raise Halt(Status.DENIED, f"{self.name}: {verdict.reason}")
        picked: JSONObject = dict(verdict.args) if isinstance(verdict, Edited) else suggested
        answer = judge.ruling(_as_texts(judge, picked, self.name), "person", ruling.input)
        how = "edited" if isinstance(verdict, Edited) else "approved"
        _keep_label(ctx, ruling.input, suggested, picked, how)
        return answer

    def _judge(self) -> Judge[object]:
        if self.judge is None:
            raise JudgeError(
                f"{self.name}: an AskPerson asks for a judge's labels; give it to a Cascade "
                "as unsure=",
                name=self.name,
                code="no-labels",
            )
        return self.judge


def _keep_label(
    ctx: Context, input: object, suggested: JSONObject, picked: JSONObject, how: str
) -> None:
    """Keep a person's pick as a labelled live case of the run's target (``kind="person"``:
    the cascade's input, the judge's answer, the labels the person chose), once per run: a
    ``step_started``/``step_finished`` pair at ``<ask_person>/label`` whose ``live`` data
    the run store keeps (``loopwise eval --from-store`` re-certifies on them)."""
    key = ctx.next_key(LIVE)
    if key in ctx.journal:  # kept before a later pause: the resumed run keeps it once
        return
    at = ctx.child("label")
    at.emit(EventType.STEP_STARTED, {"input": jsonable(input), "kind": str(Kind.FUNCTION)})
    case = {
        "kind": "person",
        "input": jsonable(input),
        "output": suggested,
        "reference": picked,
        "agree": picked == suggested,
        "status": how,
        "detail": None,
    }
    done: JSONObject = {"key": key, "output": picked, "usage": Usage().to_dict(), LIVE: case}
    at.emit(EventType.STEP_FINISHED, done)


def _suggested(judge: Judge[object], ruling: Ruling[object]) -> JSONObject:
    """The judge's own answer, one JSON label per question."""
    answer = ruling.answer
    if not isinstance(answer, pydantic.BaseModel):  # one question: the answer is its label
        return {judge.questions[0].name: jsonable(answer)}
    dumped = answer.model_dump(mode="json")
    return {q.name: dumped[q.name] for q in judge.questions}


def _as_texts(judge: Judge[object], picked: JSONMapping, where: str) -> dict[str, str]:
    """A person's pick as label texts; a label that is not one raises :class:`JudgeError`
    (an in-code handler's pick: the CLI and the inbox check it when it is given)."""
    texts: dict[str, str] = {}
    for q in judge.questions:
        value = picked.get(q.name)
        text = None if value is None else label_text(value)
        if text is None or text not in q.texts or jsonable(q.labels[q.texts.index(text)]) != value:
            raise JudgeError(
                f"{where}: {value!r} is not a label of {q.name!r} (one of "
                f"{', '.join(map(repr, [jsonable(label) for label in q.labels]))})",
                name=str(value),
                code="not-a-label",
            )
        texts[q.name] = text
    return texts


def probabilities_line(ruling: Ruling[object]) -> str:
    """Every label with its probability, likeliest first, per question."""
    parts = []
    for question, spread in ruling.probabilities.items():
        ranked = sorted(spread.items(), key=lambda kv: -kv[1])
        parts.append(f"{question}: " + ", ".join(f"{label} {p:.2f}" for label, p in ranked))
    return "; ".join(parts) or "no probabilities known"


class Cascade(Workflow):
    """A workflow that routes on a judge's confidence; see the module docstring.

    ``sure`` takes the :class:`Ruling`; ``unsure`` takes the cascade's input (or is an
    :class:`AskPerson`); ``threshold`` in [0, 1] (a case is sure when its confidence is
    above it); ``unknown`` is how an unknown confidence counts. ``input_type`` defaults
    to the unsure step's. :meth:`with_threshold` gives the same cascade at another
    threshold (the eval's sweep uses it).
    """

    def __init__(
        self,
        name: str,
        judge: Judge[object],
        *,
        sure: Step,
        unsure: Step,
        threshold: float = 0.8,
        unknown: Side = "unsure",
        input_type: TypeForm[object] | None = None,
        description: str = "",
        budget: Budget | None = None,
    ) -> None:
        if not isinstance(judge, Judge):
            raise JudgeError(
                f"cascade {name!r}: {judge!r} is not a loopwise.Judge (a cascade routes on "
                "a judge's confidence)",
                name=name,
                code="no-labels",
            )
        if unknown not in ("sure", "unsure"):
            raise JudgeError(
                f"cascade {name!r}: unknown={unknown!r} is not 'sure' or 'unsure'",
                name="unknown",
                code="threshold",
            )
        check_step(sure)
        check_step(unsure)
        self.judge = judge
        self.sure = sure
        self.unsure = unsure
        self.threshold = checked_threshold(threshold, f"cascade {name!r}")
        self.unknown: Side = unknown
        person = isinstance(unsure, AskPerson)
        if input_type is None:
            input_type = Any if person else step_member(unsure, "input_type")
        super().__init__(name, input_type=input_type, description=description, budget=budget)
        self._check_types(name, judge, sure, unsure, input_type)
        self._declare(judge, sure, unsure)

    @property
    def steps(self) -> dict[str, Step]:
        """Node name → the step it runs: the sure and unsure steps as given."""
        return {
            node: step.inner if isinstance(step, _Fed) else step
            for node, step in super().steps.items()
        }

    def thresholds(self) -> dict[str, float]:
        """The thresholds it declares, by name (``loopwise eval --sweep NAME=...``)."""
        return {"threshold": self.threshold}

    def with_threshold(self, threshold: float, *, unknown: Side | None = None) -> Cascade:
        """The same cascade (same name, same steps) at another ``threshold``."""
        return Cascade(
            self.name,
            self.judge,
            sure=self.sure,
            unsure=self.unsure,
            threshold=threshold,
            unknown=self.unknown if unknown is None else unknown,
            input_type=self.input_type,
            description=self.description,
            budget=self.budget,
        )

    def unsure_path(self) -> Step:
        """The unsure branch alone, as a step of the :class:`Weighed` record a run of this
        cascade made (what the eval's sweep runs once per escalated case)."""
        return _UnsurePath(self)

    def _declare(self, judge: Judge[object], sure: Step, unsure: Step) -> None:
        self.add(judge.name, judge)
        self.add(
            THRESHOLD_NODE,
            _Threshold(self.name, judge, self.threshold, self.unknown),
            after=[judge.name],
        )
        if isinstance(unsure, AskPerson):
            picker = unsure.bound(judge)
            branches = {"sure": sure.name, "unsure": picker.name}
            self.add_route(SIDE_NODE, "side", branches, after=[THRESHOLD_NODE])
            self.add(picker.name, picker)
            self.add(sure.name, _Fed(sure, "ruling"), after=[SIDE_NODE, picker.name])
        else:
            branches = {"sure": sure.name, "unsure": unsure.name}
            self.add_route(SIDE_NODE, "side", branches, after=[THRESHOLD_NODE])
            self.add(sure.name, _Fed(sure, "ruling"))
            self.add(unsure.name, _Fed(unsure, "input"))
        self.validate()

    @staticmethod
    def _check_types(
        name: str, judge: Judge[object], sure: Step, unsure: Step, input_type: object
    ) -> None:
        if sure.name == unsure.name:
            raise GraphError(
                f"cascade {name!r}: the sure and unsure steps are both named {sure.name!r}",
                node=sure.name,
            )
        taken = {judge.name, THRESHOLD_NODE, SIDE_NODE}
        for step in (sure, unsure):
            if step.name in taken:
                raise GraphError(
                    f"cascade {name!r}: a step may not be named {step.name!r} (the "
                    f"cascade's own nodes are {', '.join(sorted(taken))})",
                    node=step.name,
                )
        wanted = step_member(sure, "input_type")
        if not types_compatible(judge.output_type, wanted):
            raise GraphError(
                f"cascade {name!r}: the sure step {sure.name!r} takes {type_name(wanted)} "
                f"but is fed the judge's {type_name(judge.output_type)}",
                node=sure.name,
                code="type-mismatch",
            )
        taken_in = step_member(unsure, "input_type")
        if not isinstance(unsure, AskPerson) and not types_compatible(input_type, taken_in):
            raise GraphError(
                f"cascade {name!r}: the unsure step {unsure.name!r} takes "
                f"{type_name(taken_in)} but the cascade's input is {type_name(input_type)}",
                node=unsure.name,
                code="type-mismatch",
            )


class _UnsurePath(StepDefaults):
    """A cascade's unsure branch alone, fed a :class:`Weighed` record (as JSON or typed)."""

    def __init__(self, cascade: Cascade) -> None:
        self.cascade = cascade
        self.name = cascade.name
        self.output_type: object = cascade.output_type
        self.budget = cascade.budget

    @property
    def needs_model(self) -> bool:
        return needs_model(self.cascade.unsure)

    def describe(self) -> Shape:
        return describe(self.cascade.unsure)

    async def run(self, weighed: object, ctx: Context) -> object:
        cascade = self.cascade
        typed = Weighed[cascade.judge.answer_type]  # type: ignore[name-defined]
        weighed = coerce_input(weighed, typed, f"cascade {cascade.name}")
        if isinstance(cascade.unsure, AskPerson):
            picker = cascade.unsure.bound(cascade.judge)
            picked = await ctx.run_step(picker, weighed)
            return await ctx.run_step(_Fed(cascade.sure, "ruling"), picked)
        return await ctx.run_step(_Fed(cascade.unsure, "input"), weighed)
