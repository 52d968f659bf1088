"""OTLP/HTTP received by several processes: ``Collector(workers=N)``, ``agenteval collect --workers N``.

One Python process decodes OTLP with the GIL held, which caps a collector at one core. With workers, the
parent listens and accepts, and passes each connection whole (its file descriptor, over a Unix socket) to the
worker process with the fewest open connections. A worker reads that connection's requests, decodes them,
answers, and writes the spans through an intake and a Parquet writer of its own, exactly as a one-process
collector does, so an answer still means its spans are queued for the store. Several writers' files land in
the same partitions, as several instrumented processes' do. The memory of recent requests is the one table of the
parent (:mod:`._recent`; its descriptor is passed at start like a connection), so a request sent again is stored
once whichever worker takes each copy.

The parent coordinates stopping: each worker refuses new requests, answers those in progress, writes what
is queued, says how many spans it took, and exits. A worker does the same on SIGTERM or SIGINT (a terminal's
Ctrl-C reaches the whole process group) and when its parent dies, so even a ``kill -9`` of the parent leaves
every span it acknowledged on disk. A worker that dies is replaced; what it had queued is lost, as with a
one-process collector killed. With online scoring, workers report the roots they wrote to the parent, which
scores the traces (after asking every worker to publish what it holds).
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import queue
import signal
import socket
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from multiprocessing.reduction import HAVE_SEND_HANDLE, recv_handle, send_handle
from types import FrameType
from typing import Any

from agenteval_instrumentation.masking import masked_logger

from ._intake import CollectStats, Intake
from ._recent import RecentRequests
from ._settings import LISTEN_BACKLOG

logger = masked_logger(__name__)

CAN_HAND_OVER_CONNECTIONS = HAVE_SEND_HANDLE
"""Whether this platform passes sockets between processes (Unix does; Windows has no ``send_handle`` here)."""
START_SECONDS = 60.0
"""How long a worker may take to start (import pyarrow and the OpenTelemetry protobufs) before start fails."""
REPLY_SECONDS = 30.0
"""How long the parent waits for a worker's counts or its flush."""
STOP_SECONDS = 300.0
"""How long the parent waits for a worker to write out its queue at a stop."""
POLL_SECONDS = 0.25
"""How often the parent's accepting thread looks whether the collector is stopping (a stop wakes it at once on
Linux), and a worker whether a signal asked it to stop."""


@dataclasses.dataclass(frozen=True)
class WorkerSettings:
    """What a worker needs to receive and write like the parent would (picklable: sent at spawn)."""

    store: str
    address: tuple[str, int]
    token: str | None
    max_body_bytes: int
    body_timeout: float
    max_queued_spans: int
    flush_interval: float | None
    report_roots: bool
    """With online scoring: tell the parent the traces whose root spans were written."""


