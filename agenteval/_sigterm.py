"""SIGTERM for a traced process: flush its spans, then hand the signal on (``setup_tracing``'s handler).

Three hazards of a Python-level SIGTERM handler are handled here:

- a handler runs on the main thread between bytecodes. A signal that arrives as the main thread enters a blocking C
  call (a pool's idle worker waiting on its task queue's lock) is noted and never handled: no second signal comes to
  interrupt the wait, where the default action would have ended the process at once. A watcher thread learns of each
  SIGTERM through the wakeup file descriptor and, while the handler has not run, sends the signal to the main thread
  again, which interrupts the wait;
- a forked child inherits the handler with its parent's queued spans, which the exporters' fork hooks empty: a
  SIGTERM that reached the child before they had flushed the parent's spans from the child, stored twice. SIGTERM
  is blocked from just before a fork until the child's hooks have run;
- threads do not survive a fork, so each forked child gets a watcher of its own.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

RESEND_AFTER_SECONDS = 0.5
"""How long the watcher waits for the handler to start before it sends SIGTERM to the main thread again."""


class _Ending:
    """This process's state: whether a handler has started (the watcher then stops), and the watcher's pipe."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.pipe: tuple[int, int] | None = None


_this_process = _Ending()
_ending_handlers: set[Callable[..., Any]] = set()
"""The handlers :func:`flush_on_sigterm` installed that end the process (those with the default beneath them; with
``setup_tracing()`` called twice the second chains to the first): the watcher re-sends a signal for any of them."""


def flush_on_sigterm(flush: Callable[[], Any]) -> None:
    """From the main thread: on SIGTERM, ``flush``, then hand the signal on to the handler installed before (the
    application's own, or the default, which ends the process as SIGTERM does)."""
    previous = signal.getsignal(signal.SIGTERM)
    ends = previous == signal.SIG_DFL or previous in _ending_handlers

    began = threading.Event()

    def on_sigterm(signum: int, frame: FrameType | None) -> Any:
        if ends and began.is_set():
            return None  # sent again by the watcher while this one flushes: it ends the process already
        began.set()
        _this_process.started.set()
        flush()
        if callable(previous):
            return previous(signum, frame)
        if previous == signal.SIG_IGN:
            return None
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the default: end as SIGTERM does, now flushed
        os.kill(os.getpid(), signal.SIGTERM)
        return None

    signal.signal(signal.SIGTERM, on_sigterm)
    _hold_sigterm_while_forking()
    if ends:  # not over an application's own handler, which may count the signals it gets
        _ending_handlers.add(on_sigterm)
    if previous == signal.SIG_DFL:
        _watch()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_watch_in_child)


def _watch_in_child() -> None:
    """A forked child's own watcher: the parent's thread did not come with it, and its pipe is the parent's."""
    global _this_process
    inherited = _this_process.pipe
    _this_process = _Ending()
    if inherited is not None:
        current = signal.set_wakeup_fd(-1)
        for end in inherited:
            os.close(end)
        if current != inherited[1]:
            signal.set_wakeup_fd(current)  # another's since the parent's watcher began (an event loop's): theirs
    _watch()


def _watch() -> None:
    """Start the watcher in this process, unless the wakeup file descriptor is someone else's (an
    event loop's signal handling), which then wakes its own thread for each signal."""
    if threading.current_thread() is not threading.main_thread():
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    if previous != -1:
        signal.set_wakeup_fd(previous)
        os.close(read)
        os.close(write)
        return
    _this_process.pipe = (read, write)
    watcher = threading.Thread(
        target=_resend_while_unhandled, args=(read, _this_process), name="agenteval-sigterm", daemon=True
    )
    watcher.start()


def _resend_while_unhandled(read: int, ending: _Ending) -> None:
    main = threading.main_thread().ident
    while True:
        try:
            received = os.read(read, 512)
        except OSError:  # closed in a child forked from this process
            return
        if not received:
            return
        if signal.SIGTERM not in received:
            continue
        while not ending.started.wait(RESEND_AFTER_SECONDS):
            if signal.getsignal(signal.SIGTERM) not in _ending_handlers or main is None:
                break  # the application has its own handler now: how it waits is its own
            signal.pthread_kill(main, signal.SIGTERM)


_forking = threading.local()


def _hold_sigterm_while_forking() -> None:
    """Keep SIGTERM blocked from just before a fork until the child has run every fork hook registered so far.

    A forked child inherits the handler with the parent's queued and buffered spans, which the exporters' and the
    SDK's own fork hooks then empty. A SIGTERM that reached the child before they had (a pool's ``terminate()``
    sends one to a worker still being forked) flushed the parent's spans from the child, and the parent flushed
    them too: each stored twice. Blocked, the signal waits in the kernel and is handled once the child is its own.
    Registered after the processors, so the child's hook runs after theirs (and the parent's before theirs)."""
    if not hasattr(os, "register_at_fork") or not hasattr(signal, "pthread_sigmask"):
        return
    os.register_at_fork(before=_block_sigterm, after_in_parent=_unblock_sigterm, after_in_child=_unblock_sigterm)


def _block_sigterm() -> None:
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    _forking.depth = getattr(_forking, "depth", 0) + 1
    if _forking.depth == 1:
        _forking.was_blocked = signal.SIGTERM in held


def _unblock_sigterm() -> None:
    _forking.depth = getattr(_forking, "depth", 1) - 1
    if _forking.depth == 0 and not getattr(_forking, "was_blocked", False):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
