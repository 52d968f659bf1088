"""The sync agents' worker threads: reused between calls, never a queue behind a hung call, the caller's context
carried over, outcomes and exceptions handed back to the loop, and nothing left running once closed."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from agenteval.run._workers import SyncWorkers

who = contextvars.ContextVar("who", default="nobody")


def test_sequential_calls_reuse_one_worker():
    pool = SyncWorkers()

    async def main():
        return [await pool.submit(threading.current_thread) for _ in range(50)]

    threads = asyncio.run(main())
    pool.close()
    assert len({id(t) for t in threads}) == 1 and pool.started == 1


def test_a_blocked_call_never_delays_the_next_one():
    pool = SyncWorkers()
    release = threading.Event()

    async def main():
        blocked = pool.submit(release.wait, 60)
        # The second call finishes although the first holds its worker; with a fixed pool of one it would wait.
        done = await asyncio.wait_for(pool.submit(lambda: "free"), 30)
        release.set()
        return done, await blocked

    assert asyncio.run(main()) == ("free", True)
    pool.close()
    assert pool.started == 2


def test_an_abandoned_call_s_worker_is_reused_once_it_returns():
    pool = SyncWorkers()
    release, returned = threading.Event(), threading.Event()

    def slow():
        release.wait(60)
        returned.set()
        return threading.current_thread()

    async def main():
        abandoned = pool.submit(slow)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(abandoned, 0.05)  # cancels the future: the call's outcome will be discarded
        release.set()
        await asyncio.to_thread(returned.wait, 30)
        await asyncio.sleep(0)  # let the discarded outcome reach the loop
        return [await pool.submit(threading.current_thread) for _ in range(10)]

    threads = asyncio.run(main())
    pool.close()
    assert pool.started <= 2 and len({id(t) for t in threads}) == 1


def test_calls_see_the_caller_s_context_and_exceptions_come_back():
    pool = SyncWorkers()

    def boom():
        raise ValueError("agent broke")

    async def main():
        who.set("trial-7")
        seen = await pool.submit(who.get)
        with pytest.raises(ValueError, match="agent broke"):
            await pool.submit(boom)
        return seen

    assert asyncio.run(main()) == "trial-7"
    pool.close()


def test_closing_ends_idle_workers_and_refuses_new_calls():
    pool = SyncWorkers(name="agenteval-test-pool")

    async def main():
        await asyncio.gather(*(pool.submit(threading.Event().wait, 0.01) for _ in range(4)))

    asyncio.run(main())
    alive = [t for t in threading.enumerate() if t.name == "agenteval-test-pool"]
    assert 1 <= len(alive) <= 4
    pool.close()
    for thread in alive:
        thread.join(30)
    assert not any(t.is_alive() for t in alive)

    async def late():
        pool.submit(lambda: None)

    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(late())
