"""Between the receivers and the store: a bounded queue of decoded spans and the one thread that writes them.

Receivers (HTTP and gRPC) decode a request on their own thread and hand its rows here; a request is answered
only once its rows are queued, so every span a client saw acknowledged reaches the store when the collector
stops gracefully (:meth:`Intake.close` drains the queue, then flushes the writer). When the queue holds
``max_queued_spans`` (the disk or the encoder cannot keep up), requests are refused before they are even
decoded, and the receivers answer "unavailable, retry after a second" (HTTP 503 with ``Retry-After``, gRPC
UNAVAILABLE with RetryInfo), which OTLP clients retry: they slow down and lose nothing.

A request whose decoded body is the same as one already queued (an OTLP client sends a request again when its
answer did not reach it) gets the first one's answer and stores nothing more: the last
:data:`~._recent.REMEMBERED_REQUESTS` requests are known by a digest of their body, in a table that a collector's
worker processes share (:mod:`._recent`), so a repeat is recognised whichever process takes it. A copy that arrives
while the first is still being queued waits for the first's answer, up to :data:`PENDING_WAIT_SECONDS`, and is
then refused as busy (clients retry that), never queued twice.

Rows are written by the in-process exporter's own writer (:class:`~agenteval_exporters.ParquetSpanExporter`),
so collected spans land where that exporter puts spans without an experiment (``spans/date=YYYY-MM-DD/``),
in the same files and partitions.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping

import pyarrow as pa

from agenteval_exporters import ParquetSpanExporter
from agenteval_instrumentation.masking import masked_logger

from ._budget import BODIES_AT_ONCE, BodyBudget
from ._decode import Decoded, PayloadError
from ._recent import CLAIMED, RecentRequests, Remembered
from ._settings import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_QUEUED_SPANS

logger = masked_logger(__name__)


@dataclasses.dataclass(frozen=True)
class Answer:
    """What a receiver tells the client: ``ok`` (possibly with rejected spans), ``invalid`` (the request
    cannot be read) or ``busy`` (retry later)."""

    outcome: str
    rejected: int = 0
    message: str = ""


OK = Answer("ok")
"""The answer to a request whose every span was taken (one object, however many requests remember it)."""
BUSY = Answer("busy", message="agenteval collect cannot keep up; retry later")
STILL_QUEUEING = Answer("busy", message="agenteval collect is still queueing the same request; retry later")


@dataclasses.dataclass(frozen=True)
class CollectStats:
    """Counts since start: spans acknowledged, written (handed to the writer), rejected as invalid, and
    requests refused because the queue was full or the collector was stopping; with online scoring, the
    traces scored and the scores written (and ``traces_finished``)."""

    spans_received: int
    spans_written: int
    spans_rejected: int
    requests_refused: int
    traces_scored: int = 0
    """Traces the scorers judged: of the finished ones, those the sample chose that did not end in error."""
    scores_written: int = 0
    spans_lost: int = 0
    """Acknowledged spans the store would not take (a full disk, a refused folder), lost when the collector
    stopped; not counted as written."""
    spans_repeated: int = 0
    """Spans of requests sent again (the same body as one already queued), acknowledged and not stored twice; not
    counted as received."""
    traces_finished: int = 0
    """Traces handed to online scoring (their root written), before its sample and before those that ended in error
    are left out."""
    not_scored: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Scorer -> finished traces it could not judge for want of message content (captured off by the sender), as
    ``rescore --traces`` reports them: without it, ``0 scores for 900 of 900`` gave no reason."""

    def __add__(self, other: CollectStats) -> CollectStats:
        """Two receivers' counts together (a collector's HTTP workers and its own)."""
        counts = {
            field.name: getattr(self, field.name) + getattr(other, field.name)
            for field in dataclasses.fields(self)
            if field.name != "not_scored"
        }
        return CollectStats(**counts, not_scored=dict(Counter(self.not_scored) + Counter(other.not_scored)))


