"""Spans of work an agent hands to threads: each one stored with its own trial's ids, counted once, or said lost.

Real runs into a real store, concurrent trials, spans counted back with DuckDB.
"""

from __future__ import annotations

import asyncio
import json
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
from opentelemetry import context, trace

from agenteval import agent, llm_call, set_llm_response, tool
from agenteval.dataset import Case, Dataset
from agenteval.run import evaluate
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


@agent
def plain_pool(question: str) -> str:
    with ThreadPoolExecutor(TOOL_CALLS) as pool:
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


def test_spans_a_thread_started_without_the_trials_context_are_said_lost(tmp_path):
    with pytest.warns(UserWarning, match=rf"^{CASES * ATTEMPTS * TOOL_CALLS} span\(s\) started outside any trial"):
        store, experiment = run(tmp_path, plain_pool)
    assert {len(spans) for spans in tool_spans_per_trial(store, experiment.id).values()} == {0}

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # carried over: nothing to say
        store, experiment = run(tmp_path / "carried", every_way)
    assert_every_tool_span_is_its_trials(store, experiment.id, CASES, 3 * TOOL_CALLS)
