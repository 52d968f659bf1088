"""Leases: exclusive OS file locks under the store, each held by one process and gone when it dies.

A running experiment holds one, so ``--resume`` can tell a live run from one that was killed; a
compaction holds the store's, so two never merge the same files. A crashed process (even by SIGKILL)
leaves no stale lock behind: the operating system drops it with the process.

A store on object storage has no OS locks: its leases are objects, taken with a conditional write and kept
alive by a heartbeat (:class:`RemoteLease`).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

from agenteval_exporters.settings import env_number
from agenteval_exporters.storefs import RemoteFile, RemoteRoot, StoreRoot
from agenteval_instrumentation.masking import masked_logger

from ..errors import AgentevalError

if sys.platform == "win32":  # no fcntl: a locked byte instead
    import msvcrt
else:
    import fcntl

LOCKS = ".locks"
"""The folder of lock files under the store (no table's glob reaches it)."""
POLL_SECONDS = 0.05
TAKE_WAIT_SECONDS = 1.0
"""How long a run waits for an experiment's lease before saying another process holds it: asking whether a run is
alive (see :meth:`Lease.in_use`) holds the lock for an instant."""


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

    def check(self) -> None:
        """Nothing to check: an OS lock is held until its holder lets go or dies (see :meth:`RemoteLease.check`)."""

    def in_use(self) -> bool:
        """Whether a process holds the lock, this one included. Asking takes a shared lock for an instant (only a
        holder refuses it): a process taking the lock in that instant is refused, so takers wait a moment."""
        if self._fd is not None:
            return True
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        except OSError:  # cannot tell: as if held, so nothing is called dead on a guess
            return True
        try:
            _lock(fd, shared=True)
        except OSError:
            return True
        finally:
            os.close(fd)
        return False

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


def _lock(fd: int, shared: bool = False) -> None:
    if sys.platform == "win32":  # no shared locks: an exclusive one, dropped as the descriptor closes
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    else:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)


logger = masked_logger(__name__)

ENV_LEASE_SECONDS = "AGENTEVAL_LEASE_SECONDS"
LEASE_SECONDS = 30.0
"""How long a lease on object storage outlives its holder's last heartbeat (``AGENTEVAL_LEASE_SECONDS``)."""


def lease_seconds() -> float:
    return max(0.5, env_number(ENV_LEASE_SECONDS, LEASE_SECONDS))


class LeaseLost(AgentevalError, OSError):
    """A lease on object storage that its holder could not keep: another process may hold it now."""


