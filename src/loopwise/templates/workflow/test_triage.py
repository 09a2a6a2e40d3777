"""The triage workflow, offline: the test runs it with its own offline model, as `pytest`
runs it in CI, with no model, no key and no network."""

from __future__ import annotations

from triage import Triage, offline_model, triage

import loopwise


def test_a_double_charge_goes_to_billing_and_fraud_escalates() -> None:
    charged = loopwise.run(
        triage, "I was charged twice for my order.", model=offline_model, store=None
    )
    assert charged.status == "completed"
    assert isinstance(charged.output, Triage)
    assert (charged.output.category, charged.output.queue) == ("billing", "billing")
    fraud = loopwise.run(
        triage, "Fraud: someone used my card here.", model=offline_model, store=None
    )
    assert (fraud.output.urgency, fraud.output.queue) == (5, "escalations")
