"""A shared limiter per model, process-wide: additive increase, multiplicative decrease (AIMD).

Every call to one model (provider, base URL and model) holds a place while its request is in flight. A 429
halves the places (never below one); a run of successes as long as the current limit adds one (never above the
bound). Calls beyond the limit wait in order. The limiter is thread-safe and serves any number of event loops
(a notebook's run has a loop of its own, sync agents call from worker threads), so it holds no asyncio lock:
a waiter's future is resolved on its own loop.

Calls waiting (here or in a retry's backoff) are counted process-wide for the progress display.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Protocol

DEFAULT_INITIAL = 32
DEFAULT_MAXIMUM = 256
"""The most places a model's limiter grows to; its first limit is :data:`DEFAULT_INITIAL`."""


class Limiter(Protocol):
    """What a model call needs of a limiter: a place before the request, given back with what happened."""

    async def acquire(self) -> tuple[int, float]: ...

    def release(self, generation: int, outcome: str) -> None: ...


@dataclasses.dataclass(eq=False)
class _Waiter:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    granted: bool = False


class AdaptiveLimiter:
    """Places for concurrent requests to one model, adapted to the 429s it meets."""

    def __init__(self, initial: int = DEFAULT_INITIAL, minimum: int = 1, maximum: int = DEFAULT_MAXIMUM) -> None:
        if not 1 <= minimum <= initial <= maximum:
            raise ValueError("the limiter needs 1 <= minimum <= initial <= maximum")
        self.limit = initial
        self.minimum = minimum
        self.maximum = maximum
        self.active = 0
        self._successes = 0
        self._generation = 0
        """Bumped at each decrease: 429s of requests sent before it say nothing new, so one burst halves once."""
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._lock = threading.Lock()
        self.limits: list[int] = [initial]
        """Every limit taken, in order: how concurrency fell and recovered."""

    async def acquire(self) -> tuple[int, float]:
        """Wait for a place; returns the generation it was granted in and the seconds waited."""
        with self._lock:
            if not self._waiters and self.active < self.limit:
                self.active += 1
                return self._generation, 0.0
            loop = asyncio.get_running_loop()
            waiter = _Waiter(loop, loop.create_future())
            self._waiters.append(waiter)
        started = time.monotonic()
        waiting(+1)
        try:
            await waiter.future
        except BaseException:
            with self._lock:
                if waiter.granted:  # granted as it was cancelled: hand the place on
                    self.active -= 1
                    self._grant()
                else:
                    self._waiters.remove(waiter)
            raise
        finally:
            waiting(-1)
        with self._lock:
            return self._generation, time.monotonic() - started

    def release(self, generation: int, outcome: str) -> None:
        """Give the place back; ``outcome`` is ``ok``, ``throttled`` (a 429) or ``other`` (neither says anything)."""
        with self._lock:
            self.active -= 1
            if outcome == "throttled" and generation == self._generation:
                self._set(max(self.minimum, self.limit // 2))
                self._generation += 1
                self._successes = 0
            elif outcome == "ok":
                self._successes += 1
                if self._successes >= self.limit and self.limit < self.maximum:
                    self._set(self.limit + 1)
                    self._successes = 0
            self._grant()

    def _set(self, limit: int) -> None:
        if limit != self.limit:
            self.limit = limit
            self.limits.append(limit)

    def _grant(self) -> None:
        """Wake waiters in order while there are places (called with the lock held)."""
        while self._waiters and self.active < self.limit:
            waiter = self._waiters.popleft()
            waiter.granted = True
            self.active += 1
            waiter.loop.call_soon_threadsafe(_resolve, waiter.future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


_limiters: dict[str, Limiter] = {}
_limiters_lock = threading.Lock()


def _own_limiter(key: str) -> Limiter:
    return AdaptiveLimiter()


_make_limiter: Callable[[str], Limiter] = _own_limiter


def limiter_for(key: str) -> Limiter:
    """The process's one limiter for ``key`` (provider, base URL and model)."""
    with _limiters_lock:
        found = _limiters.get(key)
        if found is None:
            found = _limiters[key] = _make_limiter(key)
        return found


def use_limiters(make: Callable[[str], Limiter] | None) -> None:
    """Where this process's limiters come from from now on: ``make(key)``, or (None) one
    :class:`AdaptiveLimiter` per key in this process. A cluster's worker uses limiters shared by the whole
    cluster (``agenteval.run._ray``), so that every worker backs off together when a model says 429."""
    global _make_limiter
    with _limiters_lock:
        _limiters.clear()
        _make_limiter = make or _own_limiter


_waiting = 0
_watchers: list[Callable[[int], None]] = []
_waiting_lock = threading.Lock()


def waiting(change: int) -> None:
    """A model call started (+1) or stopped (-1) waiting: on the limiter or in a retry's backoff."""
    global _waiting
    with _waiting_lock:
        _waiting += change
        watchers = list(_watchers)
    for watcher in watchers:
        watcher(change)


def calls_waiting() -> int:
    """Model calls of this process waiting right now."""
    return _waiting


def watch_waiting(watcher: Callable[[int], None]) -> Callable[[], None]:
    """Call ``watcher(+1 or -1)`` (from any thread) as calls start and stop waiting; returns the unsubscribe."""
    with _waiting_lock:
        _watchers.append(watcher)

    def stop() -> None:
        with _waiting_lock:
            if watcher in _watchers:
                _watchers.remove(watcher)

    return stop
