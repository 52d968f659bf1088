"""Spans of asyncio tasks an async agent creates: its trial's while the trial is open, and never a later trial's.

Real runs into a real store on the run's own loop and on the caller's (``evaluate_async``), spans read back with
DuckDB.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import warnings
from typing import Any

import pytest

from agenteval import agent, tool
from agenteval.dataset import Case, Dataset
from agenteval.run import evaluate, evaluate_async
from agenteval.run._collect import TrialScope, current_trial
from agenteval.store import Store

ATTEMPTS = 2
LATER = r"span\(s\) started in a thread or asyncio task a trial had started, after that trial had ended"


@tool
async def fetch(question: str, i: int = 0) -> str:
    await asyncio.sleep(0)
    return question


def dataset(cases: int) -> Dataset:
    return Dataset(
        "tasks",
        "tasks(test)",
        f"hash-tasks-{cases}",
        [Case(id=f"c{n}", input=f"q{n}", expected_output=f"q{n}") for n in range(cases)],
    )


def fetches_per_trial(store: Store, experiment_id: str) -> dict[str, list[str]]:
    """Each trial's case input, and the question of each ``fetch`` span stored as that trial's."""
    rows = store.rows(
        "SELECT t.trial_id, c.input, s.attributes FROM trials t JOIN cases c USING (experiment_id, case_id) "
        "LEFT JOIN spans s ON s.trial_id = t.trial_id AND s.name = 'execute_tool fetch' WHERE t.experiment_id = ?",
        [experiment_id],
    )
    per_trial: dict[str, list[str]] = {}
    for row in rows:
        asked = per_trial.setdefault(f"{row['trial_id']} {row['input']}", [])
        if row["attributes"] is not None:
            asked.append(json.loads(json.loads(row["attributes"])["gen_ai.tool.call.arguments"])["question"])
    return per_trial


def assert_none_is_another_trials(per_trial: dict[str, list[str]]) -> None:
    for trial, asked in per_trial.items():
        question = trial.split()[1]
        assert all(a == question for a in asked), (trial, asked)


# A background consumer an async agent creates on its first call and keeps, fed over an asyncio.Queue.
CONSUMER: dict[str, Any] = {}


async def consume(work: asyncio.Queue[tuple[str, asyncio.Future[str], contextvars.Context | None]]) -> None:
    while True:
        question, reply, handed_context = await work.get()
        if handed_context is None:
            reply.set_result(await fetch(question))
        else:  # the work runs in the context of the trial that handed it over (a context of its own is kept)
            reply.set_result(await asyncio.get_running_loop().create_task(fetch(question), context=handed_context))


async def through_the_consumer(question: str, *, with_context: bool) -> str:
    if "task" not in CONSUMER:
        CONSUMER["work"] = asyncio.Queue()
        CONSUMER["task"] = asyncio.create_task(consume(CONSUMER["work"]))
        CONSUMER["creator"] = current_trial.get()
    else:
        # While the trial that created the consumer is open, work others hand it counts as that trial's (nothing in
        # the queue says which trial put it there), as for a thread; the others hand theirs over once it has ended.
        creator: TrialScope = CONSUMER["creator"]
        while not creator.ended:
            await asyncio.sleep(0.001)
    reply: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    handed = contextvars.copy_context() if with_context else None
    CONSUMER["work"].put_nowait((question, reply, handed))
    return await reply


@agent
async def with_a_consumer_created_on_first_call(question: str) -> str:
    return await through_the_consumer(question, with_context=False)


@agent
async def handing_its_context_to_a_consumer(question: str) -> str:
    return await through_the_consumer(question, with_context=True)


def test_a_task_a_trial_creates_and_keeps_lends_no_later_trial_its_context(tmp_path):
    # The consumer ran in the first trial's context for its life: what it did for every later trial was stored,
    # without a word, as the first trial's late spans. It is no trial's now, and the run says so.
    CONSUMER.clear()
    cases = 6
    later = cases * ATTEMPTS - 1
    with pytest.warns(UserWarning, match=rf"^{later} {LATER}"):
        experiment = evaluate(
            with_a_consumer_created_on_first_call,
            dataset(cases),
            attempts=ATTEMPTS,
            concurrency=4,
            store=tmp_path,
            timeout=30,
            progress="none",
        )
    per_trial = fetches_per_trial(Store(tmp_path), experiment.id)
    assert_none_is_another_trials(per_trial)
    assert sorted(len(asked) for asked in per_trial.values()) == [0] * later + [1]  # the creator's own call, only
    assert experiment.summary.passed == cases * ATTEMPTS


def test_work_handed_to_a_kept_task_with_the_trials_context_is_that_trials(tmp_path):
    CONSUMER.clear()
    cases = 6
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every span in its trial: nothing to say
        experiment = evaluate(
            handing_its_context_to_a_consumer,
            dataset(cases),
            attempts=ATTEMPTS,
            concurrency=4,
            store=tmp_path,
            timeout=30,
            progress="none",
        )
    per_trial = fetches_per_trial(Store(tmp_path), experiment.id)
    assert_none_is_another_trials(per_trial)
    assert [len(asked) for asked in per_trial.values()] == [1] * cases * ATTEMPTS


TOOL_CALLS = 3


@agent
async def tasks_of_every_kind(question: str) -> str:
    """Tasks a trial creates and waits for: gathered, created and awaited later, in a task group, nested."""
    await asyncio.gather(*(fetch(question, i) for i in range(TOOL_CALLS)))
    created = [asyncio.create_task(fetch(question, i)) for i in range(TOOL_CALLS)]
    await asyncio.sleep(0)
    await asyncio.wait(created)
    async with asyncio.TaskGroup() as group:
        for i in range(TOOL_CALLS):
            group.create_task(fetch(question, i))
    await asyncio.wait_for(asyncio.gather(fetch(question), asyncio.create_task(fetch(question))), 30)
    return question


def test_tasks_a_trial_creates_and_waits_for_are_its_own(tmp_path):
    async def main() -> Any:
        experiment = await evaluate_async(
            tasks_of_every_kind, dataset(4), attempts=ATTEMPTS, concurrency=8, store=tmp_path, progress="none"
        )
        return experiment, asyncio.get_running_loop().get_task_factory()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        experiment, factory_after = asyncio.run(main())
    assert factory_after is None  # the caller's loop as it was
    per_trial = fetches_per_trial(Store(tmp_path), experiment.id)
    assert_none_is_another_trials(per_trial)
    assert [len(asked) for asked in per_trial.values()] == [3 * TOOL_CALLS + 2] * 4 * ATTEMPTS


def test_the_callers_task_factory_still_makes_every_task_and_is_put_back(tmp_path):
    CONSUMER.clear()
    made: list[str] = []

    def callers_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        made.append(coro.__qualname__)
        return asyncio.Task(coro, loop=loop, **kwargs)

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(callers_factory)
        try:
            experiment = await evaluate_async(
                with_a_consumer_created_on_first_call,
                dataset(3),
                attempts=ATTEMPTS,
                concurrency=2,
                store=tmp_path,
                timeout=30,
                progress="none",
            )
            return experiment, loop.get_task_factory()
        finally:
            CONSUMER["task"].cancel()
            loop.set_task_factory(None)

    later = 3 * ATTEMPTS - 1
    with pytest.warns(UserWarning, match=rf"^{later} {LATER}"):
        experiment, factory_after = asyncio.run(main())
    assert factory_after is callers_factory
    assert made.count("consume") == 1  # the task created inside a trial, carried, made by the caller's factory
    per_trial = fetches_per_trial(Store(tmp_path), experiment.id)
    assert sorted(len(asked) for asked in per_trial.values()) == [0] * later + [1]


OVERDUE: dict[str, asyncio.Event] = {}


@tool
async def after_the_timeout(question: str) -> str:
    return question


@agent
async def keeps_working_past_its_timeout(question: str) -> str:
    if question == "q0":  # the first trial: cancelled at its timeout, it will not stop, and is given up on
        scope = current_trial.get()
        assert scope is not None
        while not scope.ended:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                pass
        await after_the_timeout(question)  # the trial's own code: a late span of its trial
        await asyncio.create_task(fetch(question))  # a task it creates once it has ended: no trial's
        OVERDUE["called"].set()
    else:  # a later trial, started once the first was given up (one at a time): the run is still open
        await OVERDUE["called"].wait()
    return question


def test_a_timed_out_async_agents_own_code_keeps_its_spans_after_the_trial_ended(tmp_path):
    async def main() -> Any:
        OVERDUE["called"] = asyncio.Event()
        return await evaluate_async(
            keeps_working_past_its_timeout,
            dataset(2),
            attempts=1,
            concurrency=1,
            store=tmp_path,
            timeout=0.5,
            progress="none",
        )

    with pytest.warns(UserWarning, match=rf"^1 {LATER}"):
        experiment = asyncio.run(main())
    rows = Store(tmp_path).rows(
        "SELECT t.case_id, t.failure_type, s.name FROM spans s JOIN trials t USING (experiment_id, trial_id) "
        "WHERE s.name LIKE 'execute_tool %' AND t.experiment_id = ?",
        [experiment.id],
    )
    assert rows == [{"case_id": "c0", "failure_type": "timeout", "name": "execute_tool after_the_timeout"}]
