"""Buffering record batches per partition and publishing them as files by rows or by time.

Each partition has one staged file open at a time. Rows go into it a row group at a time on a
background thread: Parquet encoding and zstd release the GIL, so the caller goes on encoding the
next spans meanwhile. A file is published when it reaches ``max_rows``, when its first rows are
``flush_interval`` seconds old, or on :meth:`PartitionedWriter.flush`. The caller that fills a
file, and ``flush()``, wait until it is published and get its error if it could not be; the rows
of a file that failed are kept and go first into the partition's next file.

``flush()`` and ``close()`` take a timeout, as OpenTelemetry's ``force_flush`` and ``shutdown`` do: past it
they return False rather than wait on a stalled store, and drop nothing. Every row they were asked to publish
is by then buffered or queued for the background thread, which publishes it once the store answers (the
flush thread picks up whatever was not handed over, by time).
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from concurrent import futures
from concurrent.futures import Future
from dataclasses import dataclass, field

import pyarrow as pa

from agenteval_instrumentation.masking import masked_logger

from .files import StagedFile, remove_stale_staging
from .storefs import StoreRoot, as_root

logger = masked_logger(__name__)

Partitioner = Callable[[pa.RecordBatch], Iterable[tuple[str, pa.RecordBatch]]]
"""Splits a batch into ``(partition path, rows)`` pairs."""

BatchCheck = Callable[[pa.RecordBatch], None]
"""Validates a batch before it is taken; what it raises refuses the batch whole."""

ROW_GROUP_ROWS = 32_768
"""Rows handed to the background thread at a time, each written as one Parquet row group."""

MAX_QUEUED_JOBS = 4
"""Row groups waiting for the background thread before callers wait for it (back-pressure)."""

MAX_BUFFERED_ROWS = 2_000_000
"""Past this many unpublished rows (the disk keeps failing), the oldest are dropped and logged."""


@dataclass
class _Buffer:
    """The caller's side of a partition's current file."""

    batches: list[pa.RecordBatch] = field(default_factory=list)
    rows: int = 0  # in ``batches``, not yet handed to the background thread
    file_rows: int = 0  # in the current file, ``rows`` included
    since: float = field(default_factory=time.monotonic)  # when the file's first rows arrived


@dataclass
class _Write:
    partition: str
    table: pa.Table


@dataclass
class _Publish:
    partitions: list[str] | None  # None: every partition with an open file or rows to retry
    retry: bool  # also publish partitions whose only rows are ones kept from a failed file
    done: Future[None]


_STOP = object()
_DISCARD = object()


class _Deadline:
    """What is left of one timeout shared by several waits; ``None`` seconds waits as long as it takes."""

    __slots__ = ("_end",)

    def __init__(self, seconds: float | None) -> None:
        self._end = None if seconds is None else time.monotonic() + max(0.0, seconds)

    def left(self) -> float | None:
        return None if self._end is None else max(0.0, self._end - time.monotonic())

    def lock_timeout(self) -> float:
        """:meth:`left` as ``Lock.acquire`` takes it (-1: no limit)."""
        left = self.left()
        return -1 if left is None else left


_NO_DEADLINE = _Deadline(None)


class _OpenFile:
    """The background thread's staged file for one partition, and the tables in it (kept so
    that a failed file's rows can go into the next one)."""

    def __init__(self, stage: Callable[[], StagedFile], tables: list[pa.Table]) -> None:
        self.tables: list[pa.Table] = []
        self.error: Exception | None = None
        self.staged: StagedFile | None = None
        try:
            self.staged = stage()
        except Exception as exc:
            self.error = exc
        for table in tables:
            self.write(table)

    def write(self, table: pa.Table) -> None:
        self.tables.append(table)
        if self.error is None and self.staged is not None:
            try:
                self.staged.write(table)
            except Exception as exc:
                self.error = exc

    def publish(self, partition: str) -> None:
        if self.error is None and self.staged is not None:
            try:
                self.staged.publish(partition)
                return
            except Exception as exc:
                self.error = exc
        if self.staged is not None:
            self.staged.abandon()
        raise self.error or RuntimeError("staged file missing")


