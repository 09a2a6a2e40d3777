"""What a cascade needs offline, without hand wiring: :func:`scripted_judge` (a judge's
probabilities per input) and :class:`SplitModel` (judge requests one way, the rest another).

A cascade's run asks its model two kinds of thing: the judge's questions (a Decisions API
call or a log-probability question, :func:`~loopwise.models.decided.is_decision`) and
whatever its sure and unsure sides ask. A test of a threshold wants to script the first per
input — "on ticket 7 the judge puts 0.97 on refund" — and let something else answer the
rest, e.g. the offline ``--model scripted`` or a :class:`~loopwise.testing.ScriptedAgent`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from loopwise.models.decided import is_decision
from loopwise.models.port import (
    DecisionBackend,
    Model,
    ModelDefaults,
    ModelRequest,
    Turn,
    model_member,
)
from loopwise.models.scripted import ScriptedModel, auto_respond

__all__ = ["SplitModel", "judge_input", "partial_model", "scripted_judge"]

Probabilities = Mapping[str, float | Mapping[str, float]]
"""``{question: {label: p}}`` (or ``{label: p}`` for a one-question judge)."""


def judge_input(request: ModelRequest) -> str:
    """The input a judge's ``request`` asks about, as the text the judge showed the model
    (its user message, whichever way it asks)."""
    return request.user_text()


def scripted_judge(
    answers: Mapping[str, Probabilities] | Callable[[str], Probabilities | None],
    *,
    default: Probabilities | None = None,
    name: str = "scripted-judge",
    decision_backends: tuple[DecisionBackend, ...] = ("decisions", "logprobs"),
) -> ScriptedModel:
    """A scripted model whose judge answers with the probabilities given per input:
    ``answers`` maps an input's text to them (or is a function of the text returning them,
    ``None`` for the default). An input not given gets ``default`` (``None``: every label
    equally likely). Any other request gets the offline model's answer
    (:func:`~loopwise.models.scripted.auto_respond`). Raises ``ValueError`` when a
    probability is outside [0, 1]."""
    table = None if callable(answers) else dict(answers)
    for given in [*(table or {}).values(), *([default] if default is not None else [])]:
        _check(given)

    def respond(request: ModelRequest) -> Any:
        if not is_decision(request):
            return auto_respond(request)
        text = judge_input(request)
        found = table.get(text) if table is not None else answers(text)  # type: ignore[operator]
        if found is not None and table is None:
            _check(found)
        return found if found is not None else (default or {})

    return ScriptedModel(respond, name=name, decision_backends=decision_backends)


def _check(probabilities: Probabilities) -> None:
    for key, value in probabilities.items():
        if isinstance(value, Mapping):
            _check(value)
        elif not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
            raise ValueError(
                f"scripted_judge: the probability of {key!r} is {value!r}, not in [0, 1]"
            )


class SplitModel(ModelDefaults):
    """A model that sends a judge's requests to ``judge`` and every other request to
    ``rest``: one target's model, two scripts. It asks for probabilities the way ``judge``
    can (its ``decision_backends``)."""

    def __init__(self, judge: Model, rest: Model, *, name: str | None = None) -> None:
        self.judge = judge
        """Answers the judge's questions."""
        self.rest = rest
        """Answers everything else."""
        self.name = name or str(rest.name)
        self.decision_backends = _backends(judge)

    async def complete(self, request: ModelRequest) -> Turn:
        """Answer ``request`` with :attr:`judge` when it is a judge's, else :attr:`rest`."""
        return await (self.judge if is_decision(request) else self.rest).complete(request)

    async def aclose(self) -> None:
        """Release both models."""
        for model in (self.judge, self.rest):
            if isinstance(model, ModelDefaults):
                await model.aclose()


def _backends(model: Model) -> tuple[DecisionBackend, ...]:
    return tuple(model_member(model, "decision_backends"))


def partial_model(
    judge: Model | Callable[[], Model],
    workflow: Model | Callable[[], Model],
    agent: Model | Callable[[], Model],
) -> Model:
    """The offline model of a cascade ``loopwise graduate --partial`` wrote: the path
    judge's questions to ``judge``, the graduated workflow's calls (what
    :func:`~loopwise.testing.graduated_model` answers) to ``workflow``, everything else —
    the agent's own turns — to ``agent``; each a model, or the module-level function that
    makes one (an ``offline_model``)."""
    from loopwise.testing._graduated import is_graduated_call

    made = _made(agent)
    rest = _Routed(_made(workflow), made, is_graduated_call)
    return SplitModel(_made(judge), rest, name=str(made.name))


def _made(model: Model | Callable[[], Model]) -> Model:
    """A model, or the module-level function that makes one (``offline_model``)."""
    return model() if callable(model) and not isinstance(model, ModelDefaults) else model


class _Routed(ModelDefaults):
    """Requests ``which`` picks to ``first``, the rest to ``second``."""

    def __init__(self, first: Model, second: Model, which: Callable[[ModelRequest], bool]):
        self.first, self.second, self.which = first, second, which
        self.name = str(second.name)

    async def complete(self, request: ModelRequest) -> Turn:
        model = self.first if self.which(request) else self.second
        return await model.complete(request)
