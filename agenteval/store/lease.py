"""Leases: an exclusive OS file lock under the store, held by one process and gone when it dies.

A running experiment holds one, so ``--resume`` can tell a live run from one that was killed; a
crashed process (even by SIGKILL) leaves no stale lease behind, because the operating system drops
the lock with the process.
"""

from __future__ import annotations

import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]
    import msvcrt

LOCKS = ".locks"
"""The folder of lock files under the store (no table's glob reaches it)."""


class Lease:
    """An exclusive lock on ``path``; :meth:`acquire` without waiting, :meth:`release` when done."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        """Take the lock if no process holds it; True when this process now holds it."""
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _lock(fd)
        except OSError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the descriptor drops the lock

    def holder(self) -> int | None:
        """The process id the holder wrote, if it can be read."""
        try:
            return int(self.path.read_text() or 0) or None
        except (OSError, ValueError):
            return None

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _lock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    else:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)


def experiment_lease(root: Path, experiment_id: str) -> Lease:
    """The lease a running experiment holds."""
    return Lease(root / LOCKS / f"experiment-{experiment_id}.lock")


def is_running(root: Path, experiment_id: str) -> bool:
    """Whether a live process holds the experiment's lease (a run killed by any means does not)."""
    lease = experiment_lease(root, experiment_id)
    if not lease.path.exists():
        return False
    taken = lease.acquire()
    lease.release()
    return not taken
