"""Leases: exclusive OS file locks under the store, each held by one process and gone when it dies.

A running experiment holds one, so ``--resume`` can tell a live run from one that was killed; a
compaction holds the store's, so two never merge the same files. A crashed process (even by SIGKILL)
leaves no stale lock behind: the operating system drops it with the process.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

if sys.platform == "win32":  # no fcntl: a locked byte instead
    import msvcrt
else:
    import fcntl

LOCKS = ".locks"
"""The folder of lock files under the store (no table's glob reaches it)."""
POLL_SECONDS = 0.05


class Lease:
    """An exclusive lock on ``path``: :meth:`acquire` (waiting up to a bound), :meth:`release` when done."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, wait: float = 0.0) -> bool:
        """Take the lock, waiting up to ``wait`` seconds for its holder; True when this process holds it."""
        deadline = time.monotonic() + wait
        while not self._try_acquire():
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_SECONDS)
        return True

    def _try_acquire(self) -> bool:
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _lock(fd)
        except OSError:
            os.close(fd)
            return False
        # Written only once held: a waiting process never truncates what the holder wrote.
        os.ftruncate(fd, 0)
        os.write(fd, f"process {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S %Z')}".encode())
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the descriptor drops the lock

    def holder(self) -> str:
        """Who holds the lock, as the holder wrote it (``process N, since ...``)."""
        try:
            return self.path.read_text().strip() or "another process"
        except OSError:  # Windows keeps a locked file unreadable
            return "another process"

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _lock(fd: int) -> None:
    if sys.platform == "win32":
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    else:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def store_lease(root: Path, name: str) -> Lease:
    """The lease named ``name`` in the store at ``root``."""
    return Lease(root / LOCKS / f"{name}.lock")


def experiment_lease(root: Path, experiment_id: str) -> Lease:
    """The lease a running experiment holds."""
    return store_lease(root, f"experiment-{experiment_id}")


def is_running(root: Path, experiment_id: str) -> bool:
    """Whether a live process holds the experiment's lease (a run killed by any means does not)."""
    lease = experiment_lease(root, experiment_id)
    if not lease.path.exists():
        return False
    taken = lease.acquire()
    lease.release()
    return not taken