EXIT_FLUSH_SECONDS = 30.0
"""How long a process that exits with a writer still open waits for its rows to be published (see
:func:`_flush_at_exit`)."""


def _flush_at_exit(writer: PartitionedWriter) -> Callable[[], None]:
    """What the interpreter runs at exit for a writer nobody closed: publish its rows. Without it, rows a caller
    handed over (spans an exporter acknowledged) were lost with the background threads, which are daemons: an
    exporter used without ``shutdown()`` exported 3,000 spans and stored none. A flush, not a close: an
    OpenTelemetry provider's own exit hook, registered before, runs after this one and may still export spans.
    The writer is held weakly, so the hook keeps nothing alive."""
    held = weakref.ref(writer)

    def flush() -> None:
        if (alive := held()) is not None and not alive._stopped:
            try:
                if not alive.flush(EXIT_FLUSH_SECONDS):
                    logger.warning(
                        "agenteval: %s rows under %s not published within %g s of the process's exit",
                        alive.table_name,
                        alive.root,
                        EXIT_FLUSH_SECONDS,
                    )
            except Exception:
                logger.exception("agenteval: could not publish %s files under %s", alive.table_name, alive.root)

    return flush


class PartitionedWriter:
    """Buffers batches per partition; publishes a partition's rows as one file when it reaches
    ``max_rows`` or its oldest rows are ``flush_interval`` seconds old. Thread-safe.

    ``check``, when given, sees each batch before anything of it is buffered: a batch it refuses (by raising)
    leaves the rows taken before it as they were, where a bad row found only when its file is written would fail
    that whole file, and every retry of it.
    """

    def __init__(
        self,
        root: StoreRoot | str,
        table_name: str,
        schema: pa.Schema,
        partitioner: Partitioner,
        *,
        max_rows: int = 100_000,
        flush_interval: float = 1.0,
        row_group_rows: int = ROW_GROUP_ROWS,
        check: BatchCheck | None = None,
    ) -> None:
        self.root: StoreRoot = as_root(root)
        self.table_name = table_name
        self.schema = schema
        self.partitioner = partitioner
        self.max_rows = max_rows
        self.flush_interval = flush_interval
        self.row_group_rows = min(row_group_rows, max_rows)
        self.check = check
        self.files_written = 0
        self.rows_dropped = 0
        self._lock = threading.Lock()  # the callers' buffers, and the order of jobs
        self._buffers: dict[str, _Buffer] = {}
        self._jobs: queue.Queue[object] = queue.Queue(MAX_QUEUED_JOBS)
        self._open: dict[str, _OpenFile] = {}  # the background thread's alone, like _retry
        self._retry: dict[str, list[pa.Table]] = {}
        self._closed = threading.Event()
        self._last: Future[None] = Future()  # the last files' publishing, the flush thread's final step
        self._stopped = False
        self._failing = False
        remove_stale_staging(self.root)
        self._start_threads()
        self._flush_at_exit = _flush_at_exit(self)
        atexit.register(self._flush_at_exit)
        if hasattr(os, "register_at_fork"):
            after_fork = weakref.WeakMethod(self._after_fork_in_child)
            os.register_at_fork(after_in_child=lambda: (method := after_fork()) and method())

    def _start_threads(self) -> None:
        name = self.table_name
        self._worker = threading.Thread(target=self._work, name=f"agenteval-{name}-writer", daemon=True)
        self._worker.start()
        self._timer = threading.Thread(target=self._flush_on_time, name=f"agenteval-{name}-flush", daemon=True)
        self._timer.start()

    def _after_fork_in_child(self) -> None:
        """A forked child starts empty, with threads of its own: what was buffered is the parent's
        to publish, and the parent's staged files are never touched from here."""
        for open_file in self._open.values():
            if open_file.staged is not None:
                open_file.staged.detach()
        self._open, self._retry, self._buffers = {}, {}, {}
        self._lock = threading.Lock()
        self._jobs = queue.Queue(MAX_QUEUED_JOBS)
        if not self._closed.is_set():
            self._closed = threading.Event()
            self._last = Future()
            self._start_threads()

    def append(self, batch: pa.RecordBatch) -> None:
        """Buffer ``batch``; a partition that reached ``max_rows`` is published before this returns
        (raises if it could not be; its rows are kept). Raises what ``check`` raises, taking nothing of ``batch``."""
        if batch.num_rows == 0:
            return
        if self.check is not None:
            self.check(batch)
        published = []
        with self._lock:  # checked under the lock: close() publishes every row accepted before it stopped
            if self._stopped:
                raise RuntimeError(f"the {self.table_name} writer under {self.root} is closed")
            for partition, rows in self.partitioner(batch):
                buffer = self._buffers.setdefault(partition, _Buffer())
                buffer.batches.append(rows)
                buffer.rows += rows.num_rows
                buffer.file_rows += rows.num_rows
                if buffer.file_rows >= self.max_rows:
                    self._hand_over(partition, self._buffers.pop(partition))
                    published.append(self._publish([partition], retry=False))
                elif buffer.rows >= self.row_group_rows:
                    self._hand_over(partition, buffer)
        for done in published:
            done.result()

    def flush(self, timeout: float | None = None) -> bool:
        """Publish everything buffered: True once it is. False when that takes longer than ``timeout`` seconds
        (None: as long as it takes), the store being slow or stalled; nothing is dropped then, the rows are
        published once the store answers (see the module's doc). Raises if a file could not be written (its rows
        are kept)."""
        deadline = _Deadline(timeout)
        # Held by an append waiting for room in the background thread's queue (back-pressure), or by the flush
        # thread handing rows over: both wait for a stalled store.
        if not self._lock.acquire(timeout=deadline.lock_timeout()):
            return False
        try:
            # Once closed, what is left to wait for is the last files, which a close that gave up left on their way.
            done = self._last if self._stopped else self._publish_all(deadline)
        except queue.Full:
            return False
        finally:
            self._lock.release()
        try:
            done.result(deadline.left())
        except futures.TimeoutError:
            return False
        return True

    def close(self, timeout: float | None = None) -> bool:
        """Publish what is left and stop the background threads: True once done. False when that takes longer
        than ``timeout`` seconds (None: as long as it takes); the last rows are still published then, by the
        flush thread, once the store answers, if the process lives that long. Raises if the last files could not
        be written (their rows are counted in :attr:`rows_unwritten`). Safe to call twice.

        Appends racing with it either get their rows into the last files or raise: the writer stops taking rows
        in the same locked step that hands the last ones over, so no row is accepted and then left behind."""
        deadline = _Deadline(timeout)
        atexit.unregister(self._flush_at_exit)
        self._closed.set()  # the flush thread's cue for its last step, _publish_last
        try:
            self._last.result(deadline.left())
        except futures.TimeoutError:
            return False
        self._worker.join(deadline.left())
        return not self._worker.is_alive()

    def discard(self) -> int:
        """Drop every row not published yet and take no more (:meth:`close` then publishes nothing): for rows
        this process may no longer commit. Returns how many rows were dropped from the callers' side."""
        with self._lock:
            self._stopped = True
            dropped = sum(buffer.rows for buffer in self._buffers.values())
            self._buffers.clear()
            self._jobs.put(_DISCARD)  # behind the rows already handed over, which it drops too
        return dropped

    def _publish_all(self, deadline: _Deadline = _NO_DEADLINE) -> Future[None]:
        """Hand every buffer over and queue the publishing of every partition; called under the lock.

        Raises ``queue.Full`` when the background thread's queue stays full past ``deadline``. The buffers are
        then all still listed, those handed over with no rows left: the flush thread publishes every one of them
        when it is due, as it does a file whose first row groups went ahead of it."""
        for partition, buffer in self._buffers.items():
            self._hand_over(partition, buffer, deadline.left())
        done = self._publish(None, retry=True, timeout=deadline.left())
        self._buffers.clear()
        return done

    # The callers' side: jobs are queued under the lock, so they run in the order rows arrived.

    def _hand_over(self, partition: str, buffer: _Buffer, timeout: float | None = None) -> None:
        """Queue the buffer's rows for the background thread; raises ``queue.Full`` past ``timeout``, leaving the
        buffer as it was."""
        if buffer.rows:
            self._jobs.put(_Write(partition, pa.Table.from_batches(buffer.batches, self.schema)), timeout=timeout)
            buffer.batches, buffer.rows = [], 0

    def _publish(self, partitions: list[str] | None, *, retry: bool, timeout: float | None = None) -> Future[None]:
        done: Future[None] = Future()
        self._jobs.put(_Publish(partitions, retry, done), timeout=timeout)
        return done

    def _flush_on_time(self) -> None:
        tick = max(0.01, self.flush_interval / 4)
        while not self._closed.wait(tick):
            self._publish_due()
        self._publish_last()

    def _publish_due(self) -> None:
        now = time.monotonic()
        with self._lock:
            due = [p for p, buffer in self._buffers.items() if now - buffer.since >= self.flush_interval]
            for partition in due:
                self._hand_over(partition, self._buffers.pop(partition))
            if not due and not self._retry:
                return
            done = self._publish(due, retry=True)
        try:
            done.result()
            self._failing = False
        except Exception:
            if not self._failing:  # once per failure spell, not per file
                logger.exception("agenteval: could not publish %s files under %s", self.table_name, self.root)
            self._failing = True

    def _publish_last(self) -> None:
        """For :meth:`close`, on this thread, so that a close that stops waiting leaves the last rows on their way:
        stop taking rows, publish every one taken, then stop the background thread."""
        try:
            with self._lock:
                self._stopped = True
                done = self._publish_all()
            done.result()
        except Exception as exc:
            error: Exception | None = exc
        else:
            error = None
        self._jobs.put(_STOP)
        if error is None:
            self._last.set_result(None)
        else:
            self._last.set_exception(error)

    # The background thread's side.

    def _work(self) -> None:
        while (job := self._jobs.get()) is not _STOP:
            if isinstance(job, _Write):
                try:
                    self._write(job.partition, job.table)
                except Exception:  # _OpenFile keeps write errors for publish; this is a bug
                    logger.exception("agenteval: %s writer failed to buffer rows", self.table_name)
            elif job is _DISCARD:
                for open_file in self._open.values():
                    if open_file.staged is not None:
                        open_file.staged.abandon()
                self._open.clear()
                self._retry.clear()
            elif isinstance(job, _Publish):
                try:
                    self._publish_files(job.partitions, job.retry)
                except Exception as exc:
                    job.done.set_exception(exc)
                else:
                    job.done.set_result(None)

    def _write(self, partition: str, table: pa.Table) -> None:
        open_file = self._open.get(partition)
        if open_file is None:
            self._open[partition] = _OpenFile(self._stage, self._retry.pop(partition, []) + [table])
        else:
            open_file.write(table)

    def _stage(self) -> StagedFile:
        return StagedFile(self.root, self.table_name, self.schema)

    def _publish_files(self, partitions: list[str] | None, retry: bool) -> None:
        names = list(self._open) if partitions is None else list(partitions)
        if retry:
            names += [p for p in self._retry if p not in names]
        error: Exception | None = None
        for partition in names:
            open_file = self._open.pop(partition, None)
            if open_file is None:
                kept = self._retry.pop(partition, None)
                if not kept:
                    continue
                open_file = _OpenFile(self._stage, kept)
            try:
                open_file.publish(partition)
                self.files_written += 1
            except Exception as exc:
                self._keep_for_retry(partition, open_file.tables)
                error = exc
        if error is not None:
            raise error

    @property
    def rows_unwritten(self) -> int:
        """Rows handed over that are in no published file: dropped past the retry limit, or (once closed) kept
        for a retry that will not come."""
        return self.rows_dropped + sum(t.num_rows for tables in self._retry.values() for t in tables)

    def _keep_for_retry(self, partition: str, tables: list[pa.Table]) -> None:
        kept = tables + self._retry.get(partition, [])
        rows = sum(t.num_rows for t in kept)
        while rows > MAX_BUFFERED_ROWS and len(kept) > 1:
            dropped = kept.pop(0)
            rows -= dropped.num_rows
            self.rows_dropped += dropped.num_rows
        self._retry[partition] = kept
