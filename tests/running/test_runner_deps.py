"""Typed per-run dependencies (issue 18): `deps=` reaches steps, tools, policies and
offline models through the context, is never stored, comes back on a resume in another
process from the target module's `make_deps()` or `--deps`, and a run that needs deps and
has none ends `error` saying how to give them."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import loopwise
from loopwise import Context, ModelRequest, Turn
from loopwise.cli.main import main
from loopwise.evidence.evals.dataset import Case
from loopwise.evidence.evals.harness import EvalTarget
from loopwise.testing import ScriptedModel, call, reply
from loopwise.tools.gates import policy_then_human


@dataclass
class Ledger:
    """What a run needs from outside: an account, a limit, where payments go."""

    account: str
    limit: int
    token: str = "s3cret-token"
    paid: list[int] = field(default_factory=list)


def _within_limit(args: dict[str, Any], ctx: Context[Ledger]) -> bool | str:
    return True if args["amount"] <= ctx.deps.limit else f"over {ctx.deps.limit}"


@loopwise.tool(effect="irreversible", gate=policy_then_human(_within_limit))
def pay(amount: int, ctx: Context[Ledger]) -> str:
    """Pay an amount from the run's account. Use it when the customer is owed money."""
    ctx.deps.paid.append(amount)
    return f"paid {amount} from {ctx.deps.account}"


def _respond(request: ModelRequest) -> Turn:
    # An offline model sees the deps too: it pays what the ledger allows.
    done = [m["content"] for m in request.messages if m["role"] == "tool"]
    return reply(done[-1]) if done else call("pay", {"amount": request.deps.limit}, id="p1")


payer = loopwise.Agent(name="payer", tools=[pay])


