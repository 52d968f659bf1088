"""While a run lasts, threads and thread-pool tasks started inside a trial run in that trial's context.

A thread starts with an empty context (before Python 3.14, and on 3.14 unless ``sys.flags.thread_inherit_context``),
so the spans of a sync agent's tools called in a ``threading.Thread`` or a ``ThreadPoolExecutor`` of its own would
belong to no trial and be lost. As ``opentelemetry-instrumentation-threading`` does, ``Thread.start`` and
``ThreadPoolExecutor.submit`` are wrapped, here only while a run is open and only for calls made inside a trial:

- a thread started inside a trial runs its ``run()`` in a copy of the starter's context. The copy is put on the
  instance as its ``run`` rather than by wrapping ``Thread.run``, so a subclass that overrides ``run()`` without
  calling ``super().run()`` (``threading.Timer``) is carried too; a thread given its own ``context=`` (3.14) keeps it.
- a task submitted inside a trial runs in a copy of the submitter's context, taken at each submit: a pool's worker
  threads are shared by whoever submits, so its own worker threads are started in an empty context, and a task
  submitted later from outside any trial runs in none.
- a callback given to a ``concurrent.futures.Future``'s ``add_done_callback`` inside a trial runs in a copy of the
  context it was added in, as an asyncio future's callback does: it runs on whichever thread finishes the future
  (the pool's worker, in no trial's context), so the spans it made belonged to no trial and were lost.

Work handed over any other way (a queue read by a thread started outside the trials, another process) is not
carried: nothing in a queue says which trial put the item there.
"""

from __future__ import annotations

import contextvars
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ._collect import current_trial
from ._while_runs import WhileAnyRun

_originals: dict[tuple[type, str], Callable[..., Any]] = {}
"""What each wrapper replaced, called through by it (kept after the last run: a wrapper someone held on to still
calls through)."""
_left_under: set[tuple[type, str]] = set()
"""Wrappers left in place under another library's wrapper of the same method (see :func:`_remove`)."""


def _install_wrappers() -> None:
    _install(threading.Thread, "start", _start)
    _install(ThreadPoolExecutor, "submit", _submit)
    _install(Future, "add_done_callback", _add_done_callback)


def _remove_wrappers() -> None:
    _remove(threading.Thread, "start", _start)
    _remove(ThreadPoolExecutor, "submit", _submit)
    _remove(Future, "add_done_callback", _add_done_callback)


carried_into_threads = WhileAnyRun(_install_wrappers, _remove_wrappers)
"""For the length of a run (``with carried_into_threads():``): threads and pool tasks started inside a trial carry
its context."""


def _install(cls: type, name: str, wrapper: Callable[..., Any]) -> None:
    if (cls, name) in _left_under:
        if _still_under(cls, name, wrapper):  # in place under another library's wrapper since the last run
            return
        _left_under.discard((cls, name))  # that library put back what it wrapped: ours is gone
    _originals[cls, name] = cls.__dict__[name]
    setattr(cls, name, wrapper)


def _remove(cls: type, name: str, wrapper: Callable[..., Any]) -> None:
    if cls.__dict__.get(name) is wrapper:
        setattr(cls, name, _originals[cls, name])
        _left_under.discard((cls, name))  # the library that wrapped ours has unwrapped it since
    elif _still_under(cls, name, wrapper):
        # Another library wrapped ours meanwhile (an instrumentor installed during the run): putting the original
        # back would drop its wrapper, so ours stays under it, passing every call through while no run is open.
        _left_under.add((cls, name))
    else:  # another library put back the method ours replaced (undoing its own wrapper from before the run)
        _left_under.discard((cls, name))


def _still_under(cls: type, name: str, wrapper: Callable[..., Any]) -> bool:
    """Whether ``cls.name`` still calls ``wrapper``: found down the ``__wrapped__`` chain of the wrappers over it (as
    wrapt and functools.wraps leave), not if that chain reaches what ``wrapper`` replaced (put back by whoever had
    wrapped it before the run), and taken to be under a wrapper that does not say what it wraps."""
    replaced = list(_wrapped_chain(_originals.get((cls, name))))
    for current in _wrapped_chain(cls.__dict__.get(name)):
        if current is wrapper:
            return True
        if any(current is method for method in replaced):
            return False
    return cls.__dict__.get(name) is not None


def _wrapped_chain(method: Any) -> Iterator[Any]:
    """``method``, what it wraps, what that wraps... (a chain that loops back on itself is not followed for ever)."""
    for _ in range(100):
        if method is None:
            return
        yield method
        method = getattr(method, "__wrapped__", None)


def _start(self: threading.Thread, *args: Any, **kwargs: Any) -> None:
    original = _originals[threading.Thread, "start"]
    # A thread given a context of its own (Python 3.14's ``context=``) runs in it, as its starter asked.
    if not carried_into_threads.active or current_trial.get() is None or getattr(self, "_context", None) is not None:
        return original(self, *args, **kwargs)
    restore = _run_in(self, carried_context())
    try:
        return original(self, *args, **kwargs)
    except BaseException:  # never started: it is as it was
        restore()
        raise


def carried_context() -> contextvars.Context:
    """A copy of the current context for a thread or task started in it, whose trial scope says it was carried:
    what it starts once the trial has ended is no trial's, unlike what the trial's own code starts."""
    context = contextvars.copy_context()
    scope = context[current_trial]
    assert scope is not None  # only called inside a trial
    context.run(current_trial.set, scope.carried())
    return context


_NOTHING = object()


def _run_in(thread: threading.Thread, context: contextvars.Context) -> Callable[[], None]:
    """Make ``thread``'s ``run()`` (whichever class defines it) run in ``context``; the function that undoes it."""
    run = thread.run
    before = thread.__dict__.get("run", _NOTHING)

    def restore() -> None:
        # Also breaks the cycle thread -> this closure -> its bound run -> thread, as Thread.run drops its target.
        if thread.__dict__.get("run") is run_in_context:
            if before is _NOTHING:
                del thread.__dict__["run"]
            else:
                thread.__dict__["run"] = before

    def run_in_context() -> None:
        try:
            context.run(run)
        finally:
            restore()

    thread.__dict__["run"] = run_in_context
    return restore


def _submit(self: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
    original = _originals[ThreadPoolExecutor, "submit"]
    if not carried_into_threads.active or current_trial.get() is None or _ships_its_tasks(self):
        return original(self, fn, *args, **kwargs)
    task = carried_context()
    # Submitted in an empty context: a worker thread this submit starts is the pool's, no trial's (see above).
    return contextvars.Context().run(original, self, task.run, fn, *args, **kwargs)


def _add_done_callback(self: Future[Any], fn: Callable[[Future[Any]], object]) -> None:
    original = _originals[Future, "add_done_callback"]
    if not carried_into_threads.active or current_trial.get() is None:
        return original(self, fn)
    context = carried_context()  # a copy for each callback: one Context cannot be entered by two threads at once

    def in_its_context(future: Future[Any]) -> object:
        return context.run(fn, future)

    return original(self, in_its_context)


def _ships_its_tasks(executor: ThreadPoolExecutor) -> bool:
    """Whether ``executor`` sends its tasks elsewhere (3.14's InterpreterPoolExecutor pickles them to another
    interpreter, where a Context cannot go)."""
    module = sys.modules.get("concurrent.futures.interpreter")
    pool = getattr(module, "InterpreterPoolExecutor", None)
    return pool is not None and isinstance(executor, pool)
