"""Running trials concurrently on one event loop, with a housekeeping tick beside them.

``concurrency`` workers take plans from one queue; every :data:`TICK_SECONDS`, or as soon as
:data:`BATCH_TRIALS` trials have finished, the tick hands the finished trials on (to be scored and saved).
A stop request cancels the trials still running (they stay missing, so ``--resume`` runs them) and keeps
what finished.

An async agent cancelled at its timeout that will not end (it swallows ``CancelledError``) holds its worker
for ever: the tick gives its trial up as a timeout, leaves that worker behind and starts another in its place;
a stop waits for cancelled trials no longer than the runner's grace either.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ._loop import leave_running, start_task
from ._trial import GivenUp, TrialPlan, TrialResult, TrialRunner

TICK_SECONDS = 1.0
"""How often finished trials are scored and saved. Each micro-batch has a fixed cost (the feature query,
each SQL scorer's query, the outcome query: 30 to 50 ms); twice a second cost a tenth of a 10,000-trial
run's time, once a second half that. The progress counts move at this pace."""
BATCH_TRIALS = 1000
"""Finished trials that make a micro-batch without waiting for the tick's time: what one batch holds in memory
(its results, spans and the feature query's working memory, about 25 MB a thousand trials) stays bounded however
fast the agent answers, and a run killed at any moment loses at most this many finished trials' work."""
BLOCKED_LOOP_SECONDS = 1.0
"""How late the tick may wake before the run says that something blocks the event loop."""


async def run_all(
    plans: Sequence[TrialPlan],
    runner: TrialRunner,
    finished: list[TrialResult],
    tick: Callable[[], Awaitable[None]],
    stop: asyncio.Event,
    concurrency: int,
    on_blocked: Callable[[float], None],
) -> None:
    """Run every plan with ``runner`` (``concurrency`` at a time), appending each result to ``finished``; call
    ``tick`` every :data:`TICK_SECONDS`, or sooner once :data:`BATCH_TRIALS` results wait (it takes the results out
    of ``finished``; the caller hands on what is left when this returns). When ``stop`` is set, unfinished
    trials are cancelled. An exception from ``runner.run`` or ``tick`` (a failure of the harness, not of a
    trial) stops the run and is raised."""
    queue = iter(plans)
    loop = asyncio.get_running_loop()
    wake: asyncio.Future[None] = loop.create_future()

    def tick_now() -> None:
        if not wake.done():
            wake.set_result(None)

    async def worker() -> None:
        for plan in queue:
            if stop.is_set():
                return
            try:
                result = await runner.run(plan)
            except GivenUp:  # this worker was left behind, and another took its place
                return
            finished.append(result)
            if len(finished) >= BATCH_TRIALS:
                tick_now()
            # An agent that never suspends (no I/O) would otherwise starve the tick: nothing would be
            # scored or saved until the very end, and memory would grow with the run.
            await asyncio.sleep(0)

    async def ticking() -> None:
        nonlocal wake
        warned = False
        while True:
            asleep = time.monotonic()
            timer = loop.call_later(TICK_SECONDS, tick_now)
            try:
                await wake  # a future, not an event: the tick runs at the loop's next turn, before more pile up
            finally:
                timer.cancel()
            wake = loop.create_future()
            runner.end_if_forked()  # a child an agent forked, whose loop went on, neither says nor saves anything
            late = time.monotonic() - asleep - TICK_SECONDS
            if late >= BLOCKED_LOOP_SECONDS and not warned:
                warned = True  # once a run: the trials that ran past their timeout say it each
                on_blocked(late)
            replace_stuck_workers()
            await tick()

    def replace_stuck_workers() -> None:
        for result, task in runner.give_up_overdue(time.monotonic()):
            finished.append(result)
            if task in running:
                running.discard(task)
                leave_running(task)
                running.add(start_task(worker()))
                if not changed.done():  # the main loop waits on the workers it knew of
                    changed.set_result(None)

    running: set[asyncio.Task[None]] = set()
    changed: asyncio.Future[None] = loop.create_future()  # set when workers were replaced
    keeper = asyncio.create_task(ticking())
    running.update(start_task(worker()) for _ in range(min(concurrency, len(plans) or 1)))
    stopper = asyncio.create_task(stop.wait())
    try:
        while running:
            watched: set[asyncio.Future[Any]] = {*running, stopper, keeper, changed}
            done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            if changed.done():
                changed = loop.create_future()
            for task in done & {*running, keeper}:
                task.result()  # a failure of the harness itself (not of a trial) stops the run loudly
            running -= done
            if stopper in done:
                runner.cancelling_trials = True
                await _cancelled(running, runner.grace)  # unfinished trials are re-run by --resume
                break
    finally:
        runner.cancelling_trials = True  # whatever ends the run (a harness failure, a cancel) cancels what is left
        keeper.cancel()
        stopper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper


async def _cancelled(tasks: set[asyncio.Task[Any]], grace: float) -> None:
    """Cancel ``tasks`` and wait for them to end, at most ``grace`` seconds; those that will not are left behind."""
    if not tasks:
        return
    for task in tasks:
        task.cancel()
    ended, stuck = await asyncio.wait(tasks, timeout=grace)
    for task in ended:
        if not task.cancelled():
            task.exception()  # seen, as gathering them would (a trial's failure is in its result, not here)
    for task in stuck:
        leave_running(task)
