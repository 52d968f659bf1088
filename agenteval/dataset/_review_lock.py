"""One review of a dataset's card at a time: ``agenteval review`` reads the card, changes it and writes it back,
and two at once would each write their own change over the other's.

The lock is an exclusive OS lock on the dataset file itself, opened to read: the card cannot be it (a review
replaces the card by a rename, and a lock on the old file would guard nothing), and a lock file would be left in
the user's folder. Like every OS lock it dies with its process, so a killed review leaves nothing stale behind.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

if sys.platform == "win32":  # no flock: a locked byte instead, as the store's leases take
    import msvcrt
else:
    import fcntl

_WINDOWS_LOCKED_BYTE = 1 << 40
"""Where on Windows the locked byte is: far past any dataset's end, as a Windows lock keeps other processes from
reading the bytes it covers, and a run reading the cases meanwhile must not be refused."""
_WINDOWS_POLL_SECONDS = 0.05
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP}
"""What a filesystem without locks answers (some network shares): the review goes on unlocked, as before."""


@contextlib.contextmanager
def one_review_at_a_time(dataset_path: Path, on_wait: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Hold the review lock of the dataset at ``dataset_path`` (waiting for another review to finish, after calling
    ``on_wait`` once: a wait with no word looks like a hang) while the block reads and writes its card. A path that
    cannot be opened as a regular file is not locked: loading the cases then says what is wrong with it."""
    fd = _locked(dataset_path, on_wait)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # closing the descriptor drops the lock


def _locked(path: Path, on_wait: Callable[[], None]) -> int | None:
    on_wait = _once(on_wait)  # a dataset replaced while this waited is waited for again, but said once
    while True:
        try:  # O_NONBLOCK: opening a pipe to read would wait for a writer
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                return None
            _wait_for_lock(fd, on_wait)
            if _still_there(path, fd):
                return fd
        except OSError as exc:
            os.close(fd)
            if exc.errno in _NO_LOCKS:
                return None
            raise
        except BaseException:  # stopped while it waited (Ctrl-C, an on_wait that raised): the descriptor goes too
            os.close(fd)
            raise
        # The dataset was replaced by a rename (an editor's save) while this waited: a review that opens it now
        # locks the new file, so lock that one too.
        os.close(fd)


def _once(action: Callable[[], None]) -> Callable[[], None]:
    done = False

    def first_time() -> None:
        nonlocal done
        if not done:
            done = True
            action()

    return first_time


def _still_there(path: Path, fd: int) -> bool:
    try:
        now = os.stat(path)
    except OSError:
        return True  # gone: loading the cases says so
    held = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


def _wait_for_lock(fd: int, on_wait: Callable[[], None]) -> None:
    if sys.platform == "win32":
        os.lseek(fd, _WINDOWS_LOCKED_BYTE, os.SEEK_SET)
        said = False
        while True:  # LK_LOCK gives up after ten seconds; a review waits for the one before it however long
            try:
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
                return
            except PermissionError:
                if not said:
                    on_wait()
                    said = True
                time.sleep(_WINDOWS_POLL_SECONDS)
    else:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_wait()
            fcntl.flock(fd, fcntl.LOCK_EX)
