"""Spans of work an agent hands to threads: each one stored with its own trial's ids, counted once, or said lost.

Real runs into a real store, concurrent trials, spans counted back with DuckDB.
"""

from __future__ import annotations

import asyncio
import functools
import json
import queue
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from opentelemetry import context, trace

from agenteval import agent, llm_call, set_llm_response, tool
from agenteval.dataset import Case, Dataset
from agenteval.run import evaluate, evaluate_async
from agenteval.run._collect import TrialScope, current_trial
from agenteval.store import Store
from agenteval_instrumentation import ContextThreadPoolExecutor

TOOL_CALLS = 4
CASES = 3
ATTEMPTS = 2


@tool
def lookup(question: str, i: int) -> str:
    return f"{question}-{i}"


@llm_call(model="m", provider="p")
def chat(question: str) -> str:
    set_llm_response(input_tokens=3, output_tokens=1)
    return "ok"


def in_threads_carrying_the_opentelemetry_context(question: str) -> None:
    """As opentelemetry-instrumentation-threading does: the caller's Context attached in each thread."""
    parent = context.get_current()

    def work(i: int) -> None:
        token = context.attach(parent)
        try:
            lookup(question, i)
        finally:
            context.detach(token)

    with ThreadPoolExecutor(TOOL_CALLS) as pool:
        list(pool.map(work, range(TOOL_CALLS)))


