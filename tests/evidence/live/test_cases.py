"""People's decisions are labels (issue 41): each pick a person makes for a cascade's
AskPerson (approved as suggested, or edited) is kept as a labelled live case of the run's
target, once per run, and ``loopwise eval --from-store`` evaluates and re-certifies on them."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise.cli.main import main
from loopwise.running.targets import load_target

DESK = textwrap.dedent(
    """
    import loopwise
    from loopwise import AskPerson, Cascade, Judge, Ruling
    from loopwise.testing import ScriptedModel

    TRUTH = {f"ticket {i}": ("bug" if i % 3 else "refund") for i in range(12)}


    @loopwise.step
    def answer(ruling: Ruling) -> dict[str, str]:
        return {"kind": str(ruling.answer)}


    desk = Cascade("desk", Judge("kind", ["refund", "bug", "other"]), sure=answer,
                   unsure=AskPerson(), threshold=0.9)


    def _respond(request):
        text = request.user_text()
        right = TRUTH.get(text, "other")
        wrong = "other" if right != "other" else "bug"
        # the judge leans to the right label (0.8) on all but ticket 0, unsure of each
        top = wrong if text == "ticket 0" else right
        return {"kind": {top: 0.8, "other" if top != "other" else "refund": 0.1}}


    def offline_model():
        return ScriptedModel(_respond)
    """
)


@pytest.fixture
def desk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    (tmp_path / "desk.py").write_text(DESK)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LOOPWISE_STORE", str(tmp_path / "runs.db"))
    monkeypatch.setenv("LOOPWISE_EVAL_STORE", str(tmp_path / "eval.db"))
    return load_target("desk.py:desk").module


def _live_traffic(desk: Any) -> list[str]:
    """Every ticket pauses for a person (the judge is unsure of all), who picks the true
    label: as suggested where the judge was right, edited where it was not."""
    spec = str(Path("desk.py").resolve()) + ":desk"
    run_ids = []
    for text, truth in desk.TRUTH.items():
        paused = loopwise.run(desk.desk, text, model=desk.offline_model(), spec=spec)
        assert paused.status == "awaiting_approval"
        (pending,) = paused.pending
        edit = None if pending["args"] == {"kind": truth} else {"kind": truth}
        loopwise.approve(paused.run_id, by="maria", args=edit)
        done = loopwise.resume(paused.run_id, step=desk.desk, model=desk.offline_model())
        assert (done.status, done.output) == ("completed", {"kind": truth})
        run_ids.append(done.run_id)
    return run_ids


def test_every_pick_is_a_labelled_case_kept_once(desk: Any) -> None:
    run_ids = _live_traffic(desk)
    loopwise.resume(run_ids[0], step=desk.desk, model=desk.offline_model())  # a no-op
    with loopwise.open_store(Path("runs.db")) as store:
        cases = store.live_cases([str(Path("desk.py").resolve()) + ":desk"], kind="person")
    assert len(cases) == 12
    by_input = {c.input: c for c in cases}
    edited = by_input["ticket 0"]  # the judge was wrong: the person edited its answer
    assert (edited.status, edited.agree) == ("edited", False)
    assert (edited.output, edited.reference) == ({"kind": "other"}, {"kind": "refund"})
    kept = by_input["ticket 1"]
    assert (kept.status, kept.agree, kept.reference) == ("approved", True, {"kind": "bug"})
    assert kept.step == "desk/ask_person/label"


def test_eval_from_store_recertifies_on_peoples_labels(
    desk: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _live_traffic(desk)
    argv = ["eval", "desk.py:desk", "--from-store", "--model", "scripted", "--json"]
    # the sweep models the person (they pick right); the certificate is the sure side's
    assert main([*argv, "--sweep", "--max-error", "0.3", "--person-accuracy", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cases"] == 12 and doc["dataset"] == "live:desk.py:desk"
    (swept,) = doc["sweeps"]
    certified = swept["certified"]
    # at a threshold below the judge's 0.8 every case is accepted: 11 of 12 right
    assert certified is not None and (certified["accepted"], certified["errors"]) == (12, 1)


def test_from_store_needs_labelled_cases_and_excludes_a_dataset(
    desk: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["eval", "desk.py:desk", "--model", "scripted"]
    assert main([*argv, "--from-store"]) == 2
    assert "--from-store: no run store" in capsys.readouterr().err
    _live_traffic(desk)
    assert main([*argv, "--from-store", "desk.py:other"]) == 2
    assert "no labelled live case of desk.py:other" in capsys.readouterr().err
    assert main([*argv, "--from-store", "--dataset", "d.jsonl"]) == 2
    assert "--dataset FILE.jsonl or --from-store" in capsys.readouterr().err
    assert main(argv) == 2


def test_a_pick_made_in_the_inbox_is_a_labelled_case(desk: Any) -> None:
    import threading

    from loopwise.serve.app import ServeSettings, make_server
    from tests.serve.test_app import Client

    spec = str(Path("desk.py").resolve()) + ":desk"
    paused = loopwise.run(desk.desk, "ticket 0", model=desk.offline_model(), spec=spec)
    (pending,) = paused.pending
    server, _ = make_server(ServeSettings(port=0, by="maria"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = Client(port=server.server_address[1])
        answer = client.decide(
            run_id=paused.run_id,
            approval_id=pending["approval_id"],
            decision="approve",
            args=json.dumps({"kind": "refund"}),
        )
        assert answer.status == 303, answer.body
    finally:
        server.shutdown()
        thread.join()
        server.app.wait_for_resumes()
        server.server_close()
        server.app.store.close()
    done = loopwise.resume(paused.run_id, step=desk.desk, model=desk.offline_model())
    assert done.output == {"kind": "refund"}
    with loopwise.open_store(Path("runs.db")) as store:
        (case,) = store.live_cases([spec], kind="person")
    assert (case.input, case.reference, case.status) == ("ticket 0", {"kind": "refund"}, "edited")
