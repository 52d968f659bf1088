"""Whole-body deadlines for OTLP/HTTP: a sender must send a request's body whole within ``--body-timeout`` seconds.

A socket's timeout bounds each read, not the body: a sender that trickles a byte every few seconds (a slowloris on
the body) never trips it, and held its connection, its thread and the body budget its bytes took (see
:mod:`._budget`) for as long as it kept trickling, up to the body limit at its own pace. Each connection reading a
body is given a deadline here; one thread shuts the reading side of those past it, which ends the handler's read
at once (a read of a shut side returns no bytes), and the handler answers 408 and closes the connection.
"""

from __future__ import annotations

import socket
import threading
from time import monotonic as _now


class BodyDeadlines:
    """Connections reading a body, each due ``seconds`` after it started. Thread-safe."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._due: dict[socket.socket, float] = {}
        """Deadlines in the order they fall: every one is ``seconds`` after its start, so the first is the next."""
        self._expired: set[socket.socket] = set()
        self._lock = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    def start(self, connection: socket.socket) -> None:
        """``connection`` starts reading a body: its deadline starts now."""
        with self._lock:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._watch, name="agenteval-collect-deadlines", daemon=True)
                self._thread.start()
            self._due.pop(connection, None)
            self._due[connection] = _now() + self.seconds
            if len(self._due) == 1:
                self._lock.notify_all()  # the watcher waits without end while nothing is due

    def stop(self, connection: socket.socket) -> bool:
        """``connection`` read its body (or gave up): whether it ran past its deadline (its reading side is shut)."""
        with self._lock:
            self._due.pop(connection, None)
            if connection in self._expired:
                self._expired.discard(connection)
                return True
            return False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join()

    def _watch(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                if not self._due:
                    self._lock.wait()
                    continue
                connection, due = next(iter(self._due.items()))
                left = due - _now()
                if left > 0:
                    self._lock.wait(left)
                    continue
                del self._due[connection]
                self._expired.add(connection)
            try:
                connection.shutdown(socket.SHUT_RD)  # the handler's read returns, with no bytes
            except OSError:
                pass  # closed meanwhile: its handler is done
