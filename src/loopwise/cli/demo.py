"""``make demo``: the main job — the canonical examples and the workflow-vs-agent eval.

It runs the ``loopwise`` command itself, one subprocess per step, and prints each
command before a short account of what happened (status, usage, the pending gate and
its approval, the eval's recommendation), then writes ``report.html``::

    python -m loopwise.cli.demo [--root DIR] [--store PATH] [--report PATH]

The model: ``LOOPWISE_MODEL`` (with ``OPENAI_API_KEY``/``OPENAI_BASE_URL``) is used
unchanged; a key or base URL with no model name runs ``gpt-4o-mini``; with nothing
configured every command gets ``--model scripted`` (the built-in offline model) and the
demo says so. Runs go to their own store (``.loopwise/demo.db``, emptied first) and
the examples' shop to its own database (``.loopwise/demo-shop.db``, rebuilt), so a rerun
starts clean.

It needs the canonical examples (``workflows/``, ``agents/``) under ``--root``: a checkout,
or a folder where ``loopwise init examples`` wrote them; without them it says so, points at
``loopwise init examples``, and exits 2 before running anything. Exit code 0 when every
part ran and did what it should (offline the statuses are known exactly: a step that ends
otherwise fails the demo; with a real model a status other than ``completed`` is reported,
not failed); 1 otherwise — a part that was skipped fails it too.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loopwise.core.jsontypes import (
    JSONMapping,
    JSONObject,
    JSONValue,
    json_list,
    json_number,
    json_object,
    json_str,
)
from loopwise.core.names import counted

__all__ = ["main", "model_choice"]

DEFAULT_REAL_MODEL = "gpt-4o-mini"
TICKET = {
    "subject": "Charged twice for my order",
    "body": "Hi, my card was charged twice for order O-1001 yesterday. Please refund one.",
}
QUESTION = "Why did customer C-1004's last three orders fail?"
FOLLOW_UP = "And what should we tell her about the first one?"
CONVERSATION = "demo-c-1004"
COMPLAINT = "Order O-1003 arrived broken and I want my money back."
TRIAGE = "workflows/ticket_triage.py:triage"
INVESTIGATE = "agents/order_investigation.py:investigate"
REFUND_DESK = "workflows/refund_desk.py:refund_desk"
TRIAGE_AGENT = "agents/triage_agent.py:triage_agent"
CASCADE = "workflows/ticket_triage.py:cascade"
DATASET = "workflows/data/tickets.jsonl"


@dataclass
class Outcome:
    """One finished ``loopwise`` command."""

    code: int
    stdout: str
    stderr: str

    @property
    def data(self) -> JSONValue:
        """The ``--json`` document (``None`` when stdout is not one)."""
        try:
            document: JSONValue = json.loads(self.stdout)
        except ValueError:
            return None
        return document

    @property
    def unavailable(self) -> bool:
        """The verb has not landed yet."""
        return self.code == 2 and "not available yet" in self.stderr


@dataclass
class Demo:
    """The demo's settings and what went wrong so far."""

    root: Path
    model_args: list[str]
    scripted: bool
    env: dict[str, str]
    failures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def cli(self, *args: str) -> Outcome:
        """Run ``loopwise ARGS`` in :attr:`root`, printing the command first."""
        print(f"   $ loopwise {shlex.join(args)}", flush=True)
        done = subprocess.run(
            [sys.executable, "-m", "loopwise.cli.main", *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        return Outcome(done.returncode, done.stdout, done.stderr)

    def present(self, target: str, what: str) -> bool:
        """Whether ``target``'s file exists; says so and records a skip when not."""
        if (self.root / target.split(":", maxsplit=1)[0]).is_file():
            return True
        self.skip(what, f"{target.split(':', maxsplit=1)[0]} is not there yet")
        return False

    def skip(self, what: str, why: str) -> None:
        """Record and print a skipped part."""
        self.skipped.append(what)
        print(f"   skipped: {what} — {why}")

    def expect(self, what: str, got: str | None, wanted: str) -> bool:
        """Check a status: offline it must be ``wanted``; with a real model it is reported."""
        if got == wanted:
            return True
        if self.scripted or got is None:
            self.failures.append(f"{what}: {got or 'no result'} (expected {wanted})")
            print(f"   FAILED: {what} ended {got or 'with no result'}, expected {wanted}")
        else:
            print(f"   note: {what} ended {got} with this model (offline it is {wanted})")
        return False


def model_choice(env: dict[str, str]) -> tuple[list[str], bool, str]:
    """Which model the demo runs with, from ``env``: ``(--model args, offline?, the line
    that says which model runs)``."""
    name = env.get("LOOPWISE_MODEL", "")
    if name == "scripted":
        return [], True, "LOOPWISE_MODEL=scripted: the built-in offline scripted model"
    if name:
        where = env.get("OPENAI_BASE_URL") or "the OpenAI API"
        return [], False, f"{name} at {where} (from LOOPWISE_MODEL), unchanged"
    if env.get("OPENAI_API_KEY") or env.get("OPENAI_BASE_URL"):
        where = env.get("OPENAI_BASE_URL") or "the OpenAI API"
        line = f"{DEFAULT_REAL_MODEL} at {where} (set LOOPWISE_MODEL to choose another)"
        return ["--model", DEFAULT_REAL_MODEL], False, line
    line = (
        "NONE CONFIGURED, so every command runs OFFLINE with `--model scripted` — the\n"
        "          built-in scripted model (schema-valid answers; each example's own offline\n"
        "          script). Nothing below is a real model's answer. To use one, set\n"
        "          OPENAI_API_KEY (and OPENAI_BASE_URL, LOOPWISE_MODEL) and run `make demo` again."
    )
    return ["--model", "scripted"], True, line


def _usage_line(result: JSONMapping) -> str:
    u = json_object(result.get("usage"))
    cost = u.get("cost_usd")
    price = "cost unknown" if cost is None else f"${cost:.6f}"
    return (
        f"usage: {counted(int(json_number(u.get('model_calls'))), 'model call')}, "
        f"{counted(int(json_number(u.get('tool_calls'))), 'tool call')}, "
        f"{u.get('total_tokens', 0)} tokens, {price}, {u.get('wall_seconds', 0):.2f}s"
    )


def _report_run(demo: Demo, what: str, outcome: Outcome, wanted: str) -> JSONObject | None:
    """Print a run's status and usage; check the status; return the result document."""
    if outcome.unavailable:
        demo.skip(what, "`loopwise run` is not available yet")
        return None
    data = outcome.data
    result = data if isinstance(data, dict) else None
    if result is None:
        line = (outcome.stderr.strip().splitlines() or ["no output"])[-1]
        demo.failures.append(f"{what}: exit {outcome.code}: {line}")
        print(f"   FAILED: exit {outcome.code}: {line}")
        return None
    detail = f" — {result['detail']}" if result.get("detail") else ""
    print(f"   → {result.get('status')}{detail}  (run {result.get('run_id')})")
    print(f"     {_usage_line(result)}")
    demo.expect(what, json_str(result.get("status")), wanted)
    return result


def _completed_output(result: JSONMapping | None) -> JSONValue:
    """A run's output when it completed (a stopped run's partial output is not shown)."""
    return (result or {}).get("output") if (result or {}).get("status") == "completed" else None


def _run(demo: Demo, target: str, payload: object, *extra: str) -> Outcome:
    return demo.cli(
        "run", target, "--input", json.dumps(payload), *extra, *demo.model_args, "--json"
    )


def triage_workflow(demo: Demo) -> None:
    """The ticket-triage workflow: one structured call, then routing code."""
    print("\n1. Ticket triage — a WORKFLOW: one structured-output call + plain routing code")
    output = _triage(demo, TRIAGE, "ticket triage")
    if output is not None:
        print(f"     summary: {output.get('summary')}")


def _triage(demo: Demo, target: str, name: str) -> JSONObject | None:
    """Run one triage target on the ticket and print its routing; its output, if any."""
    if not demo.present(target, name):
        return None
    result = _report_run(demo, name, _run(demo, target, TICKET), "completed")
    output = _completed_output(result)
    if not isinstance(output, dict):
        return None
    fields = ", ".join(f"{k}={output.get(k)!r}" for k in ("category", "urgency", "queue"))
    print(f"     output: {fields}")
    return output


def investigation_agent(demo: Demo) -> None:
    """The order-investigation agent: read-only tools over the shop database."""
    print("\n2. Order investigation — an AGENT: model + read-only tools + a guarded loop")
    if not demo.present(INVESTIGATE, "order investigation"):
        return
    asked = _run(demo, INVESTIGATE, QUESTION, "--conversation", CONVERSATION)
    result = _report_run(demo, "order investigation", asked, "completed")
    if result is not None:
        print(f"     steps: {result.get('steps')}; answer:")
        _print_answer(result)
        follow_up(demo, result)


def _print_answer(result: JSONMapping) -> None:
    answer = result.get("output")
    text = answer if isinstance(answer, str) else json.dumps(answer)
    for line in str(text).splitlines()[:8]:
        print(f"       {line}")


_ORDER_ID = re.compile(r"\bO-\d{4}\b")


def follow_up(demo: Demo, first: JSONMapping) -> None:
    """A second message in the same conversation: its answer should rest on what the
    first run found (offline: the order ids of the first answer, and no new tool call)."""
    print("   A follow-up in the same conversation: the agent is sent the first exchange")
    asked = _run(demo, INVESTIGATE, FOLLOW_UP, "--conversation", CONVERSATION)
    result = _report_run(demo, "follow-up question", asked, "completed")
    if result is None:
        return
    _print_answer(result)
    found = set(_ORDER_ID.findall(str(first.get("output"))))
    cited = sorted(found & set(_ORDER_ID.findall(str(result.get("output")))))
    tools = int(json_number(json_object(result.get("usage")).get("tool_calls")))
    if cited:
        print(
            f"     used the earlier findings: cites {', '.join(cited)} from the first answer, "
            f"with {counted(tools, 'new tool call')}"
        )
    elif demo.scripted:
        demo.failures.append("follow-up question: the answer cites no order of the first")
        print("   FAILED: the follow-up answer cites no order the first answer found")
    else:
        print("   note: the follow-up answer cites no order id of the first answer")


def refund_desk(demo: Demo) -> None:
    """The refund desk: propose, pause at the human gates, approve, resume."""
    print("\n3. Refund desk — a HYBRID: the model proposes a plan, a workflow executes it,")
    print("   refunds and customer mails wait behind human gates")
    if not demo.present(REFUND_DESK, "refund desk"):
        return
    first = _report_run(
        demo, "refund desk (first run)", _run(demo, REFUND_DESK, COMPLAINT), "awaiting_approval"
    )
    if first is None:
        return
    _print_plan(first.get("output"))
    if first.get("status") != "awaiting_approval":
        return
    run_id = str(first["run_id"])
    _show_inbox(demo)
    if _approve_all(demo, run_id):
        _resume(demo, run_id)


def _show_inbox(demo: Demo) -> None:
    """Serve the approvals inbox for a moment and keep its page in a file (with its
    stylesheet inlined, so it opens from disk)."""
    store = demo.env["LOOPWISE_STORE"]
    page = Path(store).with_name("inbox.html")
    print("   → the same approvals in the browser, decided by a person:")
    print(f"   $ loopwise serve --store {shlex.quote(store)}   # then open http://127.0.0.1:8765")
    with subprocess.Popen(
        [sys.executable, "-m", "loopwise.cli.main", "serve", "--store", store, "--port", "0"],
        cwd=demo.root,
        env=demo.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as server:
        try:
            first = server.stdout.readline() if server.stdout else ""
            if not first.startswith("serving http://"):
                demo.failures.append("loopwise serve printed no `serving` line")
                print("   FAILED: loopwise serve did not start")
                return
            url = first.split()[1]
            html = _fetch(f"{url}/").replace(
                "<link rel='stylesheet' href='/static/inbox.css'>",
                f"<style>{_fetch(f'{url}/static/inbox.css')}</style>",
            )
        finally:
            server.terminate()
    page.write_text(html, encoding="utf-8")
    print(f"   → the inbox page as it looked, rendered once: {page}")


def _fetch(url: str) -> str:
    # The server this demo just started, on 127.0.0.1.
    with urllib.request.urlopen(url, timeout=30) as answer:
        return str(answer.read().decode("utf-8"))


def _print_plan(output: JSONValue) -> None:
    steps = json_list(json_object(json_object(output).get("plan")).get("steps"))
    for step in map(json_object, steps):
        args = json.dumps(step.get("args"))
        args = args if len(args) <= 70 else args[:67] + "..."
        print(f"     plan {step.get('id')}: {step.get('action')}({args})")


def _approve_all(demo: Demo, run_id: str) -> bool:
    """List the pending gates and approve each one by its id."""
    pending = demo.cli("pending", "--json")
    if pending.unavailable:
        demo.skip("approval and resume", "`loopwise pending` is not available yet")
        return False
    gates = [g for g in map(json_object, json_list(pending.data)) if g.get("run_id") == run_id]
    print(f"   → {len(gates)} gate(s) pending:")
    for gate in gates:
        print(
            f"     {gate['approval_id']}: {gate['tool']} [{gate.get('effect')}] — {gate['reason']}"
        )
    for gate in gates:
        approved = demo.cli(
            "approve", run_id, "--approval", str(gate["approval_id"]), "--by", "demo"
        )
        if approved.code != 0:
            line = (approved.stderr.strip().splitlines() or ["?"])[-1]
            demo.failures.append(f"approve {gate['approval_id']}: {line}")
            print(f"   FAILED: {line}")
            return False
        print(f"   → approved {gate['approval_id']} (by 'demo'; in real use a person decides)")
    return bool(gates)


def _resume(demo: Demo, run_id: str) -> None:
    """Resume in a new process; show that each effect happened exactly once."""
    result = _report_run(
        demo, "refund desk (resumed)", demo.cli("resume", run_id, "--json"), "completed"
    )
    if result is None:
        return
    effects = _effects(json_object(demo.cli("runs", "show", run_id, "--json").data))
    listed = ", ".join(f"{tool} ×{n}" for tool, n in effects.items()) or "none"
    print(f"     write/irreversible effects in the audit log: {listed}")
    if demo.scripted and effects.get("issue_refund") != 1:
        demo.failures.append(f"refund desk: issue_refund ran {effects.get('issue_refund', 0)}x")
        print("   FAILED: issue_refund should have run exactly once")


def _effects(shown: JSONMapping) -> dict[str, int]:
    """How many times each tool with an effect ran successfully, from ``runs show``."""
    effect_of: dict[str, str] = {}
    counts: dict[str, int] = {}
    for event in map(json_object, json_list(shown.get("events"))):
        data = json_object(event.get("data"))
        if event.get("type") == "tool_call":
            effect_of[str(data.get("call_id"))] = str(data.get("effect"))
        elif (
            event.get("type") == "tool_result"
            and not data.get("is_error")
            and effect_of.get(str(data.get("call_id"))) in {"write", "irreversible"}
        ):
            counts[str(data.get("tool"))] = counts.get(str(data.get("tool")), 0) + 1
    return counts


def triage_agent(demo: Demo) -> None:
    """The triage job again, as an agent, so the eval can compare the two."""
    print("\n4. Triage agent — the same job as 1, done as an AGENT (for the comparison)")
    _triage(demo, TRIAGE_AGENT, "triage agent")


def evaluation(demo: Demo, report: Path) -> None:
    """The workflow-vs-agent eval over the labeled tickets, with the HTML report."""
    print(
        "\n5. Eval — workflow vs agent vs the cascade between them, on the same labeled "
        "tickets, decided on evidence"
    )
    if not all(demo.present(t, "eval") for t in (TRIAGE, TRIAGE_AGENT)):
        return
    if not (demo.root / DATASET).is_file():
        demo.skip("eval", f"{DATASET} is not there yet")
        return
    args = ["eval", TRIAGE, TRIAGE_AGENT, CASCADE, "--sweep", "--dataset", DATASET]
    args += demo.model_args
    shown = report.relative_to(demo.root) if report.is_relative_to(demo.root) else report
    outcome = demo.cli(*args, "--report", str(shown), "--json")
    if outcome.unavailable:
        demo.skip("eval", "`loopwise eval` is not available yet")
        return
    given = outcome.data
    data = given if isinstance(given, dict) else None
    if data is None:
        line = (outcome.stderr.strip().splitlines() or ["no output"])[-1]
        demo.failures.append(f"eval: exit {outcome.code}: {line}")
        print(f"   FAILED: exit {outcome.code}: {line}")
        return
    _print_eval(data)
    if report.is_file():
        print(f"   → report written: {report}")
    else:
        demo.failures.append("eval: no report.html")
        print(f"   FAILED: {report} was not written")


def _print_eval(data: JSONMapping) -> None:
    print(f"   {data.get('cases')} cases × {data.get('repeat')} repeat(s)")
    for t in map(json_object, json_list(data.get("targets"))):
        metrics = json_object(t.get("metrics"))
        tokens = json_object(metrics.get("tokens"))
        calls = json_object(metrics.get("model_calls"))
        print(
            f"   {t.get('label')} ({t.get('architecture')}): "
            f"completed {t.get('completed_rate', 0):.0%}, correct {t.get('correct_rate', 0):.0%}, "
            f"model calls p50 {_num(calls.get('p50'))}, tokens p50 {_num(tokens.get('p50'))} / "
            f"p95 {_num(tokens.get('p95'))}"
        )
    rec = json_object(data.get("recommendation"))
    print(f"   → recommendation: {rec.get('text', 'none')}")
    for found in map(json_object, json_list(data.get("sweeps"))):
        _print_sweep(found)


def _print_sweep(found: JSONMapping) -> None:
    """The cascade's frontier in a few points, and the threshold it chose."""
    points = map(json_object, json_list(found.get("frontier")))
    chosen = found.get("recommended_threshold")
    best = json_object(found.get("best")).get("threshold")
    shown = [
        p
        for p in points
        if round(json_number(p["threshold"]) * 4, 6) % 1 == 0 or p["threshold"] in (chosen, best)
    ]
    print(f"   the cascade's frontier ({found.get('cost_basis')}):")
    for p in shown:
        mark = "  ← chosen" if p["threshold"] == chosen else ""
        mark = mark or ("  ← most accurate" if p["threshold"] == best else "")
        cost = "?" if p.get("cost") is None else f"${p['cost']:.6f}"
        accuracy = "?" if p.get("accuracy") is None else f"{p['accuracy']:.0%}"
        print(
            f"     threshold {p['threshold']:.2f}: {accuracy} correct, "
            f"{p['share_escalated']:.0%} to the agent, {cost} per case{mark}"
        )
    print(f"   → threshold: {found.get('reason')}")
    if found.get("calibration_warning"):
        print(f"   ⚠ {found['calibration_warning']}")


def _num(value: JSONValue) -> str:
    return f"{value:,.0f}" if isinstance(value, int | float) else "?"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m loopwise.cli.demo", description=__doc__)
    parser.add_argument(
        "--root", default=".", help="the folder holding workflows/ and agents/ (default: here)"
    )
    parser.add_argument("--store", default=".loopwise/demo.db", help="the demo's run store")
    parser.add_argument("--report", default="report.html", help="where the eval report goes")
    return parser


def _setup(args: argparse.Namespace) -> Demo:
    root = Path(args.root).resolve()
    store = Path(args.store)
    store = store if store.is_absolute() else root / store
    store.parent.mkdir(parents=True, exist_ok=True)
    # A rerun starts from an empty store and a fresh shop (the refund desk's effects
    # land in the shop database: a second refund of the same order would be refused).
    shop = store.with_name("demo-shop.db")
    for path in (store, shop):
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    env = {**os.environ, "LOOPWISE_STORE": str(store), "LOOPWISE_SHOP_DB": str(shop)}
    model_args, scripted, line = model_choice(env)
    print("loopwise demo — the canonical examples and the workflow-vs-agent eval")
    print(f"   model: {line}")
    print(f"   store: {store} (emptied first); shop database: {shop} (fresh)")
    return Demo(root=root, model_args=model_args, scripted=scripted, env=env)


NEEDS = (TRIAGE, INVESTIGATE, REFUND_DESK, TRIAGE_AGENT, DATASET)
"""What the demo runs: the canonical examples of a loopwise checkout."""


def _missing(root: Path) -> list[str]:
    return [
        path for path in (n.split(":", maxsplit=1)[0] for n in NEEDS) if not (root / path).is_file()
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; 0 when every part ran and did what it should, 2 when the examples are
    not there (an installed package has none: it says what to do instead)."""
    args = _parser().parse_args(argv)
    root = Path(args.root).resolve()
    missing = _missing(root)
    if missing:
        print(
            f"loopwise demo: it runs the canonical examples, and {root} lacks "
            f"{', '.join(missing)}. `loopwise init examples` writes them here (then run the "
            "demo again), or run it in a checkout of the loopwise repository (or pass --root "
            "DIR); `loopwise init workflow|agent|hybrid` starts a project of your own.",
            file=sys.stderr,
        )
        return 2
    demo = _setup(args)
    report = Path(args.report)
    report = report if report.is_absolute() else demo.root / report
    for part in (triage_workflow, investigation_agent, refund_desk, triage_agent):
        part(demo)
    evaluation(demo, report)
    print()
    if demo.skipped:
        # A part that did not run proves nothing: never "passed" after a skip.
        demo.failures.append(f"skipped: {', '.join(demo.skipped)}")
    if demo.failures:
        print(f"demo FAILED: {'; '.join(demo.failures)}")
        return 1
    mode = "offline, scripted model" if demo.scripted else "real model"
    print(f"demo passed ({mode}).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
