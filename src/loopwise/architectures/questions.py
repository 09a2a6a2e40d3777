"""The questions a judge asks, read from the answer it declares.

A :class:`~loopwise.architectures.judge.Judge` declares its answer as a ``Literal`` (or
``Enum``, or a list) of labels — a *choice* —, ``bool`` — a *predicate* —, a ``range`` or
an ``int`` with ``ge``/``le`` — a *score* —, or a pydantic model whose fields are each one
of those. :func:`questions_of` turns that into :class:`Question` values (their kind, their
typed labels, their text) and refuses what is not a question with a
:class:`~loopwise.errors.JudgeError`; :func:`label_text` is how a label is keyed as text.
"""

from __future__ import annotations

import enum
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args, get_origin

import annotated_types
import pydantic
from typing_extensions import TypeForm

from loopwise.architectures.wiring import strip_type
from loopwise.core.jsontypes import JSONObject
from loopwise.errors import JudgeError

__all__ = [
    "MAX_LABELS",
    "Question",
    "QuestionKind",
    "label_text",
    "list_literal",
    "model_of",
    "questions_of",
]

QuestionKind = Literal["choice", "predicate", "score"]
"""What a question asks for: one of its labels, true or false, or a level."""

MAX_LABELS = 26
"""A log-probability question answers with one letter per label."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Question:
    """One closed question a judge asks."""

    name: str
    """The field it answers (the judge's name for a one-question judge)."""
    kind: QuestionKind
    """``choice``, ``predicate`` or ``score``."""
    labels: tuple[object, ...]
    """The allowed answers, typed, in order (a score's lowest first)."""
    text: str
    """The question as the model reads it."""

    @property
    def texts(self) -> tuple[str, ...]:
        """The labels as text (what probabilities are keyed by)."""
        return tuple(label_text(label) for label in self.labels)

    def tokens(self) -> dict[str, str]:
        """Answer token → label text, for a log-probability question."""
        texts = self.texts
        if self.kind == "score" and all(len(t) == 1 and t.isdigit() for t in texts):
            return {t: t for t in texts}
        return dict(zip(string.ascii_uppercase, texts, strict=False))

    def wire(self) -> JSONObject:
        """The question as the Decisions API takes it."""
        if self.kind == "predicate":
            return {"type": "predicate", "name": self.name, "instructions": self.text}
        if self.kind == "choice":
            return {
                "type": "choice",
                "name": self.name,
                "instructions": self.text,
                "choices": [{"value": t} for t in self.texts],
            }
        return {
            "type": "score",
            "name": self.name,
            "instructions": self.text,
            "levels": [{"label": t} for t in self.texts],
        }


def label_text(label: object) -> str:
    """A label as text: an enum by its value, a bool as ``true``/``false``."""
    if isinstance(label, enum.Enum):
        label = label.value
    if isinstance(label, bool):
        return "true" if label else "false"
    return str(label)


def model_of(answer: object) -> type[pydantic.BaseModel] | None:
    """The pydantic model a judge's answer is (several questions), else ``None``."""
    if isinstance(answer, type) and issubclass(answer, pydantic.BaseModel):
        return answer
    return None


def list_literal(answer: object) -> TypeForm[object]:
    """The answer's type: a list or range of labels as the ``Literal`` of them."""
    if isinstance(answer, range | list | tuple):
        answer = Literal[tuple(answer)] if answer else Any
    # cast: a type form either way. A Literal built here at run time is one a type checker
    # cannot see (a special form to it); any other answer passed questions_of, which
    # refuses what is not a question's type, before a judge calls this.
    return cast("TypeForm[object]", answer)


def questions_of(
    name: str,
    answer: object,
    model: type[pydantic.BaseModel] | None,
    question: str,
    texts: Mapping[str, str],
) -> tuple[Question, ...]:
    """The questions of a judge ``name`` declaring ``answer`` (``model`` when it is a
    pydantic model, one question per field); :class:`JudgeError` for what is not one."""
    if model is None:
        kind, labels = _kind_of(name, answer)
        return (_question(name, name, kind, labels, question or f"Which {name}?"),)
    if not model.model_fields:
        raise JudgeError(
            f"judge {name!r}: {model.__name__} has no fields", name=name, code="no-labels"
        )
    unknown = sorted(set(texts) - set(model.model_fields))
    if unknown:
        raise JudgeError(
            f"judge {name!r}: questions name {unknown[0]!r}, which is not a field of "
            f"{model.__name__}",
            name=unknown[0],
            code="unsupported-type",
        )
    found = []
    for field, info in model.model_fields.items():
        kind, labels = _kind_of(f"{name}.{field}", info.annotation, info.metadata)
        default = f"Is it {field}?" if kind == "predicate" else f"Which {field}?"
        text = texts.get(field) or info.description or question or default
        found.append(_question(name, field, kind, labels, text))
    return tuple(found)


def _question(
    judge: str, field: str, kind: QuestionKind, labels: tuple[object, ...], text: str
) -> Question:
    where = judge if field == judge else f"{judge}.{field}"
    if len(labels) < 2:
        raise JudgeError(
            f"judge {where!r}: a {kind} needs two or more labels, not {len(labels)}",
            name=where,
            code="no-labels",
        )
    texts = [label_text(label) for label in labels]
    if any(not t.strip() for t in texts):
        raise JudgeError(
            f"judge {where!r}: a label is empty text; every label needs a name the model reads",
            name=where,
            code="no-labels",
        )
    folded = [t.strip().casefold() for t in texts]
    dupes = sorted({t for t, f in zip(texts, folded, strict=True) if folded.count(f) > 1})
    if dupes:
        raise JudgeError(
            f"judge {where!r}: label {dupes[0]!r} is given twice (labels are compared as "
            "text, ignoring case and surrounding spaces)",
            name=dupes[0],
            code="duplicate-labels",
        )
    return Question(name=field, kind=kind, labels=labels, text=text)


def _kind_of(
    where: str, tp: object, metadata: Sequence[object] = ()
) -> tuple[QuestionKind, tuple[object, ...]]:
    """A field type as a question: its kind and its labels."""
    if isinstance(tp, range):
        return "score", tuple(tp)
    if isinstance(tp, list | tuple):
        return "choice", tuple(tp)
    tp = strip_type(tp)
    if tp is bool:
        return "predicate", (True, False)
    if get_origin(tp) is Literal:
        return "choice", get_args(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "choice", tuple(tp)
    if tp is int:
        bounds = _bounds(metadata)
        if bounds is not None and 2 <= bounds[1] - bounds[0] + 1 <= MAX_LABELS:
            return "score", tuple(range(bounds[0], bounds[1] + 1))
    raise JudgeError(
        f"judge {where!r}: {tp!r} is not a question; use a Literal of labels (a choice), "
        f"bool (a predicate) or an int with ge= and le= at most {MAX_LABELS} apart (a score)",
        name=where,
        code="unsupported-type",
    )


def _bounds(metadata: Sequence[object]) -> tuple[int, int] | None:
    lo = hi = None
    for item in metadata:
        if isinstance(item, annotated_types.Ge):
            lo = int(item.ge)  # type: ignore[call-overload]
        elif isinstance(item, annotated_types.Gt):
            lo = int(item.gt) + 1  # type: ignore[call-overload]
        elif isinstance(item, annotated_types.Le):
            hi = int(item.le)  # type: ignore[call-overload]
        elif isinstance(item, annotated_types.Lt):
            hi = int(item.lt) - 1  # type: ignore[call-overload]
    return None if lo is None or hi is None else (lo, hi)
