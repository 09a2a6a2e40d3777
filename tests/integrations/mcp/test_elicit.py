"""A server's question in the middle of a call (MCP elicitation) is loopwise's durable
pause: the run waits ``awaiting_approval`` with the question and its schema, a person
answers through the CLI (checked against the schema when given), and ``resume`` — in
another process — makes the call again and sends the answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from loopwise.cli.main import main

ASKER = Path(__file__).resolve().with_name("_asker.py")

TARGET = """
import sys
import loopwise
from loopwise import mcp
from loopwise.testing import ScriptedModel, call, reply

asker = mcp.stdio(sys.executable, ASKER, env={"ASKER_LOG": LOG}, trust_annotations=True)
desk = loopwise.Agent(name="desk", tools=[asker], max_steps=4)


def _respond(request):
    done = [m["content"] for m in request.messages if m["role"] == "tool"]
    if not done:
        return call("delete_account", {"user": "bob"}, id="c1")
    return reply("done: " + done[-1])


def offline_model():
    return ScriptedModel(_respond)
"""


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _paused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, dict[str, Any]]:
    log = tmp_path / "asker.log"
    module = TARGET.replace("ASKER,", f"{str(ASKER)!r},").replace("LOG}", f"{str(log)!r}}}")
    (tmp_path / "desk.py").write_text(module)
    spec = f"{tmp_path / 'desk.py'}:desk"
    code, out, _ = _cli(capsys, "run", spec, "--model", "scripted", "--input", '"x"', "--json")
    paused = json.loads(out)
    assert code == 1 and paused["status"] == "awaiting_approval", paused
    (asked,) = json.loads(_cli(capsys, "pending", paused["run_id"], "--json")[1])
    return str(paused["run_id"]), asked


def test_a_servers_question_pauses_the_run_and_the_checked_answer_resumes_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    store_at: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOOPWISE_STORE", store_at)
    run_id, asked = _paused(tmp_path, capsys)
    assert asked["tool"] == "delete_account"
    assert "Why should the account of bob be deleted?" in asked["reason"]
    assert asked["answer_schema"]["required"] == ["reason", "notify"]
    assert not (tmp_path / "asker.log").exists()  # nothing deleted while it waits
    approval = asked["approval_id"]
    # Answers are checked against the question's schema when they are given.
    wrong = json.dumps({"reason": 5})
    code, _, err = _cli(capsys, "approve", run_id, "--approval", approval, "--args", wrong)
    assert code == 2 and "does not match the question's schema" in err
    code, _, err = _cli(capsys, "approve", run_id, "--approval", approval)
    assert code == 2 and "'reason' is a required property" in err
    answer = json.dumps({"reason": "asked by the owner", "notify": True})
    code, _, _ = _cli(capsys, "approve", run_id, "--approval", approval, "--args", answer)
    assert code == 0
    code, out, _ = _cli(capsys, "resume", run_id, "--json")
    done = json.loads(out)
    assert code == 0 and done["status"] == "completed", done
    assert done["output"] == "done: deleted bob"
    logged = (tmp_path / "asker.log").read_text().splitlines()
    assert logged == ["deleted bob: asked by the owner (notify=True)"]


def test_a_declined_question_is_the_servers_to_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id, asked = _paused(tmp_path, capsys)
    code, _, _ = _cli(
        capsys, "deny", run_id, "--approval", asked["approval_id"], "--reason", "not today"
    )
    assert code == 0
    code, out, _ = _cli(capsys, "resume", run_id, "--json")
    done = json.loads(out)
    assert done["status"] == "completed" and "decline" in done["output"]
    assert not (tmp_path / "asker.log").exists()


def test_the_inbox_takes_the_answer_as_an_edit_checked_against_the_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import http.client
    import re
    import threading
    from urllib.parse import urlencode

    from loopwise.serve.app import ServeSettings, make_server

    run_id, asked = _paused(tmp_path, capsys)
    server, _ = make_server(ServeSettings(port=0, by="lead", resume=True))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = int(server.server_address[1])

    def request(method: str, body: str | None = None, cookie: str = "") -> tuple[int, str, str]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded"}
        conn.request(method, "/" if body is None else "/decide", body=body, headers=headers)
        r = conn.getresponse()
        answer = (r.status, r.read().decode(), r.getheader("Set-Cookie") or "")
        conn.close()
        return answer

    try:
        _, page, set_cookie = request("GET")
        assert "Why should the account of bob be deleted?" in page  # the question, shown
        cookie = set_cookie.split(";", 1)[0]
        found = re.search(r"name='csrf' value='([0-9a-f]+)'", page)
        assert found
        form = {"csrf": found.group(1), "run_id": run_id, "approval_id": asked["approval_id"],
                "args_hash": asked["args_hash"], "decision": "approve"}  # fmt: skip
        status, page, _ = request("POST", urlencode({**form, "args": '{"reason": 1}'}), cookie)
        assert status == 400 and "does not match the question" in page
        answer = json.dumps({"reason": "the owner asked", "notify": False})
        assert request("POST", urlencode({**form, "args": answer}), cookie)[0] == 303
        server.app.wait_for_resumes()
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
        server.app.store.close()
    code, out, _ = _cli(capsys, "runs", "show", run_id, "--json")
    assert code == 0 and json.loads(out)["status"] == "completed"
    logged = (tmp_path / "asker.log").read_text().splitlines()
    assert logged == ["deleted bob: the owner asked (notify=False)"]


def test_an_in_code_handler_answers_the_question_and_a_wrong_answer_never_reaches_it(
    tmp_path: Path,
) -> None:
    import sys

    import loopwise
    from loopwise import mcp
    from loopwise.testing import ScriptedModel, call, reply

    log = tmp_path / "asker.log"
    asker = mcp.stdio(
        sys.executable, str(ASKER), env={"ASKER_LOG": str(log)}, trust_annotations=True
    )
    desk = loopwise.Agent(name="desk", tools=[asker], max_steps=3)
    for answer, logged in (({"reason": 3}, []), ({"reason": "r", "notify": True}, ["r"])):
        model = ScriptedModel([call("delete_account", {"user": "ann"}), reply("ok")])
        done = loopwise.run(
            desk,
            "x",
            model=model,
            store=None,
            approvals=lambda r, a=answer: loopwise.Edited(args=a),
        )
        assert done.status == "completed", done
        said = log.read_text().splitlines() if log.exists() else []
        assert [line.split(": ")[1].split(" (")[0] for line in said] == logged
