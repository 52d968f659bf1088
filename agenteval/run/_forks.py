"""An agent that forks: the child must never go on as the run.

The child of an ``os.fork()`` made inside an agent that returns (or raises) instead of ending itself comes back
into the harness. A sync agent's child comes back into a worker thread, the only thread it has, which waits for the
pool's next call: a parent that waits for its child hangs its trial. An async agent's child comes back into the
event loop, which then runs the rest of the run a second time, into the same store.

So every way back from the agent's code into the harness, and each step of its own that a child's event loop
could take (starting a trial, the tick that scores and saves), compares the process with the run's. In a child it
ends the process at once with ``os._exit``: no ``finally``, no ``atexit``, no flush of the copies of the parent's
buffers and files the child holds, so nothing is written twice and nothing is written at all.
"""

from __future__ import annotations

import os
from types import TracebackType

RETURNED = 0
"""The exit status of a child whose code returned into the harness (or that the harness met on its way)."""
RAISED = 1
"""The exit status of a child whose code raised into the harness, as an uncaught exception ends a script."""


class RunProcess:
    """The run's process; as a context manager around a call of the user's code (the agent, the user simulator),
    it ends any other process that comes back out of it, a fork's child. One object serves every call (it holds
    nothing but the pid), and costs a ``getpid`` a call."""

    __slots__ = ("pid",)

    def __init__(self) -> None:
        self.pid = os.getpid()

    def end_if_forked(self, status: int = RETURNED) -> None:
        """End this process at once, with ``status``, unless it is the run's."""
        if os.getpid() != self.pid:
            os._exit(status)

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.end_if_forked(RETURNED if kind is None else RAISED)
