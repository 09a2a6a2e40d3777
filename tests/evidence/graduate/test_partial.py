"""`graduate --partial`: an agent whose runs take two known paths and an unknown tail gets a
cascade that routes the known paths to the generated workflow at a certified threshold and
the rest to the agent — where full graduation cannot pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import loopwise
from loopwise.cli.main import main
from loopwise.evidence.evals.bounds import clopper_pearson_upper
from loopwise.running.targets import load_target, model_for

AGENT = """
\"\"\"An agent whose runs take two known paths (alpha: look; beta: look then fetch) and an
unknown tail (gamma: its tools in varied orders).\"\"\"

from __future__ import annotations

from typing import Any

from loopwise import Agent, ModelRequest, tool
from loopwise.testing import ScriptedModel, calls, reply, scripted_judge


@tool
def look(text: str) -> dict[str, Any]:
    \"\"\"Look the request up. Call it first for alpha and beta requests.\"\"\"
    return {"kind": text.split()[0], "n": int(text.split()[-1])}


@tool
def fetch(text: str) -> dict[str, Any]:
    \"\"\"Fetch the record of the request. Call it after look for beta requests.\"\"\"
    return {"record": f"rec-{text.split()[-1]}"}


@tool
def note(text: str) -> str:
    \"\"\"Note the request. Call it for unusual requests.\"\"\"
    return "noted"


router = Agent(name="router", tools=[look, fetch, note], max_steps=6)

_GAMMA = [["fetch", "note"], ["note", "fetch"], ["note", "look"], ["fetch", "look"], ["note"]]


def _respond(request: ModelRequest) -> Any:
    question = request.user_text()
    done = [m for m in request.messages if m["role"] == "tool"]
    kind, n = question.split()[0], int(question.split()[-1])
    plan = {"alpha": ["look"], "beta": ["look", "fetch"]}.get(kind) or _GAMMA[n % len(_GAMMA)]
    if len(done) < len(plan):
        return calls((plan[len(done)], {"text": question}, f"c{len(done)}"))
    return reply(f"{kind} {n}: done after {len(done)} call(s)")


def offline_model() -> ScriptedModel:
    return ScriptedModel(_respond)


def _path(text: str) -> dict[str, Any]:
    kind = text.split()[0]
    if kind == "alpha":
        return {"path": {"p1": 0.97, "p2": 0.02, "none": 0.01}}
    if kind == "beta":
        return {"path": {"p2": 0.95, "p1": 0.03, "none": 0.02}}
    return {"path": {"none": 0.9, "p1": 0.05, "p2": 0.05}}


offline_path_judge = scripted_judge(_path)
"""


def test_partial_graduation_routes_the_known_paths_at_a_certified_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "router_agent.py").write_text(AGENT)
    spec = "router_agent.py:router"
    target = load_target(spec)
    model = model_for(target, "scripted")
    for i in range(400):  # 55% alpha, 30% beta, 15% gamma (five different paths)
        kind = "alpha" if i % 20 < 11 else "beta" if i % 20 < 17 else "gamma"
        done = loopwise.run(
            target.step, f"{kind} request {i}", model=model, store="runs.db", spec=spec
        )
        assert done.status == "completed", done.detail
    argv = ["graduate", spec, "--store", "runs.db", "--model", "scripted", "--partial"]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # full graduation cannot pass: the gamma tail is outside the mined paths
    assert doc["recommendation"] != "graduate" and doc["outside_mined_paths"] > 0.05
    partial = doc["partial"]
    certified = partial["certified"]
    assert certified is not None and partial["certified_references"] == "agent"
    n, k = certified["accepted"], certified["errors"]
    # the workflow's share: alpha and beta held-out cases, never a gamma one
    assert 0.7 < partial["share"] == certified["coverage"] < 0.95
    assert k == 0 and certified["error_bound"] == pytest.approx(
        clopper_pearson_upper(0, n, 0.9), abs=1e-6
    )
    assert certified["error_bound"] <= 0.05 and n >= 45
    written = Path(partial["out"]).read_text()
    assert f"THRESHOLD = {certified['threshold']!r}" in written
    # the cascade runs: a known path by the workflow, the tail by the agent
    cascade = load_target(partial["target"])
    run_model = model_for(cascade, "scripted")
    known = loopwise.run(cascade.step, "beta request 1003", model=run_model)
    tail = loopwise.run(cascade.step, "gamma request 1019", model=run_model)
    assert known.status == tail.status == "completed"
    assert known.output == "beta 1003: done after 2 call(s)"
    assert tail.output == "gamma 1019: done after 1 call(s)"


def test_partial_without_a_workflow_or_with_a_dataset_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "router_agent.py").write_text(AGENT)
    (tmp_path / "d.jsonl").write_text('{"input": "alpha request 1", "expected": "x"}\n')
    argv = ["graduate", "router_agent.py:router", "--store", "runs.db", "--partial"]
    assert main([*argv, "--dataset", "d.jsonl"]) == 2
    assert "--partial certifies on the held-out runs" in capsys.readouterr().err
    assert main([*argv, "--max-error", "2"]) == 2
    assert "--max-error 2.0" in capsys.readouterr().err
