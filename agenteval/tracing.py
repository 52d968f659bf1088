"""One call that configures tracing for a process or a run: Parquet, and OTLP when configured.

A service's spans wait in the SDK's batch queues (``OTEL_BSP_MAX_QUEUE_SIZE``, 2,048 spans by default); past
that the SDK drops spans rather than slow the application, and says so in its log. What is queued is flushed
when the process exits and when it receives SIGTERM: :func:`setup_tracing` installs a SIGTERM handler (from the
main thread) that flushes, then hands the signal on to the handler that was there before (the application's
own, or the default, which ends the process as SIGTERM does). A run's own spans do not take this path: the run
sends them itself, after scoring, with back-pressure (``agenteval.run._export``).
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import threading
import time
import weakref
from collections.abc import Callable
from multiprocessing import util as multiprocessing_util

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from agenteval_exporters import ParquetSpanExporter, store_path
from agenteval_exporters.masked_exporter import MaskingSpanExporter
from agenteval_exporters.storefs import RemoteRoot
from agenteval_instrumentation.masking import masked_logger

from ._otlp_rejections import RejectionCountingExporter, Rejections, grpc_exporter, http_exporter
from ._sigterm import flush_on_sigterm
from .run._collect import TrialCollector, collector_for, store_key

logger = masked_logger(__name__)

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
    down: bool = False

    def flush(self, timeout_millis: int = 30_000) -> bool:
        """Push every finished span through to disk, then to the OTLP backend, within ``timeout_millis`` in all;
        False if some had not arrived by then.

        Disk comes first, so a backend that does not answer never keeps spans from the store; and each step is
        waited for only until the deadline, since the SDK's processors ignore the timeout they are given."""
        deadline = time.monotonic() + timeout_millis / 1000
        to_disk, *to_backends = self.processors
        # A processor's flush hands spans to the exporter; the Parquet exporter still buffers them.
        on_disk = _flushed_by(deadline, to_disk.force_flush) and _flushed_by(deadline, self.parquet.force_flush)
        handed_on = [_flushed_by(deadline, p.force_flush) for p in to_backends]  # each, even after a False
        return on_disk and all(handed_on)

    def shutdown(self) -> None:
        _set_up(self.provider).pop(store_key(self.parquet.store), None)
        atexit.unregister(self.flush_quietly)
        self.down = True
        for processor in self.processors:
            processor.shutdown()

    def flush_quietly(self) -> None:
        """:meth:`flush`, at exit or on a signal: bounded in time, never raising."""
        if self.down:
            return
        try:
            self.flush(FLUSH_ON_SIGNAL_MILLIS)
        except Exception:  # flushing at exit must never turn an exit into a traceback
            logger.debug("agenteval: flushing spans at exit failed", exc_info=True)


def _flushed_by(deadline: float, flush: Callable[[int], bool]) -> bool:
    """``flush(milliseconds left)``, waited for until ``deadline`` at most: it runs on a thread of its own, left
    to finish (or be ended with the process) if it overruns."""
    left = max(deadline - time.monotonic(), 0.0)
    outcome: list[bool] = []

    def run() -> None:
        try:
            outcome.append(bool(flush(int(left * 1000))))
        except Exception:  # the caller learns False; the exporter logs its own failure
            logger.debug("agenteval: a span flush failed", exc_info=True)
            outcome.append(False)

    worker = threading.Thread(target=run, name="agenteval-flush", daemon=True)
    worker.start()
    worker.join(left)
    return bool(outcome and outcome[0])


class _SkipRunSpans(SpanProcessor):
    """Hands spans on to ``inner``, except those a run in progress writes to the same store itself (or, with no
    store, sends over OTLP itself): with ``setup_tracing()`` and ``evaluate()`` in one process, each span is
    written once and sent once."""

    def __init__(
        self, inner: SpanProcessor, collector: TrialCollector, store: os.PathLike[str] | RemoteRoot | None
    ) -> None:
        self.inner = inner
        self.collector = collector
        self.store = None if store is None else store_key(store)

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


def otlp_exporter_from_env() -> RejectionCountingExporter | None:
    """The OTLP span exporter the standard ``OTEL_EXPORTER_OTLP_*`` variables ask for, or None: handed spans masked
    as the store has them (:class:`~agenteval_exporters.masked_exporter.MaskingSpanExporter`), its logs masked,
    counting the spans the backend answers it rejected (:mod:`agenteval._otlp_rejections`)."""
    if not any(os.environ.get(v) for v in OTLP_ENDPOINT_VARIABLES):
        return None
    protocol = next((os.environ[v] for v in OTLP_PROTOCOL_VARIABLES if os.environ.get(v)), "http/protobuf")
    rejections = Rejections()
    exporter: SpanExporter
    if protocol == "grpc":
        exporter = grpc_exporter(rejections)
    else:
        if protocol != "http/protobuf":
            logger.warning("agenteval: OTLP protocol %r is not supported; using http/protobuf", protocol)
        exporter = http_exporter(rejections)
    _mask_logs_of(exporter)
    return RejectionCountingExporter(MaskingSpanExporter(exporter), rejections)


def _mask_logs_of(exporter: SpanExporter) -> None:
    """The exporter's loggers masked: its warnings quote the error its HTTP client raised, and that names the
    endpoint with its query (``?api-key=...``); they go to the run's stderr."""
    for cls in type(exporter).__mro__:
        if cls.__module__.startswith("opentelemetry.exporter."):
            masked_logger(cls.__module__)
    masked_logger("opentelemetry.exporter.otlp.common.http")  # the HTTP client's own, for what it logs itself


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
        batch = BatchSpanProcessor(otlp_exporter, schedule_delay_millis=SCHEDULE_DELAY_MILLIS)
        processors.append(_SkipRunSpans(batch, collector_for(provider), None))
    for processor in processors:
        provider.add_span_processor(processor)
    tracing = _set_up(provider)[store_key(parquet.store)] = Tracing(provider, parquet, processors, otlp_exporter)
    _flush_on_exit(tracing)
    return tracing


FLUSH_ON_SIGNAL_MILLIS = 5_000
"""How long a SIGTERM waits for queued spans to reach disk and the backend before it is handed on."""


def _flush_on_exit(tracing: Tracing) -> None:
    """Flush ``tracing`` at exit and on SIGTERM (:mod:`agenteval._sigterm`), chaining to the SIGTERM handler installed
    before."""
    atexit.register(tracing.flush_quietly)
    _flush_at_process_exit(tracing)
    multiprocessing_util.register_after_fork(tracing, _flush_at_process_exit)
    if threading.current_thread() is threading.main_thread():  # signal handlers belong to it; exit still flushes
        flush_on_sigterm(tracing.flush_quietly)


def _flush_at_process_exit(tracing: Tracing) -> None:
    """Flush ``tracing`` when this process ends as a ``multiprocessing`` child ends: by ``os._exit`` once its
    target returns, which runs no ``atexit`` hook. A worker's spans were lost so: 75 spans made by three
    ``Process`` children and 20 by a ``Pool``'s workers (the fork start method, Linux's default before Python
    3.14), 0 to 20 stored. Registered here and, through ``register_after_fork``, again in every child forked by
    ``multiprocessing`` (which forgets its parent's finalizers); run in the parent at exit too, where it finds
    the spans flushed already."""
    multiprocessing_util.Finalize(None, tracing.flush_quietly, exitpriority=EXIT_FLUSH_PRIORITY)


EXIT_FLUSH_PRIORITY = 100
"""Before ``multiprocessing``'s own finalizers of priority 0 and above (a pool's), so a process waiting for its
children has its spans on disk already."""
