"""The judge: typed questions answered with calibrated probabilities, on every backend."""

from __future__ import annotations

import math
from typing import Literal

import pytest
from pydantic import BaseModel, Field

import loopwise
from loopwise import Budget, Judge, JudgeError, Status, Turn, Workflow
from loopwise.testing import FakeChatServer, Fault, ScriptedModel, logprob_turn


class Reading(BaseModel):
    category: Literal["billing", "technical", "other"] = Field(description="Which area is it?")
    urgency: int = Field(ge=1, le=5, description="How urgent, 1 to 5?")
    spam: bool = Field(description="Is it spam?")


READING = {"category": {"billing": 0.8, "technical": 0.15}, "urgency": {"2": 0.9}, "spam": 0.1}
LETTERS = {"A": "billing", "B": "technical", "C": "other"}


def test_a_model_judge_asks_each_field_and_multiplies_confidences() -> None:
    judge = Judge("reading", Reading, instructions="You read tickets.")
    result = loopwise.run(judge, {"subject": "x"}, model=ScriptedModel(lambda r: READING))
    ruling = result.output
    assert result.status is Status.COMPLETED
    assert ruling.answer == Reading(category="billing", urgency=2, spam=False)
    assert ruling.probabilities["category"] == {"billing": 0.8, "technical": 0.15, "other": 0.05}
    assert ruling.probabilities["spam"] == {"true": 0.1, "false": 0.9}
    assert ruling.confidence == pytest.approx(0.8 * 0.9 * 0.9)
    assert ruling.backend == "decisions" and ruling.input == {"subject": "x"}
    assert ruling.sure(0.6) and not ruling.sure(0.7)
    assert [q.kind for q in judge.questions] == ["choice", "score", "predicate"]


def test_a_literal_a_bool_and_a_range_are_judges() -> None:
    assert Judge("c", Literal["a", "b"]).questions[0].kind == "choice"
    assert Judge("p", bool).questions[0].labels == (True, False)
    assert Judge("s", range(1, 4)).questions[0].labels == (1, 2, 3)
    out = loopwise.run(Judge("s", range(1, 4)), "x", model=ScriptedModel(lambda r: {"s": {"3": 1}}))
    assert out.output.answer == 3 and out.output.confidence == 1.0


@pytest.mark.parametrize(
    ("answer", "code", "culprit"),
    [
        ([], "no-labels", "bad"),
        (["only"], "no-labels", "bad"),
        (["a", "b", "a"], "duplicate-labels", "a"),
        (Literal[1, "1"], "duplicate-labels", "1"),
        (["yes", "Yes"], "duplicate-labels", "Yes"),
        (["x", " x "], "duplicate-labels", " x "),
        (["", "b"], "no-labels", "bad"),
        (["  ", "b"], "no-labels", "bad"),
        (str, "unsupported-type", "bad"),
    ],
)
def test_bad_labels_are_typed_errors_naming_the_culprit(
    answer: object, code: str, culprit: str
) -> None:
    with pytest.raises(JudgeError) as e:
        Judge("bad", answer)
    assert (e.value.code, e.value.name) == (code, culprit) or e.value.code == "unsupported-type"


def test_a_model_field_that_is_no_question_is_named() -> None:
    class Loose(BaseModel):
        category: Literal["a", "b"]
        summary: str

    with pytest.raises(JudgeError) as e:
        Judge("loose", Loose)
    assert (e.value.code, e.value.name) == ("unsupported-type", "loose.summary")
    with pytest.raises(JudgeError, match="backend 'magic'"):
        Judge("x", bool, backends=["magic"])  # type: ignore[list-item]


def test_the_decisions_api_gets_the_sdk_request_and_its_answers() -> None:
    judge = Judge("reading", Reading, instructions="You read tickets.")
    with FakeChatServer(lambda r: READING) as server:
        result = loopwise.run(judge, {"subject": "x"}, model=server.model("gpt-6-luna"))
    assert result.status is Status.COMPLETED, result.detail
    assert result.output.answer.category == "billing"
    (sent,) = server.requests
    assert sent["model"] == "gpt-6-luna"
    assert sent["input"][0] == {"role": "developer", "content": "You read tickets."}
    assert sent["questions"][0] == {
        "type": "choice",
        "name": "category",
        "instructions": "Which area is it?",
        "choices": [{"value": "billing"}, {"value": "technical"}, {"value": "other"}],
    }
    assert sent["questions"][1]["levels"] == [{"label": str(i)} for i in range(1, 6)]
    assert sent["questions"][2] == {
        "type": "predicate",
        "name": "spam",
        "instructions": "Is it spam?",
    }
    assert result.usage.model_calls == 1


