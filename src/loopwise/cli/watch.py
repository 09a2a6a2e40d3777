"""What the command line shows of a run while it goes: one progress line per model call
and tool call on a terminal, the answer's text as it arrives with ``--stream``, and
OpenTelemetry spans with ``--otel``.

``--otel`` (or the standard environment: ``OTEL_TRACES_EXPORTER``, or an
``OTEL_EXPORTER_OTLP_*ENDPOINT``) exports each run's spans through
:class:`loopwise.integrations.otel.OTelSink`, with an SDK tracer provider built here: the exporter
is
``OTEL_TRACES_EXPORTER`` (``otlp``, the default; ``console``, which writes to stderr;
``none``), the OTLP protocol ``OTEL_EXPORTER_OTLP_PROTOCOL`` (``http/protobuf`` or
``grpc``), the service name ``OTEL_SERVICE_NAME`` (default ``loopwise``). A missing
package is a usage error naming it (exit 2).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

from loopwise.cli.options import given
from loopwise.core.events import Event, EventSink, EventType, TextDelta
from loopwise.core.jsontypes import json_list, json_number, json_object
from loopwise.core.names import counted, printable
from loopwise.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = ["Progress", "TextPrinter", "add_watch_flags", "watch_sinks"]

_OTLP_ENV = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def add_watch_flags(p: argparse.ArgumentParser, *, stream: bool = False) -> None:
    """``--otel`` for a verb that runs steps (run, resume, eval), and ``--stream``."""
    if stream:
        p.add_argument(
            "--stream",
            action="store_true",
            help="stream the model's answers and print their text as it arrives (not with --json)",
        )
    p.add_argument(
        "--otel",
        action="store_true",
        help="export OpenTelemetry spans (exporter from OTEL_TRACES_EXPORTER, default otlp; "
        "needs opentelemetry-sdk)",
    )


@contextmanager
def watch_sinks(
    args: argparse.Namespace, *, progress: bool = True
) -> Iterator[tuple[EventSink, ...]]:
    """The sinks the verb's runs get: progress lines on a terminal (``progress`` and no
    ``--json``) and the OTel sink when asked for; spans are flushed when it closes."""
    sinks: list[EventSink] = []
    quiet = given(args, "json", False)
    # The text printer first: it ends a streamed answer's line before a progress line
    # about the same model call is written, so the two never share a line.
    if given(args, "stream", False) and not quiet:
        sinks.append(TextPrinter(sys.stdout))
    if progress and not quiet and sys.stderr.isatty():
        sinks.append(Progress(sys.stderr))
    provider = _otel_provider(given(args, "otel", False))
    if provider is not None:
        from loopwise.integrations.otel import OTelSink

        sinks.append(OTelSink(provider))
    try:
        yield tuple(sinks)
    finally:
        if provider is not None:
            provider.shutdown()


class Progress:
    """One line per model call and tool call (and per gate asked), as they happen."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def record(self, run_id: str, event: Event) -> None:
        """Print the line ``event`` stands for, if it stands for one."""
        line = _line(event)
        if line is not None:
            print(printable(f"  {event.step or run_id}: {line}"), file=self.out, flush=True)


class TextPrinter:
    """Prints a streamed run's answer text as it arrives (``--stream``), each model call's
    text ending in a newline."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._open: str | None = None
        self.printed = False
        """Whether any text was printed (then the answer is not printed again)."""

    def text(self, run_id: str, delta: TextDelta) -> None:
        """Print the new piece of text at once."""
        self._open = delta.key
        self.printed = True
        # Model text: lines and tabs as they come, an ESC or CR shown, never obeyed.
        self.out.write(printable(delta.text, keep="\n\t"))
        self.out.flush()

    def record(self, run_id: str, event: Event) -> None:
        """End the line of a model call whose text was printed."""
        if event.type is EventType.MODEL_CALL and event.data.get("key") == self._open:
            self._open = None
            print(file=self.out, flush=True)


def _line(event: Event) -> str | None:
    data = event.data
    if event.type is EventType.MODEL_CALL:
        calls = len(json_list(json_object(data.get("turn")).get("tool_calls")))
        answer = counted(calls, "tool call") if calls else str(data.get("finish_reason"))
        return (
            f"model {data.get('model')} → {answer} "
            f"({data.get('input_tokens')}+{data.get('output_tokens')} tokens, "
            f"{json_number(data.get('duration_seconds')):.2f}s)"
        )
    if event.type is EventType.TOOL_CALL:
        edited = f" (edited by {data['edited_by']})" if data.get("edited_by") else ""
        return f"tool {data.get('tool')} {_short(data.get('args'))}{edited}"
    if event.type is EventType.TOOL_RESULT:
        # A call is logged before its gate is asked: only this line says it ran.
        if data.get("is_error"):
            return f"tool {data.get('tool')} failed: {_short(data.get('content'))}"
        return f"done {data.get('tool')}: {_short(data.get('content'), 40)}"
    if event.type is EventType.GATE_REQUESTED:
        return f"waiting for approval {data.get('approval_id')}: {data.get('tool')}"
    return None


def _short(value: object, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _otel_wanted(flag: bool) -> bool:
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    return flag or exporter not in ("", "none") or any(os.environ.get(v) for v in _OTLP_ENV)


def _otel_provider(flag: bool) -> TracerProvider | None:
    """An SDK tracer provider exporting as the ``OTEL_*`` environment says, or ``None``."""
    if not _otel_wanted(flag):
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as e:
        raise ConfigError(
            "--otel needs the OpenTelemetry SDK: pip install 'loopwise[otel]' (the SDK and "
            "the OTLP/HTTP exporter)",
            name="otel",
        ) from e
    service = os.environ.get("OTEL_SERVICE_NAME") or "loopwise"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    names = os.environ.get("OTEL_TRACES_EXPORTER") or "otlp"
    for name in (n.strip().lower() for n in names.split(",")):
        if name and name != "none":
            provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
    return provider


def _exporter(name: str) -> SpanExporter:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        # stdout belongs to the verb's own output (one JSON document with --json).
        return ConsoleSpanExporter(out=sys.stderr)
    if name != "otlp":
        raise ConfigError(
            f"OTEL_TRACES_EXPORTER={name!r} is not supported here; use otlp, console or none",
            name="OTEL_TRACES_EXPORTER",
        )
    grpc = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf").strip() == "grpc"
    kind = "grpc" if grpc else "http"
    try:
        module = importlib.import_module(f"opentelemetry.exporter.otlp.proto.{kind}.trace_exporter")
    except ImportError as e:
        package = f"opentelemetry-exporter-otlp-proto-{kind}"
        raise ConfigError(
            f"--otel exports with OTLP, which needs {package} (pip install {package}; "
            "loopwise[otel] brings the http/protobuf one), or set OTEL_TRACES_EXPORTER=console",
            name="otel",
        ) from e
    exporter: SpanExporter = module.OTLPSpanExporter()  # the module imported by its name
    return exporter