def test_deps_reach_tools_policies_and_offline_models_and_are_never_stored(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ledger = Ledger(account="ACME-7", limit=40)
    result = loopwise.run(payer, "pay them", model=ScriptedModel(_respond), deps=ledger)
    assert result.status == "completed" and result.output == "paid 40 from ACME-7"
    assert ledger.paid == [40]
    assert main(["runs", "show", result.run_id, "--json"]) == 0
    stored = capsys.readouterr().out
    assert "ACME-7" in stored  # the tool's result names it...
    assert "s3cret-token" not in stored and "Ledger(" not in stored  # ...the deps are not kept


def test_a_policy_judges_with_the_runs_deps() -> None:
    strict = Ledger(account="A", limit=10)
    model = ScriptedModel([call("pay", {"amount": 25}, id="p1"), reply("could not pay")])
    result = loopwise.run(payer, "pay 25", model=model, deps=strict, store=None)
    assert result.status == "completed" and strict.paid == []
    denied = [e for e in result.events if e.type == "tool_result" and e.data["is_error"]]
    assert "over 10" in denied[0].data["content"]


def test_a_run_that_needs_deps_and_has_none_ends_error_saying_how_to_give_them() -> None:
    result = loopwise.run(payer, "pay", model=ScriptedModel(_respond), store=None)
    assert result.status == "error"
    assert "no deps" in (result.detail or "") and "deps=" in (result.detail or "")
    assert "AttributeError" not in (result.detail or "")

    @loopwise.step
    async def balance(account: str, ctx: Context[Ledger]) -> int:
        return ctx.deps.limit if ctx.has_deps else -1

    assert loopwise.run(balance, "x", store=None).output == -1
    assert loopwise.run(balance, "x", store=None, deps=Ledger("B", 3)).output == 3


def test_astream_and_evaluate_take_deps() -> None:
    ledger = Ledger(account="S", limit=5)

    async def watch() -> tuple[list[str], Any]:
        stream = loopwise.astream(
            payer, "pay", model=ScriptedModel(_respond), deps=ledger, store=None
        )
        return [str(event.type) async for event in stream], stream.result

    types, result = asyncio.run(watch())
    assert "tool_result" in types and result.status == "completed"
    cases = [Case(id="c1", input="pay", expected="paid 5 from S")]
    target = EvalTarget(name="payer", step=payer, model=ScriptedModel(_respond))
    report = loopwise.evaluate([target], cases, deps=ledger)
    assert report.targets[0].correct_rate == 1.0 and ledger.paid == [5, 5]


DESK = '''
import loopwise
from loopwise import Context, gates
from loopwise.testing import ScriptedModel, call, reply

OPENED = []


class Bank:
    def __init__(self, name):
        self.name = name
        OPENED.append(name)


@loopwise.tool(effect="irreversible", gate=gates.human())
def transfer(amount: int, ctx: Context[Bank]) -> str:
    """Transfer an amount. Use it when the customer is owed money."""
    return f"sent {amount} via {ctx.deps.name}"


def _respond(request):
    done = [m["content"] for m in request.messages if m["role"] == "tool"]
    return reply(done[-1]) if done else call("transfer", {"amount": 7}, id="t1")


desk = loopwise.Agent(name="desk", tools=[transfer])


def make_deps():
    return Bank("module bank")


def other_bank():
    return Bank("other bank")


def offline_model():
    return ScriptedModel(_respond)
'''


def test_the_cli_makes_deps_with_make_deps_or_deps_on_run_and_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = tmp_path / "desk.py"
    module.write_text(DESK)
    target = f"{module}:desk"

    def cli(*argv: str) -> Any:
        capsys.readouterr()
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, (json.loads(out) if "--json" in argv else out), err

    code, paused, _ = cli("run", target, "--model", "scripted", "--input-text", "go", "--json")
    assert paused["status"] == "awaiting_approval"
    assert main(["approve", paused["run_id"]]) == 0
    code, done, _ = cli("resume", paused["run_id"], "--json")
    assert code == 0 and done["output"] == "sent 7 via module bank"

    code, paused, _ = cli("run", target, "--model", "scripted", "--input", '"go"', "--json")
    assert main(["approve", paused["run_id"]]) == 0
    code, done, _ = cli("resume", paused["run_id"], "--deps", f"{module}:other_bank", "--json")
    assert code == 0 and done["output"] == "sent 7 via other bank"

    code, _, err = cli("run", target, "--model", "scripted", "--input", '"go"', "--deps", "x")
    assert code == 2 and "--deps 'x': name a function" in err
    argv = ("run", target, "--model", "scripted", "--input", '"go"', "--queue")
    code, _, err = cli(*argv, "--deps", f"{module}:other_bank")
    assert code == 2 and "make_deps()" in err


def test_eval_makes_fresh_deps_per_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = tmp_path / "counted.py"
    module.write_text(
        "import itertools\nimport loopwise\nfrom loopwise import Context\n\n"
        "_made = itertools.count(1)\n\n"
        "def make_deps():\n    return {'n': next(_made)}\n\n"
        "@loopwise.step\nasync def which(x: str, ctx: Context[dict]) -> int:\n"
        "    return ctx.deps['n']\n"
    )
    data = tmp_path / "cases.jsonl"
    data.write_text(
        "".join(f'{{"input": "{c}", "expected": {n}}}\n' for n, c in enumerate("abc", 1))
    )
    argv = ["eval", f"{module}:which", "--dataset", str(data), "--concurrency", "1", "--json"]
    assert main(argv) == 0
    (measured,) = json.loads(capsys.readouterr().out)["targets"]
    assert measured["correct_rate"] == 1.0  # runs 1, 2 and 3 each made their own


def test_a_worker_makes_deps_with_make_deps(tmp_path: Path) -> None:
    from loopwise.running.live import owner_id
    from loopwise.running.runner import execute_claimed

    module = tmp_path / "desk.py"
    module.write_text(DESK)
    store = str(tmp_path / "runs.db")
    run_id = loopwise.enqueue(f"{module}:desk", "go", model="scripted", store=store)
    with loopwise.open_store(store) as st:
        row = st.claim_next(owner_id())
        assert row is not None and row.run_id == run_id
        paused = asyncio.run(execute_claimed(st, row))
        assert paused.status == "awaiting_approval"
        st.decide(run_id, "t1", decision="approved", by="alice")
    done = loopwise.resume(run_id, store=store)
    assert done.status == "completed" and done.output == "sent 7 via module bank"


def test_a_worker_whose_make_deps_fails_records_the_run_error(tmp_path: Path) -> None:
    from loopwise.running.live import owner_id
    from loopwise.running.runner import execute_claimed

    module = tmp_path / "broken.py"
    module.write_text(
        "import loopwise\n\n"
        "@loopwise.step\n"
        "async def echo(text: str) -> str:\n"
        "    return text\n\n"
        "def make_deps():\n"
        "    raise RuntimeError('ledger is down')\n"
    )
    store = str(tmp_path / "runs.db")
    run_id = loopwise.enqueue(f"{module}:echo", "go", store=store)
    with loopwise.open_store(store) as st:
        row = st.claim_next(owner_id())
        assert row is not None and row.run_id == run_id
        with pytest.raises(loopwise.ConfigError, match="ledger is down"):
            asyncio.run(execute_claimed(st, row))
        # Not left `running` under this worker's name (no worker would take it again).
        failed = st.get_run(run_id)
        assert failed.status == "error" and "ledger is down" in (failed.detail or "")
