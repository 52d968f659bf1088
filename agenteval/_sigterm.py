"""SIGTERM for a traced process: flush its spans, then hand the signal on (``setup_tracing``'s handler).

Three hazards of a Python-level SIGTERM handler are handled here:

- a handler runs on the main thread between bytecodes. A signal that arrives as the main thread enters a blocking C
  call (a pool's idle worker waiting on its task queue's lock) is noted and never handled: no second signal comes to
  interrupt the wait, where the default action would have ended the process at once. In a ``multiprocessing`` child,
  which a pool's ``terminate()`` ends with SIGTERM, a watcher thread learns of each SIGTERM through the wakeup file
  descriptor and, while the handler has not run, sends the signal to the main thread again, which interrupts the
  wait. Not in the application's own process, whose wakeup file descriptor its event loop may want (Trio warns when
  it finds one taken);
- a forked child inherits the handler with its parent's queued spans, which the exporters' fork hooks empty: a
  SIGTERM that reached the child before they had flushed the parent's spans from the child, stored twice. SIGTERM
  is blocked from just before a fork until the child's hooks have run;
- threads do not survive a fork, so each ``multiprocessing`` child gets a watcher of its own, and a child forked
  otherwise lets go of its parent's.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable
from multiprocessing import util as multiprocessing_util
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
    if ends:  # not over an application's own handler, which may count the signals it gets
        _ending_handlers.add(on_sigterm)
    if previous == signal.SIG_DFL:  # the first call
        if hasattr(os, "register_at_fork"):
            # Before the hold below, so a child stops writing to its parent's pipe while SIGTERM is still blocked: a
            # SIGTERM the child took with its parent's wakeup fd reached the parent's watcher, which then sent SIGTERM
            # to the parent's main thread (found by the review).
            os.register_at_fork(after_in_child=_disown_the_parents_watcher)
        # Run in every child multiprocessing forks, once the child is its own.
        multiprocessing_util.register_after_fork(_MULTIPROCESSING_CHILDREN, _watch_in_a_child)
        if _in_a_multiprocessing_child():
            _watch()
    _hold_sigterm_while_forking()


class _Registration:
    """What multiprocessing's registry of after-fork calls keeps alive (it holds its objects weakly)."""


_MULTIPROCESSING_CHILDREN = _Registration()


def _in_a_multiprocessing_child() -> bool:
    """Whether this process is a ``multiprocessing`` child: one set up inside its target, or a spawned (forkserver)
    one importing its parent's main module, which it runs as ``__mp_main__`` before the child is bootstrapped (and
    which no after-fork call reaches)."""
    return multiprocessing.parent_process() is not None or "__mp_main__" in sys.modules


def _watch_in_a_child(_: object) -> None:
    _watch()


def _disown_the_parents_watcher() -> None:
    """In a forked child: the parent's watcher thread did not come with it, and its pipe is the parent's."""
    global _this_process
    inherited = _this_process.pipe
    _this_process = _Ending()
    if inherited is not None:
        current = signal.set_wakeup_fd(-1)
        for end in inherited:
            os.close(end)
        if current != inherited[1]:
            signal.set_wakeup_fd(current)  # another's since the parent's watcher began (an event loop's): theirs


def _watch() -> None:
    """Start the watcher in this process (a ``multiprocessing`` child), unless there is one already or the wakeup
    file descriptor is someone else's (an event loop's signal handling), which then wakes its own thread for each
    signal."""
    if threading.current_thread() is not threading.main_thread() or _this_process.pipe is not None:
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
