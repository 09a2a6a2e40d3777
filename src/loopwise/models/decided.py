"""Scripted answers to a judge's requests: Decisions API answers and log-probability turns.

A judge (:mod:`loopwise.architectures.judge`) asks either the Decisions API
(``request.decision``: questions of type ``choice``, ``score`` or ``predicate``) or Chat
Completions for one label token with its log-probabilities (``request.labels``: token →
label). The scripted model and the fake server answer both from the same script entry:

* a :class:`~loopwise.models.port.Turn` is sent as it is (``Turn.decision`` /
  ``Turn.logprobs`` set by hand, for odd answers: a refusal, missing log-probabilities);
* a dict of probabilities — ``{question: {label: p}}`` for a decision (a predicate's
  value is the probability of *true*), ``{label: p}`` for one log-probability question —
  becomes the answer a real server would give (missing labels get what is left, shared);
* anything else, or no script, gets an uninformed answer: every label equally likely.

Labels are compared as text (``"3"`` is the score 3, ``"true"`` the predicate's yes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from loopwise.models.port import ModelRequest, Turn

__all__ = ["decision_turn", "is_decision", "label_probabilities", "logprob_turn"]


def is_decision(request: ModelRequest) -> bool:
    """Whether ``request`` is a judge's (a Decisions API call or a log-probability question)."""
    return request.decision is not None or request.labels is not None


def decision_turn(entry: object, request: ModelRequest) -> Turn:
    """The answer to a judge's ``request`` from a script entry (see the module docs)."""
    if isinstance(entry, Turn):
        return entry
    if request.decision is not None:
        questions = request.decision.get("questions") or []
        given = entry if isinstance(entry, Mapping) else {}
        return Turn(decision=[_answer(q, given.get(q.get("name"))) for q in questions])
    return logprob_turn(request.labels or {}, entry if isinstance(entry, Mapping) else {})


def logprob_turn(labels: Mapping[str, str], probabilities: Mapping[object, float]) -> Turn:
    """A one-token answer whose top log-probabilities spread ``probabilities`` (by label)
    over the answer tokens of ``labels`` (token → label); the likeliest token is the text."""
    spread = label_probabilities(list(labels.values()), probabilities)
    by_token = {token: spread[label] for token, label in labels.items()}
    top = {t: math.log(p) if p > 0 else -100.0 for t, p in by_token.items()}
    text = max(by_token, key=lambda t: by_token[t]) if by_token else ""
    return Turn(text=text, logprobs=[top])


def label_probabilities(labels: list[str], given: Mapping[object, float]) -> dict[str, float]:
    """``given`` (label → probability) over ``labels``: unknown labels dropped, missing ones
    sharing what is left (all equal when nothing is given), summing to 1."""
    known = {str(k).lower(): float(v) for k, v in given.items()}
    chosen = {label: max(0.0, known[label.lower()]) for label in labels if label.lower() in known}
    rest = [label for label in labels if label not in chosen]
    left = max(0.0, 1.0 - sum(chosen.values()))
    for label in rest:
        chosen[label] = left / len(rest)
    total = sum(chosen.values()) or 1.0
    return {label: chosen[label] / total for label in labels}


def _answer(question: Mapping[str, Any], given: object) -> dict[str, Any]:
    """One Decisions API answer to ``question``, as the wire has it."""
    name = question.get("name")
    kind = question.get("type")
    if kind == "predicate":
        p = float(given) if isinstance(given, int | float) and not isinstance(given, bool) else 0.5
        return {"type": "predicate", "name": name, "probability": min(1.0, max(0.0, p))}
    if kind == "choice":
        values = [c["value"] for c in question.get("choices") or []]
        spread = label_probabilities([_text(v) for v in values], _mapping(given))
        probs = [{"value": v, "probability": spread[_text(v)]} for v in values]
        best = max(probs, key=lambda p: p["probability"])
        return {
            "type": "choice",
            "name": name,
            "choice": best["value"],
            "confidence": best["probability"],
            "probabilities": probs,
        }
    levels = [str(level["label"]) for level in question.get("levels") or []]
    spread = label_probabilities(levels, _mapping(given))
    probs = [
        {"label": label, "value": i, "probability": spread[label]} for i, label in enumerate(levels)
    ]
    best = max(probs, key=lambda p: p["probability"]) if probs else {"probability": 0.0}
    return {
        "type": "score",
        "name": name,
        "score": sum(p["value"] * p["probability"] for p in probs),
        "confidence": best["probability"],
        "probabilities": probs,
    }


def _mapping(given: object) -> Mapping[object, float]:
    return given if isinstance(given, Mapping) else {}


def _text(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)
