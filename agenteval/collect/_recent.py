"""The requests a collector queued lately, known by a digest of their body, shared by all of its processes.

An OTLP client that did not get its answer sends the same request again, perhaps on a new connection, which
``--workers`` may hand to another process than the first: each process remembering its own requests stored such a
repeat twice. The memory is therefore one table in a shared, anonymous file (``memfd``), which the collector's
process creates and passes to each worker (its descriptor, over the worker's channel, as connections are passed):
it has no name, so nothing is left behind whatever kills the collector.

A request is first *claimed* (pending: one process is decoding and queueing it), then *remembered* with its answer
once queued, or *released* when it was not queued (unreadable, refused as busy), so that a repeat is decoded anew. A
copy that arrives while another process holds the claim is told so, and :class:`~._intake.Intake` waits for the
first's answer. A claim whose process is gone (killed mid-request) is taken over.

The table holds the last :data:`REMEMBERED_REQUESTS` claims in a ring (the oldest is forgotten first), found through
an open-addressing index (linear probing, half full at most). One lock guards both: a ``threading.Lock`` between
the threads of a process, and a POSIX record lock (``lockf``) between processes, which the kernel releases when the
process holding it dies, so a worker killed at any moment cannot leave the table locked.
"""

from __future__ import annotations

import dataclasses
import fcntl
import mmap
import os
import struct
import tempfile
import threading
import time

REMEMBERED_REQUESTS = 65_536
"""How many requests a repeat of is recognised (16 MB, shared by the collector and its workers). OTLP clients send
a request again within a minute or two of the first try; at a hundred 512-span requests a second this covers ten
minutes."""
MESSAGE_BYTES = 200
"""A remembered partial success keeps this much of its message (UTF-8): the first reason, which names the span."""
STALE_SECONDS = 60.0
"""A claim this old is taken over even if its process still runs (decoding the largest request takes seconds)."""

_SLOT = struct.Struct(f"<16sBxxxidIIH{MESSAGE_BYTES}s")  # digest, state, pid, claimed at, rows, rejected, message
_SLOT_BYTES = 256
_INDEX_SLOTS = 2 * REMEMBERED_REQUESTS  # a power of two, twice the ring: probes stay short
_HEADER_BYTES = 64  # the ring's next slot (uint32), then padding
_INDEX_AT = _HEADER_BYTES
_RING_AT = _INDEX_AT + 4 * _INDEX_SLOTS
SIZE = _RING_AT + _SLOT_BYTES * REMEMBERED_REQUESTS
assert _SLOT.size <= _SLOT_BYTES

_FREE, _PENDING, _DONE, _RELEASED = 0, 1, 2, 3
"""A ring slot's state. FREE: never used, not in the index. RELEASED: in the index, claimable (its request was not
queued, or its claim's process died)."""


@dataclasses.dataclass(frozen=True)
class Remembered:
    """A request queued before: its spans (counted as repeated) and what its client was told."""

    rows: int
    rejected: int
    message: str


CLAIMED = "claimed"
"""This request is the caller's to queue, then :meth:`RecentRequests.remember` or :meth:`RecentRequests.release`."""
PENDING = "pending"
"""Another thread or process is queueing this request right now."""


