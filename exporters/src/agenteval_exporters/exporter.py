"""ParquetSpanExporter: an OpenTelemetry span exporter that writes the agenteval store's spans."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Sequence

import pyarrow as pa
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from agenteval_instrumentation.masking import masked_logger

from .ablation import FALLBACKS, enabled
from .encode import sample_spans, spans_to_batch, spans_to_batches
from .files import write_to_memory
from .partitions import partition_spans, store_path
from .required import required_columns, without_missing
from .schema import SPAN_SCHEMA
from .settings import env_number
from .writer import PartitionedWriter

logger = masked_logger(__name__)

ENV_MAX_ROWS = "AGENTEVAL_PARQUET_MAX_ROWS"
ENV_FLUSH_INTERVAL = "AGENTEVAL_PARQUET_FLUSH_INTERVAL"
DEFAULT_MAX_ROWS = 100_000
DEFAULT_FLUSH_INTERVAL = 1.0
SPANS_TABLE = "spans"


WARM_UP_SPANS = 512
"""The BatchSpanProcessor's default batch size."""

WARM_UP = enabled("warm_up")
"""Benchmarks only (see .ablation): False leaves the first-time work to the first export."""


@functools.cache
def warm_up() -> None:
    """Do an export's first-time work once per process, before any span waits for it: pyarrow's
    converters and kernels (and its one-time look for pandas), orjson, the Parquet writer and zstd.
    Left to the first export it took ~40 ms, long enough for a burst of spans right after start-up
    to overflow the SDK's batch queue, which then drops spans."""
    if not WARM_UP:
        return
    try:
        samples = sample_spans()
        # As many spans as the SDK's default batch: first-time allocations are sized by the batch too.
        batch = spans_to_batch(samples * (WARM_UP_SPANS // len(samples) + 1))
        write_to_memory(pa.Table.from_batches([rows for _, rows in partition_spans(batch)], SPAN_SCHEMA))
    except Exception:  # an exporter that could not warm up still works, only its first export is slower
        FALLBACKS["warm_up"] += 1
        logger.debug("agenteval: exporter warm-up failed", exc_info=True)


class ParquetSpanExporter(SpanExporter):
    """Writes one flat row per span to ``<store>/spans/``, Hive-partitioned, files published atomically.

    Settings resolve as: constructor argument, then environment variable, then default —
    ``store`` (``AGENTEVAL_STORE``, ``./.agenteval``), ``max_rows`` per file
    (``AGENTEVAL_PARQUET_MAX_ROWS``, 100,000) and ``flush_interval`` in seconds
    (``AGENTEVAL_PARQUET_FLUSH_INTERVAL``, 1.0). Never raises into the application: a failure
    returns ``FAILURE`` and is logged once per spell of failures.
    """

    def __init__(
        self,
        store: str | os.PathLike[str] | None = None,
        *,
        max_rows: int | None = None,
        flush_interval: float | None = None,
    ) -> None:
        self.store = store_path(store)
        warm_up()
        self._writer = PartitionedWriter(
            self.store,
            SPANS_TABLE,
            SPAN_SCHEMA,
            partition_spans,
            max_rows=int(max_rows if max_rows is not None else env_number(ENV_MAX_ROWS, DEFAULT_MAX_ROWS, int)),
            flush_interval=(
                flush_interval if flush_interval is not None else env_number(ENV_FLUSH_INTERVAL, DEFAULT_FLUSH_INTERVAL)
            ),
        )
        self._shutdown = False
        self._failing = False
        self._lock = threading.Lock()
        self.spans_refused = 0
        """Spans left out because they lacked a value every span needs (see :meth:`export_batch`)."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            logger.warning("agenteval: ParquetSpanExporter.export called after shutdown; spans dropped")
            return SpanExportResult.FAILURE
        if not spans:
            return SpanExportResult.SUCCESS
        try:
            for batch in spans_to_batches(spans):
                self.export_batch(batch)
        except Exception:
            self._log_failure("export spans")
            return SpanExportResult.FAILURE
        self._failing = False
        return SpanExportResult.SUCCESS

    def export_batch(self, batch: pa.RecordBatch) -> None:
        """Hand over spans already encoded to :data:`SPAN_SCHEMA` (the runner encodes once, for both
        its scorers and this writer). A span lacking a value the schema requires (a span named None by the
        application) is left out alone, logged and counted in :attr:`spans_refused`: in a file, it would fail that
        file and every retry of it."""
        batch, refused = without_missing(SPAN_SCHEMA, batch)
        if refused:
            with self._lock:
                self.spans_refused += refused
            logger.warning(
                "agenteval: left out %d span(s) lacking a value every span needs (%s); the others are written",
                refused,
                ", ".join(required_columns(SPAN_SCHEMA)),
            )
        self._writer.append(batch)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Publish everything buffered: True when it all reached the store within ``timeout_millis``. False when
        the store could not be written (logged) or did not answer in time; the spans are kept either way, and
        published once the store lets them, by time or by a later flush."""
        try:
            return self._writer.flush(timeout_millis / 1000)
        except Exception:
            self._log_failure("flush spans")
            return False

    def shutdown(self, timeout_millis: float | None = None) -> None:
        """Publish the last spans and stop, waiting at most ``timeout_millis`` (None: as long as publishing takes).
        The SDK's ``BatchSpanProcessor`` passes what is left of its own shutdown timeout. A shutdown that stops
        waiting says so in the log; its spans are still published, once the store answers, if the process lives
        that long."""
        with self._lock:
            if self._shutdown:
                logger.warning("agenteval: ParquetSpanExporter.shutdown called more than once")
                return
            self._shutdown = True
        try:
            finished = self._writer.close(None if timeout_millis is None else timeout_millis / 1000)
        except Exception:
            self._log_failure("publish the last spans")
            return
        if not finished:
            logger.warning(
                "agenteval: the last spans were not published under %s within %g ms; they are written once the "
                "store answers, if this process lives that long",
                self.store,
                timeout_millis,
            )

    @property
    def spans_unwritten(self) -> int:
        """Spans handed over that reached no published file (the store kept refusing them); after
        :meth:`shutdown`, those that are lost."""
        return self._writer.rows_unwritten

    @property
    def files_written(self) -> int:
        return self._writer.files_written

    def _log_failure(self, what: str) -> None:
        if not self._failing:
            logger.exception(
                "agenteval: could not %s under %s; will retry, logging again only after a success", what, self.store
            )
        self._failing = True
