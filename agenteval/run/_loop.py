"""The event loop a run executes on: :func:`asyncio.run`, except that the end of the run never waits forever on an
agent that ignores its cancellation.

``asyncio.run`` cancels every task still pending when its coroutine returns and waits for all of them to end.
An async agent that catches ``CancelledError`` and carries on (a retry loop with a bare ``except:`` or
``except BaseException``) never ends, so the run would hang after saving everything, and Ctrl-C could not stop
it. Here such a task gets :data:`CANCEL_GRACE_SECONDS` and is then left behind (a trial's agent stuck so while the
run goes on is given up by the scheduler, see ``_scheduler``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

from agenteval_instrumentation import ContextThreadPoolExecutor

T = TypeVar("T")

CANCEL_GRACE_SECONDS = 5.0
"""How long a cancelled agent may take to end (closing its connections, cancelling its own calls) before it is
left running: a trial past its timeout, and the tasks still pending when a run's event loop closes."""

_left: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
"""Tasks given up on: closing the loop does not wait for them again."""
_contexts: weakref.WeakKeyDictionary[asyncio.Task[Any], contextvars.Context] = weakref.WeakKeyDictionary()
"""The context each task started with :func:`start_task` runs in."""


def start_task(coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """A task, as :func:`asyncio.create_task` makes it, whose context is kept: if it has to be left running, its
    coroutine is ended in that context when the loop closes (see :func:`_close_coroutine`)."""
    context = contextvars.copy_context()
    task = asyncio.get_running_loop().create_task(coroutine, context=context)
    _contexts[task] = context
    return task


def leave_running(task: asyncio.Task[Any]) -> None:
    """Give up on ``task``: it runs on as long as the loop does, and the loop closes without it (no "Task was
    destroyed but it is pending" when it is collected: leaving it was the point)."""
    _left.add(task)
    task._log_destroy_pending = False  # type: ignore[attr-defined]  # as asyncio clears it on tasks it gives up on


def run_to_the_end(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on a new event loop, as :func:`asyncio.run` does (Ctrl-C cancels it first); then cancel what
    is still pending and close the loop. ``main``'s own task is waited for however long it takes (it saves what
    finished); any other task at most :data:`CANCEL_GRACE_SECONDS`, then it is left behind."""
    runner = asyncio.Runner()
    # The loop's default executor carries the caller's context into its threads, as asyncio.to_thread does: an
    # agent's ``loop.run_in_executor(None, tool, ...)`` then runs in its trial, and its spans are that trial's.
    runner.get_loop().set_default_executor(ContextThreadPoolExecutor(thread_name_prefix="asyncio"))
    tasks: list[asyncio.Task[Any]] = []

    async def recorded() -> T:
        task = asyncio.current_task()
        assert task is not None
        tasks.append(task)
        return await main

    try:
        return runner.run(recorded())
    finally:
        _close(runner, tasks[0] if tasks else None)


def _close(runner: asyncio.Runner, main: asyncio.Task[Any] | None) -> None:
    loop = runner.get_loop()
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    if main in pending:
        loop.run_until_complete(asyncio.wait([main]))
    rest = [task for task in pending if not task.done() and task not in _left]
    if rest:
        loop.run_until_complete(asyncio.wait(rest, timeout=CANCEL_GRACE_SECONDS))
    stuck = [task for task in pending if not task.done()]
    if not stuck:
        runner.close()
        return
    for task in stuck:
        leave_running(task)
    # What Runner.close() does, but for the wait on every pending task, which would never end.
    try:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        for task in stuck:  # the loop runs no more: nothing steps them after this
            _close_coroutine(task)
        asyncio.set_event_loop(None)
        loop.close()


def _close_coroutine(task: asyncio.Task[Any]) -> None:
    """End a left-behind task's coroutine (GeneratorExit at its await) in the task's own context, so that its
    ``finally`` blocks can reset the context variables they set (the trial's ids, the current span). Collected
    later, it would end outside that context, and each one would print a traceback as the process exits."""
    context = _contexts.get(task) or contextvars.copy_context()
    with contextlib.suppress(BaseException):  # whatever the agent does on its way out, the run is over
        context.run(task.get_coro().close)
