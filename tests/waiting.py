"""Tests wait for what they need to have happened, never for a guessed time: a fixed sleep fails on a loaded
machine and wastes time on an idle one. Within a process, wait on a threading.Event or join the thread; across
processes, read the line the other process prints when it is ready; for a file or a row that appears, poll with
:func:`wait_until`. A call that must not block is run with :func:`returns_within`, whose bound is far above
what the call is given to wait."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import TypeVar

import pytest

T = TypeVar("T")

POLL_SECONDS = 0.01


def wait_until(condition: Callable[[], T], what: str, timeout: float = 30) -> T:
    """Poll ``condition`` until it returns something true, and return that; after ``timeout`` seconds, fail
    the test saying what it waited for."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout:g} s for {what}")
        time.sleep(POLL_SECONDS)
    return value


def returns_within(seconds: float, call: Callable[[], T]) -> T:
    """What ``call()`` returns (or raises), run on a thread of its own; fails the test if it has not returned after
    ``seconds`` (it is left to finish), rather than hang the test with it."""
    outcome: futures.Future[T] = futures.Future()

    def run() -> None:
        try:
            outcome.set_result(call())
        except BaseException as exc:
            outcome.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    try:
        return outcome.result(seconds)
    except futures.TimeoutError:
        pytest.fail(f"still waiting after {seconds:g} s")
