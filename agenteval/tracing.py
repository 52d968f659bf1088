"""One call that configures tracing for a process or a run: Parquet, and OTLP when configured."""

from __future__ import annotations

import dataclasses
import logging
import os
import weakref

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from agenteval_exporters import ParquetSpanExporter, store_path

from .run._collect import TrialCollector, collector_for, store_key

logger = logging.getLogger(__name__)

OTLP_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
OTLP_PROTOCOL_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
SCHEDULE_DELAY_MILLIS = 200
"""How long a BatchSpanProcessor waits before handing spans on; short, so finished work reaches
disk within about a second (the exporter adds its own flush interval)."""


@dataclasses.dataclass
class Tracing:
    """What :func:`setup_tracing` installed; ``flush()`` and ``shutdown()`` act on agenteval's part only."""

    provider: TracerProvider
    parquet: ParquetSpanExporter
    processors: list[SpanProcessor]
    otlp: SpanExporter | None = None

    def flush(self, timeout_millis: int = 30_000) -> bool:
        """Push every finished span through to disk (and to the OTLP backend)."""
        handed_on = all(p.force_flush(timeout_millis) for p in self.processors)
        # A processor's flush hands spans to the exporter; the exporter still buffers them.
        return handed_on and self.parquet.force_flush(timeout_millis)

    def shutdown(self) -> None:
        _set_up(self.provider).pop(store_key(self.parquet.store), None)
        for processor in self.processors:
            processor.shutdown()


class _SkipRunSpans(SpanProcessor):
    """Hands spans on to ``inner``, except those a run in progress writes to the same store itself:
    with ``setup_tracing()`` and ``evaluate()`` in one process, each span is written once."""

    def __init__(self, inner: SpanProcessor, collector: TrialCollector, store: os.PathLike[str]) -> None:
        self.inner = inner
        self.collector = collector
        self.store = store_key(store)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.inner.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if not self.collector.written_by_run(span, self.store):
            self.inner.on_end(span)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


_active: weakref.WeakKeyDictionary[TracerProvider, dict[str, Tracing]] = weakref.WeakKeyDictionary()
"""Tracing set up per provider and store: a second setup must not write every span twice. Keyed by the
provider itself (held weakly), never by its id(), which a later provider may be given."""


def _set_up(provider: TracerProvider) -> dict[str, Tracing]:
    return _active.setdefault(provider, {})


def exports_otlp(provider: TracerProvider) -> bool:
    """Whether :func:`setup_tracing` already sends ``provider``'s spans to an OTLP backend (a run then
    adds no exporter of its own, so the backend receives each span once)."""
    return any(t.otlp is not None for t in _active.get(provider, {}).values())


def otlp_exporter_from_env() -> SpanExporter | None:
    """The OTLP span exporter the standard ``OTEL_EXPORTER_OTLP_*`` variables ask for, or None."""
    if not any(os.environ.get(v) for v in OTLP_ENDPOINT_VARIABLES):
        return None
    protocol = next((os.environ[v] for v in OTLP_PROTOCOL_VARIABLES if os.environ.get(v)), "http/protobuf")
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter()
    if protocol != "http/protobuf":
        logger.warning("agenteval: OTLP protocol %r is not supported; using http/protobuf", protocol)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter()


def sdk_provider(service_name: str | None = None) -> TracerProvider:
    """The application's SDK TracerProvider, or a new one installed as the global provider."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        return provider
    if not isinstance(provider, trace.ProxyTracerProvider):
        raise RuntimeError(
            f"a non-SDK TracerProvider ({type(provider).__name__}) is installed; agenteval needs the "
            "OpenTelemetry SDK's TracerProvider to add its exporters to"
        )
    name = service_name or os.environ.get("OTEL_SERVICE_NAME") or "agenteval"
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
    trace.set_tracer_provider(provider)
    return provider


def setup_tracing(
    store: str | os.PathLike[str] | None = None,
    *,
    service_name: str | None = None,
    flush_interval: float | None = None,
    otlp: bool = True,
) -> Tracing:
    """Send spans to the store's Parquet files and, when the standard OpenTelemetry variables name an
    endpoint, to that OTLP backend too.

    Calling it again for the same provider and store returns the same :class:`Tracing`.
    If the application already installed an SDK TracerProvider, agenteval adds its processors to it
    rather than replacing it, so existing exporters and parent links stay as they are.
    """
    provider = sdk_provider(service_name)
    existing = _set_up(provider).get(store_key(store_path(store)))
    if existing is not None:
        return existing
    parquet = ParquetSpanExporter(store, flush_interval=flush_interval)
    processors: list[SpanProcessor] = [
        _SkipRunSpans(
            BatchSpanProcessor(parquet, schedule_delay_millis=SCHEDULE_DELAY_MILLIS),
            collector_for(provider),
            parquet.store,
        )
    ]
    otlp_exporter = otlp_exporter_from_env() if otlp else None
    if otlp_exporter is not None:
        processors.append(BatchSpanProcessor(otlp_exporter, schedule_delay_millis=SCHEDULE_DELAY_MILLIS))
    for processor in processors:
        provider.add_span_processor(processor)
    tracing = _set_up(provider)[store_key(parquet.store)] = Tracing(provider, parquet, processors, otlp_exporter)
    return tracing
