"""``python ray_limiter_calls.py ADDRESS CALLS``, run inside a test cluster's namespace: starts the run's limiter
actor as a run does (``start_limiter_host``) and makes CALLS model calls at once through one worker's
:class:`ClusterLimiter`, each giving its place back; prints how many finished, and how many were still waiting when
it gave up on them (a minute after the last one finished, as a deadlocked actor never answers)."""

from __future__ import annotations

import asyncio
import json
import sys

import ray

from agenteval.models._ray_limiter import ClusterLimiter, start_limiter_host

GIVE_UP_SECONDS = 60.0


async def calls(limiter: ClusterLimiter, count: int) -> dict[str, int]:
    async def one() -> None:
        token, _ = await limiter.acquire()
        await asyncio.sleep(0.01)
        limiter.release(token, "ok")

    pending = {asyncio.ensure_future(one()) for _ in range(count)}
    finished = 0
    while pending:
        done, pending = await asyncio.wait(pending, timeout=GIVE_UP_SECONDS)
        if not done:
            break
        finished += len(done)
    for task in pending:
        task.cancel()
    return {"finished": finished, "waiting": len(pending)}


def main() -> None:
    address, count = sys.argv[1], int(sys.argv[2])
    ray.init(address=address, namespace="agenteval", include_dashboard=False, log_to_driver=False)
    host = start_limiter_host(ray, "agenteval-limiters-test", "agenteval")
    print(json.dumps(asyncio.run(calls(ClusterLimiter(host, "m"), count))), flush=True)


if __name__ == "__main__":
    main()