def test_a_refused_question_ends_the_run_refused() -> None:
    refusal = Turn(decision=[{"type": "refusal", "name": "c"}])
    with FakeChatServer([refusal]) as server:
        result = loopwise.run(Judge("c", Literal["a", "b"]), "x", model=server.model())
    assert result.status is Status.REFUSED and "declined" in (result.detail or "")


def test_without_the_decisions_api_log_probabilities_renormalised_over_the_labels() -> None:
    # A stray token ("The") takes 3% of the mass: the labels share the rest, and
    # "other", not listed, counts as likely as the least listed token (its upper bound).
    first = Turn(
        text="B", logprobs=[{"B": math.log(0.6), "A": math.log(0.37), "The": math.log(0.03)}]
    )
    judge = Judge("category", Literal["billing", "technical", "other"])
    with FakeChatServer([first, first], decisions=False) as server:
        model = server.model()
        result = loopwise.run(judge, "x", model=model)
        again = loopwise.run(judge, "x", model=model)  # the endpoint's backend is remembered
    assert result.status is Status.COMPLETED, result.detail
    ruling = result.output
    assert ruling.backend == "logprobs" and ruling.answer == "technical"
    assert sum(ruling.probabilities["category"].values()) == pytest.approx(1.0, abs=1e-5)
    # "other" gets the least listed mass (0.03): 0.6 + 0.37 + 0.03 = 1, nothing undeclared
    assert ruling.probabilities["category"]["other"] == pytest.approx(0.03, abs=1e-4)
    assert ruling.confidence == pytest.approx(0.6, abs=1e-4)
    assert ruling.unknown_reason is None
    sent = server.requests[0]
    assert (sent["logprobs"], sent["top_logprobs"], sent["max_completion_tokens"]) == (True, 20, 1)
    assert "A: billing" in sent["messages"][0]["content"]
    assert again.status is Status.COMPLETED and len(server.requests) == 2


def test_a_stray_token_holding_a_quarter_of_the_mass_is_not_renormalised_away() -> None:
    # "The" (no label's token) takes 25%: renormalising it away would inflate "technical"
    turn = Turn(text="B", logprobs=[{"B": math.log(0.6), "A": math.log(0.15), "The": -1.386}])
    judge = Judge("category", Literal["billing", "technical", "other"], backends=["logprobs"])
    ruling = loopwise.run(judge, "x", model=ScriptedModel([turn])).output
    assert ruling.answer == "technical" and ruling.confidence is None
    assert "10% of the probability of 'category' is on labels it did not declare" in (
        ruling.unknown_reason or ""
    )


def test_a_server_without_log_probabilities_is_an_error_never_a_sure_answer() -> None:
    turn = logprob_turn(LETTERS, {"billing": 0.9})
    with FakeChatServer([turn], decisions=False, logprobs=False) as server:
        result = loopwise.run(
            Judge("category", Literal["billing", "technical", "other"]), "x", model=server.model()
        )
    assert result.status is Status.ERROR
    assert "judge 'category'" in (result.detail or "")
    assert "no log-probabilities" in (result.detail or "")


def test_an_answer_off_the_labels_is_an_error_naming_the_tokens() -> None:
    stray = Turn(text="Hello", logprobs=[{"Hello": -0.1, "Hi": -2.0}])
    model = ScriptedModel([stray], decision_backends=("logprobs",))
    result = loopwise.run(Judge("c", Literal["a", "b"]), "x", model=model)
    assert result.status is Status.ERROR and "none of 'c'" in (result.detail or "")


@pytest.mark.parametrize(
    "answer",
    [
        {"type": "choice", "probabilities": [{"value": "a", "probability": math.nan},
                                             {"value": "b", "probability": 0.3}]},
        {"type": "choice", "probabilities": [{"value": "a", "probability": -5},
                                             {"value": "b", "probability": 0.01}]},
        {"type": "choice", "probabilities": [{"value": "a", "probability": 7}]},
        {"type": "choice", "probabilities": [{"value": "a", "probability": 0.8},
                                             {"value": "b", "probability": 0.7}]},
        {"type": "choice", "probabilities": [{"value": "a", "probability": "high"}]},
        {"type": "choice", "probabilities": [{"value": "a"}]},
        {"type": "choice", "probabilities": ["a"]},
        {"type": "choice", "probabilities": {"a": 1}},
    ],
)  # fmt: skip
def test_numbers_that_are_not_probabilities_are_an_error_never_a_sure_answer(
    answer: dict[str, object],
) -> None:
    model = ScriptedModel([Turn(decision=[{"name": "c", **answer}])])
    result = loopwise.run(Judge("c", Literal["a", "b"]), "x", model=model)
    assert result.status is Status.ERROR, (result.status, result.output)
    assert "'c'" in (result.detail or "") and "probabilit" in (result.detail or "")


