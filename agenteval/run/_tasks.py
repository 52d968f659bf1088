"""While a run is open on an event loop, asyncio tasks created there inside a trial carry the trial as a thread does.

A task runs in a copy of its creator's context, so one an async agent creates in a trial runs in that trial's, which
is what a ``gather`` of tool calls or a ``create_task`` awaited later needs. But a task it creates and keeps (a
background consumer fed over an ``asyncio.Queue``, created on first use) would run in the first trial's context for
its life, and what it does for later trials would be stored as that first trial's late spans. So, as a thread started
inside a trial (:mod:`._threads`), such a task gets the trial's *carried* scope (:meth:`TrialScope.carried`): its
spans are the trial's while the trial is open, and no trial's (counted, and the run warns) once it has ended.

The run's loop gets a task factory for this while a run is open on it, chaining the one it had (the user's own loop,
under ``evaluate_async``), which is put back when the last run on it ends. Tasks created outside trials (the run's
own workers, each running one trial after another in its own scope) and tasks given a ``context=`` of their own keep
theirs. The runner never puts the trial's own code in such a task: it awaits the agent in the worker's task, so an
agent given up on at its timeout still runs in the trial's own scope, and its spans are stored as the trial's late
spans. What the agent itself wraps in a task (``create_task``, ``gather``, on Python 3.11 ``asyncio.wait_for``) is
carried: the trial's while it is open, and if it ignores its cancellation and runs on past the trial's end, what it
starts then is no trial's.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from ._collect import current_trial
from ._threads import carried_context

TaskFactory = Callable[..., "asyncio.Future[Any]"]


class _CarryingFactory:
    """The task factory a run's loop has while runs are open on it: creates each task as the factory it replaced
    would (``previous``, or asyncio's own), in the trial's carried context when created inside a trial."""

    def __init__(self, previous: TaskFactory | None) -> None:
        self.previous = previous
        self.runs = 0
        """The runs open on the loop: none, and this factory (left under another one) passes every task through."""

    def __call__(self, loop: asyncio.AbstractEventLoop, coro: Any, /, **kwargs: Any) -> Any:
        # A task given a context of its own runs in it, as its creator asked.
        if not self.runs or kwargs.get("context") is not None or current_trial.get() is None:
            return self._create(loop, coro, **kwargs)
        # Created in the carried context rather than given it as ``context=``: a factory of the user's from before
        # Python 3.11 takes no such argument, and a task copies the context it is created in.
        return carried_context().run(self._create, loop, coro, **kwargs)

    def _create(self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        if self.previous is None:
            return asyncio.Task(coro, loop=loop, **kwargs)
        return self.previous(loop, coro, **kwargs)


_factories: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _CarryingFactory] = weakref.WeakKeyDictionary()
"""The factory installed on each loop a run is open on."""
_lock = threading.Lock()  # runs on loops in other threads open and close at the same time


@contextlib.contextmanager
def carried_into_tasks() -> Iterator[None]:
    """For the length of a run on the running loop: tasks created on it inside a trial carry the trial's scope."""
    loop = asyncio.get_running_loop()
    factory = _open(loop)
    try:
        yield
    finally:
        _close(loop, factory)


def _open(loop: asyncio.AbstractEventLoop) -> _CarryingFactory:
    with _lock:
        factory = _factories.get(loop)
        if factory is None:
            factory = _factories[loop] = _CarryingFactory(loop.get_task_factory())
            loop.set_task_factory(factory)
        factory.runs += 1
        return factory


def _close(loop: asyncio.AbstractEventLoop, factory: _CarryingFactory) -> None:
    with _lock:
        factory.runs -= 1
        if factory.runs:
            return
        del _factories[loop]
        # Put back what it replaced; but a factory set over ours during the run stays (it may call through ours,
        # which now passes every task through).
        current: object = loop.get_task_factory()
        if current is factory:
            loop.set_task_factory(factory.previous)
