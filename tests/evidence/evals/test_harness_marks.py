"""Eval runs are marked in the store and kept out of what people and workers act on:
``pending``, the inbox and the workers' queue skip them even in a store shared with real
runs; ``runs list`` shows the mark."""

from __future__ import annotations

import http.client
import json
import threading
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise import EvalTarget, Status
from loopwise.cli.main import main
from loopwise.evidence.evals.dataset import Case
from loopwise.serve.app import ServeSettings, make_server
from loopwise.store.open import open_store
from loopwise.testing import ScriptedModel, call, reply
from loopwise.tools.gates import human

PAID: list[int] = []


@loopwise.tool(effect="irreversible", gate=human())
def pay(amount_cents: int) -> str:
    """Pay money back."""
    PAID.append(amount_cents)
    return "paid"


def _model() -> ScriptedModel:
    def respond(request: loopwise.ModelRequest) -> Any:
        if request.tool_results():
            return reply("paid")
        return call("pay", {"amount_cents": 500})

    return ScriptedModel(respond)


AGENT = loopwise.Agent(name="payer", tools=[pay])


def _inbox(store: str) -> str:
    server, _ = make_server(ServeSettings(port=0, store=store))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
        conn.request("GET", "/")
        page = conn.getresponse().read().decode()
        conn.close()
        return page
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
        server.app.store.close()


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_eval_runs_are_marked_and_kept_out_of_pending_the_inbox_and_the_queue(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    where = (
        str(tmp_path / "shared.db") if backend == "sqlite" else request.getfixturevalue("pg_url")
    )
    # A real run waiting for a person, and an eval's run waiting the same way (an eval in
    # Python with no gate rule of its own), in one store.
    real = loopwise.run(AGENT, "refund O-1", model=_model(), store=where)
    assert real.status is Status.AWAITING_APPROVAL
    target = EvalTarget(name="payer", step=AGENT, model=_model())
    report = loopwise.evaluate([target], [Case(id="1", input="refund O-2")], store=where)
    (measured,) = report.targets[0].runs
    assert measured.status == "awaiting_approval"
    with open_store(where) as st:
        stored = st.get_run(measured.run_id)
        assert stored.eval_id == report.eval_id and st.get_run(real.run_id).eval_id is None
        assert [a.run_id for a in st.pending()] == [real.run_id]
        assert len(st.pending(measured.run_id)) == 1  # asked by its id, it is there
    out = _cli(capsys, "pending", "--json", "--store", where)
    assert [a["run_id"] for a in json.loads(out)] == [real.run_id]
    page = _inbox(where)
    assert real.run_id in page and measured.run_id not in page
    table = _cli(capsys, "runs", "list", "--store", where)
    (line,) = [x for x in table.splitlines() if x.startswith(measured.run_id)]
    assert f"eval {report.eval_id}" in line
    (line,) = [x for x in table.splitlines() if x.startswith(real.run_id)]
    assert "eval" not in line
    # Both approved: a worker resumes the real run, never the eval's.
    loopwise.approve(real.run_id, store=where, by="lead")
    loopwise.approve(measured.run_id, store=where, by="lead")
    with open_store(where) as st:
        claimed = st.claim_next("worker-1")
        assert claimed is not None and claimed.run_id == real.run_id
        assert st.claim_next("worker-2") is None