class RemoteLease:
    """A lease on object storage, where there are no OS locks.

    Its objects are ``.locks/<name>/<generation>.lease``, numbered up. Taking it: list them; if the newest was
    renewed within :func:`lease_seconds`, its holder is alive and the lease is taken; otherwise create the next
    generation with a conditional write (``If-None-Match: *``), which exactly one of several takers wins. The holder
    renews its object (a heartbeat, every third of the lease's time); releasing writes the next generation as
    ``<generation>.released``, which frees the lease at once. A holder killed by any means stops renewing, and
    the lease is free once its time has passed. Numbers are never reused while a taker could still hold an old
    listing: generations older than ten lease times are removed, newer ones kept. Freshness compares the object's
    modification time, stamped by the store's clock, with this machine's: clocks must agree to within a fraction
    of the lease's time, as NTP keeps them.

    A holder may also lose it without dying: stopped (Ctrl-Z, SIGSTOP), its machine asleep, or cut off from the
    store for longer than the lease's time, it may find another process holding it when it goes on. So the holder
    counts the lease as its own only within two thirds of the lease's time of the start of its last renewal that
    was written while its generation was the newest (a heartbeat first lists, and stops once another generation is
    newer); :meth:`check` raises :class:`LeaseLost` past that, for good. A run checks before each commit (the
    publishing of trial rows), so a run that was taken over while it could not renew saves no more trials.
    """

    def __init__(self, root: RemoteRoot, name: str) -> None:
        self.root = root
        self.folder = f"{LOCKS}/{name}"
        self.path = root / self.folder
        self.seconds = lease_seconds()
        self._key: str | None = None
        self._number = 0
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._confirmed = 0.0
        """``time.monotonic()`` at the start of the newest write of the lease's object that kept it this holder's."""
        self._lost: str | None = None
        """Why the lease is no longer this holder's, once it is not."""

    @property
    def held(self) -> bool:
        return self._key is not None

    def _generations(self) -> list[RemoteFile]:
        return [f for f in self.root.list_files(self.folder) if f.relative.endswith((HELD, RELEASED))]

    def _alive(self, generations: list[RemoteFile]) -> bool:
        if not generations or generations[-1].relative.endswith(RELEASED):
            return False
        return time.time() - generations[-1].modified_ns / 1e9 < self.seconds

    def acquire(self, wait: float = 0.0) -> bool:
        deadline = time.monotonic() + wait
        while not self._try_acquire():
            if time.monotonic() >= deadline:
                return False
            time.sleep(max(POLL_SECONDS, min(1.0, self.seconds / 10)))
        return True

    def _try_acquire(self) -> bool:
        if self._key is not None:
            return True
        generations = self._generations()
        if self._alive(generations):
            return False
        number = _number(generations[-1]) + 1 if generations else 1
        key = f"{self.folder}/{number:012d}{HELD}"
        record = {"holder": f"process {os.getpid()} on {socket.gethostname()}", "since": time.time()}
        started = time.monotonic()
        if not self.root.create(key, json.dumps(record).encode()):
            return False  # another taker won this generation
        self._key, self._number, self._confirmed, self._lost = key, number, started, None
        cutoff = time.time() - 10 * self.seconds
        self.root.delete([g.relative for g in generations if g.modified_ns / 1e9 < cutoff])
        self._stop.clear()
        self._heartbeat = threading.Thread(target=self._renew, args=(key, record), daemon=True, name="agenteval-lease")
        self._heartbeat.start()
        return True

    def _renew(self, key: str, record: dict[str, object]) -> None:
        data = json.dumps(record).encode()
        while not self._stop.wait(self.seconds / 3):
            started = time.monotonic()
            if self._expired(started):
                return  # too late to renew: another process may have taken the lease meanwhile
            try:
                generations = self._generations()
                if generations and generations[-1].relative != key:
                    self._lost = f"another process took it ({generations[-1].relative.rpartition('/')[2]})"
                    return
                self.root.write_bytes(key, data)
            except Exception:  # the next beat tries again
                logger.warning("agenteval: could not renew the lease %s", self.root / key, exc_info=True)
                continue
            if self._lost is None:
                self._confirmed = started

    def _expired(self, now: float) -> bool:
        """Whether the lease may have been taken by another process by ``now`` (a ``time.monotonic()``); once it
        may, it is lost for good."""
        since = now - self._confirmed
        if self._lost is None and since >= self.seconds * 2 / 3:
            self._lost = f"it was not renewed for {since:.0f} s"
        return self._lost is not None

    def check(self) -> None:
        """Raise :class:`LeaseLost` unless this process still holds the lease for certain."""
        if self._key is not None and self._expired(time.monotonic()):
            raise LeaseLost(
                f"the lease {self.path} is no longer this process's: {self._lost} (this process was stopped or "
                f"suspended, or the store did not answer), and after {self.seconds:g} s another process may take it. "
                "Nothing more is saved by this process; the trials saved before are intact. See `agenteval "
                "experiments` for the run's status, and resume it once no process runs it"
            )

    def release(self) -> None:
        if self._key is not None:
            self._key = None
            self._stop.set()
            if self._heartbeat is not None and self._heartbeat is not threading.current_thread():
                self._heartbeat.join(timeout=10)
            try:
                # Conditional: a lease taken over (generation number + 1 held by another process) stays theirs.
                self.root.create(f"{self.folder}/{self._number + 1:012d}{RELEASED}", b"{}")
            except Exception:  # it expires by itself
                logger.warning("agenteval: could not release the lease %s; it expires by itself", self.path)

    def running(self) -> bool:
        """Whether a live holder has the lease (this process included)."""
        return self._alive(self._generations())

    def holder(self) -> str:
        generations = self._generations()
        raw = self.root.read_bytes(generations[-1].relative) if generations else None
        try:
            record = json.loads(raw or b"{}")
            since = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(record["since"]))
            renewed = time.time() - generations[-1].modified_ns / 1e9
            return (
                f"{record['holder']}, since {since}; its lease was renewed {renewed:.0f} s ago, and is free "
                f"{self.seconds:g} s after its last renewal if that process is gone"
            )
        except (ValueError, KeyError, TypeError):
            return "another process"

    def __enter__(self) -> RemoteLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


HELD = ".lease"
RELEASED = ".released"


def _number(generation: RemoteFile) -> int:
    return int(generation.relative.rpartition("/")[2].partition(".")[0])


AnyLease = Lease | RemoteLease


def store_lease(root: StoreRoot, name: str) -> AnyLease:
    """The lease named ``name`` in the store at ``root``."""
    if isinstance(root, RemoteRoot):
        return RemoteLease(root, name)
    return Lease(root / LOCKS / f"{name}.lock")


def experiment_lease(root: StoreRoot, experiment_id: str) -> AnyLease:
    """The lease a running experiment holds."""
    return store_lease(root, f"experiment-{experiment_id}")


def run_lease_name(experiment_id: str, shard: str | None = None) -> str:
    """The name a run's lease goes by: the experiment's id, or for one shard (``K/N``) of a run in shards, that
    shard's own (each shard runs in its own process)."""
    if shard is None:
        return experiment_id
    index, _, count = shard.partition("/")
    return f"{experiment_id}.shard-{index}-of-{count}"


def run_lease(root: StoreRoot, experiment_id: str, shard: str | None = None) -> AnyLease:
    """The lease a run of ``experiment_id`` holds (of its shard ``K/N``, for a run in shards)."""
    return experiment_lease(root, run_lease_name(experiment_id, shard))


JOIN_WAIT_SECONDS = 900.0
"""How long a shard waits for the other shards of its experiment to finish joining (each: its check, its cases,
its first record; an instant on disk, a few object writes on object storage). Shards join one at a time, so a job
of hundreds of shards started at once (a Kubernetes indexed job, a Slurm array) queues here for a while: the
bound is long so that none of them is refused for waiting its turn."""


def joining_lease(root: StoreRoot, experiment_id: str) -> AnyLease:
    """The lease every shard of ``experiment_id`` holds from checking that it may join the others until its record is
    saved: each shard has a lease of its own, so without this one two shards started at the same instant (say
    ``1/2`` and ``2/3``) would each check before the other's record exists, and both join."""
    return experiment_lease(root, f"{experiment_id}.joining")


def is_running(root: StoreRoot, experiment_id: str, shard: str | None = None) -> bool:
    """Whether a live process holds the run's lease, this one included (a run killed by any means does not)."""
    lease = run_lease(root, experiment_id, shard)
    if isinstance(lease, RemoteLease):
        return lease.running()
    return lease.in_use()