@pytest.mark.parametrize(
    ("probability", "shown"), [(math.nan, "nan"), (1.5, "1.5"), ("0.9", "0.9"), (True, "True")]
)
def test_a_predicate_probability_that_is_not_one_is_an_error(
    probability: object, shown: str
) -> None:
    turn = Turn(decision=[{"type": "predicate", "name": "p", "probability": probability}])
    result = loopwise.run(Judge("p", bool), "x", model=ScriptedModel([turn]))
    assert result.status is Status.ERROR and shown in (result.detail or "")


@pytest.mark.parametrize("logprobs", [{"A": math.nan, "B": -1.0}, {"A": 5.0}, {"B": math.inf}])
def test_log_probabilities_that_are_not_ones_are_an_error_never_a_sure_answer(
    logprobs: dict[str, float],
) -> None:
    model = ScriptedModel([Turn(text="A", logprobs=[logprobs])], decision_backends=("logprobs",))
    result = loopwise.run(Judge("c", Literal["a", "b"]), "x", model=model)
    assert result.status is Status.ERROR, (result.status, result.output)
    assert "not probabilities" in (result.detail or "")


def test_structured_backend_answers_with_unknown_confidence() -> None:
    model = ScriptedModel(decision_backends=("structured",))
    result = loopwise.run(Judge("c", Literal["a", "b"]), "x", model=model)
    assert result.output.confidence is None and result.output.probabilities == {"c": {}}
    assert not result.output.sure(0.0)
    assert result.output.sure(0.0, unknown=True)


def test_a_model_with_no_backend_that_fits_is_a_typed_error() -> None:
    with FakeChatServer(decisions=False) as server:
        model = loopwise.OpenAIModel(
            "m", api_key="k", base_url=server.base_url, decision_backends=("decisions",)
        )
        with pytest.raises(JudgeError) as e:
            loopwise.run(Judge("c", Literal["a", "b"]), "x", model=model)
    assert e.value.code == "no-backend" and e.value.name == "c"


def test_a_judge_runs_under_the_budget_and_is_journaled() -> None:
    class Big(BaseModel):
        text: str

    calls = ScriptedModel(lambda r: {"c": {"a": 0.7}})
    over = loopwise.run(
        Judge("c", Literal["a", "b"]), "x" * 4000, model=calls, budget=Budget(max_tokens=50)
    )
    assert over.status is Status.BUDGET_EXCEEDED and calls.calls == 0
    flow = Workflow("flow").then(Judge("c", Literal["a", "b"]))
    done = loopwise.run(flow, "x", model=calls)
    (call,) = [e for e in done.events if e.type == "model_call"]
    assert call.data["turn"]["decision"][0]["choice"] == "a"
    assert Turn.from_dict(call.data["turn"]).decision == call.data["turn"]["decision"]


def test_a_fault_on_the_decisions_route_is_the_usual_model_error() -> None:
    with FakeChatServer([Fault(status=500)]) as server:
        result = loopwise.run(Judge("c", Literal["a", "b"]), "x", model=server.model())
    assert result.status is Status.ERROR and "HTTP 500" in (result.detail or "")


def test_the_decisions_body_is_the_one_the_sdks_create_sends() -> None:
    import asyncio

    import openai

    judge = Judge("reading", Reading, instructions="You read tickets.")
    with FakeChatServer(lambda r: READING) as server:
        loopwise.run(judge, {"subject": "x"}, model=server.model("gpt-6-luna"), store=None)
        ours = server.requests[0]

        async def by_the_sdk() -> None:
            client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
            await client.decisions.create(
                model="gpt-6-luna", input=ours["input"], questions=ours["questions"]
            )
            await client.close()

        asyncio.run(by_the_sdk())
        theirs = server.requests[1]
    assert ours == theirs and list(ours) == list(theirs) == ["model", "input", "questions"]
