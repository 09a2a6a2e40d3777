"""An eval's run resumed by id never gets the real deps: it is resumed on the module's
``make_eval_deps()`` sandbox, or refused (one line, exit 2) when the module has none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import loopwise
from loopwise.cli.main import main
from loopwise.running.targets import load_target

MODULE = '''
import loopwise
from loopwise.testing import ScriptedModel, call, reply
from loopwise.tools.gates import human

REAL: list[int] = []
SANDBOX: list[int] = []


@loopwise.tool(effect="irreversible", gate=human())
def pay(ctx: loopwise.Context, amount_cents: int) -> str:
    """Pay money back."""
    ctx.deps.append(amount_cents)
    return "paid"


def _respond(request):
    return reply("paid") if request.tool_results() else call("pay", {"amount_cents": 500})


offline_model = ScriptedModel(_respond)
payer = loopwise.Agent(name="payer", tools=[pay])


def make_deps():
    return REAL


def scratch():
    return SANDBOX
'''


def _paused_eval_run(tmp_path: Path, source: str) -> tuple[str, str, object]:
    path = tmp_path / "desk.py"
    path.write_text(source)
    spec, db = f"{path}:payer", str(tmp_path / "eval.db")
    target = load_target(spec)
    paused = loopwise.run(
        target.step,
        "refund",
        model=target.module.offline_model,
        store=db,
        spec=spec,
        eval_id="e1",
        deps=target.module.SANDBOX,
    )
    assert paused.status == "awaiting_approval"
    loopwise.approve(paused.run_id, store=db, by="lead")
    return paused.run_id, db, target.module


def test_an_eval_run_resumes_on_its_sandbox_not_the_real_deps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = MODULE + "\n\ndef make_eval_deps():\n    return SANDBOX\n"
    run_id, db, module = _paused_eval_run(tmp_path, source)
    code = main(["resume", run_id, "--store", db, "--model", "scripted", "--json"])
    assert code == 0, capsys.readouterr()
    assert json.loads(capsys.readouterr().out)["status"] == "completed"
    assert (module.REAL, module.SANDBOX) == ([], [500])


def test_an_eval_run_without_a_sandbox_is_not_resumed_on_the_real_deps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id, db, module = _paused_eval_run(tmp_path, MODULE)
    code = main(["resume", run_id, "--store", db, "--model", "scripted"])
    err = capsys.readouterr().err
    assert code == 2 and "make_eval_deps" in err and run_id in err
    assert len(err.strip().splitlines()) == 1
    assert module.REAL == []
    deps = f"{tmp_path / 'desk.py'}:scratch"  # nothing lost: given its deps, it goes on
    assert main(["resume", run_id, "--store", db, "--model", "scripted", "--deps", deps]) == 0
    assert (module.REAL, module.SANDBOX) == ([], [500])


def test_an_eval_run_resumes_on_a_throwaway_sandbox_left_when_the_run_ends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = MODULE + (
        "\n\nimport contextlib\nLEFT: list[str] = []\n\n"
        "@contextlib.contextmanager\ndef make_eval_deps():\n"
        "    yield SANDBOX\n    LEFT.append('left')\n"
    )
    run_id, db, module = _paused_eval_run(tmp_path, source)
    code = main(["resume", run_id, "--store", db, "--model", "scripted", "--json"])
    assert code == 0, capsys.readouterr()
    assert json.loads(capsys.readouterr().out)["status"] == "completed"
    assert (module.REAL, module.SANDBOX, module.LEFT) == ([], [500], ["left"])
