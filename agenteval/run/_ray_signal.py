"""What the driver of a ``--executor ray`` run tells its tasks while they run: go on, start nothing more, or stop.

Ray can only cancel a running task by interrupting it (``KeyboardInterrupt`` wherever its thread is, DuckDB
included) or by killing its process; either loses the trials it had finished, whose rows it had yet to return.
So the driver keeps one small actor per run, :class:`TaskSignal`, and its tasks ask it: a task asks once before
it starts (a task that may not start returns at once, with no trials), and then every
:data:`~agenteval.run._scheduler.TICK_SECONDS` while it runs (a task told to stop stops as a local run stops on
Ctrl-C: no new trial, the running ones cancelled, and the finished ones saved and returned).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from ._scheduler import TICK_SECONDS

GO = "go"
"""Tasks start and run to their end."""
FINISH = "finish"
"""No task starts any more; the running ones run to their end (a task of the run failed for good)."""
STOP = "stop"
"""No task starts; the running ones stop after the trials they are running, and return the finished ones."""


class TaskSignal:
    """The run's word to its tasks; made a Ray actor owned by the driver (it ends with the driver)."""

    def __init__(self) -> None:
        self._word = GO

    def tell(self, word: str) -> None:
        # A stop is never taken back by a later "finish".
        if self._word != STOP:
            self._word = word

    def word(self) -> str:
        return self._word


def start_task_signal(ray: Any) -> Any:
    """The run's :class:`TaskSignal` actor (no CPU of its own, so a full cluster still runs it)."""
    return ray.remote(TaskSignal).options(num_cpus=0).remote()


async def word_of(signal: Any) -> str:
    """What ``signal`` says now, without blocking the event loop; :data:`GO` when it cannot be asked (a driver
    that died takes its tasks with it: Ray ends the tasks of an owner that is gone)."""
    try:
        word: str = await asyncio.wrap_future(signal.word.remote().future())
    except Exception:
        return GO
    return word


async def stop_when_told(signal: Any, stop: asyncio.Event) -> None:
    """Set ``stop`` (the task's run's own Ctrl-C) once ``signal`` says :data:`STOP`; asked every tick."""
    while not stop.is_set():
        await asyncio.sleep(TICK_SECONDS)
        if await word_of(signal) == STOP:
            stop.set()


@contextlib.asynccontextmanager
async def watching(signal: Any, stop: asyncio.Event) -> AsyncIterator[None]:
    """While the body runs, ``stop`` is set when ``signal`` says so."""
    watcher = asyncio.ensure_future(stop_when_told(signal, stop))
    try:
        yield
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
