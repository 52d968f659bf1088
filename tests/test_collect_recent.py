"""The memory of recent requests that ``agenteval collect`` and its worker processes share (``_recent``): bounded
to the last 65,536 requests, one claimer per request across real processes, and a process killed while it holds
the lock or a claim blocks no one (the kernel releases its ``lockf`` lock; its claim is taken over)."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle, send_handle

from agenteval.collect._recent import (
    CLAIMED,
    MESSAGE_BYTES,
    PENDING,
    REMEMBERED_REQUESTS,
    RecentRequests,
    Remembered,
)


def digest(n: int) -> bytes:
    return hashlib.blake2b(n.to_bytes(8, "big"), digest_size=16).digest()


def test_the_last_requests_are_remembered_and_older_ones_forgotten():
    recent = RecentRequests()
    try:
        extra = 5_000
        for n in range(REMEMBERED_REQUESTS + extra):
            assert recent.claim(digest(n)) == CLAIMED
            recent.remember(digest(n), rows=n % 1_000)
        # Every one of the last 65,536 is found (the index keeps them reachable as older ones leave it)...
        for n in range(extra, REMEMBERED_REQUESTS + extra):
            assert recent.claim(digest(n)) == Remembered(n % 1_000, 0, "")
        # ...and the oldest are forgotten: sent again, they are new requests.
        for n in range(extra):
            assert recent.claim(digest(n)) == CLAIMED
    finally:
        recent.close()


def test_a_claim_is_pending_until_remembered_and_claimable_again_once_released():
    recent = RecentRequests()
    try:
        assert recent.claim(digest(1)) == CLAIMED
        assert recent.claim(digest(1)) == PENDING  # another thread of this process, the same request in flight
        recent.release(digest(1))  # not queued (unreadable, or refused as busy)
        assert recent.claim(digest(1)) == CLAIMED
        long_reason = "spans[3]: " + "é" * MESSAGE_BYTES
        recent.remember(digest(1), rows=7, rejected=1, message=long_reason)
        remembered = recent.claim(digest(1))
        assert isinstance(remembered, Remembered) and (remembered.rows, remembered.rejected) == (7, 1)
        assert long_reason.startswith(remembered.message) and len(remembered.message.encode()) <= MESSAGE_BYTES
    finally:
        recent.close()


def attach(channel: Connection) -> RecentRequests:
    return RecentRequests(recv_handle(channel))


def claim_all(channel: Connection, count: int, first: int) -> None:
    """A process that claims requests 0..count-1, from ``first`` on round to ``first - 1`` (so that processes
    meet), remembering each it claimed; says which ones it claimed."""
    recent = attach(channel)
    channel.send("ready")
    channel.recv()  # the start line: every process claims at once
    claimed = []
    for n in [*range(first, count), *range(first)]:
        while (known := recent.claim(digest(n))) == PENDING:
            time.sleep(0.0001)
        if known == CLAIMED:
            claimed.append(n)
            recent.remember(digest(n), rows=1)
    channel.send(claimed)


def hold_the_lock(channel: Connection) -> None:
    """A process that claims request 1, then holds the table's lock until it is killed."""
    recent = attach(channel)
    assert recent.claim(digest(1)) == CLAIMED
    with recent._locked():
        channel.send("holding")
        time.sleep(600)


def start(target, recent: RecentRequests, *args) -> tuple[multiprocessing.Process, Connection]:
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=target, args=(theirs, *args), daemon=True)
    process.start()
    theirs.close()
    send_handle(ours, recent.fileno(), process.pid)
    return process, ours


def test_processes_claiming_the_same_requests_at_once_claim_each_once():
    recent = RecentRequests()
    count = 20_000
    try:
        started = [start(claim_all, recent, count, k * count // 3) for k in range(3)]
        assert all(channel.poll(60) and channel.recv() == "ready" for _, channel in started)
        for _, channel in started:
            channel.send("go")
        claimed = [channel.recv() for _, channel in started]
        for process, _ in started:
            process.join(30)
    finally:
        recent.close()
    assert sorted(n for each in claimed for n in each) == list(range(count))
    assert sum(1 for each in claimed if each) >= 2  # they did meet: two or more claimed some


def test_a_process_killed_holding_the_lock_and_a_claim_leaves_neither_behind():
    recent = RecentRequests()
    try:
        process, channel = start(hold_the_lock, recent)
        assert channel.poll(60) and channel.recv() == "holding"
        answers: list[object] = []
        waiting = threading.Thread(target=lambda: answers.append(recent.claim(digest(2))), daemon=True)
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive()  # another request, but the lock is held: the claim waits for it
        os.kill(process.pid, signal.SIGKILL)
        waiting.join(10)
        assert answers == [CLAIMED]  # the kernel released the dead process's lock
        process.join(30)
        # Its claim of request 1, pending for ever, is taken over (as the intake asks again while it is pending:
        # the process is gone once its parent has reaped it).
        deadline = time.monotonic() + 10
        while (known := recent.claim(digest(1))) == PENDING and time.monotonic() < deadline:
            time.sleep(0.01)
        assert known == CLAIMED
    finally:
        recent.close()
