"""Python hosts: evaluate from async code, a running event loop, a Jupyter kernel, and agents with no source file."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap

import nbformat
from nbclient import NotebookClient
from opentelemetry import trace

import agenteval
from agenteval.analysis import _experiments as ex
from agenteval.store import Store
from agenteval.store._lease import LOCKS, Lease, experiment_lease

KERNEL_START_SECONDS = 60
CELL_SECONDS = 120


def lease_free(store, experiment_id: str) -> bool:
    lease = experiment_lease(Store(store).root, experiment_id)
    try:
        return lease.acquire()
    finally:
        lease.release()


def free_leases(store) -> list[bool]:
    """For each lease file under the store, whether it could be taken now (False: a run holds it)."""
    found = []
    for path in sorted((store / LOCKS).rglob("*")):
        if path.is_file():
            lease = Lease(path)
            found.append(lease.acquire())
            lease.release()
    return found


def test_evaluate_async_runs_under_asyncio_run_and_lets_go_of_its_lease(tmp_path):
    store = tmp_path / "store"
    held_during_run = []

    async def agent(message: str) -> str:
        held_during_run.append(free_leases(store))
        return "0"  # a wrong answer: the trial is judged, not failed

    experiment = asyncio.run(agenteval.evaluate_async(agent, "arithmetic", cases=3, store=store, progress="none"))

    assert experiment.status == ex.COMPLETED
    assert experiment.summary.this_run == {"trials": 9, "wrong": 9}
    assert held_during_run and all(leases == [False] for leases in held_during_run)  # the run's lease, held
    assert lease_free(store, experiment.id)  # and let go when it ended
    assert ex.find(Store(store), experiment.id).status == ex.COMPLETED


def test_evaluate_called_inside_a_running_event_loop_keeps_the_callers_trace_and_lease(tmp_path):
    store = tmp_path / "store"
    held_during_run = []

    def agent(message: str) -> str:
        held_during_run.append(free_leases(store))
        return "0"  # a wrong answer: the trial is judged, not failed

    async def application() -> tuple[ex.Experiment, str]:
        with trace.get_tracer("host").start_as_current_span("host request") as span:
            done = agenteval.evaluate(agent, "arithmetic", cases=3, store=store, progress="none")
        return done, format(span.get_span_context().trace_id, "032x")

    experiment, host_trace = asyncio.run(application())

    assert experiment.status == ex.COMPLETED
    assert experiment.summary.this_run == {"trials": 9, "wrong": 9}
    assert held_during_run and all(leases == [False] for leases in held_during_run)
    assert lease_free(store, experiment.id)
    traces = Store(store).rows("SELECT DISTINCT trace_id FROM spans WHERE name LIKE 'invoke_agent%'")
    assert [row["trace_id"] for row in traces] == [host_trace]  # every trial under the caller's span


def test_evaluate_in_a_jupyter_kernel_with_an_agent_defined_in_a_cell(tmp_path):
    store = tmp_path / "store"
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(
            "import agenteval\n"
            f"experiment = agenteval.evaluate('mock', 'arithmetic', cases=3, store={str(store)!r}, progress='none')\n"
            "print('mock', experiment.status, experiment.summary.this_run)"
        ),
        nbformat.v4.new_code_cell(
            "def answer(message):\n"
            "    return '0'\n"
            f"experiment = agenteval.evaluate(answer, 'arithmetic', cases=2, store={str(store)!r}, progress='none')\n"
            "print('cell', experiment.status, experiment.summary.this_run, experiment.environment['agent'])"
        ),
    ]
    client = NotebookClient(
        notebook,
        kernel_name="python3",
        startup_timeout=KERNEL_START_SECONDS,
        timeout=CELL_SECONDS,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()

    printed = ["".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream") for cell in notebook.cells]
    assert printed[0] == "mock completed {'trials': 9, 'passed': 9}\n"
    assert printed[1] == (
        "cell completed {'trials': 6, 'wrong': 6} {'source': 'unavailable', 'version_from': 'code'}\n"
    )


AGENT_IN_PYTHON_C = """
import json, sys
import agenteval
from agenteval.analysis import _experiments as ex
from agenteval.store import Store

