"""The judge: a step that answers typed questions with calibrated probabilities.

A :class:`Judge` asks the run's model one or more *closed* questions about its input and
returns a :class:`Ruling`: the typed answer, the probability of every label of every
question, and a confidence. Declare it from

* a ``Literal`` (or ``Enum``, or a list) of labels — a **choice**;
* ``bool`` — a **predicate** (is it true?);
* ``range(lo, hi + 1)`` — a **score** (ordered levels);
* a pydantic model whose fields are each one of those (an ``int`` field with ``ge`` and
  ``le`` is a score) — several questions answered together, each with its own question
  text (``questions={"field": "..."}``, else the field's description).

(:mod:`loopwise.architectures.questions` reads the questions from the declared answer.)

It is a step like a structured call: each model call goes through ``ctx.call_model``,
so it is budgeted, journaled and replayed on resume (the probabilities are part of the
journaled turn). How the probabilities are got is the model's (``decision_backends``,
tried in order; a ``Judge(backends=...)`` overrides):

``decisions``
    the Decisions API (``/v1/decisions``), all questions in one call; a server without
    it (404) steps down to the next backend, remembered per endpoint;
``logprobs``
    Chat Completions, one call per question, the answer restricted to one token per
    label (``A``, ``B``... or the digits of a score) and the probabilities read from
    its 20 ``top_logprobs`` and renormalised over the allowed tokens; a label not listed
    counts as likely as the least listed token (its upper bound: counted as 0, a label
    listed alone would be sure however little of the mass it holds); a server that
    sends none, or lists no label, raises :class:`~loopwise.errors.ProbabilitiesMissing`,
    never a guess;
``structured``
    a structured-output call with no probabilities: ``confidence`` is ``None``
    (unknown), which a cascade treats as unsure.

``confidence`` is the probability that the whole answer is right: the chosen label's
probability, multiplied over the questions (taken as independent). A judge answers only
its labels: when more than 5% of a question's probability lies on labels it did not
declare (:data:`UNDECLARED_LIMIT`), that mass is never renormalised into a confident
declared answer — the confidence is unknown (a cascade counts it unsure) and
``Ruling.unknown_reason`` says why. A refusal ends the
run ``refused``. Declaration mistakes raise :class:`~loopwise.errors.JudgeError`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Generic, TypeVar, overload

import pydantic
import typing_extensions
from typing_extensions import TypeForm

from loopwise.architectures.questions import (
    MAX_LABELS,
    Question,
    label_text,
    list_literal,
    model_of,
    questions_of,
)
from loopwise.architectures.structured import Prompt, Structured, endpoint_key, render_input
from loopwise.core.events import Status, jsonable
from loopwise.core.jsontypes import JSONMapping
from loopwise.core.members import StepDefaults
from loopwise.core.names import check_name
from loopwise.core.result import Halt
from loopwise.core.shape import Kind, Shape
from loopwise.core.step import Context
from loopwise.errors import DecisionsUnsupported, JudgeError, ProbabilitiesMissing
from loopwise.models.port import (
    DECISION_BACKENDS,
    DecisionBackend,
    Message,
    ModelRequest,
    Turn,
    decision_backends,
    model_name,
)

__all__ = ["UNDECLARED_LIMIT", "Judge", "Ruling"]

A = TypeVar("A")
"""The type of a ruling's answer."""

A_co = typing_extensions.TypeVar("A_co", covariant=True, default=object)
"""The type of a judge's answer: its labels' type (``Judge("kind", ["a", "b"])`` is a
``Judge[str]``), its ``Enum``, ``bool`` or pydantic model; ``object`` for a ``Literal`` of
labels, which a type checker cannot read from a value (annotate ``Judge[Literal[...]]``
to keep it). A judge only gives answers, so a ``Judge[str]`` is a ``Judge[object]``."""

_TOP_LOGPROBS = 20
"""Alternatives a log-probability question asks for (OpenAI's most): a label not among
them is given the least listed probability, so more of them make that bound tighter."""