class HttpWorkers:
    """The parent's side: the listening socket, the thread that hands out connections, and the workers."""

    def __init__(
        self,
        address: tuple[str, int],
        settings: WorkerSettings,
        count: int,
        recent: RecentRequests,
        on_roots: Callable[[list[str]], None] | None = None,
    ) -> None:
        """``recent``: the parent's memory of recent requests, which every worker shares."""
        self.settings, self.count, self.recent, self.on_roots = settings, count, recent, on_roots
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._listener = socket.create_server(address, family=family, backlog=LISTEN_BACKLOG)
        self._listener.settimeout(POLL_SECONDS)
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._closing = False
        self._accepting = threading.Thread(target=self._accept, name="agenteval-collect-accept", daemon=True)

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def start(self) -> HttpWorkers:
        """Start every worker and wait until each is ready; then accept connections."""
        try:
            # Started together, then waited for: each takes about a second to import what it needs.
            self._workers = [
                _Worker.launch(n, self.settings, self.recent, self._worker_died, self.on_roots)
                for n in range(self.count)
            ]
            for worker in self._workers:
                worker.wait_ready()
        except BaseException:
            self.close()
            raise
        self._accepting.start()
        return self

    def pids(self) -> list[int]:
        with self._lock:
            return [w.pid for w in self._workers if w.pid is not None]

    def stats(self) -> list[CollectStats]:
        """Each worker's counts (a replaced worker's are its successor's from zero)."""
        with self._lock:
            workers = list(self._workers)
        return [worker.stats() for worker in workers]

    def flush(self) -> bool:
        """Every worker publishes the spans it holds (online scoring reads them next)."""
        with self._lock:
            workers = list(self._workers)
        return all([worker.flush() for worker in workers])

    def close(self) -> None:
        """Stop accepting, then stop every worker (each writes out its queue); returns when all have exited."""
        with self._lock:
            self._closing = True
            workers = list(self._workers)
        with contextlib.suppress(OSError):  # wakes a blocked accept() on Linux, rather than at its next poll
            self._listener.shutdown(socket.SHUT_RDWR)
        if self._accepting.is_alive():
            self._accepting.join()
        self._listener.close()
        for worker in workers:
            worker.ask_to_stop()
        for worker in workers:
            worker.wait_stopped()

    def _accept(self) -> None:
        while not self._closing:
            try:
                connection, address = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._closing:
                    return
                logger.exception("agenteval collect: could not accept a connection")
                continue
            with connection:  # the worker has its own descriptor once handed over
                self._hand_over(connection, address)

    def _hand_over(self, connection: socket.socket, address: Any) -> None:
        """To the live worker with the fewest open connections; with none (every one is being replaced), the
        connection is closed and the client reconnects and retries."""
        with self._lock:
            alive = [w for w in self._workers if w.alive]
        for worker in sorted(alive, key=lambda w: w.open_connections):
            if worker.take(connection, address):
                return

    def _worker_died(self, dead: _Worker) -> None:
        """Called from a worker's reader thread when its process ended without being asked to."""
        with self._lock:
            if self._closing:
                return
        logger.error(
            "agenteval collect: HTTP worker %d (pid %s) exited with code %s; its open connections are closed and "
            "the spans it had queued are lost; starting another",
            dead.number,
            dead.pid,
            dead.process.exitcode,
        )
        try:
            replacement = _Worker.launch(dead.number, self.settings, self.recent, self._worker_died, self.on_roots)
            replacement.wait_ready()
        except Exception:
            logger.exception("agenteval collect: could not start a replacement HTTP worker")
            return
        with self._lock:
            closing = self._closing
            if not closing:
                self._workers = [replacement if w is dead else w for w in self._workers]
        if closing:  # stopped while the replacement started: it has nothing to write
            replacement.ask_to_stop()
            replacement.wait_stopped()


class _Worker:
    """One worker process, seen from the parent: its channel, a thread reading what it says, its counts."""

    def __init__(
        self,
        number: int,
        process: BaseProcess,
        channel: Connection,
        on_death: Callable[[_Worker], None],
        on_roots: Callable[[list[str]], None] | None,
    ) -> None:
        self.number, self.process, self.channel = number, process, channel
        self.pid = process.pid
        self.open_connections = 0
        self.alive = True
        self.final: CollectStats | None = None
        self._on_death, self._on_roots = on_death, on_roots
        self._send_lock = threading.Lock()
        self._request_lock = threading.Lock()
        self._replies: queue.Queue[tuple[Any, ...] | None] = queue.Queue()
        self._stopping = False
        self._done = threading.Event()  # the worker said it stopped (everything written), or it is gone
        self._reader = threading.Thread(target=self._read, name=f"agenteval-collect-worker-{number}", daemon=True)

    @classmethod
    def launch(
        cls,
        number: int,
        settings: WorkerSettings,
        recent: RecentRequests,
        on_death: Callable[[_Worker], None],
        on_roots: Callable[[list[str]], None] | None,
    ) -> _Worker:
        # spawn, not fork: the parent has threads (receivers, writer) whose locks a fork would copy mid-use.
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe(duplex=True)
        process = context.Process(
            target=serve_worker, args=(theirs, settings), name=f"agenteval-collect-worker-{number}", daemon=True
        )
        process.start()
        theirs.close()
        send_handle(ours, recent.fileno(), process.pid)  # the first thing the worker reads
        return cls(number, process, ours, on_death, on_roots)

    def wait_ready(self) -> None:
        """Wait for the process to say it is ready, then listen to it; raise if it does not."""
        if not self.channel.poll(START_SECONDS) or _receive(self.channel) != ("ready",):
            self.process.kill()
            self.process.join()
            self.alive = False
            raise RuntimeError(
                f"agenteval collect: HTTP worker {self.number} did not start (exit code {self.process.exitcode})"
            )
        self._reader.start()

    def take(self, connection: socket.socket, address: Any) -> bool:
        """Pass ``connection`` to the process; False if it is gone."""
        try:
            with self._send_lock:
                self.channel.send(("connection", address))
                send_handle(self.channel, connection.fileno(), self.pid)
                self.open_connections += 1
        except OSError:
            return False
        return True

    def stats(self) -> CollectStats:
        if self.final is not None:
            return self.final
        reply = self._request(("stats",), REPLY_SECONDS)
        if reply is None:  # it stopped (or died) meanwhile: its final counts, when it said them
            return self.final or CollectStats(0, 0, 0, 0)
        return CollectStats(*reply[1])

    def flush(self) -> bool:
        reply = self._request(("flush",), REPLY_SECONDS)
        return bool(reply and reply[1])

    def ask_to_stop(self) -> None:
        self._stopping = True
        with contextlib.suppress(OSError), self._send_lock:
            self.channel.send(("stop",))

    def wait_stopped(self) -> None:
        """Wait for the worker to say that it has written out its queue (its final counts are kept then). Its
        process exits on its own after that (its reader thread reaps it): Python's teardown of pyarrow and
        gRPC took ~0.1 s, with nothing left to write."""
        if not self._reader.is_alive() and not self._done.is_set():
            return  # never started: launched, but start failed before it was ready
        if not self._done.wait(STOP_SECONDS):
            logger.error("agenteval collect: HTTP worker %d did not stop in %.0f s; killed", self.number, STOP_SECONDS)
            self.process.kill()
            self._reader.join()

    def _request(self, message: tuple[Any, ...], timeout: float) -> tuple[Any, ...] | None:
        with self._request_lock:
            if not self.alive or self.final is not None:
                return None
            try:
                with self._send_lock:
                    self.channel.send(message)
                return self._replies.get(timeout=timeout)
            except (OSError, queue.Empty):
                return None

    def _read(self) -> None:
        while True:
            message = _receive(self.channel)
            if message is None:
                break
            kind = message[0]
            if kind == "roots" and self._on_roots is not None:
                self._on_roots(message[1])
            elif kind == "closed":
                with self._send_lock:
                    self.open_connections -= 1
            elif kind == "stopped":
                self.final = CollectStats(*message[1])
                self._done.set()
                self._replies.put(None)  # a request sent as it stopped is not answered: it gets no reply
            else:
                self._replies.put(message)
        self.alive = False
        self._replies.put(None)  # a request waiting for an answer gets none
        self._done.set()
        self.channel.close()
        # Stopped on its own with its queue written (a signal to it alone): not a crash, and not replaced.
        self.process.join(REPLY_SECONDS)
        if not self._stopping and self.final is None:
            self._on_death(self)


