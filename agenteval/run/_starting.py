"""Ctrl-C and SIGTERM while a run starts: before its first trial, the run stops at once (and, by the same means,
while it sums up after its trials are saved: see :func:`stopped_by_signals`).

Starting (importing the agent, building it, reading the dataset and the corpus, checking the store) runs without
an await. Under ``asyncio.Runner`` a Ctrl-C only asks the run's task to cancel, which happens at its next await:
after a heavy import of minutes, and then among the trials, which ran to the end. So while the run starts, a
signal raises where it lands, as Python's own Ctrl-C does; the run's handlers (see ``_Run._signals``) take over
once trials begin.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

STOPPED_STARTING = "stopped while the run was starting: no trial ran; to run it, give the same command again"


class StoppedStarting(KeyboardInterrupt):
    """A Ctrl-C or SIGTERM before the run's first trial: nothing ran."""


def stoppable_start() -> contextlib.AbstractContextManager[None]:
    """While the block runs, Ctrl-C and SIGTERM raise :class:`StoppedStarting` (from the main thread only: Python
    delivers signals there, and another thread leaves the application's handlers alone)."""
    return stopped_by_signals(lambda: StoppedStarting(STOPPED_STARTING))


@contextlib.contextmanager
def stopped_by_signals(stop: Callable[[], KeyboardInterrupt]) -> Iterator[None]:
    """While the block runs, Ctrl-C and SIGTERM raise ``stop()`` where they land (on the main thread; elsewhere the
    handlers are left alone). What the signal interrupted may have turned it into its own error (DuckDB's "Query
    interrupted", a user's import that wraps what it catches): after a signal, any error leaving the block is
    ``stop()`` too."""
    received: list[int] = []

    def on_signal(signum: int, frame: Any) -> NoReturn:
        received.append(signum)
        raise stop()

    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, on_signal)
        except ValueError:  # not the main thread
            break
    try:
        yield
    except Exception:
        if received:
            raise stop() from None
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