class Intake:
    """The bounded queue and the writer thread. Thread-safe; one per collector."""

    def __init__(
        self,
        exporter: ParquetSpanExporter,
        max_queued_spans: int = DEFAULT_MAX_QUEUED_SPANS,
        on_written: Callable[[pa.RecordBatch, list[str]], None] | None = None,
        recent: RecentRequests | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        """``recent``: the requests queued lately, shared with the collector's other processes (one of its own
        otherwise, closed with it). ``max_body_bytes`` sizes :attr:`bodies`."""
        self.exporter = exporter
        self.bodies = BodyBudget(BODIES_AT_ONCE * max_body_bytes)
        """The bytes of request bodies this process holds at once (see :mod:`._budget`): the receivers take from it."""
        self.recent = recent if recent is not None else RecentRequests()
        self._owns_recent = recent is None
        self.on_written = on_written
        """Told of each batch the writer handed over, with the traces whose spans in it have a remote parent (online
        scoring takes the traces whose roots, or tops of such spans, it holds)."""
        self.max_queued_spans = max_queued_spans
        self._queue: deque[tuple[pa.RecordBatch, tuple[str, ...]]] = deque()  # each with its remote children
        self._queued = 0  # rows queued or being written
        self._waiting = 0  # rows queued
        self._lock = threading.Condition()
        self._in_flight = 0  # requests past the "closing?" check and not yet queued
        self._closing = False
        self._received = self._written = self._rejected = self._refused = self._lost = self._repeated = 0
        self._writer = threading.Thread(target=self._write, name="agenteval-collect-writer", daemon=True)
        self._writer.start()

    def receive(self, body: bytes, decode: Callable[[bytes], Decoded]) -> Answer:
        """Decode ``body`` and queue its spans; the answer for the client."""
        digest = hashlib.blake2b(body, digest_size=16).digest()
        repeated = self._claim(digest)
        if repeated is not None:
            return repeated
        with self._lock:
            refused = self._closing or self._queued >= self.max_queued_spans
            if refused:
                self._refused += 1
            else:
                self._in_flight += 1
        if refused:
            self.recent.release(digest)
            return BUSY
        queued = False
        try:
            try:
                decoded = decode(body)
            except PayloadError as exc:
                return Answer("invalid", message=str(exc))
            answer = Answer("ok", decoded.rejected, decoded.reason or "") if decoded.rejected or decoded.reason else OK
            rows = self._queue_decoded(decoded)
            # Remembered once queued, not before: a repeat answered "ok" meanwhile would be acknowledged unqueued.
            self.recent.remember(digest, rows, answer.rejected, answer.message)
            queued = True
            return answer
        finally:
            if not queued:  # unreadable, or a bug: a repeat is decoded anew
                self.recent.release(digest)
            with self._lock:
                self._in_flight -= 1
                # Waking the writer and a stopper on every request cost ~5% of the receivers' time holding the
                # GIL; only a stop waits for requests in flight.
                if self._closing:
                    self._lock.notify_all()

    def take_body(self, size: int) -> bool:
        """Hold ``size`` more bytes of a request's body (:attr:`bodies`); False, counting the request refused, when
        they do not fit: the receiver answers :data:`BUSY`."""
        if self.bodies.take(size):
            return True
        with self._lock:
            self._refused += 1
        return False

    def _claim(self, digest: bytes) -> Answer | None:
        """None when this request is the caller's to queue; else the answer: the one its first copy got (its spans
        counted as repeated), or busy when the first copy is still being queued after ``PENDING_WAIT_SECONDS``."""
        deadline = time.monotonic() + PENDING_WAIT_SECONDS
        pause = 0.001
        while True:
            known = self.recent.claim(digest)
            if known == CLAIMED:
                return None
            if isinstance(known, Remembered):
                with self._lock:
                    self._repeated += known.rows
                return Answer("ok", known.rejected, known.message) if known.rejected or known.message else OK
            # Another thread or process is queueing the same bytes (a client that gave up waiting sent them again).
            if time.monotonic() >= deadline:
                with self._lock:
                    self._refused += 1
                return STILL_QUEUEING
            time.sleep(pause)
            pause = min(2 * pause, 0.05)

    def _queue_decoded(self, decoded: Decoded) -> int:
        """Queue the decoded rows (waking the writer when enough wait) and count them; how many rows."""
        with self._lock:
            rows = 0
            if decoded.batch is not None:
                self._queue.append((decoded.batch, decoded.remote_children))
                rows = decoded.batch.num_rows
                self._queued += rows
                self._waiting += rows
                self._received += rows
                if self._waiting >= WAKE_ROWS > self._waiting - rows:  # see WAKE_ROWS
                    self._lock.notify_all()
            self._rejected += decoded.rejected
        return rows

    def stats(self) -> CollectStats:
        with self._lock:
            written = self._written - self._lost
            return CollectStats(
                self._received,
                written,
                self._rejected,
                self._refused,
                spans_lost=self._lost,
                spans_repeated=self._repeated,
            )

    def stop_accepting(self) -> None:
        """Refuse new requests, and wait for those already accepted to be queued."""
        with self._lock:
            self._closing = True
            self._lock.wait_for(lambda: self._in_flight == 0)

    def close(self) -> None:
        """Stop accepting, write everything queued, and flush the writer (every acknowledged span on disk)."""
        self.stop_accepting()
        with self._lock:
            self._lock.notify_all()
        self._writer.join()
        self.exporter.shutdown()
        with self._lock:
            # Handed to the writer is not written: what it could not publish by now is lost, and said so.
            self._lost = min(self.exporter.spans_unwritten, self._written)
        if self._owns_recent:
            self.recent.close()

    def _write(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(
                    lambda: self._waiting >= WAKE_ROWS or (self._closing and self._in_flight == 0), WAKE_SECONDS
                )
                if not self._queue:
                    if self._closing and self._in_flight == 0:
                        return  # nothing is left or can still arrive
                    continue
                batch, remote = self._queue.popleft()
                batches, remote_children = [batch], list(remote)
                rows = batch.num_rows
                while self._queue and rows < WRITE_ROWS:
                    batch, remote = self._queue.popleft()
                    batches.append(batch)
                    remote_children += remote
                    rows += batch.num_rows
                self._waiting -= rows
            batch = _one_batch(batches)
            try:
                self.exporter.export_batch(batch)
            except Exception:  # the writer keeps the rows of a file it could not publish and retries them
                logger.exception("agenteval collect: could not write spans under %s", self.exporter.store)
            if self.on_written is not None:
                self.on_written(batch, remote_children)
            with self._lock:
                self._queued -= rows
                self._written += rows


PENDING_WAIT_SECONDS = 2.0
"""How long a copy of a request waits for the first copy (on another thread or process) to be queued before it is
refused as busy: decoding 512 spans takes milliseconds, the largest request seconds; a busy answer is retried."""

WAKE_ROWS = 4_096
WAKE_SECONDS = 0.05
"""The writer takes what is queued every ``WAKE_SECONDS``, or as soon as ``WAKE_ROWS`` are waiting, rather than
being woken by each request: waking it per request (a futex wake while holding the GIL, then the writer
contending for it) cost ~9% of the receivers' time holding the GIL in the profile. Spans wait at most 50 ms
more on their way to the exporter, which publishes files about once a second."""

WRITE_ROWS = 32_768
"""Queued requests are handed to the writer together, up to this many rows: partitioning costs a few pyarrow
calls per hand-over, each of which releases the GIL and may wait a whole switch interval (5 ms) to get it back
from the receivers' threads. Once per 512-span request, that capped the collector near 20,000 spans/s."""


def _one_batch(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
