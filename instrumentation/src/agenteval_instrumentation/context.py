"""Keeping the current span across threads.

asyncio tasks copy the context by themselves; threads do not. Work handed to a thread pool
would otherwise start a new trace. These helpers carry the caller's context over.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def with_current_context(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` bound to the context current now; call it from any thread and spans nest here."""
    ctx = contextvars.copy_context()

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        # A copy per call: one Context cannot be entered by two threads at once.
        return ctx.copy().run(fn, *args, **kwargs)

    return run


class ContextThreadPoolExecutor(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` whose tasks run in the context of the code that submitted them."""

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        ctx = contextvars.copy_context()
        return super().submit(ctx.run, fn, *args, **kwargs)


def submit_with_context(executor: Any, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
    """``executor.submit(fn, ...)`` with the caller's context carried over, for any executor."""
    return executor.submit(contextvars.copy_context().run, fn, *args, **kwargs)
