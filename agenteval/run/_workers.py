"""Reusable threads for sync agents: a trial hands its call to an idle worker instead of starting a thread.

Starting a thread per call cost 61.7 µs against 24.5 µs for a hand-off, and under a profiler half of the
loop thread's time went to lock waits inside ``Thread.start``. What a thread per call gave is kept: a call
never waits behind another, because a call that finds no idle worker starts a new one; so an agent that
hangs past its timeout holds only its own worker, which rejoins the idle ones if the call ever returns.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", contextvars.Context, Callable[..., Any], tuple, dict]

IDLE_SECONDS = 30.0
"""A worker idle this long ends: a run's pool shrinks back after a burst, and threads never outlive a closed pool
by more than this."""


class SyncWorkers:
    """Daemon threads that run sync calls for an event loop and settle an asyncio future with the outcome.

    The pool grows to the number of calls in flight (each caller's concurrency bounds it) and no further.
    """

    def __init__(self, name: str = "agenteval-trial") -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # workers waiting for a job that no submitted job has claimed yet
        self._started = 0
        self._closed = False

    @property
    def started(self) -> int:
        """How many worker threads this pool has started (a pool that reuses them starts few)."""
        return self._started

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        """Run ``fn(*args, **kwargs)`` on a worker with the caller's context (so its spans nest under the
        caller's); the returned future settles on the caller's loop. Cancelling the future abandons the call:
        whatever it returns later is discarded. A StopIteration or GeneratorExit comes wrapped (see
        :class:`_Carried`): :meth:`call` is the way to await a call."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker pool is closed")
            start = self._idle == 0
            if start:
                self._started += 1
            else:
                self._idle -= 1
        self._jobs.put((loop, future, contextvars.copy_context(), fn, args, kwargs))
        if start:
            # Started in an empty context: the worker is the run's and serves every trial, never the one whose
            # call started it (see ``._threads``); each call runs in its caller's context.
            worker = threading.Thread(target=self._work, name=self._name, daemon=True)
            contextvars.Context().run(worker.start)
        return future

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``await submit(fn, ...)``, with what ``fn`` raised raised here as it was, even an exception that a
        future cannot carry as it is (see :class:`_Carried`)."""
        try:
            return await self.submit(fn, *args, **kwargs)
        except _Carried as carried:
            error = carried.error
        # Raised from this coroutine's frame, it travels up the awaiting coroutines like any exception (a
        # StopIteration becomes "coroutine raised StopIteration", as it does from an async function; the trial records
        # the StopIteration, its cause).
        raise error

    def close(self) -> None:
        """Let idle workers end now and busy ones once their call returns."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, 0
        for _ in range(idle):
            self._jobs.put(None)

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                if self._leave_idle():
                    return
                continue
            if job is None:
                return
            loop, future, ctx, fn, args, kwargs = job
            outcome = _call(future, ctx, fn, args, kwargs)
            # Idle before the caller hears back, so a caller that submits its next call at once finds this worker.
            with self._lock:
                closed = self._closed
                if not closed:
                    self._idle += 1
            if outcome is not None:
                _deliver(loop, future, outcome)
            if closed:
                return

    def _leave_idle(self) -> bool:
        """An idle worker that timed out ends unless a job was handed to it meanwhile."""
        with self._lock:
            if self._idle == 0:  # every idle worker's slot is claimed: a job for this one is on its way
                return False
            self._idle -= 1
            return True


_Outcome = tuple[Callable[[Any], None], Any]


class _Carried(Exception):
    """An exception a future cannot hand to its awaiting task as it is: a future refuses StopIteration (the
    call's outcome would never arrive, so the caller waited out its timeout), and a GeneratorExit thrown into a
    task closes every coroutine it awaits through instead of reaching the one that awaits the call (so no
    ``except`` there could catch it). :meth:`SyncWorkers.call` raises it again as it was."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


def _call(
    future: asyncio.Future[Any], ctx: contextvars.Context, fn: Callable[..., Any], args: tuple, kwargs: dict
) -> _Outcome | None:
    if future.cancelled():  # abandoned before it started (the trial's timeout or the run's end)
        return None
    try:
        return (future.set_result, ctx.run(fn, *args, **kwargs))
    except (StopIteration, GeneratorExit) as exc:
        return (future.set_exception, _Carried(exc))
    except BaseException as exc:  # handed to the awaiting task
        return (future.set_exception, exc)


def _deliver(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], outcome: _Outcome) -> None:
    try:
        loop.call_soon_threadsafe(_settle, future, *outcome)
    except RuntimeError:  # the loop has closed: the run is over and the outcome is discarded
        pass


def _settle(future: asyncio.Future[Any], setter: Callable[[Any], None], value: Any) -> None:
    if not future.done():
        setter(value)
