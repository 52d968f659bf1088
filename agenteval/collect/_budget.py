"""The bytes of request bodies a collector process holds at once, bounded: its memory stays bounded however many
senders send large requests together.

A receiver takes from the budget as a body's bytes arrive (and again as they are decompressed) and gives them back
once the request is answered; a request whose next bytes do not fit is refused as busy (HTTP 503 with
``Retry-After``, gRPC UNAVAILABLE with RetryInfo), which OTLP clients retry. Before, each of up to 256 connections
read and decoded a body of up to ``--max-body`` at once: four senders of 20 MiB requests of small spans took the
collector to 2.9 GB, and the count grew with the senders.
"""

from __future__ import annotations

import threading

BODIES_AT_ONCE = 2
"""The budget, in bodies of the largest size (``--max-body``): one such request, compressed and decompressed, or two
uncompressed ones, decode at once (decoding holds the GIL, so more at once would not be faster)."""


class BodyBudget:
    """Bytes held by requests in progress, up to ``limit``. Thread-safe."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._lock = threading.Lock()

    def take(self, size: int) -> bool:
        """Hold ``size`` more bytes; False, holding nothing more, when they do not fit."""
        with self._lock:
            if self.held + size > self.limit:
                return False
            self.held += size
            return True

    def give_back(self, size: int) -> None:
        with self._lock:
            self.held -= size
