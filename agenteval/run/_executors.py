"""How a run's trials are executed: on this process's event loop (``local``, the default), or spread over a Ray
cluster (``ray``, see :mod:`._ray`). Everything else about a run (its plan, lease, status, scoring, what it
saves) is the same whichever executes it."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import UsageError

if TYPE_CHECKING:
    from ..analysis._experiments import Experiment
    from ..dataset._cases import Dataset
    from ..scorers import Scorer
    from ..scorers._loading import ScorerSpec
    from ._options import RunOptions
    from ._runner import _Run
    from ._trial import TrialRunner, UserSimulator

EXECUTORS = ("local", "ray")


class Executor(Protocol):
    """Runs a run's planned trials until they are done or the run is stopped."""

    name: str

    def ready(self, shipped: Mapping[str, Any]) -> contextlib.AbstractContextManager[None]:
        """While the run is planned and runs: for a cluster, connected to it, and checked that it can run tasks and
        that ``shipped`` (what its workers are sent, by what to call it in an error) can be sent. Entered before
        anything is written, so a refusal leaves the store as it was."""
        ...

    async def run(self, run: _Run, runner: TrialRunner) -> None:
        """Run ``run.plans``; every finished trial ends up saved by ``run`` (its spans, scores and row)."""
        ...


class LocalExecutor:
    """Trials on this process's event loop, ``concurrency`` at a time (``agenteval.run._scheduler``)."""

    name = "local"

    def ready(self, shipped: Mapping[str, Any]) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    async def run(self, run: _Run, runner: TrialRunner) -> None:
        await run.run_trials(runner)


def executor_for(name: str | None, address: str | None = None) -> Executor:
    """The executor named by ``--executor`` (``local`` or ``ray``); ``address`` is the Ray cluster's."""
    if name in (None, "local"):
        if address is not None:
            raise UsageError("--ray-address goes with --executor ray")
        return LocalExecutor()
    if name == "ray":
        from ._ray import RayExecutor

        return RayExecutor(address)
    raise UsageError(f"--executor {name!r}: expected one of {', '.join(EXECUTORS)}")


@dataclasses.dataclass
class RunRecipe:
    """What a worker elsewhere needs to make the run again around its share of the trials: the run's options and
    experiment as the driver decided them, and the agent, scorers and simulator as they were given."""

    store: str
    experiment: Experiment
    options: RunOptions
    agent: str | Callable[..., Any] | None
    scorers: Sequence[Scorer | ScorerSpec]
    urls: dict[str, str | None] = dataclasses.field(repr=False)
    """The model URLs as given (a gateway's may carry credentials): sent to the workers, never stored."""
    user_simulator: UserSimulator | None
    pass_id: str
    """The run's scoring pass: every worker's scores belong to the one pass."""
    dataset: Dataset | None = None
    """The whole dataset, for the reference agent (``--model``), whose tools read it."""
    cwd: str = dataclasses.field(default_factory=os.getcwd)
    """The driver's working folder: a worker runs its task there when it has it (a shared file system), so an agent
    named by a relative ``FILE.py`` path is found as the driver found it."""
    limiters: str | None = None
    """The name of the cluster's limiter actor, once the executor made it."""
    store_mark: str | None = None
    """The mark the driver left in the store for this run (``._store_mark``), once the executor made it: a worker
    that does not find it is looking at another folder at the store's path."""