class Ruling(pydantic.BaseModel, Generic[A]):
    """A judge's answer with its probabilities (see :class:`Judge`)."""

    answer: A
    """The typed answer: a label, or the judge's pydantic model of labels."""
    probabilities: dict[str, dict[str, float]]
    """Question → label (as text) → probability; empty for a question whose backend
    gave none (``structured``)."""
    confidence: float | None
    """The probability that the whole answer is right; ``None`` when unknown."""
    backend: str
    """The backend that answered (``decisions``, ``logprobs``, ``structured``), or
    ``person`` when a person picked the answer."""
    input: object = None
    """What was judged (JSON), for a step that takes over when the judge is unsure."""
    unknown_reason: str | None = None
    """Why :attr:`confidence` is unknown although probabilities came back (more than
    :data:`UNDECLARED_LIMIT` of a question's probability on labels the judge did not
    declare); ``None`` otherwise."""

    def sure(self, threshold: float, *, unknown: bool = False) -> bool:
        """Whether the answer is sure at ``threshold``: its confidence is above it (an
        unknown confidence counts as ``unknown``, unsure unless told otherwise)."""
        if self.confidence is None:
            return unknown
        return self.confidence > threshold


class Judge(StepDefaults, Generic[A_co]):
    """A step that answers closed questions with probabilities; see the module docstring.

    ``answer`` is a ``Literal``/``Enum``/list of labels, ``bool``, a ``range`` or a
    pydantic model of such fields; ``question`` is the question of a one-question judge,
    ``questions`` per field of a model (default: the field's description);
    ``instructions`` are the system message. Raises :class:`~loopwise.errors.JudgeError`
    for no labels, one label, an empty label, duplicate labels (as text, ignoring case
    and surrounding spaces), an unsupported field type or an unknown backend. Labels
    that are not text (``[1, 2]``, an ``Enum``) are keyed by their text (``"1"``, the
    enum's value) in the probabilities; the answer keeps their type.
    """

    needs_model = True
    """The CLI must give this step a model."""

    # The answer types the judge: a class (an Enum, bool, a model) or labels (a list, a
    # range) is what it answers; any other type form (a Literal) answers object.
    @overload
    def __init__(
        self,
        name: str,
        answer: type[A_co] | Sequence[A_co],
        *,
        question: str = "",
        questions: Mapping[str, str] | None = None,
        instructions: str = "",
        prompt: Prompt | None = None,
        backends: Sequence[DecisionBackend] | None = None,
    ) -> None: ...
    @overload
    def __init__(
        self,
        name: str,
        answer: TypeForm[object],
        *,
        question: str = "",
        questions: Mapping[str, str] | None = None,
        instructions: str = "",
        prompt: Prompt | None = None,
        backends: Sequence[DecisionBackend] | None = None,
    ) -> None: ...
    def __init__(
        self,
        name: str,
        answer: type[A_co] | Sequence[A_co] | TypeForm[object],
        *,
        question: str = "",
        questions: Mapping[str, str] | None = None,
        instructions: str = "",
        prompt: Prompt | None = None,
        backends: Sequence[DecisionBackend] | None = None,
    ) -> None:
        self.name = check_name(name, what="judge")
        self.instructions = instructions
        self.prompt = prompt
        self.description = instructions or question
        self.backends = _checked_backends(name, backends)
        self.model_type: type[pydantic.BaseModel] | None = model_of(answer)
        self.questions = questions_of(name, answer, self.model_type, question, questions or {})
        self.answer_type: TypeForm[object] = list_literal(answer)
        self._ruling: type[Ruling[A_co]] = Ruling[self.answer_type]  # type: ignore[name-defined]
        self.output_type: TypeForm[object] = self._ruling
        self._structured = Structured(
            name, output=self._answer_model(), instructions=self._structured_instructions()
        )
        self._chosen: dict[tuple[str, str], DecisionBackend] = {}

    def __repr__(self) -> str:
        return f"<Judge {self.name}: {', '.join(q.name for q in self.questions)}>"

    def describe(self) -> Shape:
        """One model call (or one per question): no tools, no loop."""
        return Shape(kind=Kind.STRUCTURED, name=self.name)

    def labels(self) -> dict[str, tuple[str, ...]]:
        """Question → its labels as text."""
        return {q.name: q.texts for q in self.questions}

    async def run(self, input: object, ctx: Context) -> Ruling[A_co]:
        """Ask, and return the :class:`Ruling`; see the module docstring for how it fails."""
        text = self.render(input)
        key = endpoint_key(ctx.model)
        offered = self.backends or decision_backends(ctx.model)
        start = offered.index(self._chosen[key]) if self._chosen.get(key) in offered else 0
        for backend in offered[start:]:
            try:
                probabilities = await self._ask(backend, text, ctx)
            except DecisionsUnsupported:
                continue
            self._chosen[key] = backend
            return self.ruling(probabilities, backend, input)
        raise JudgeError(
            f"judge {self.name!r}: model {model_name(ctx.model) or '?'!r} offers no "
            f"decision backend that works (tried {', '.join(offered[start:])}); give the "
            "model or the judge backends=('logprobs',) for a server that returns "
            "log-probabilities, or ('structured',) to accept answers of unknown confidence",
            name=self.name,
            code="no-backend",
        )

    def render(self, input: object) -> str:
        """The user message for ``input``: ``prompt(input)``, a string as is, else JSON."""
        return render_input(self.prompt, input)

    def ruling(
        self, probabilities: Mapping[str, Mapping[str, float] | str], backend: str, input: object
    ) -> Ruling[A_co]:
        """The ruling for per-question ``probabilities`` (a label text instead of a
        mapping: that label, with no probability known)."""
        chosen: dict[str, object] = {}
        probs: dict[str, dict[str, float]] = {}
        confidence: float | None = 1.0
        why: list[str] = []
        for q in self.questions:
            given = probabilities[q.name]
            if isinstance(given, str):
                chosen[q.name] = q.labels[q.texts.index(given)]
                probs[q.name] = {}
                confidence = None
                continue
            spread = _normalised(q, given)
            best = max(q.texts, key=lambda t: spread[t])  # ties: the first declared
            chosen[q.name] = q.labels[q.texts.index(best)]
            probs[q.name] = spread
            undeclared = 1.0 - _declared_mass(q, given)
            if undeclared > UNDECLARED_LIMIT:  # never renormalised into a confident answer
                why.append(
                    f"judge {self.name!r}: {undeclared:.0%} of the probability of {q.name!r} "
                    f"is on labels it did not declare, so the confidence of {best!r} is unknown"
                )
                confidence = None
            confidence = None if confidence is None else confidence * spread[best]
        # Validated into the answer type (a label as typed, the judge's model of labels).
        return self._ruling.model_validate(
            {
                "answer": self._typed(chosen),
                "probabilities": probs,
                "confidence": None if confidence is None else round(confidence, 6),
                "backend": backend,
                "input": jsonable(input),
                "unknown_reason": "; ".join(why) or None,
            }
        )

    def _typed(self, chosen: dict[str, object]) -> object:
        if self.model_type is None:
            return chosen[self.questions[0].name]
        return self.model_type.model_validate(chosen)

    async def _ask(
        self, backend: DecisionBackend, text: str, ctx: Context
    ) -> dict[str, Mapping[str, float] | str]:
        if backend == "decisions":
            return await self._by_decisions(text, ctx)
        if backend == "logprobs":
            return {q.name: await self._by_logprobs(q, text, ctx) for q in self.questions}
        answer = (await self._structured.run(text, ctx)).model_dump()
        if self.model_type is None:
            return {self.questions[0].name: label_text(answer["answer"])}
        return {q.name: label_text(answer[q.name]) for q in self.questions}

    async def _by_decisions(self, text: str, ctx: Context) -> dict[str, Mapping[str, float] | str]:
        messages = self._messages(self.instructions, text)
        wire_input: list[Message] = [
            {"role": "developer" if m["role"] == "system" else m["role"], "content": m["content"]}
            for m in messages
        ]
        body = {"input": wire_input, "questions": [q.wire() for q in self.questions]}
        turn = await ctx.call_model(ModelRequest(messages=messages, decision=body))
        answers = turn.decision
        if not all(isinstance(a, Mapping) for a in answers or ()):
            answers = None
        if not answers or len(answers) != len(self.questions):
            raise ProbabilitiesMissing(
                f"judge {self.name!r}: the Decisions API answered {len(answers or [])} of "
                f"{len(self.questions)} question(s)"
            )
        return {
            q.name: self._from_answer(q, a) for q, a in zip(self.questions, answers, strict=True)
        }

    def _from_answer(self, q: Question, answer: JSONMapping) -> dict[str, float]:
        kind = answer.get("type")
        if kind == "refusal":
            raise Halt(Status.REFUSED, f"{self.name}: the model declined to answer {q.name!r}")
        if kind == "predicate" and q.kind == "predicate":
            p = _probability(self.name, q, answer.get("probability"))
            return {"true": p, "false": 1.0 - p}
        key = "value" if kind == "choice" else "label"
        listed = answer.get("probabilities")
        rows = listed if isinstance(listed, list) else []
        spread = [p for p in rows if isinstance(p, dict)]
        if len(spread) < len(rows):  # one entry that is not an object: none is trusted
            spread = []
        found = {
            label_text(p.get(key)): _probability(self.name, q, p.get("probability")) for p in spread
        }
        if kind != q.kind or not found:
            raise ProbabilitiesMissing(
                f"judge {self.name!r}: the Decisions API gave no probabilities for {q.name!r} "
                f"(answer type {kind!r}, asked {q.kind!r})"
            )
        return found

    async def _by_logprobs(self, q: Question, text: str, ctx: Context) -> dict[str, float]:
        tokens = q.tokens()
        if len(tokens) < len(q.labels):
            raise JudgeError(
                f"judge {self.name!r}: {q.name!r} has {len(q.labels)} labels; a "
                f"log-probability question takes at most {MAX_LABELS}",
                name=q.name,
                code="no-backend",
            )
        listed = "\n".join(f"{token}: {label}" for token, label in tokens.items())
        system = (
            f"{self.instructions}\n\n{q.text}\nAnswer with exactly one of these "
            f"{'digits' if q.kind == 'score' and next(iter(tokens)).isdigit() else 'letters'}"
            f" and nothing else:\n{listed}"
        ).strip()
        request = ModelRequest(
            messages=self._messages(system, text),
            max_output_tokens=1,
            temperature=0.0,
            top_logprobs=_TOP_LOGPROBS,
            labels=tokens,
        )
        turn = await ctx.call_model(request)
        if turn.refusal:
            raise Halt(Status.REFUSED, f"{self.name}: the model refused: {turn.refusal[:200]}")
        return self._read_logprobs(q, tokens, turn, ctx)

    def _read_logprobs(
        self, q: Question, tokens: dict[str, str], turn: Turn, ctx: Context
    ) -> dict[str, float]:
        model = model_name(ctx.model) or "?"
        if not turn.logprobs:
            raise ProbabilitiesMissing(
                f"judge {self.name!r}: model {model!r} sent no log-probabilities for "
                f"{q.name!r}; use a server that returns logprobs, or backends=('structured',) "
                "to accept answers of unknown confidence"
            )
        alternatives = turn.logprobs[0]
        mass: dict[str, float] = {}
        for token, logprob in alternatives.items():
            label = tokens.get(token.strip().upper()) or tokens.get(token.strip())
            if label is not None:
                mass[label] = mass.get(label, 0.0) + math.exp(logprob)
        if not mass:
            raise ProbabilitiesMissing(
                f"judge {self.name!r}: none of {q.name!r}'s answer tokens "
                f"({', '.join(tokens)}) is among model {model!r}'s top log-probabilities "
                f"(it answered {(turn.text or '')[:40]!r})"
            )
        # A label the server did not list is at most as likely as the least it listed:
        # counted as 0, a label listed alone would be sure however little mass it holds.
        least = min(math.exp(lp) for lp in alternatives.values())
        return {label: mass.get(label, least) for label in tokens.values()}

    def _messages(self, system: str, text: str) -> list[Message]:
        if not system:
            return [{"role": "user", "content": text}]
        return [{"role": "system", "content": system}, {"role": "user", "content": text}]

    def _answer_model(self) -> type[pydantic.BaseModel]:
        if self.model_type is not None:
            return self.model_type
        return pydantic.create_model(f"{_ident(self.name)}_answer", answer=(self.answer_type, ...))

    def _structured_instructions(self) -> str:
        asked = "\n".join(f"- {q.name}: {q.text}" for q in self.questions)
        return f"{self.instructions}\n\nAnswer these questions:\n{asked}".strip()


