"""``--executor ray``: a run's trials as tasks on a Ray cluster, each writing straight to the shared store.

The driver (the process that ran ``agenteval run``) plans the run, holds its lease and records its status as a
local run does; it cuts the planned trials into chunks and submits each as a Ray task. A task makes the run again
in its worker (``_Run.for_worker``), gives its trials fresh ids, runs them ``concurrency`` at a time, scores them,
and publishes their spans and scores to the store itself, through writers of its own (file names are unique, so
workers never collide). It returns its trial rows, and the driver publishes them: a trial row is the trial's
commit, and only the driver writes them.

Exactly once, as ``--resume`` has it: a task lost with its worker or node is run again by Ray (``max_retries``);
what the lost attempt published has no trial row (the row was still to come), so it is as invisible as the spans
of a trial a killed local run never finished, and the retry's trials carry new ids. Ray hands the driver one
result per task however often it ran, and the driver keeps at most one row per (case, attempt), the key resume
reads, dropping any other deterministically (the first committed stays). A driver that dies leaves the run as a
killed local run does: ``--resume`` (with either executor) runs what has no row.

Rate limits are shared: one :class:`agenteval.models._ray_limiter.LimiterHost` actor per run holds one AIMD
limiter per model for the whole cluster. Progress moves on the driver as tasks finish.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import socket
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ._plan import trial_id
from ._scheduler import TICK_SECONDS
from ._trial import TrialPlan

if TYPE_CHECKING:
    from ._executors import RunRecipe
    from ._runner import _Run
    from ._trial import TrialRunner

NAMESPACE = "agenteval"
"""The Ray namespace of the driver and its limiter actor."""
MAX_RETRIES = 3
"""How often Ray runs a task again whose worker process or node was lost."""
CHUNKS_PER_CPU = 4
"""Tasks per CPU of the cluster: enough for a lost node to cost little and for fast nodes to take more."""
MAX_CHUNK = 1000
"""The most trials one task runs: its trial rows reach the store when it ends, so progress moves by chunks."""


def require_ray() -> Any:
    """The ``ray`` module, or an error naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise UsageError(
            "--executor ray needs Ray: pip install 'agenteval[ray]' (on the driver and on every node)"
        ) from None
    return ray


def chunks(plans: Sequence[TrialPlan], cpus: int, concurrency: int) -> list[list[TrialPlan]]:
    """The trials cut into tasks: about :data:`CHUNKS_PER_CPU` per CPU, each at least ``concurrency`` trials
    (a task runs that many at once) and at most :data:`MAX_CHUNK`."""
    size = max(concurrency, min(MAX_CHUNK, math.ceil(len(plans) / (max(cpus, 1) * CHUNKS_PER_CPU))))
    return [list(plans[i : i + size]) for i in range(0, len(plans), size)]


@dataclasses.dataclass
class ChunkDone:
    """What a task hands back: its trials' rows (to publish), the model calls its cache answered, where it ran."""

    rows: list[dict[str, Any]]
    cache_hits: int
    worker: str
    node: str


def run_chunk(recipe: RunRecipe, plans: list[TrialPlan]) -> ChunkDone:
    """The Ray task: run ``plans`` in this worker, publish their spans and scores, return their rows."""
    import ray

    from ..models._limiter import use_limiters
    from ..models._ray_limiter import ClusterLimiter
    from ._runner import _Run

    if recipe.limiters is not None:
        host = ray.get_actor(recipe.limiters, namespace=NAMESPACE)
        use_limiters(lambda key: ClusterLimiter(host, key))
    # New ids for every try of the task: spans an earlier, lost try published never join this one's.
    fresh = [dataclasses.replace(plan, trial_id=trial_id()) for plan in plans]
    run = _Run.for_worker(recipe, fresh)
    try:
        rows, cache_hits = asyncio.run(run.run_chunk())
    finally:
        run.agent.release()
        use_limiters(None)
    node = ray.get_runtime_context().get_node_id()
    return ChunkDone(rows, cache_hits, f"{socket.gethostname()}:{os.getpid()}", node)


class RayExecutor:
    """Trials as Ray tasks on the cluster at ``address`` (else ``$RAY_ADDRESS``, else a local cluster)."""

    name = "ray"

    def __init__(self, address: str | None = None) -> None:
        self.address = address
        self.ray = require_ray()  # said before anything is written

    async def run(self, run: _Run, runner: TrialRunner) -> None:
        ray = self.ray
        connected_here = not ray.is_initialized()
        if connected_here:
            ray.init(
                address=self.address or os.environ.get("RAY_ADDRESS"),
                namespace=NAMESPACE,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
        try:
            await self._run(run)
        finally:
            if connected_here:
                ray.shutdown()

    async def _run(self, run: _Run) -> None:
        ray = self.ray
        assert run.recipe is not None and run.sink is not None
        if not run.plans:
            return
        from ..models._ray_limiter import LimiterHost

        name = f"agenteval-limiters-{uuid.uuid4().hex[:12]}"
        # Owned by the driver: it ends with the run, or with the driver if that dies.
        host = ray.remote(LimiterHost).options(name=name, namespace=NAMESPACE, num_cpus=0).remote()
        recipe = ray.put(dataclasses.replace(run.recipe, limiters=name))
        task = ray.remote(run_chunk).options(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=False)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        pending: dict[asyncio.Future[ChunkDone], Any] = {}
        for chunk in chunks(run.plans, cpus, run.options.concurrency):
            ref = task.remote(recipe, chunk)
            pending[asyncio.wrap_future(ref.future())] = ref
        tasks = len(pending)
        stopper = asyncio.ensure_future(run.stop.wait())
        committed: set[tuple[str, int]] = set()
        workers: set[str] = set()
        nodes: set[str] = set()
        try:
            while pending:
                done, _ = await asyncio.wait([*pending, stopper], timeout=TICK_SECONDS, return_when="FIRST_COMPLETED")
                for finished in done - {stopper}:
                    del pending[finished]
                    result = finished.result()  # a task's own error (not a lost worker) fails the run
                    rows = [row for row in result.rows if (row["case_id"], row["attempt"]) not in committed]
                    committed.update((row["case_id"], row["attempt"]) for row in rows)
                    run.commit(rows, result.cache_hits)
                    workers.add(result.worker)
                    nodes.add(result.node)
                run.sink.flush()
                if stopper.done():  # the unfinished tasks' trials have no row: --resume runs them
                    break
        finally:
            stopper.cancel()
            for ref in pending.values():
                ray.cancel(ref, force=True)
            for finished in pending:
                finished.cancel()
            ray.kill(host)
        run.counts["ray_tasks"] = tasks
        run.counts["ray_worker_processes"] = len(workers)
        run.counts["ray_nodes"] = len(nodes)
        run.progress.note(f"ray: {tasks} tasks ran on {len(workers)} worker processes, {len(nodes)} nodes")
