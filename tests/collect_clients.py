"""Clients of ``agenteval collect`` for the tests and the benchmark: real SDK spans, the real OTLP exporters,
and plain HTTP for what exporters never send (malformed payloads, other content types)."""

from __future__ import annotations

import contextlib
import http.client
import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from agenteval_instrumentation import attributes as A


def agent_spans(traces: int, service: str = "support-bot", prefix: str = "") -> list[ReadableSpan]:
    """``traces`` production-like traces of 4 spans each: an agent turn (root, SERVER), a model call with usage
    and finish reasons, a tool call with an event, and a failed tool call; no experiment ids."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": service, "deployment.environment": "prod"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("agenteval_instrumentation")
    for n in range(traces):
        with tracer.start_as_current_span(
            f"invoke_agent {prefix}agent",
            kind=SpanKind.SERVER,
            attributes={A.GEN_AI_OPERATION_NAME: "invoke_agent", "user.question": f"question {n}"},
        ):
            with tracer.start_as_current_span(
                "chat gpt-4o-mini",
                kind=SpanKind.CLIENT,
                attributes={
                    A.GEN_AI_OPERATION_NAME: "chat",
                    A.GEN_AI_PROVIDER_NAME: "openai",
                    A.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
                    A.GEN_AI_USAGE_INPUT_TOKENS: 100 + n,
                    A.GEN_AI_USAGE_OUTPUT_TOKENS: 7,
                    A.GEN_AI_RESPONSE_FINISH_REASONS: ("tool_calls",),
                    "temperature": 0.25,
                    "streamed": False,
                },
            ):
                pass
            with tracer.start_as_current_span(
                "execute_tool lookup",
                attributes={A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "lookup"},
            ) as tool:
                tool.add_event("cache miss", {"key": f"k{n}", "tries": 2})
            with tracer.start_as_current_span(
                "execute_tool refund",
                attributes={A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "refund"},
            ) as failed:
                failed.set_attribute(A.ERROR_TYPE, "PermissionError")
                failed.set_status(Status(StatusCode.ERROR, "not allowed"))
    provider.shutdown()
    return list(memory.get_finished_spans())


def post(
    endpoint: str, body: bytes, content_type: str = "application/x-protobuf", **headers: str
) -> tuple[int, dict[str, str], bytes]:
    """One POST on a fresh connection: status, headers (lower-case names), body."""
    url = urlsplit(endpoint)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        connection.request("POST", url.path or "/", body, {"Content-Type": content_type, **headers})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def json_request(spans: Sequence[dict], service: str = "json-client") -> bytes:
    """An OTLP/JSON ExportTraceServiceRequest with ``spans`` under one resource and scope."""
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                    "scopeSpans": [{"scope": {"name": "hand-built", "version": "1"}, "spans": list(spans)}],
                }
            ]
        }
    ).encode()


def synthetic_spans(count: int, seed: int, service: str = "load", first: int = 0) -> list[ReadableSpan]:
    """``count`` SDK spans made directly (no tracer, so a client process spends its time sending, not tracing):
    traces of 4 spans, ids unique per ``seed``, the attributes of a model call."""
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, TraceFlags

    resource = Resource({"service.name": service})
    scope = InstrumentationScope("agenteval_instrumentation")
    spans = []
    for n in range(first, first + count):
        trace_id = (seed << 64) | (n // 4 + 1)
        span_id = (seed << 40) | (n + 1)
        root = (seed << 40) | (n - n % 4 + 1)
        context = SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(1))
        parent = None if n % 4 == 0 else SpanContext(trace_id, root, is_remote=False)
        spans.append(
            ReadableSpan(
                name="chat gpt-4o-mini",
                context=context,
                parent=parent,
                resource=resource,
                attributes={
                    A.GEN_AI_OPERATION_NAME: "chat",
                    A.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
                    A.GEN_AI_USAGE_INPUT_TOKENS: n,
                    "client": seed,
                },
                kind=SpanKind.CLIENT,
                start_time=1_700_000_000_000_000_000 + n,
                end_time=1_700_000_000_000_000_000 + n + 1_000,
                instrumentation_scope=scope,
            )
        )
    return spans


def send_spans(endpoint: str, count: int, seed: int, protocol: str = "http/protobuf", batch: int = 512) -> list[int]:
    """Export ``count`` spans in batches with the real OTLP exporter until one export fails; the span ids the
    collector acknowledged. Runs in a client process."""
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        exporter: object = GrpcExporter(endpoint=endpoint, insecure=True, timeout=10)
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=endpoint, timeout=10)
    from opentelemetry.sdk.trace.export import SpanExportResult

    acknowledged: list[int] = []
    for start in range(0, count, batch):  # made batch by batch: memory stays flat however many are sent
        chunk = synthetic_spans(min(batch, count - start), seed, first=start)
        try:
            result = exporter.export(chunk)  # type: ignore[attr-defined]
        except Exception:  # the HTTP exporter of OpenTelemetry 1.27 raises when the collector is gone
            result = SpanExportResult.FAILURE
        if result != SpanExportResult.SUCCESS:
            break
        acknowledged += [span.context.span_id for span in chunk]
    exporter.shutdown()  # type: ignore[attr-defined]
    return acknowledged


@contextlib.contextmanager
def collect_command(store: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    """``agenteval collect`` (OTLP/HTTP only) in a process of its own, and its endpoint once it listens; killed at
    the end if still running."""
    command = [sys.executable, "-m", "agenteval.cli", "collect", "--port", "0", "--no-grpc", "--store", str(store)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("agenteval collect: OTLP/HTTP on http://127.0.0.1:"), line + process.stderr.read()
        yield process, line.split(" on ")[1].split(";")[0]
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