STORE = sys.argv[1]
REPLY = {reply!r}

def answer(message):
    if message in {{"hello", "hi", "hey", "good morning"}}:  # a set constant: its order changes per process
        return "hello"
    return REPLY

for agent in (answer, lambda message: {lambda_reply!r}):
    done = agenteval.evaluate(agent, "arithmetic", cases=2, attempts=1, store=STORE, progress="none")
    stored = ex.find(Store(STORE), done.id)
    print(json.dumps({{"status": stored.status, "version": stored.version, "agent": stored.environment["agent"]}}))
"""


def run_python_c(tmp_path, reply: str, lambda_reply: str, hash_seed: str) -> subprocess.Popen:
    """``python -c`` running a def agent, then a lambda agent (a fresh store each, no source file either)."""
    code = textwrap.dedent(AGENT_IN_PYTHON_C).format(reply=reply, lambda_reply=lambda_reply)
    return subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / f"store-{hash_seed}")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONHASHSEED": hash_seed},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_agents_from_python_c_get_a_version_from_their_code(tmp_path):
    started = {
        "first": run_python_c(tmp_path, "42", "7", "1"),
        "same code, another process": run_python_c(tmp_path, "42", "7", "2"),
        "constants changed": run_python_c(tmp_path, "43", "8", "3"),
    }
    versions = {}
    for label, process in started.items():
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, f"{label}: {err}"
        results = [json.loads(line) for line in out.strip().splitlines()]
        assert [r["status"] for r in results] == [ex.COMPLETED, ex.COMPLETED]
        assert all(r["agent"] == {"source": "unavailable", "version_from": "code"} for r in results)
        versions[label] = [r["version"] for r in results]  # [def, lambda]

    assert versions["first"] == versions["same code, another process"]
    assert versions["first"][0] != versions["constants changed"][0]  # the def's global REPLY
    assert versions["first"][1] != versions["constants changed"][1]  # the lambda's own constant
    assert len({*versions["first"], *versions["constants changed"]}) == 4


INTERRUPTED_HOST = """
import asyncio, json, sys, time
import agenteval
from agenteval.analysis import _experiments as ex
from agenteval.store import Store
from agenteval.store._lease import experiment_lease

STORE = sys.argv[1]

def slow_agent(message):
    sys.stdout.write("agent started\\n")  # one write: two trials' lines never interleave
    sys.stdout.flush()
    time.sleep(0.2)
    return "0"

async def application():  # a host whose loop has no SIGINT handler of its own: Ctrl-C raises here
    return agenteval.evaluate(
        slow_agent, "arithmetic", cases=50, attempts=1, concurrency=2, store=STORE, progress="none"
    )

try:
    asyncio.new_event_loop().run_until_complete(application())
except KeyboardInterrupt:
    stored = ex.find(Store(STORE))
    lease = experiment_lease(Store(STORE).root, stored.experiment_id)
    trials = Store(STORE).rows("SELECT count(*) AS n FROM trials")[0]["n"]
    print(json.dumps({"status": stored.status, "lease_free": lease.acquire(), "trials": trials}), flush=True)
"""


def test_ctrl_c_stops_a_run_started_inside_a_running_loop_which_keeps_what_finished(tmp_path):
    host = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED_HOST, str(tmp_path / "store")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert host.stdout.readline().startswith("agent started"), host.stderr.read()
    host.send_signal(signal.SIGINT)
    out, err = host.communicate(timeout=60)

    result = json.loads(out.strip().splitlines()[-1])
    assert result["status"] == ex.INTERRUPTED, out + err
    assert result["lease_free"]  # the run let go of its lease before the interrupt reached the host
    assert result["trials"] < 50  # stopped early; what finished was saved and can be resumed
