"""A judge answers only its labels: probability on a label it never declared is not
renormalised into a confident declared answer; the cascade counts it unsure, and says why.
And an ECE exactly at the limit is not reported as above it."""

from __future__ import annotations

import math
from typing import Literal

import pytest

import loopwise
from loopwise import Cascade, Judge, Ruling
from loopwise.evidence.sweeps.calibration import (
    ECE_LIMIT,
    Calibration,
    calibration_verdict,
)
from loopwise.models.port import Turn
from loopwise.testing import ScriptedModel


def _decided(probabilities: list[dict[str, object]]) -> ScriptedModel:
    return ScriptedModel(
        lambda r: Turn(decision=[{"type": "choice", "name": "c", "probabilities": probabilities}])
    )


def test_mass_on_an_undeclared_label_makes_the_confidence_unknown() -> None:
    # 98% on "c", which the judge never declared, 2% on "a": not a 100%-sure "a"
    model = _decided([{"value": "c", "probability": 0.98}, {"value": "a", "probability": 0.02}])
    result = loopwise.run(Judge("c", Literal["a", "b"]), "x", model=model)
    ruling = result.output
    assert ruling.answer == "a" and ruling.confidence is None
    assert ruling.unknown_reason is not None
    assert "98% of the probability of 'c' is on labels it did not declare" in ruling.unknown_reason


def test_the_same_by_log_probabilities() -> None:
    # the one-token answer: "Z" (no label's token) holds 98%, "A" 2%
    turn = Turn(text="Z", logprobs=[{"Z": math.log(0.98), "A": math.log(0.02)}])
    judge = Judge("c", Literal["a", "b"], backends=["logprobs"])
    result = loopwise.run(judge, "x", model=ScriptedModel(lambda r: turn))
    assert result.output.confidence is None and result.output.unknown_reason


def test_a_small_leak_stays_known_and_a_declared_answer_is_unchanged() -> None:
    model = _decided([{"value": "a", "probability": 0.9}, {"value": "b", "probability": 0.08}])
    ruling = loopwise.run(Judge("c", Literal["a", "b"]), "x", model=model).output
    assert ruling.unknown_reason is None and ruling.confidence == pytest.approx(
        0.9 / 0.98, abs=1e-6
    )


@loopwise.step
async def _sure(ruling: Ruling) -> str:  # type: ignore[type-arg]
    return f"sure {ruling.answer}"


@loopwise.step
async def _unsure(text: str) -> str:
    return "asked the careful side"


def test_the_cascade_counts_it_unsure_and_records_why() -> None:
    model = _decided([{"value": "c", "probability": 0.98}, {"value": "a", "probability": 0.02}])
    desk = Cascade("desk", Judge("c", Literal["a", "b"]), sure=_sure, unsure=_unsure, threshold=0.1)
    events: list[loopwise.Event] = []

    class Sink:
        def record(self, run_id: str, event: loopwise.Event) -> None:
            events.append(event)

    result = loopwise.run(desk, "x", model=model, sinks=[Sink()])
    assert result.output == "asked the careful side"
    weighed = [
        e.data["output"] for e in events if e.step == "desk/threshold" and "output" in e.data
    ]
    assert weighed and weighed[-1]["side"] == "unsure"
    assert "on labels it did not declare" in weighed[-1]["reason"]


def test_an_ece_exactly_at_the_limit_is_not_above_it() -> None:
    assert calibration_verdict(Calibration(n=40, unknown=0, ece=ECE_LIMIT, bins=[])) is None
    over = Calibration(n=40, unknown=0, ece=0.1000011, bins=[])
    verdict = calibration_verdict(over)
    assert verdict is not None and verdict[0] == "large"
    # 0.1 computed as 0.30000000000000004 - 0.2 is a hair above 0.1: not "above" as shown
    assert (
        calibration_verdict(Calibration(n=40, unknown=0, ece=0.30000000000000004 - 0.2, bins=[]))
        is None
    )