def _normalised(q: Question, given: Mapping[str, float]) -> dict[str, float]:
    """``given`` over ``q``'s labels, summing to 1 (labels it lacks: 0). Each must be a
    probability (a number in [0, 1]) and together at most 1: anything else — NaN, a
    negative, a log-probability above 0 — raises :class:`ProbabilitiesMissing`, never
    a confident answer made of it."""
    by_text = {str(k).lower(): float(v) for k, v in given.items()}
    raw = {t: by_text.get(t.lower(), 0.0) for t in q.texts}
    bad = [t for t, v in raw.items() if not 0.0 <= v <= 1.0 + _SLACK]  # NaN fails both
    if bad or sum(raw.values()) > 1.0 + _SLACK:
        said = f"{bad[0]!r} is {raw[bad[0]]!r}" if bad else f"they sum to {sum(raw.values()):g}"
        raise ProbabilitiesMissing(
            f"the probabilities of {q.name!r} are not probabilities ({said}); "
            "the answer's confidence cannot be known"
        )
    total = sum(raw.values())
    if total <= 0:
        raise ProbabilitiesMissing(f"the probabilities of {q.name!r} are missing (all zero)")
    return {t: round(v / total, 6) for t, v in raw.items()}


_SLACK = 1e-3
"""How far above 1 a server's rounded probabilities may sum."""

