"""``Collector``: the OTLP receivers, the write queue and the store, started and stopped together.

Stopping is graceful whatever asks for it (``stop()``, leaving a ``with`` block, SIGTERM or SIGINT under
:meth:`Collector.serve`): the receivers refuse new requests (clients retry them elsewhere or later), requests
already accepted are queued, the queue is written out, and the writer publishes its last files. Every span a
client saw acknowledged is then in the store. A ``kill -9`` loses what was acknowledged in the last flush
interval (about a second), as with any collector that queues in memory; what is on disk is never damaged.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import TYPE_CHECKING

from agenteval_exporters import ParquetSpanExporter, store_path

from ..errors import UsageError
from ._grpc import GrpcReceiver
from ._http import HttpReceiver
from ._intake import CollectStats, Intake
from ._online import OnlineScoring
from ._recent import RecentRequests
from ._settings import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_GRPC_PORT,
    DEFAULT_HOST,
    DEFAULT_HTTP_PORT,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_QUEUED_SPANS,
    DEFAULT_SCORE_DELAY,
    ENV_TOKEN,
    is_loopback,
)
from ._workers import CAN_HAND_OVER_CONNECTIONS, HttpWorkers, WorkerSettings

if TYPE_CHECKING:
    from ..scorers._traces import TraceScorer


SERVE_POLL_SECONDS = 0.05
"""How often the HTTP server's loop looks whether it is being stopped: socketserver's default, half a second,
made every stop wait up to that long for it (up to a quarter of a timed run of the benchmark)."""


class Collector:
    """OTLP receivers (HTTP, and gRPC unless ``grpc_port`` is None) writing spans into a store.

    Port 0 takes a free port (see :attr:`http_port` and :attr:`grpc_port` once started). Binding anything
    but loopback needs a token (``token``, else ``AGENTEVAL_COLLECT_TOKEN``), which clients send as
    ``Authorization: Bearer TOKEN``; with a token, loopback requires it too. With ``score`` (a
    :class:`~agenteval.scorers.TraceScorer` over the same store), each trace is scored ``score_delay`` seconds
    after its root span is written (see ``agenteval.collect._online``). With ``workers`` above 1, HTTP is
    received by that many processes, each decoding and writing the connections handed to it (see
    ``agenteval.collect._workers``); gRPC stays in this process.
    """

    def __init__(
        self,
        store: str | os.PathLike[str] | None = None,
        *,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_HTTP_PORT,
        grpc_port: int | None = DEFAULT_GRPC_PORT,
        token: str | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        body_timeout: float = DEFAULT_BODY_TIMEOUT,
        max_queued_spans: int = DEFAULT_MAX_QUEUED_SPANS,
        flush_interval: float | None = None,
        score: TraceScorer | None = None,
        score_delay: float = DEFAULT_SCORE_DELAY,
        workers: int = 1,
    ) -> None:
        self.store = store_path(store)
        if workers < 1:
            raise UsageError(f"agenteval collect: --workers must be at least 1, not {workers}")
        if workers > 1 and not CAN_HAND_OVER_CONNECTIONS:
            raise UsageError("agenteval collect: --workers above 1 needs a platform that passes sockets (Unix)")
        self.workers = workers
        self.host = host
        self.token = token if token is not None else (os.environ.get(ENV_TOKEN) or None)
        if not is_loopback(host) and not self.token:
            raise UsageError(
                f"agenteval collect: binding {host} (not loopback) needs a token: --token or ${ENV_TOKEN}; "
                "clients then send 'Authorization: Bearer TOKEN'"
            )
        self._ports = (port, grpc_port)
        self._max_body_bytes = max_body_bytes
        self._body_timeout = body_timeout
        self._max_queued_spans = max_queued_spans
        self._flush_interval = flush_interval
        self._http: HttpReceiver | None = None
        self._http_workers: HttpWorkers | None = None
        self._grpc: GrpcReceiver | None = None
        self._intake: Intake | None = None
        self._recent: RecentRequests | None = None
        self._scorer, self._score_delay = score, score_delay
        self._online: OnlineScoring | None = None
        self._threads: list[threading.Thread] = []
        self._stopped = threading.Event()
        self._lock = threading.Lock()

    # Lifecycle -----------------------------------------------------------------------------------------------

    def start(self) -> Collector:
        """Bind the ports and start receiving; returns once clients can connect."""
        port, grpc_port = self._ports
        exporter = ParquetSpanExporter(str(self.store), flush_interval=self._flush_interval)
        online = None
        if self._scorer is not None:
            online = OnlineScoring(self._scorer, exporter.force_flush, self._score_delay)
        # One memory of recent requests for gRPC here and every HTTP worker: a repeat is stored once wherever it lands.
        recent = RecentRequests()
        on_written = online.written if online is not None else None
        intake = Intake(exporter, self._max_queued_spans, on_written, recent, self._max_body_bytes)
        self._intake, self._online, self._recent = intake, online, recent
        try:
            try:
                if self.workers > 1:
                    self._http_workers = self._start_workers(port)
                else:
                    self._http = HttpReceiver(
                        (self.host, port), intake, self.token, self._max_body_bytes, body_timeout=self._body_timeout
                    )
            except OSError as exc:
                raise UsageError(f"agenteval collect: cannot listen on {self.host}:{port} ({exc.strerror})") from None
            if grpc_port is not None:
                self._grpc = GrpcReceiver((self.host, grpc_port), intake, self.token, self._max_body_bytes)
        except BaseException:
            if self._http is not None:
                self._http.server_close()
            if self._http_workers is not None:
                self._http_workers.close()
            intake.close()
            recent.close()
            if online is not None:
                online.close()
            self._intake = self._online = self._http = self._http_workers = self._recent = None
            raise
        if self._http is not None:
            thread = threading.Thread(
                target=self._http.serve_forever, args=(SERVE_POLL_SECONDS,), name="agenteval-collect-http", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        if self._grpc is not None:
            self._grpc.start()
        return self

    def _start_workers(self, port: int) -> HttpWorkers:
        online = self._online
        assert self._recent is not None
        settings = WorkerSettings(
            store=str(self.store),
            address=(self.host, port),
            token=self.token,
            max_body_bytes=self._max_body_bytes,
            body_timeout=self._body_timeout,
            max_queued_spans=self._max_queued_spans,
            flush_interval=self._flush_interval,
            report_roots=online is not None,
        )
        on_roots = online.roots_written if online is not None else None
        workers = HttpWorkers((self.host, port), settings, self.workers, self._recent, on_roots)
        if online is not None:
            online.publish = self._publish_everywhere
        return workers.start()

    def _publish_everywhere(self) -> bool:
        """Online scoring's flush with workers: this process's writer (gRPC) and every worker's."""
        assert self._intake is not None
        here = self._intake.exporter.force_flush()
        return (self._http_workers is None or self._http_workers.flush()) and here

    def stop(self) -> None:
        """Stop receiving and write every acknowledged span to the store. Safe to call twice."""
        with self._lock:
            if self._stopped.is_set() or self._intake is None:
                self._stopped.set()
                return
            self._stopped.set()
        if self._grpc is not None:
            self._grpc.close()
        self._intake.stop_accepting()
        if self._http is not None:
            self._http.close()
        if self._http_workers is not None:
            self._http_workers.close()  # each worker writes out its queue
        self._intake.close()
        if self._recent is not None:
            self._recent.close()  # every worker has exited: no one uses it now
        if self._online is not None:
            self._online.close()  # the traces still waiting, scored now that every span is written

    def serve(self, ready: Callable[[], None] = lambda: None) -> None:
        """Run until SIGTERM or SIGINT (from the main thread), then stop gracefully. ``ready`` is called once the
        collector takes requests and the signals stop it gracefully: announce it there, not before, or a SIGTERM
        sent on the announcement could end the process with spans it acknowledged unwritten."""
        wake = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            wake.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            if self._intake is None:
                self.start()
            ready()
            while not wake.wait(0.5) and not self._stopped.is_set():
                pass
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def __enter__(self) -> Collector:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # What it is doing ----------------------------------------------------------------------------------------

    @property
    def http_port(self) -> int:
        """The HTTP port listened on (the one picked, for port 0)."""
        receiver = self._http or self._http_workers
        if receiver is None:
            raise RuntimeError("the collector is not started")
        return receiver.port

    @property
    def grpc_port(self) -> int | None:
        """The gRPC port listened on, or None without gRPC."""
        return None if self._grpc is None else self._grpc.port

    @property
    def http_endpoint(self) -> str:
        """What an OTLP/HTTP exporter is given: ``http://HOST:PORT/v1/traces``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.http_port}/v1/traces"

    def stats(self) -> CollectStats:
        """Spans received, written and rejected, and requests refused, so far."""
        if self._intake is None:
            return CollectStats(0, 0, 0, 0)
        stats = self._intake.stats()
        for worker in self.worker_stats():
            stats = stats + worker
        if self._online is None:
            return stats
        return dataclasses.replace(
            stats,
            traces_scored=self._online.traces_scored,
            scores_written=self._online.scores_written,
            traces_finished=self._online.traces_finished,
            not_scored=dict(self._online.not_scored),
        )

    def worker_pids(self) -> list[int]:
        """The HTTP worker processes' ids (empty without workers)."""
        return [] if self._http_workers is None else self._http_workers.pids()

    def worker_stats(self) -> list[CollectStats]:
        """Each HTTP worker process's counts (empty without workers); :meth:`stats` adds them up."""
        return [] if self._http_workers is None else self._http_workers.stats()
