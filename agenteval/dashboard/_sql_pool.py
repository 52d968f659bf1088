"""The SQL page's worker processes, as the server sees them: a fixed number, each running one statement at a time.

Each statement of the page and each download runs in a worker (:mod:`._sql_process`) whose data the OS caps at
``--sql-memory-limit``, so a statement past it costs its worker, never the server. There are ``--sql-workers`` of
them (2 by default), started with the server and kept between statements: the statements running at once, and so
the memory they may take together, are bounded by workers times limit. With every worker busy a request is
refused at once (:class:`WorkersBusy`, a 503 with ``Retry-After``) rather than queued behind statements that may
run for ``--sql-timeout``. A worker that ended, was stopped, or retired is replaced straight away, before the next
statement needs it.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Generator
from multiprocessing.connection import Connection
from typing import Any

from ..errors import AgentevalError
from ..store._limits import SERVER_STATEMENTS, StatementOutOfMemory, shown_size
from ..store._store import NoStore, NotReadOnly
from . import _sql_process as protocol
from ._sql import MEMORY_OPTION, ShownResult, SqlFailed, SqlTimeout, timed_out

RETRY_AFTER_SECONDS = 5
"""What a refused request's ``Retry-After`` asks the client to wait."""

START_SECONDS = 60.0
"""How long a worker may take to start (import DuckDB and Arrow) before its statement gives up."""

GRACE_SECONDS = 10.0
"""How long past ``--sql-timeout`` the server waits for a worker whose own timer should have stopped the statement,
before it ends the worker itself."""

ENDING_SECONDS = 5.0
"""How long a worker that closed its socket may take to end by itself (so its exit code says why) before it is
killed."""

ERRORS: dict[str, type[AgentevalError]] = {
    error.__name__: error for error in (NotReadOnly, NoStore, SqlTimeout, SqlFailed, StatementOutOfMemory)
}
"""The errors a worker reports, by name; any other (DuckDB's own) is :class:`._sql.SqlFailed`."""


class WorkersBusy(AgentevalError):
    """Every worker of the SQL page is running a statement; try again in :data:`RETRY_AFTER_SECONDS`."""


class WorkerNotStarted(AgentevalError):
    """A worker of the SQL page ended or said nothing before it was ready (its error is in the server's log)."""


class _Worker:
    """One worker process and the server's end of its socket."""

    def __init__(self, root: str, memory_limit: int) -> None:
        ours, theirs = socket.socketpair()
        with theirs:
            command = [sys.executable, "-m", protocol.__name__, str(theirs.fileno()), root, str(memory_limit)]
            self.process = subprocess.Popen(
                command, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
            )
        self.conn = Connection(ours.detach())
        self.ready = False

    def wait_ready(self) -> bool:
        """Whether the worker said it is ready (waiting for it the first time: it imports DuckDB and Arrow)."""
        if not self.ready:
            try:
                self.ready = self.receive(time.monotonic() + START_SECONDS) == {"ready": True}
            except (EOFError, OSError, TimeoutError):
                pass
        return self.ready

    def request(self, **message: Any) -> None:
        """Send a request once the worker is ready; :class:`WorkerNotStarted` when it never was."""
        if not self.wait_ready():
            raise WorkerNotStarted(
                f"a SQL worker did not start within {START_SECONDS:g} s (exit code {self.process.poll()}): the "
                "server's log says why"
            )
        self.conn.send_bytes(json.dumps(message).encode())

    def receive(self, deadline: float) -> Any:
        """The next message (a dict), or a download's next piece (a str). Raises ``EOFError`` when the worker
        ended, ``TimeoutError`` when nothing came before ``deadline`` (``time.monotonic()``)."""
        if not self.conn.poll(max(deadline - time.monotonic(), 0.0)):
            raise TimeoutError
        data = self.conn.recv_bytes()
        if data.startswith(protocol.PIECE):
            return data[len(protocol.PIECE) :].decode()
        return json.loads(data[len(protocol.MESSAGE) :])

    def stop(self, wait: float = 0.0) -> int:
        """End the worker (it holds nothing that needs closing: its connections only read) unless it ends by itself
        within ``wait`` seconds; its exit code."""
        self.conn.close()
        try:
            return self.process.wait(wait)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def _raise_if_error(message: dict[str, Any]) -> None:
    if "error" in message:
        raise ERRORS.get(message["error"], SqlFailed)(message["message"])