class RecentRequests:
    """The shared table. Thread-safe and process-safe; :meth:`fileno` is what a worker process attaches to."""

    def __init__(self, fd: int | None = None) -> None:
        """A new table, or (``fd``) the one another process created; the descriptor is then this object's."""
        if fd is None:
            fd = _anonymous_file(SIZE)
        self._fd = fd
        self._map = mmap.mmap(fd, SIZE)
        self._view = memoryview(self._map)
        self._index = self._view[_INDEX_AT:_RING_AT].cast("I")  # ring slot + 1; 0 is empty
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def fileno(self) -> int:
        return self._fd

    def claim(self, digest: bytes) -> str | Remembered:
        """:data:`CLAIMED`, :data:`PENDING`, or the request as remembered (then the caller answers alike)."""
        with self._locked():
            position, slot = self._find(digest)
            if slot is None:
                self._claim_new(digest, position)
                return CLAIMED
            _, state, pid, since, rows, rejected, length, message = _SLOT.unpack_from(self._map, _slot_at(slot))
            if state == _DONE:
                return Remembered(rows, rejected, message[:length].decode(errors="replace"))
            if state == _PENDING and not self._stale(pid, since):
                return PENDING
            self._write(slot, digest, _PENDING)  # released, or its claimer is gone: this caller's now
            return CLAIMED

    def remember(self, digest: bytes, rows: int, rejected: int = 0, message: str = "") -> None:
        """The claimed request is queued: a repeat gets this answer."""
        text = message.encode()[:MESSAGE_BYTES].decode(errors="ignore").encode()  # whole characters only
        self._settle(digest, _DONE, rows, rejected, text)

    def release(self, digest: bytes) -> None:
        """The claimed request was not queued: a repeat is decoded anew."""
        self._settle(digest, _RELEASED)

    def close(self) -> None:
        self._index.release()
        self._view.release()
        self._map.close()
        os.close(self._fd)

    # Under the lock ----------------------------------------------------------------------------------------------

    def _settle(self, digest: bytes, state: int, rows: int = 0, rejected: int = 0, message: bytes = b"") -> None:
        with self._locked():
            _, slot = self._find(digest)
            # Forgotten meanwhile (65,536 newer claims) or taken over as stale: the claim is no longer this caller's.
            if slot is not None and self._owned(slot):
                self._write(slot, digest, state, rows, rejected, message)

    def _find(self, digest: bytes) -> tuple[int, int | None]:
        """The index position of ``digest`` and its ring slot, or the empty position where it would go and None."""
        index, view = self._index, self._view
        position = _home(digest)
        while True:
            entry = index[position]
            if entry == 0:
                return position, None
            at = _slot_at(entry - 1)
            if view[at : at + 16] == digest:
                return position, entry - 1
            position = (position + 1) & (_INDEX_SLOTS - 1)

    def _claim_new(self, digest: bytes, position: int) -> None:
        """The ring's next slot takes ``digest``; the request it held, the oldest, is forgotten."""
        (slot,) = struct.unpack_from("<I", self._map, 0)
        struct.pack_into("<I", self._map, 0, (slot + 1) % REMEMBERED_REQUESTS)
        at = _slot_at(slot)
        if self._map[at + 16] != _FREE:
            oldest = self._map[at : at + 16]
            self._unindex(self._find(oldest)[0])
            position = self._find(digest)[0]  # the removal may have moved where digest goes
        self._write(slot, digest, _PENDING)
        self._index[position] = slot + 1

    def _unindex(self, position: int) -> None:
        """Empty an index position, moving later entries of its probe run back so that every entry stays reachable
        from its home position (deletion without tombstones, which would fill the index)."""
        index, mask = self._index, _INDEX_SLOTS - 1
        hole = position
        while True:
            position = (position + 1) & mask
            entry = index[position]
            if entry == 0:
                break
            at = _slot_at(entry - 1)
            home = _home(bytes(self._view[at : at + 16]))
            # The entry may fill the hole unless its home lies cyclically after the hole, up to the entry itself.
            if (position - home) & mask >= (position - hole) & mask:
                index[hole] = entry
                hole = position
        index[hole] = 0

    def _write(
        self, slot: int, digest: bytes, state: int, rows: int = 0, rejected: int = 0, message: bytes = b""
    ) -> None:
        _SLOT.pack_into(
            self._map, _slot_at(slot), digest, state, self._pid, time.monotonic(), rows, rejected, len(message), message
        )

    def _owned(self, slot: int) -> bool:
        _, state, pid, *_ = _SLOT.unpack_from(self._map, _slot_at(slot))
        return bool(state == _PENDING and pid == self._pid)

    def _stale(self, pid: int, since: float) -> bool:
        """Whether a pending claim's process is gone (killed mid-request), or the claim is too old to wait for."""
        if time.monotonic() - since > STALE_SECONDS:
            return True
        if pid == self._pid:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # another user's process: it exists
            return False
        return False

    def _locked(self) -> _Locked:
        return _Locked(self._lock, self._fd)


class _Locked:
    """The threads of this process, then the processes (``lockf`` locks belong to a process, not to a thread)."""

    def __init__(self, lock: threading.Lock, fd: int) -> None:
        self._lock, self._fd = lock, fd

    def __enter__(self) -> None:
        self._lock.acquire()
        try:
            fcntl.lockf(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            fcntl.lockf(self._fd, fcntl.LOCK_UN)
        finally:
            self._lock.release()


def _home(digest: bytes) -> int:
    return int.from_bytes(digest[:8], "little") & (_INDEX_SLOTS - 1)


def _slot_at(slot: int) -> int:
    return _RING_AT + slot * _SLOT_BYTES


def _anonymous_file(size: int) -> int:
    """A file of ``size`` zero bytes with no name: memory only (Linux), else an unlinked temporary file."""
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None:
        fd = int(memfd_create("agenteval-collect-recent", os.MFD_CLOEXEC))
    else:
        with tempfile.TemporaryFile() as file:
            fd = os.dup(file.fileno())
    os.ftruncate(fd, size)
    return fd
