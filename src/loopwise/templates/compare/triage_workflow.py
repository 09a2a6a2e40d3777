"""Triage a support ticket as a WORKFLOW: the steps are known, so they are written down.

One structured-output model call (``classify``: summary, category, urgency), then the desk's
routing rule in plain code (``route``). One model call, the same path every time. Compare
it with ``triage_agent.py``, the same job as an agent::

    loopwise run triage_workflow.py:triage --model scripted --input-text "Charged twice"
    loopwise eval triage_workflow.py:triage triage_agent.py:triage_agent \\
        --dataset tickets.jsonl --model scripted
"""

from __future__ import annotations

from tickets import URGENCY_SCALE, Assessment, Triage, assess, queue_for

import loopwise
from loopwise import Structured, Workflow
from loopwise.testing import ScriptedModel

classify = Structured(
    "classify",
    output=Assessment,
    instructions=(
        "You triage customer support tickets (the first line is the subject). Give a "
        "one-sentence summary, the category (billing, technical, account, shipping or "
        f"other) and the urgency: {URGENCY_SCALE}."
    ),
)


@loopwise.step
async def route(assessment: Assessment) -> Triage:
    """The desk's routing rule, in plain code."""
    queue = queue_for(assessment.category, assessment.urgency)
    return Triage(**assessment.model_dump(), queue=queue)


triage = (
    Workflow("triage", input_type=str, description="Classify a ticket, then route it by rule.")
    .then(classify)
    .then(route)
)

# The offline model (`--model scripted`): the desk's keyword triager stands in for the model.
offline_model = ScriptedModel(lambda request: assess(request.user_text()))