def _receive(channel: Connection) -> tuple[Any, ...] | None:
    try:
        message: tuple[Any, ...] = channel.recv()
    except (EOFError, OSError):
        return None
    return message


# The worker's side ---------------------------------------------------------------------------------------------


def serve_worker(channel: Connection, settings: WorkerSettings) -> None:
    """A worker process's main: receive connections from the parent until told to stop (or the parent is gone,
    or SIGTERM/SIGINT), then write out every span it acknowledged."""
    from agenteval_exporters import ParquetSpanExporter

    from ._http import HttpReceiver
    from ._online import root_trace_ids

    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    send_lock = threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        with contextlib.suppress(OSError), send_lock:
            channel.send(message)

    def report_roots(batch: Any, remote_children: list[str]) -> None:
        ids = root_trace_ids(batch, remote_children)
        if ids:
            send(("roots", ids))

    recent = RecentRequests(recv_handle(channel))
    exporter = ParquetSpanExporter(settings.store, flush_interval=settings.flush_interval)
    on_written = report_roots if settings.report_roots else None
    intake = Intake(exporter, settings.max_queued_spans, on_written, recent, settings.max_body_bytes)
    server = HttpReceiver(
        settings.address,
        intake,
        settings.token,
        settings.max_body_bytes,
        body_timeout=settings.body_timeout,
        listen=False,
        on_closed=lambda: send(("closed",)),
    )
    send(("ready",))
    try:
        _serve(channel, server, intake, exporter, send, stopping)
    finally:
        intake.stop_accepting()
        server.close()
        intake.close()
        recent.close()
        send(("stopped", dataclasses.astuple(intake.stats())))


def _serve(
    channel: Connection,
    server: Any,
    intake: Intake,
    exporter: Any,
    send: Callable[[tuple[Any, ...]], None],
    stopping: threading.Event,
) -> None:
    while not stopping.is_set():
        try:
            if not channel.poll(POLL_SECONDS):
                continue
            message = channel.recv()
        except (EOFError, OSError):
            return  # the parent is gone: write everything out as if it had asked
        kind = message[0]
        if kind == "connection":
            connection = socket.socket(fileno=recv_handle(channel))
            server.hand_over(connection, message[1])
        elif kind == "stats":
            send(("stats", dataclasses.astuple(intake.stats())))
        elif kind == "flush":
            send(("flushed", exporter.force_flush()))
        elif kind == "stop":
            return