def _worker_ended(code: int, memory_limit: int) -> StatementOutOfMemory:
    """The error of a statement whose worker ended under it with exit code ``code``: with its data capped, memory
    is what ends it (an allocation that fails where nothing can catch it)."""
    how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    return StatementOutOfMemory(
        f"the statement's worker process ended ({how}) while it ran, most likely as it needed more memory than the "
        f"{shown_size(memory_limit)} a statement may use ({MEMORY_OPTION}): narrow it (a WHERE, a LIMIT, fewer or "
        f"shorter values), or raise {MEMORY_OPTION}"
    )


class SqlWorkers:
    """``workers`` worker processes over the store at ``root``, each statement capped at ``memory_limit`` bytes."""

    def __init__(self, root: str, memory_limit: int, workers: int = SERVER_STATEMENTS) -> None:
        self.root = root
        self.memory_limit = memory_limit
        self.workers = workers
        self._free: list[_Worker] = []
        self._lock = threading.Lock()
        self._started = self._closed = False

    def start(self) -> None:
        """Start the workers and wait until they are ready (done by the first statement otherwise): the server
        says it listens once a statement can run, and a statement never waits for a worker's start."""
        for worker in self._launch():
            worker.wait_ready()  # one not ready says so to the statement that takes it

    def _launch(self) -> list[_Worker]:
        """Start the workers unless they were; those this call started."""
        with self._lock:
            if self._started:
                return []
            self._free = [_Worker(self.root, self.memory_limit) for _ in range(self.workers)]
            self._started = True
            return list(self._free)

    def close(self) -> None:
        """End the free workers; a busy one ends when its statement gives it back."""
        with self._lock:
            self._closed = True
            free, self._free = self._free, []
        for worker in free:
            worker.stop()

    def page(self, sql: str, seconds: float) -> ShownResult:
        """What the SQL page shows of ``sql`` (:func:`._sql.run_sql`, run in a worker)."""
        worker = self._take()
        keep = False
        try:
            deadline = time.monotonic() + seconds + GRACE_SECONDS
            worker.request(kind="page", sql=sql, seconds=seconds)
            message = self._answer(worker, deadline, seconds)
            keep = not message["retire"]
            _raise_if_error(message)
            return protocol.shown_result(message["result"])
        finally:
            self._give_back(worker, keep)

    def download(self, sql: str, fmt: str, seconds: float) -> Generator[str, None, None]:
        """The pieces of ``sql``'s result as a ``fmt`` file (:func:`._sql_download.result_file`, run in a worker).
        A statement that is refused or fails to start raises here; closing the generator before its end ends the
        worker (it may be sending rows), and the server starts another."""
        worker = self._take()
        deadline = time.monotonic() + seconds + GRACE_SECONDS
        try:
            worker.request(kind="download", sql=sql, fmt=fmt, seconds=seconds)
            first = self._answer(worker, deadline, seconds)
        except BaseException:
            self._give_back(worker, keep=False)
            raise
        if "started" not in first:
            self._give_back(worker, keep=not first["retire"])
            _raise_if_error(first)
        pieces = self._pieces(worker, deadline, seconds)
        next(pieces)  # started: from now on, closing the generator gives the worker back
        return pieces

    def _pieces(self, worker: _Worker, deadline: float, seconds: float) -> Generator[str, None, None]:
        keep = False
        try:
            yield ""
            while isinstance(piece := self._answer(worker, deadline, seconds), str):
                yield piece
            keep = not piece["retire"]
            _raise_if_error(piece)
        finally:
            self._give_back(worker, keep)

    def _answer(self, worker: _Worker, deadline: float, seconds: float) -> Any:
        try:
            return worker.receive(deadline)
        except TimeoutError:
            raise timed_out(seconds) from None
        except (EOFError, OSError):
            raise _worker_ended(worker.stop(wait=ENDING_SECONDS), self.memory_limit) from None

    def _take(self) -> _Worker:
        self._launch()
        with self._lock:
            if self._closed:
                raise WorkersBusy("the dashboard is shutting down")
            if not self._free:
                raise WorkersBusy(
                    f"all {self.workers} SQL workers are running statements (--sql-workers): try again in a few seconds"
                )
            return self._free.pop()

    def _give_back(self, worker: _Worker, keep: bool) -> None:
        if not keep:
            worker.stop()
        with self._lock:
            if not self._closed:
                self._free.append(worker if keep else _Worker(self.root, self.memory_limit))
                return
        if keep:
            worker.stop()
