"""One writer where it matters: a live run cannot be joined by --resume, and a process that sets up
tracing and runs an evaluation writes each span once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from test_run_interruptions import ATTEMPTS, CASES, assert_complete_and_unique, start, wait_for_trials
from waiting import wait_until

from agenteval.run import RunRefused, evaluate
from agenteval.store import Store
from agenteval.store._lease import experiment_lease, is_running


def resume_process(store, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "AGENTEVAL_STORE": str(store)}
    return subprocess.run(
        [sys.executable, "-m", "agenteval.cli", "run", "--resume", *extra, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_resume_refuses_a_live_run_and_each_trial_is_run_once(tmp_path):
    store = tmp_path / "store"
    live = start(store, "--agent-option", "latency=0.1")  # about 9 s: time for two resumes to be refused
    try:
        wait_for_trials(store, 10)
        (experiment,) = Store(store).rows("SELECT DISTINCT experiment_id FROM experiments")
        experiment_id = experiment["experiment_id"]
        assert is_running(store, experiment_id)
        for extra in ((), (experiment_id,)):  # the newest interrupted-or-running, and by id
            refused = resume_process(store, *extra)
            assert refused.returncode == 1
            assert f"cannot resume {experiment_id}: it is still running (process {live.pid}, since " in refused.stderr
        out, err = live.communicate(timeout=120)
        assert live.returncode == 0, err
    finally:
        live.kill()
    assert not is_running(store, experiment_id)
    assert_complete_and_unique(store, experiment_id)
    rows = Store(store).rows("SELECT count(*) AS n FROM trials WHERE experiment_id = ?", [experiment_id])
    assert rows == [{"n": CASES * ATTEMPTS}]


def test_a_killed_run_leaves_no_lease_behind(tmp_path):
    store = tmp_path / "store"
    child = start(store)
    wait_for_trials(store, 10)
    child.kill()
    child.wait()
    (experiment,) = Store(store).rows("SELECT DISTINCT experiment_id FROM experiments")
    assert not is_running(store, experiment["experiment_id"])
    done = resume_process(store)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    assert_complete_and_unique(store, experiment["experiment_id"])


def test_resume_in_the_same_process_refuses_a_run_it_holds(tmp_path):
    store = tmp_path / "s"
    first = evaluate("mock", "arithmetic", cases=2, attempts=1, store=store, progress="none")
    lease = experiment_lease(store, first.id)
    assert lease.acquire()  # as a live run would hold it
    try:
        try:
            evaluate("mock", "arithmetic", cases=2, attempts=1, store=store, progress="none", resume=first.id)
        except RunRefused as refused:
            assert "still running" in str(refused)
        else:
            raise AssertionError("a resume joined a live run")
    finally:
        lease.release()
    resumed = evaluate("mock", "arithmetic", cases=2, attempts=1, store=store, progress="none", resume=first.id)
    assert resumed.summary.this_run["trials"] == 0


SETUP_AND_EVALUATE = textwrap.dedent(
    """
    import json, sys
    from agenteval import evaluate, tool
    from agenteval.tracing import setup_tracing
    from opentelemetry import trace

    tracing = setup_tracing(sys.argv[1])

    OPERATIONS = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "/": int.__floordiv__}

    @tool
    def calculator(a: int, op: str, b: int) -> int:
        return OPERATIONS[op](a, b)

    def agent(question: str) -> str:
        a, op, b = question.removeprefix("What is ").rstrip("?").split()
        return str(calculator(int(a), op, int(b)))

    with trace.get_tracer("app").start_as_current_span("outside any run"):
        pass
    experiment = evaluate(agent, "arithmetic", cases=4, attempts=2, store=sys.argv[1], progress="none")
    tracing.flush()
    print(json.dumps({"id": experiment.id, "passed": experiment.summary.passed}))
    """
)


def test_setup_tracing_and_evaluate_in_one_process_write_each_span_once(tmp_path):
    store = tmp_path / "store"
    script = tmp_path / "app.py"
    script.write_text(SETUP_AND_EVALUATE)
    done = subprocess.run([sys.executable, str(script), str(store)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    spans = Store(store).rows(
        "SELECT span_id, count(*) AS copies FROM spans WHERE experiment_id = ? GROUP BY span_id", [result["id"]]
    )
    assert len(spans) == 4 * 2 * 2  # a root and a tool call per trial
    assert {s["copies"] for s in spans} == {1}
    # The span outside any run still reached the store, through setup_tracing's exporter.
    assert Store(store).rows("SELECT count(*) AS n FROM spans WHERE name = 'outside any run'") == [{"n": 1}]
    # And the tool_use scorer saw each call once, at run time and when rescored.
    assert result["passed"] == 8
    rescored = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", "rescore", result["id"], "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rescored.returncode == 0, rescored.stderr
    calls = Store(store).rows(
        "SELECT DISTINCT reason FROM scores WHERE experiment_id = ? AND scorer = 'tool_use'", [result["id"]]
    )
    assert calls == [{"reason": "the tools called are the expected ones"}]


def test_setup_tracing_with_otlp_and_a_run_send_each_span_once(tmp_path, receiver):
    script = tmp_path / "app.py"
    script.write_text(SETUP_AND_EVALUATE)
    env = {**os.environ, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint}
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "store")], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    wait_until(lambda: len(receiver.spans) >= 4 * 2 * 2 + 1, "every span at the OTLP receiver")
    ids = [s["span_id"] for s in receiver.spans]
    assert len(ids) == 4 * 2 * 2 + 1 and len(set(ids)) == len(ids)
