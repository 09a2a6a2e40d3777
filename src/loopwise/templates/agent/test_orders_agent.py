"""The order-investigation agent, offline: its own offline model, no key, no network."""

from __future__ import annotations

from orders_agent import Findings, investigate, make_deps, offline_model

import loopwise


def test_the_agent_finds_the_failed_orders_and_why() -> None:
    result = loopwise.run(
        investigate,
        "Why did customer C-1004's orders fail?",
        model=offline_model,
        deps=make_deps(),
        store=None,
    )
    assert result.status == "completed"
    assert isinstance(result.output, Findings)
    assert result.output.failed_orders == ["O-2007", "O-2008", "O-2009"]
    assert "do_not_honor" in result.output.summary
    assert result.usage.tool_calls == 5  # customer, orders, then three payments at once
