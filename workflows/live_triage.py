"""The triage cascade answering live tickets, the triage agent in its shadow on a tenth of
them: a certified decision that keeps checking itself.

    loopwise run workflows/live_triage.py:live \\
        --input '{"subject": "Charged twice", "body": "Two charges of $49 on March 3."}'

``live`` returns exactly what ``workflows/ticket_triage.py:cascade`` returns; for one run in
ten (decided from the run id) it also runs the triage agent on the same ticket, without
effects (its tools only read), and keeps the pair in the run store. Two triages agree when
they route a ticket alike (:func:`same_decision`): their summaries are prose and differ.
``loopwise check workflows/live_triage.py:live`` reads the pairs against the cascade's last
certificate; ``python workflows/live_triage.py [N] [--new-app]`` sends N tickets of the
dataset (default 400) through ``live`` offline, as live traffic would — with ``--new-app``
as they arrive once a new mobile app adds its own line to every ticket, which the agent
reads otherwise than the cascade's judge: traffic unlike the dataset the cascade was
certified on.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from ticket_triage import cascade, offline_model
from triage_agent import triage_agent  # agents/, which ticket_triage puts on the path

import loopwise

__all__ = ["live", "offline_model", "same_decision"]


def same_decision(output: Any, reference: Any) -> bool:
    """Whether two triages route a ticket alike: category, urgency and queue (the summary
    is free text). Also the eval's scorer on these pairs (``--scorer``)."""
    keys = ("category", "urgency", "queue")
    return all(output.get(k) == reference.get(k) for k in keys if k in reference)


agent = dataclasses.replace(triage_agent, name="agent")
"""The triage agent under a name of its own here: the cascade's unsure side is the agent too,
and the shadow's record sits beside the cascade's nodes."""

live = loopwise.Shadow("live", cascade, agent, share=0.1, agree=same_decision)
default_target = "live"

_TICKETS = Path(__file__).resolve().parent / "data" / "tickets.jsonl"


NEW_APP = " Sent from the new app: the page went wrong twice."
"""The line the new mobile app adds to every ticket (``--new-app``)."""


def main(runs: int = 400, *, new_app: bool = False) -> None:
    """Send ``runs`` tickets (the dataset's, round and round) through ``live`` offline."""
    tickets = [json.loads(line)["input"] for line in _TICKETS.read_text().splitlines() if line]
    if new_app:
        tickets = [{**t, "body": t["body"] + NEW_APP} for t in tickets]
    spec = f"{Path(__file__).resolve()}:live"
    for i in range(runs):
        result = loopwise.run(live, tickets[i % len(tickets)], model=offline_model, spec=spec)
        if result.status != "completed":
            raise SystemExit(f"run {result.run_id} ended {result.status}: {result.detail}")
    print(f"{runs} tickets answered by the cascade; the agent shadowed about one in ten")


if __name__ == "__main__":
    counts = [int(a) for a in sys.argv[1:] if a.isdigit()]
    main(counts[0] if counts else 400, new_app="--new-app" in sys.argv[1:])
