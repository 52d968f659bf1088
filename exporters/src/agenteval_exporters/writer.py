"""Buffering record batches per partition and publishing them as files by rows or by time."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pyarrow as pa

from .files import publish, remove_stale_staging

logger = logging.getLogger(__name__)

Partitioner = Callable[[pa.RecordBatch], Iterable[tuple[str, pa.RecordBatch]]]
"""Splits a batch into ``(partition path, rows)`` pairs."""

MAX_BUFFERED_ROWS = 2_000_000
"""Past this many unpublished rows (the disk keeps failing), the oldest are dropped and logged."""


class PartitionedWriter:
    """Buffers batches per partition; publishes a partition's rows as one file when it reaches
    ``max_rows`` or its oldest rows are ``flush_interval`` seconds old. Thread-safe.
    """

    def __init__(
        self,
        root: Path,
        table_name: str,
        schema: pa.Schema,
        partitioner: Partitioner,
        *,
        max_rows: int = 100_000,
        flush_interval: float = 1.0,
    ) -> None:
        self.root = Path(root)
        self.table_name = table_name
        self.schema = schema
        self.partitioner = partitioner
        self.max_rows = max_rows
        self.flush_interval = flush_interval
        self._lock = threading.Lock()
        self._publish_lock = threading.Lock()
        self._buffers: dict[str, list[pa.RecordBatch]] = {}
        self._rows: dict[str, int] = {}
        self._since: dict[str, float] = {}
        self._closed = threading.Event()
        self._failing = False
        self.files_written = 0
        self.rows_dropped = 0
        remove_stale_staging(self.root)
        self._timer = threading.Thread(target=self._flush_on_time, name=f"agenteval-{table_name}-flush", daemon=True)
        self._timer.start()

    def append(self, batch: pa.RecordBatch) -> None:
        """Buffer ``batch``; publishes at once any partition that reached ``max_rows``."""
        if batch.num_rows == 0:
            return
        full = []
        with self._lock:
            for partition, rows in self.partitioner(batch):
                self._buffers.setdefault(partition, []).append(rows)
                self._rows[partition] = self._rows.get(partition, 0) + rows.num_rows
                self._since.setdefault(partition, time.monotonic())
                if self._rows[partition] >= self.max_rows:
                    full.append(partition)
            taken = [(p, self._take(p)) for p in full]
        self._publish_all(taken)

    def flush(self) -> None:
        """Publish everything buffered; raises if a file could not be written (rows are kept)."""
        with self._lock:
            taken = [(p, self._take(p)) for p in list(self._buffers)]
        self._publish_all(taken)

    def close(self) -> None:
        """Publish what is left and stop the timer. Safe to call twice."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._timer.join(timeout=5)
        self.flush()

    def _take(self, partition: str) -> list[pa.RecordBatch]:
        self._rows.pop(partition, None)
        self._since.pop(partition, None)
        return self._buffers.pop(partition, [])

    def _publish_all(self, taken: list[tuple[str, list[pa.RecordBatch]]]) -> None:
        error: Exception | None = None
        with self._publish_lock:
            for partition, batches in taken:
                if not batches:
                    continue
                try:
                    publish(self.root, self.table_name, partition, pa.Table.from_batches(batches, self.schema))
                    self.files_written += 1
                    self._failing = False
                except Exception as exc:
                    self._keep_for_retry(partition, batches)
                    error = exc
        if error is not None:
            raise error

    def _keep_for_retry(self, partition: str, batches: list[pa.RecordBatch]) -> None:
        with self._lock:
            kept = batches + self._buffers.get(partition, [])
            rows = sum(b.num_rows for b in kept)
            while rows > MAX_BUFFERED_ROWS and len(kept) > 1:
                dropped = kept.pop(0)
                rows -= dropped.num_rows
                self.rows_dropped += dropped.num_rows
            self._buffers[partition] = kept
            self._rows[partition] = rows
            self._since.setdefault(partition, time.monotonic())

    def _flush_on_time(self) -> None:
        tick = max(0.01, self.flush_interval / 4)
        while not self._closed.wait(tick):
            now = time.monotonic()
            with self._lock:
                due = [p for p, since in self._since.items() if now - since >= self.flush_interval]
                taken = [(p, self._take(p)) for p in due]
            try:
                self._publish_all(taken)
            except Exception:
                if not self._failing:  # once per failure spell, not per file
                    logger.exception("agenteval: could not publish %s files under %s", self.table_name, self.root)
                self._failing = True