def in_threads_under_the_agents_span(question: str) -> None:
    span = trace.get_current_span()

    def work(i: int) -> None:
        with trace.use_span(span, end_on_exit=False):
            lookup(question, i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(TOOL_CALLS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@agent
def otel_threads(question: str) -> str:
    in_threads_carrying_the_opentelemetry_context(question)
    return chat(question)


@agent
def parented_threads(question: str) -> str:
    in_threads_under_the_agents_span(question)
    return chat(question)


@agent
async def executor_threads(question: str) -> str:
    loop = asyncio.get_running_loop()
    await asyncio.gather(*(loop.run_in_executor(None, lookup, question, i) for i in range(TOOL_CALLS)))
    return chat(question)


@agent
def every_way(question: str) -> str:
    """Threads of each kind a sync agent may start, all carrying the trial over."""
    in_threads_carrying_the_opentelemetry_context(question)
    in_threads_under_the_agents_span(question)
    with ContextThreadPoolExecutor(TOOL_CALLS) as pool:
        list(pool.map(lookup, [question] * TOOL_CALLS, range(TOOL_CALLS)))
    return chat(question)


def run(tmp_path, fn, cases: int = CASES, concurrency: int = 8):
    dataset = Dataset(
        "threads",
        "threads(test)",
        f"hash-threads-{cases}",
        [Case(id=f"c{n}", input=f"q{n}", expected_output="ok", category="c") for n in range(cases)],
    )
    store = tmp_path / "s"
    experiment = evaluate(
        fn, dataset, attempts=ATTEMPTS, concurrency=concurrency, store=store, timeout=30, progress="none"
    )
    return Store(store), experiment


def tool_spans_per_trial(store: Store, experiment_id: str) -> dict[str, list[dict]]:
    """Each trial's tool spans, with the input of the trial's case and its decorated agent's span id."""
    rows = store.rows(
        """
        SELECT t.trial_id, c.input, s.trace_id, s.parent_span_id, s.attributes,
               (SELECT a.span_id FROM spans a WHERE a.trial_id = t.trial_id AND a.name LIKE 'invoke_agent %'
                  AND a.scope_name = 'agenteval_instrumentation') AS agent_span_id,
               (SELECT r.trace_id FROM spans r WHERE r.trial_id = t.trial_id
                  AND r.scope_name = 'agenteval.runner') AS root_trace_id
        FROM trials t JOIN cases c USING (experiment_id, case_id)
        LEFT JOIN spans s ON s.trial_id = t.trial_id AND s.name = 'execute_tool lookup'
        WHERE t.experiment_id = ?
        """,
        [experiment_id],
    )
    per_trial: dict[str, list[dict]] = {}
    for row in rows:
        per_trial.setdefault(row["trial_id"], [])
        if row["trace_id"] is not None:
            per_trial[row["trial_id"]].append(row)
    return per_trial


def assert_every_tool_span_is_its_trials(store: Store, experiment_id: str, cases: int, per_trial_calls: int) -> None:
    per_trial = tool_spans_per_trial(store, experiment_id)
    assert len(per_trial) == cases * ATTEMPTS
    assert {len(spans) for spans in per_trial.values()} == {per_trial_calls}
    for spans in per_trial.values():
        for span in spans:
            arguments = json.loads(json.loads(span["attributes"])["gen_ai.tool.call.arguments"])
            assert arguments["question"] == span["input"]  # its own case's, never another trial's
            assert span["trace_id"] == span["root_trace_id"]
            assert span["parent_span_id"] == span["agent_span_id"]
    (stray,) = store.rows(
        "SELECT count(*) AS n FROM spans WHERE experiment_id = ? AND trial_id IS NULL", [experiment_id]
    )
    assert stray["n"] == 0


@pytest.mark.parametrize("fn", [otel_threads, parented_threads], ids=["context attached", "use_span"])
def test_a_span_started_in_a_thread_under_a_trials_span_is_that_trials(tmp_path, fn):
    store, experiment = run(tmp_path, fn)
    assert_every_tool_span_is_its_trials(store, experiment.id, CASES, TOOL_CALLS)


def test_run_in_executor_on_the_runs_own_loop_keeps_the_trial(tmp_path):
    store, experiment = run(tmp_path, executor_threads)
    assert_every_tool_span_is_its_trials(store, experiment.id, CASES, TOOL_CALLS)


def test_trials_whose_threads_interleave_keep_each_span_apart(tmp_path):
    cases = 8
    store, experiment = run(tmp_path, every_way, cases=cases, concurrency=32)
    assert_every_tool_span_is_its_trials(store, experiment.id, cases, 3 * TOOL_CALLS)
    chats = store.rows("SELECT count(*) AS n FROM spans WHERE experiment_id = ? AND name = 'chat m'", [experiment.id])
    assert chats[0]["n"] == cases * ATTEMPTS  # each model call once


# Threads an agent starts on its own, with no helper: while a run is open, one started (or a task submitted) inside a
# trial carries the trial's context (agenteval.run._threads).

MANY_CASES = 40
POOL_BEFORE_THE_RUN = ThreadPoolExecutor(4, thread_name_prefix="before-the-run")
"""Created, and its workers started, outside any run: tasks submitted to it from a trial must still carry it."""
POOL_BEFORE_THE_RUN.submit(lambda: None).result()


class OwnRun(threading.Thread):
    """A subclass whose run() never calls Thread.run (as threading.Timer's does not)."""

    def __init__(self, question: str, i: int) -> None:
        super().__init__()
        self.question, self.i = question, i

    def run(self) -> None:
        lookup(self.question, self.i)


def started_and_joined(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def nested(question: str, i: int) -> None:
    started_and_joined([threading.Thread(target=lookup, args=(question, i))])


def every_plain_way(question: str) -> None:
    """Work in threads started every plain way, each kind calling ``lookup`` :data:`TOOL_CALLS` times."""
    # The run's own worker thread (a sync agent's) is the run's: it serves every trial and carries none.
    assert "run" not in threading.current_thread().__dict__
    started_and_joined([threading.Thread(target=lookup, args=(question, i)) for i in range(TOOL_CALLS)])
    started_and_joined([threading.Thread(target=nested, args=(question, i)) for i in range(TOOL_CALLS)])
    started_and_joined([OwnRun(question, i) for i in range(TOOL_CALLS)])
    started_and_joined([threading.Timer(0, lookup, args=(question, i)) for i in range(TOOL_CALLS)])
    with ThreadPoolExecutor(TOOL_CALLS) as pool:
        list(pool.map(lookup, [question] * TOOL_CALLS, range(TOOL_CALLS)))
    for future in [POOL_BEFORE_THE_RUN.submit(lookup, question, i) for i in range(TOOL_CALLS)]:
        future.result()
    with ThreadPoolExecutor(1) as pool:
        # Callbacks added before their futures finish: the pool's worker thread runs them, in no trial's context
        # unless they carry the one they were added in (their spans were lost before).
        finish = threading.Event()
        for i, future in enumerate([pool.submit(finish.wait) for _ in range(TOOL_CALLS)]):
            future.add_done_callback(functools.partial(looked_up_when_done, question, i))
        finish.set()


def looked_up_when_done(question: str, i: int, future: object) -> None:
    lookup(question, i)


PLAIN_WAYS = 7


@agent
def plain_threads(question: str) -> str:
    every_plain_way(question)
    return chat(question)


@agent
async def async_plain_threads(question: str) -> str:
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(TOOL_CALLS) as pool:  # the agent's own pool, through the loop
        await asyncio.gather(*(loop.run_in_executor(pool, lookup, question, i) for i in range(TOOL_CALLS)))
    await asyncio.gather(*(asyncio.wrap_future(POOL_BEFORE_THE_RUN.submit(lookup, question, i)) for i in range(2)))
    thread = threading.Thread(target=nested, args=(question, 0))
    thread.start()
    await loop.run_in_executor(POOL_BEFORE_THE_RUN, thread.join)
    return chat(question)


def test_spans_of_threads_an_agent_starts_itself_are_its_trials(tmp_path):
    originals = threading.Thread.start, ThreadPoolExecutor.submit, Future.add_done_callback
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no span outside a trial: nothing to say
        store, experiment = run(tmp_path, plain_threads, cases=MANY_CASES, concurrency=32)
    assert_every_tool_span_is_its_trials(store, experiment.id, MANY_CASES, PLAIN_WAYS * TOOL_CALLS)
    assert (threading.Thread.start, ThreadPoolExecutor.submit, Future.add_done_callback) == originals


def test_spans_of_threads_an_async_agent_starts_itself_are_its_trials(tmp_path):
    originals = threading.Thread.start, ThreadPoolExecutor.submit
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store, experiment = run(tmp_path, async_plain_threads, cases=MANY_CASES, concurrency=32)
    assert_every_tool_span_is_its_trials(store, experiment.id, MANY_CASES, TOOL_CALLS + 3)
    assert (threading.Thread.start, ThreadPoolExecutor.submit) == originals


@tool
def fetch(question: str) -> str:
    return question


SHARED: dict[str, ThreadPoolExecutor] = {}
HANDED_OVER: queue.SimpleQueue[tuple[str, queue.SimpleQueue[object]]] = queue.SimpleQueue()
SEEN_BY_HANDED_OVER: list[object] = []


def shared_pool() -> ThreadPoolExecutor:
    """One worker, started by the first trial that submits to it: every later task runs on that thread."""
    return SHARED.setdefault("pool", ThreadPoolExecutor(1, thread_name_prefix="lazy"))


def handed_over(question: str) -> str:
    SEEN_BY_HANDED_OVER.append(current_trial.get())
    return fetch(question)


def dispatcher() -> None:
    """A long-lived worker started before the run, taking work from a queue: outside every trial."""
    while (item := HANDED_OVER.get()) is not None:
        question, reply = item
        reply.put(shared_pool().submit(handed_over, question).result())


@agent
def through_a_queue(question: str) -> str:
    shared_pool().submit(lookup, question, 0).result()  # inside the trial: carried
    reply: queue.SimpleQueue[object] = queue.SimpleQueue()
    HANDED_OVER.put((question, reply))
    reply.get()
    return chat(question)


def test_a_task_submitted_outside_the_trials_runs_in_none_even_on_a_worker_a_trial_started(tmp_path):
    SEEN_BY_HANDED_OVER.clear()
    thread = threading.Thread(target=dispatcher, daemon=True)
    thread.start()
    try:
        handed = CASES * ATTEMPTS
        with pytest.warns(UserWarning, match=rf"^{handed} span\(s\) started outside any trial"):
            store, experiment = run(tmp_path, through_a_queue, concurrency=32)
    finally:
        HANDED_OVER.put(None)
        thread.join()
    assert_every_tool_span_is_its_trials(store, experiment.id, CASES, 1)
    assert SEEN_BY_HANDED_OVER == [None] * handed
    (stored,) = store.rows("SELECT count(*) AS n FROM spans WHERE name = 'execute_tool fetch'")
    assert stored["n"] == 0
    # After the run too, the pool's worker (started inside a trial) runs a task in no trial's context.
    task = shared_pool().submit(lambda: (current_trial.get(), trace.get_current_span().get_span_context().is_valid))
    assert task.result() == (None, False)
    SHARED.pop("pool").shutdown()


CARRIED_AFTER_THE_FIRST: list[bool] = []


async def the_current_trial() -> TrialScope | None:
    return current_trial.get()


def test_overlapping_runs_keep_the_threads_and_tasks_carried_until_the_last_one_ends(tmp_path):
    originals = threading.Thread.start, ThreadPoolExecutor.submit
    dataset = Dataset(
        "threads",
        "threads(test)",
        "hash-overlap",
        [Case(id=f"c{n}", input=f"q{n}", expected_output="ok") for n in range(CASES)],
    )

    async def both() -> tuple:
        first_over = asyncio.Event()

        @agent
        async def after_the_first(question: str) -> str:
            await first_over.wait()  # the first run has ended: the wrappers must still be in place
            await asyncio.to_thread(started_and_joined, [threading.Thread(target=lookup, args=(question, 0))])
            carried = await asyncio.create_task(the_current_trial())  # and the loop's task factory
            CARRIED_AFTER_THE_FIRST.append(carried is not None and carried.started_by is current_trial.get())
            return chat(question)

        @agent
        def first(question: str) -> str:
            started_and_joined([threading.Thread(target=lookup, args=(question, 0))])
            return chat(question)

        async def first_run():
            try:
                return await evaluate_async(first, dataset, attempts=ATTEMPTS, store=tmp_path / "a", progress="none")
            finally:
                first_over.set()

        second = evaluate_async(after_the_first, dataset, attempts=ATTEMPTS, store=tmp_path / "b", progress="none")
        both = await asyncio.gather(first_run(), second)
        assert asyncio.get_running_loop().get_task_factory() is None  # put back once the last run ended
        return both

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CARRIED_AFTER_THE_FIRST.clear()
        a, b = asyncio.run(both())
    assert CARRIED_AFTER_THE_FIRST == [True] * CASES * ATTEMPTS
    assert_every_tool_span_is_its_trials(Store(tmp_path / "a"), a.id, CASES, 1)
    assert_every_tool_span_is_its_trials(Store(tmp_path / "b"), b.id, CASES, 1)
    assert (threading.Thread.start, ThreadPoolExecutor.submit) == originals


LAZY: dict[str, threading.Thread] = {}
LAZY_WORK: queue.SimpleQueue[tuple[str, queue.SimpleQueue[object]]] = queue.SimpleQueue()


def lazy_worker() -> None:
    while True:
        question, reply = LAZY_WORK.get()
        reply.put(fetch(question))


@agent
def through_a_worker_started_on_first_call(question: str) -> str:
    if "worker" not in LAZY:  # started by the first trial, kept for every later one
        LAZY["worker"] = threading.Thread(target=lazy_worker, daemon=True)
        LAZY["worker"].start()
    reply: queue.SimpleQueue[object] = queue.SimpleQueue()
    LAZY_WORK.put((question, reply))
    reply.get()
    return chat(question)


def test_a_worker_a_trial_starts_and_keeps_lends_no_later_trial_its_context(tmp_path):
    # The worker carries the first trial's context for its life: what it does for later trials, after the first
    # has ended, would be stored as that first trial's late spans. It is no trial's, and said so.
    later = CASES * ATTEMPTS - 1
    with pytest.warns(
        UserWarning, match=rf"^{later} span\(s\) started in a thread or asyncio task a trial had started"
    ):
        store, experiment = run(tmp_path, through_a_worker_started_on_first_call, concurrency=1)
    rows = store.rows(
        "SELECT t.trial_id, count(s.span_id) AS n FROM trials t LEFT JOIN spans s ON s.trial_id = t.trial_id "
        "AND s.name = 'execute_tool fetch' WHERE t.experiment_id = ? GROUP BY 1",
        [experiment.id],
    )
    assert sorted(row["n"] for row in rows) == [0] * later + [1]  # the first trial's own call, only
    (stored,) = store.rows("SELECT count(*) AS n FROM spans WHERE name = 'execute_tool fetch'")
    assert stored["n"] == 1


# Another library (an OpenTelemetry instrumentor, a hand-written wrapper) wrapping the same methods as the run does,
# and unwrapping them later by putting back what it wrapped.
WRAPPED = ((threading.Thread, "start"), (ThreadPoolExecutor, "submit"))


UNDER_THE_OTHER_LIBRARY: dict[tuple[type, str], object] = {}


def wrap_as_another_library() -> None:
    for cls, name in WRAPPED:
        method = UNDER_THE_OTHER_LIBRARY[cls, name] = cls.__dict__[name]

        @functools.wraps(method)
        def passing_through(*args, __method=method, **kwargs):
            return __method(*args, **kwargs)

        setattr(cls, name, passing_through)


def unwrap_as_another_library() -> None:
    for cls, name in WRAPPED:
        setattr(cls, name, UNDER_THE_OTHER_LIBRARY.pop((cls, name)))


@agent
def a_thread_and_a_task(question: str) -> str:
    started_and_joined([threading.Thread(target=lookup, args=(question, 0))])
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lookup, question, 1).result()
    if question == "q0" and WRAP_DURING_THE_RUN:
        WRAP_DURING_THE_RUN.pop()()
    return chat(question)


WRAP_DURING_THE_RUN: list[Callable[[], None]] = []


def run_carrying_a_thread_and_a_task(tmp_path, name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # each span in its trial
        store, experiment = run(tmp_path / name, a_thread_and_a_task, concurrency=1)
    assert_every_tool_span_is_its_trials(store, experiment.id, CASES, 2)


def test_every_run_carries_threads_after_another_library_wrapped_ours_during_a_run_and_unwrapped_it(tmp_path):
    originals = threading.Thread.start, ThreadPoolExecutor.submit
    WRAP_DURING_THE_RUN.append(wrap_as_another_library)
    run_carrying_a_thread_and_a_task(tmp_path, "wrapped during")
    unwrap_as_another_library()  # its wrapper off: ours is left as the method, passing through
    run_carrying_a_thread_and_a_task(tmp_path, "second")
    assert (threading.Thread.start, ThreadPoolExecutor.submit) == originals
    run_carrying_a_thread_and_a_task(tmp_path, "third")  # the one that found the wrappers missing
    assert (threading.Thread.start, ThreadPoolExecutor.submit) == originals


def test_every_run_carries_threads_after_another_library_unwrapped_its_own_during_a_run(tmp_path):
    originals = threading.Thread.start, ThreadPoolExecutor.submit
    wrap_as_another_library()
    WRAP_DURING_THE_RUN.append(unwrap_as_another_library)  # under the run's, which it drops with its own
    with pytest.warns(UserWarning, match="outside any trial"):  # the trials after that carry nothing
        run(tmp_path / "unwrapped during", a_thread_and_a_task, concurrency=1)
    assert (threading.Thread.start, ThreadPoolExecutor.submit) == originals
    run_carrying_a_thread_and_a_task(tmp_path, "second")
    assert (threading.Thread.start, ThreadPoolExecutor.submit) == originals


OVERDUE = {"given_up": threading.Event(), "called": threading.Event()}


@tool
def after_the_timeout(question: str) -> str:
    return question


@agent
def keeps_working_past_its_timeout(question: str) -> str:
    if question == "q0":  # the first trial: given up on while its code still runs in the run's worker
        OVERDUE["given_up"].wait()
        after_the_timeout(question)
        OVERDUE["called"].set()
    else:  # a later trial, started only once the first was given up (one at a time): the run is still open
        OVERDUE["given_up"].set()
        OVERDUE["called"].wait()
    return chat(question)


def test_a_timed_out_trials_own_code_keeps_its_spans_after_the_trial_ended(tmp_path):
    # What a trial's own code starts after it timed out (a sync agent cannot be stopped) is that trial's work, stored
    # as its late spans: it was dropped as a span of a thread the trial had started, and warned of as one.
    for event in OVERDUE.values():
        event.clear()
    dataset = Dataset(
        "overdue",
        "overdue(test)",
        "hash-overdue",
        [Case(id=f"c{n}", input=f"q{n}", expected_output="ok") for n in range(2)],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        experiment = evaluate(
            keeps_working_past_its_timeout,
            dataset,
            attempts=1,
            concurrency=1,
            store=tmp_path,
            timeout=1,
            progress="none",
        )
    rows = Store(tmp_path).rows(
        "SELECT t.case_id, t.failure_type FROM spans s JOIN trials t USING (experiment_id, trial_id) "
        "WHERE s.name = 'execute_tool after_the_timeout' AND t.experiment_id = ?",
        [experiment.id],
    )
    assert rows == [{"case_id": "c0", "failure_type": "timeout"}]


SIMULATOR_WORKER: dict[str, threading.Thread] = {}
SIMULATOR_WORK: queue.SimpleQueue[tuple[str, queue.SimpleQueue[object]]] = queue.SimpleQueue()


def simulator_worker() -> None:
    while True:
        goal, reply = SIMULATOR_WORK.get()
        reply.put(fetch(goal))


def simulator_with_a_worker_started_on_first_call(goal: str, messages: list[dict[str, str]]) -> None:
    """A user simulator whose first call starts a worker kept for every later one; it ends each conversation."""
    if "worker" not in SIMULATOR_WORKER:
        SIMULATOR_WORKER["worker"] = threading.Thread(target=simulator_worker, daemon=True)
        SIMULATOR_WORKER["worker"].start()
    reply: queue.SimpleQueue[object] = queue.SimpleQueue()
    SIMULATOR_WORK.put((goal, reply))
    reply.get()
    return None


@agent
def answers_at_once(question: str) -> str:
    return chat(question)


def test_a_worker_the_user_simulator_starts_and_keeps_lends_no_later_trial_its_context(tmp_path):
    # The simulated user's scope was a new one that no trial's end ended: a worker its code started in the first
    # trial carried that scope for its life, and what it did for every later trial was stored as the first trial's.
    dataset = Dataset(
        "simulated",
        "simulated(test)",
        "hash-simulated-worker",
        [Case(id=f"c{n}", input=f"q{n}", expected_output="ok", simulated_user=f"g{n}", max_turns=2) for n in range(3)],
    )
    later = 3 * ATTEMPTS - 1
    with pytest.warns(
        UserWarning, match=rf"^{later} span\(s\) started in a thread or asyncio task a trial had started"
    ):
        experiment = evaluate(
            answers_at_once,
            dataset,
            attempts=ATTEMPTS,
            concurrency=1,
            store=tmp_path,
            timeout=30,
            progress="none",
            user_simulator=simulator_with_a_worker_started_on_first_call,
        )
    rows = Store(tmp_path).rows(
        "SELECT t.trial_id, count(s.span_id) AS n FROM trials t LEFT JOIN spans s ON s.trial_id = t.trial_id "
        "AND s.name = 'execute_tool fetch' WHERE t.experiment_id = ? GROUP BY 1",
        [experiment.id],
    )
    assert sorted(row["n"] for row in rows) == [0] * later + [1]  # the first trial's own call, only
