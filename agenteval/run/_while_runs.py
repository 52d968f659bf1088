"""A change to the whole process that lasts while any run is open: made by the first run to open, undone by the last
to close. Runs may overlap (two ``evaluate_async`` on one loop, ``evaluate`` from threads), so they are counted."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator


class WhileAnyRun:
    """``start()`` when the count of open runs goes from 0 to 1, ``end()`` when it goes back to 0 (both under a
    lock, so a run opening as the last one closes never sees the change half made)."""

    def __init__(self, start: Callable[[], None], end: Callable[[], None]) -> None:
        self._start = start
        self._end = end
        self._lock = threading.Lock()
        self._runs = 0

    @property
    def active(self) -> bool:
        """Whether a run is open."""
        return self._runs > 0

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._runs == 0:
                self._start()
            self._runs += 1
        try:
            yield
        finally:
            with self._lock:
                self._runs -= 1
                if self._runs == 0:
                    self._end()