UNDECLARED_LIMIT = 0.05
"""The most of a question's probability that may lie outside its declared labels before
the answer's confidence counts as unknown: renormalising 98% on an undeclared label and 2%
on a declared one would make a 100%-sure answer of what the model barely considered."""


def _declared_mass(q: Question, given: Mapping[str, float]) -> float:
    """The probability ``given`` puts on ``q``'s declared labels (as given, before any
    renormalising)."""
    by_text = {str(k).lower(): float(v) for k, v in given.items()}
    return sum(by_text.get(t.lower(), 0.0) for t in q.texts)


def _probability(judge: str, q: Question, value: object) -> float:
    """A probability the Decisions API sent, as a float (``ProbabilitiesMissing`` when it
    is missing or not a number; its range is :func:`_normalised`'s to check)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProbabilitiesMissing(
            f"judge {judge!r}: the Decisions API sent {str(value)[:40]!r} as a probability "
            f"of {q.name!r}, not a number"
        )
    return float(value)


def _checked_backends(
    name: str, backends: Sequence[DecisionBackend] | None
) -> tuple[DecisionBackend, ...] | None:
    if backends is None:
        return None
    unknown = [b for b in backends if b not in DECISION_BACKENDS]
    if unknown or not backends:
        raise JudgeError(
            f"judge {name!r}: backend {unknown[0] if unknown else 'none'!r} is not one of "
            f"{', '.join(DECISION_BACKENDS)}",
            name=name,
            code="no-backend",
        )
    return tuple(backends)


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name) or "judge"
