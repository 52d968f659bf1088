"""One limiter per model for a whole Ray cluster: the AIMD limiter (``._limiter``) inside one named actor, and the
proxy each worker's model calls use in its place (``use_limiters``), so a 429 seen by one worker slows them all.

Each place is asked for with a token of the caller's: a call cancelled while it waits (its trial timed out) says
so with :meth:`LimiterHost.abandon`, which withdraws the wait or, if the place was granted meanwhile, gives it
back; no place is lost to a cancelled call. A worker process that dies while its calls hold places does not give
them back: the limit recovers as the other calls succeed (additive increase), never above its bound.

Ray runs at most ``max_concurrency`` (1,000) calls of an async actor at once, and a waiting ``acquire`` is one of
them: places are given back (and waits withdrawn) through a concurrency group of their own, :data:`RETURNS`, so
however many calls wait, the ones that free places still run. Calls in two groups may start in either order, so
an ``abandon`` may come before the ``acquire`` it withdraws; that ``acquire`` then gives up at once.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
from typing import Any

from ._limiter import AdaptiveLimiter

RETURNS = "returns"
"""The actor's concurrency group for the calls that never wait: ``release``, ``abandon`` and ``limits``."""
RETURNS_AT_ONCE = 64
"""How many of those run at once: each is over in microseconds."""


class LimiterHost:
    """The cluster's limiters, one per model key; made a Ray actor (async, so waits do not block each other)."""

    def __init__(self) -> None:
        self._limiters: dict[str, AdaptiveLimiter] = {}
        self._waiting: dict[int, asyncio.Task[Any]] = {}
        self._granted: dict[int, tuple[str, int]] = {}
        self._callers: dict[str, set[str]] = {}
        self._abandoned: set[int] = set()
        """Tokens abandoned before their ``acquire`` started: it gives up on arrival."""

    async def acquire(self, key: str, token: int, caller: str = "") -> float:
        """Wait for a place under ``key``'s limiter for ``caller`` (a worker process); the seconds waited (-1 when
        the wait was abandoned)."""
        limiter = self._limiters.setdefault(key, AdaptiveLimiter())
        self._callers.setdefault(key, set()).add(caller)
        if token in self._abandoned:
            self._abandoned.discard(token)
            return -1.0
        task = asyncio.current_task()
        assert task is not None
        self._waiting[token] = task
        try:
            generation, waited = await limiter.acquire()
        except asyncio.CancelledError:
            return -1.0
        finally:
            self._waiting.pop(token, None)
        self._granted[token] = (key, generation)
        return waited

    async def release(self, token: int, outcome: str) -> None:
        """Give the place ``token`` holds back: ``ok``, ``throttled`` (a 429) or ``other``."""
        found = self._granted.pop(token, None)
        if found is not None:
            key, generation = found
            self._limiters[key].release(generation, outcome)

    async def abandon(self, token: int) -> None:
        """The caller stopped waiting: withdraw its wait, or give back the place it was granted meanwhile."""
        task = self._waiting.get(token)
        if task is not None:
            task.cancel()
        elif token in self._granted:
            await self.release(token, "other")
        else:  # its acquire has not started yet
            self._abandoned.add(token)

    async def limits(self) -> dict[str, dict[str, Any]]:
        """Per model: its ``limits`` so far, in order (how the cluster's concurrency fell and recovered), and the
        number of worker processes (``callers``) whose calls it limited."""
        return {
            key: {"limits": list(limiter.limits), "callers": len(self._callers.get(key, ()))}
            for key, limiter in self._limiters.items()
        }


def start_limiter_host(ray: Any, name: str, namespace: str) -> Any:
    """The run's :class:`LimiterHost` actor, named ``name`` in ``namespace`` (workers find it by name).

    Owned by the driver, so it ends with the run (or the driver); on the driver's node where it can be, so a lost
    worker node does not take it along; restarted (its limits afresh) should its process die."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
    return (
        ray.remote(concurrency_groups={RETURNS: RETURNS_AT_ONCE})(LimiterHost)
        .options(
            name=name,
            namespace=namespace,
            num_cpus=0,
            scheduling_strategy=here,
            max_restarts=-1,
            max_task_retries=-1,
        )
        .remote()
    )


_CALLER = f"{socket.gethostname()}:{os.getpid()}"


class ClusterLimiter:
    """A worker's stand-in for one model's limiter: every call goes to the cluster's :class:`LimiterHost`."""

    def __init__(self, host: Any, key: str) -> None:
        self.host = host
        self.key = key

    async def acquire(self) -> tuple[int, float]:
        """A place; returns the token that holds it (given back to :meth:`release`) and the seconds waited."""
        token = secrets.randbits(62)
        try:
            waited = await self.host.acquire.remote(self.key, token, _CALLER)
        except asyncio.CancelledError:
            self.host.abandon.options(concurrency_group=RETURNS).remote(token)
            raise
        return token, max(waited, 0.0)

    def release(self, generation: int, outcome: str) -> None:
        self.host.release.options(concurrency_group=RETURNS).remote(generation, outcome)
