"""``--executor ray`` on a real Ray cluster: a head and worker nodes on this machine, in a network namespace whose
only interface is loopback (tests/ray_cluster.py). Every trial exactly once and the same figures as a local run;
a worker node killed mid-run and the run still complete with every trial once; one rate limiter per model for the
whole cluster, which more waiting calls than Ray runs at once do not deadlock; a cluster that cannot be reached, is
not a Ray head, has no CPU and no autoscaler (under Ray's autoscaler v1 and v2), or has a node without the store, and
an agent that cannot be sent, each refused with one line; an autoscaling cluster waited for. One cluster serves the
module (starting one takes seconds); the tests that need a cluster without a CPU start their own."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ray_cluster import BIN, LoopbackRayCluster
from waiting import wait_until

from agenteval.dataset import load_dataset
from agenteval.errors import UsageError
from agenteval.run import evaluate
from agenteval.run._plan import new_trials
from agenteval.run._ray import MAX_CHUNK, MAX_RETRIES, WINDOW_PER_CPU, _head, chunks
from agenteval.store import Store

NODE_A, NODE_B = 6401, 6402
"""Worker nodes' node-manager ports: how a node's raylet is found to be killed."""
MOCK = ["--dataset", "arithmetic", "--agent", "mock"]
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def cluster():
    with LoopbackRayCluster(head_cpus=1) as started:
        started.add_node(2, NODE_A)
        yield started


def agenteval_run(store: Path, *args: str) -> list[str]:
    return [str(BIN / "agenteval"), "run", "--store", str(store), "--json", *args]


def start_driver(cluster: LoopbackRayCluster, store: Path, *args: str, **options) -> subprocess.Popen:
    """``agenteval run ... --executor ray`` in the cluster's namespace."""
    command = agenteval_run(store, *args, "--executor", "ray", "--ray-address", cluster.address)
    return cluster.popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **options)


def finished(child: subprocess.Popen, timeout: float = 300) -> dict:
    out, err = child.communicate(timeout=timeout)
    assert child.returncode == 0, out + err
    return json.loads(out)


def refused(child: subprocess.Popen, timeout: float = 60) -> tuple[int, str]:
    """The exit code and the one error line of a run refused before it started (a run that hangs instead fails
    the test once ``timeout`` has passed)."""
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        raise AssertionError(f"the run was not refused within {timeout} s") from None
    errors = [line for line in err.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, f"exit {child.returncode}, not one error line: {out[:2000]}"
    return child.returncode, errors[0]


def trial_keys(store: Path, experiment_id: str) -> dict[tuple[str, int], int]:
    rows = Store(store).rows(
        "SELECT case_id, attempt, count(*) AS n FROM trials WHERE experiment_id = ? GROUP BY ALL", [experiment_id]
    )
    return {(row["case_id"], row["attempt"]): row["n"] for row in rows}


def the_same_figures(summary: dict) -> dict:
    names = ("trials", "passed", "wrong", "failed", "failures_by_type", "pass_rate", "pass_rate_ci95", "cases")
    usage = ("input_tokens", "output_tokens", "cost_usd")
    return {name: summary[name] for name in (*names, *usage)}


def loopback_only(cluster: LoopbackRayCluster) -> None:
    """The namespace has loopback only, and nothing listens on any other address."""
    assert sorted(cluster.addresses()) == ["127.0.0.1/8", "::1/128"]
    listening = cluster.listeners()
    assert listening, "the cluster listens on nothing?"
    loopback = ("127.", "[::1]", "[::ffff:127.", "*:", "0.0.0.0:", "[::]:")  # wildcards reach loopback only here
    assert [address for address in listening if not address.startswith(loopback)] == []
    assert os.stat(cluster.netns).st_ino != os.stat("/proc/self/ns/net").st_ino


@pytest.mark.heavy
def test_every_trial_once_and_the_figures_of_a_local_run(cluster, tmp_path):
    loopback_only(cluster)
    options = [*MOCK, "--cases", "60", "--agent-option", "wrong_rate=0.2", "--agent-option", "fail_rate=0.1"]
    spread = finished(start_driver(cluster, tmp_path / "ray", *options))
    local = json.loads(
        subprocess.run(agenteval_run(tmp_path / "local", *options), capture_output=True, text=True, check=True).stdout
    )
    keys = trial_keys(tmp_path / "ray", spread["experiment_id"])
    assert len(keys) == 60 * 3 and set(keys.values()) == {1}
    assert spread["status"] == "completed" and spread["this_run"]["trials"] == 180
    assert the_same_figures(spread) == the_same_figures(local)
    assert spread["this_run"]["ray_worker_processes"] >= 2  # spread over the nodes' workers, not one process
    # Count in, count out: every trial's spans and scores reached the store, as many as a local run writes,
    # all in the run's one scoring pass.
    per_store = {}
    for name in ("ray", "local"):
        (row,) = Store(tmp_path / name).rows(
            "SELECT (SELECT count(*) FROM spans s WHERE s.trial_id IN (SELECT trial_id FROM trials)) AS spans,"
            " (SELECT count(*) FROM scores) AS scores, (SELECT count(DISTINCT pass_id) FROM scores) AS passes"
        )
        per_store[name] = row
    assert per_store["ray"] == per_store["local"] and per_store["ray"]["passes"] == 1
    assert list((tmp_path / "ray").rglob("*.mark")) == []  # the mark the driver left for its tasks, gone with the run


@pytest.mark.heavy
def test_a_worker_node_killed_mid_run_and_every_trial_once(cluster, tmp_path):
    cluster.add_node(2, NODE_B)
    store = tmp_path / "store"
    options = [*MOCK, "--cases", "150", "--attempts", "2", "--concurrency", "2", "--agent-option", "latency=0.2"]
    driver = start_driver(cluster, store, *options)

    def busy_on_b() -> bool:
        return cluster.busy_workers(NODE_B, "run_chunk") > 0 and any((store / "spans").rglob("part-*.parquet"))

    wait_until(busy_on_b, "a task running on node B after trials were saved", timeout=120)
    loopback_only(cluster)  # with the driver and every node at work
    assert cluster.kill_node(NODE_B) >= 2  # its raylet and a worker at least
    summary = finished(driver)
    keys = trial_keys(store, summary["experiment_id"])
    assert len(keys) == 150 * 2 and set(keys.values()) == {1}
    assert summary["status"] == "completed" and summary["trials"] == 300 and summary["this_run"]["trials"] == 300


@pytest.mark.heavy
def test_one_limiter_per_model_for_the_whole_cluster(cluster, tmp_path):
    server = cluster.popen(
        [sys.executable, str(HERE / "model_server_process.py"), "120", "0.05"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        port = int(server.stdout.readline())
        options = ["--dataset", "arithmetic", "--cases", "48", "--attempts", "1", "--concurrency", "8"]
        model = ["--model", "openai/test-model", "--base-url", f"http://127.0.0.1:{port}/v1"]
        summary = finished(
            start_driver(cluster, tmp_path / "store", *options, *model, env={"OPENAI_API_KEY": "test-key"})
        )
    finally:
        seen, _ = server.communicate(timeout=60)
    served = json.loads(seen.splitlines()[-1])
    assert served["rate_limited"] == 120
    (limiter,) = summary["limits"].values()  # one limiter for the one model
    assert limiter["callers"] >= 2  # the calls of several worker processes went through it
    assert limiter["limits"][:5] == [32, 16, 8, 4, 2]  # halved once per burst of 429s, cluster-wide
    keys = trial_keys(tmp_path / "store", summary["experiment_id"])
    assert len(keys) == 48 and set(keys.values()) == {1}


def test_tasks_hold_whole_cases_every_trial_once_within_bounds():
    plans = new_trials(load_dataset("arithmetic", cases=500).cases, 3)
    for cpus, concurrency in ((1, 4), (3, 8), (64, 4), (2, 2000)):
        cut = chunks(plans, cpus, concurrency)
        assert [plan for chunk in cut for plan in chunk] == plans  # all, once, in order
        cases = [{plan.case.id for plan in chunk} for chunk in cut]
        assert sum(map(len, cases)) == 500  # no case split between two tasks
        assert all(len(chunk) <= max(concurrency, MAX_CHUNK) + 2 for chunk in cut)
        assert all(len(chunk) >= min(concurrency, len(plans)) - 2 for chunk in cut[:-1])


def test_the_head_a_ray_address_names_is_the_one_tried_before_connecting():
    expected = {
        "10.0.0.5:6380": ("10.0.0.5", 6380),
        "head.example": ("head.example", 6379),  # Ray's default port
        "ray://head.example:10001": ("head.example", 10001),  # Ray Client
        "[::1]:6379": ("::1", 6379),
        "::1": ("::1", 6379),
        "auto": None,  # Ray's own words: Ray finds the cluster itself
        "local": None,
    }
    assert {address: _head(address) for address in expected} == expected


def test_a_ray_address_needs_the_ray_executor_and_executors_are_named(tmp_path):
    with pytest.raises(UsageError, match="--ray-address goes with --executor ray"):
        evaluate("mock", "arithmetic", cases=3, store=tmp_path / "s", progress="none", ray_address="127.0.0.1:1")
    with pytest.raises(UsageError, match="--executor 'spark'"):
        evaluate("mock", "arithmetic", cases=3, store=tmp_path / "s", progress="none", executor="spark")
    assert not (tmp_path / "s").exists()  # refused before anything was written


@pytest.mark.heavy
def test_a_killed_driver_resumes_and_every_trial_once(cluster, tmp_path):
    store = tmp_path / "store"
    options = [*MOCK, "--cases", "100", "--attempts", "2", "--concurrency", "2", "--agent-option", "latency=0.1"]
    driver = start_driver(cluster, store, *options)
    wait_until(lambda: any((store / "trials").rglob("part-*.parquet")), "trials committed by the driver", timeout=120)
    assert sorted(set(cluster.titled("LimiterHost", "TaskSignal"))) == ["ray::LimiterHost", "ray::TaskSignal"]
    driver.kill()  # SIGKILL: no status recorded, its lease dropped with it, its tasks ended by Ray
    driver.communicate()
    # Ray ends a dead driver's tasks and actors (the limiter and the tasks' signal are the driver's, not detached).
    wait_until(lambda: not cluster.titled("run_chunk", "LimiterHost", "TaskSignal"), "the run's workers ended")
    (row,) = Store(store).rows("SELECT experiment_id, status FROM experiments")
    assert row["status"] == "running"
    done = len(trial_keys(store, row["experiment_id"]))
    assert 0 < done < 200
    resumed = finished(start_driver(cluster, store, "--resume", row["experiment_id"]))
    keys = trial_keys(store, row["experiment_id"])
    assert len(keys) == 200 and set(keys.values()) == {1}
    assert resumed["status"] == "completed" and resumed["this_run"]["trials"] == 200 - done


def scored_without_a_row(store: Path) -> int:
    """Trials a task finished, scored and published, whose row the driver has not committed (yet)."""
    (row,) = Store(store).rows(
        "SELECT count(DISTINCT trial_id) AS n FROM score_history WHERE trial_id NOT IN (SELECT trial_id FROM trials)"
    )
    return int(row["n"])


@pytest.mark.heavy
def test_ctrl_c_on_the_driver_keeps_what_the_tasks_finished_and_the_run_resumes(cluster, tmp_path):
    """Ctrl-C while tasks are half done: they stop after the trials they are running and hand back the ones they
    finished, whose rows the driver commits; a force-cancel would lose them (run again on resume)."""
    store = tmp_path / "store"
    options = [*MOCK, "--cases", "100", "--attempts", "2", "--concurrency", "2", "--agent-option", "latency=0.5"]
    driver = start_driver(cluster, store, *options)
    wait_until(lambda: any((store / "trials").rglob("part-*.parquet")), "trials committed by the driver", timeout=120)
    wait_until(lambda: scored_without_a_row(store) > 0, "trials finished inside running tasks", timeout=120)
    driver.send_signal(signal.SIGINT)
    out, err = driver.communicate(timeout=120)
    summary = json.loads(out)
    assert (
        summary["status"] == "interrupted" and summary["resume"] == f"agenteval run --resume {summary['experiment_id']}"
    )
    assert scored_without_a_row(store) == 0  # every trial a task finished was committed
    done = len(trial_keys(store, summary["experiment_id"]))
    assert summary["this_run"]["trials"] == done < 200  # what it committed, nothing more
    # More at a time than the stopped run (a resume may change only that): the rest take seconds, not a minute.
    resumed = finished(start_driver(cluster, store, "--resume", summary["experiment_id"], "--concurrency", "16"))
    keys = trial_keys(store, summary["experiment_id"])
    assert len(keys) == 200 and set(keys.values()) == {1}
    assert resumed["status"] == "completed" and resumed["this_run"]["trials"] == 200 - done


@pytest.mark.heavy
def test_tasks_are_submitted_a_few_per_cpu_at_a_time_and_a_stopped_run_submits_no_more(cluster, tmp_path):
    """The trials of tasks not yet submitted wait in the driver's plan, not in Ray's object store and scheduler:
    stopped while the first tasks run, the run has submitted at most :data:`WINDOW_PER_CPU` tasks per CPU, of the
    four per CPU its trials were cut into, and the rest resume."""
    cpus = cluster.head_cpus + sum(cluster.nodes.values())
    store = tmp_path / "store"
    options = [*MOCK, "--cases", "120", "--attempts", "1", "--concurrency", "1", "--agent-option", "latency=0.5"]
    driver = start_driver(cluster, store, *options)
    wait_until(lambda: cluster.busy_workers(NODE_A, "run_chunk") > 0, "a task running", timeout=120)
    driver.send_signal(signal.SIGINT)
    out, err = driver.communicate(timeout=120)
    summary = json.loads(out)
    assert summary["status"] == "interrupted", out + err
    assert len(chunks(new_trials(load_dataset("arithmetic", cases=120).cases, 1), cpus, 1)) == 4 * cpus
    assert 0 < summary["this_run"]["ray_tasks"] <= WINDOW_PER_CPU * cpus < 4 * cpus
    resumed = finished(start_driver(cluster, store, "--resume", summary["experiment_id"], "--concurrency", "16"))
    keys = trial_keys(store, summary["experiment_id"])
    assert len(keys) == 120 and set(keys.values()) == {1} and resumed["status"] == "completed"


EXITS_ON_ONE_CASE = """
import os
import time
from pathlib import Path

HERE = Path(__file__).parent


def answer(question):
    if (HERE / "broken").exists() and question == (HERE / "bad_question").read_text():
        with open(HERE / "exits", "a") as exits:  # by process: the case's two attempts run at once, in threads
            exits.write(f"{os.getpid()}\\n")
        os._exit(3)  # the worker process is lost: Ray runs the task again, until its retries are spent
    deadline = time.monotonic() + 300  # held until the test lets go (a safety bound, never reached when it passes)
    while not (HERE / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return "4"
"""


@pytest.mark.heavy
def test_a_task_failed_for_good_lets_the_running_ones_commit_and_the_rest_resumes(cluster, tmp_path):
    """One case's agent kills its worker every time (os._exit): its task fails for good once Ray's retries are
    spent. The other tasks, running meanwhile (held until then), still commit their trials, each once; the run
    fails, resumable, and the resume, with the agent fixed, runs the failed task's trials and nothing else."""
    cases = load_dataset("arithmetic", cases=3).cases
    (tmp_path / "agent.py").write_text(EXITS_ON_ONE_CASE)
    (tmp_path / "bad_question").write_text(cases[0].input)
    (tmp_path / "broken").touch()
    store = tmp_path / "store"
    # One case a task (attempts = concurrency = 2), three tasks on the cluster's three CPUs: all run at once.
    options = ["--dataset", "arithmetic", "--cases", "3", "--attempts", "2", "--concurrency", "2"]
    command = [
        str(BIN / "agenteval"),
        "run",
        "--store",
        str(store),
        *options,
        "--agent",
        f"{tmp_path / 'agent.py'}:answer",
    ]
    driver = cluster.popen(
        [*command, "--executor", "ray", "--ray-address", cluster.address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    said: list[str] = []
    for line in iter(driver.stderr.readline, ""):  # until the driver says it heard of the failure, or ends
        said.append(line)
        if "a task failed for good" in line:
            break
    (tmp_path / "release").touch()  # the other tasks' trials finish only now
    out, err = driver.communicate(timeout=300)
    errors = [line for line in [*said, *err.splitlines()] if line.startswith("Error: ")]
    (row,) = Store(store).rows("SELECT experiment_id, status FROM experiments")
    eid = row["experiment_id"]
    assert driver.returncode == 1 and row["status"] == "failed", out + "".join(said) + err
    assert len(errors) == 1 and f"run `agenteval run --resume {eid}" in errors[0], errors
    # Ray ran the task once and again for each retry: each time in a new worker process, which both attempts of the
    # case may have written before it was gone.
    assert len(set((tmp_path / "exits").read_text().split())) == 1 + MAX_RETRIES
    assert trial_keys(store, eid) == {(case.id, attempt): 1 for case in cases[1:] for attempt in (1, 2)}

    (tmp_path / "broken").unlink()  # the agent fixed
    resumed = finished(start_driver(cluster, store, "--resume", eid))
    assert trial_keys(store, eid) == {(case.id, attempt): 1 for case in cases for attempt in (1, 2)}
    assert resumed["status"] == "completed" and resumed["this_run"]["trials"] == 2


def test_the_cluster_limiter_loses_no_place_to_abandoned_calls():
    from agenteval.models._limiter import DEFAULT_INITIAL
    from agenteval.models._ray_limiter import LimiterHost

    async def scenario():
        host = LimiterHost()
        for token in range(DEFAULT_INITIAL):  # every place taken
            assert await host.acquire("m", token, "worker-1") == 0.0
        waiting = asyncio.ensure_future(host.acquire("m", 100, "worker-2"))
        await asyncio.sleep(0)
        await host.abandon(100)  # its trial timed out while it waited
        assert await waiting == -1.0
        await host.abandon(0)  # granted, then abandoned: the place comes back
        assert await host.acquire("m", 101, "worker-2") == 0.0
        await host.release(101, "throttled")  # a 429 halves the cluster's limit
        await host.release(101, "ok")  # a token given back twice counts once
        figures = await host.limits()
        assert figures == {"m": {"limits": [DEFAULT_INITIAL, DEFAULT_INITIAL // 2], "callers": 2}}
        assert host._limiters["m"].active == DEFAULT_INITIAL - 1

    asyncio.run(scenario())


def test_a_wait_abandoned_before_it_reached_the_limiter_takes_no_place():
    """An async actor's calls may start out of order: a cancelled call's ``abandon`` can run before its ``acquire``,
    which must then give up at once rather than hold a place nobody gives back."""
    from agenteval.models._limiter import DEFAULT_INITIAL
    from agenteval.models._ray_limiter import LimiterHost

    async def scenario():
        host = LimiterHost()
        await host.abandon(7)
        assert await host.acquire("m", 7, "worker-1") == -1.0
        for token in range(DEFAULT_INITIAL):  # every place is still there to take
            assert await host.acquire("m", 100 + token, "worker-1") == 0.0
        assert host._limiters["m"].active == DEFAULT_INITIAL

    asyncio.run(scenario())


@pytest.mark.heavy
def test_more_waiting_calls_than_an_actor_runs_at_once_do_not_block_the_places_given_back(cluster):
    """Ray runs at most 1,000 calls of an async actor at once: 1,100 calls waiting for one of the limiter's 32 places
    must not keep the calls that give places back from running (a deadlock of every worker's model calls)."""
    done = cluster.run([sys.executable, str(HERE / "ray_limiter_calls.py"), cluster.address, "1100"], timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"finished": 1100, "waiting": 0}


@pytest.mark.heavy
def test_an_unreachable_cluster_is_refused_before_anything_is_written(cluster, tmp_path):
    nobody = "127.0.0.1:1"  # nothing listens there in the cluster's namespace
    for given, env in (("--ray-address", {}), ("$RAY_ADDRESS", {"RAY_ADDRESS": nobody})):
        store = tmp_path / given.strip("-$")
        address = ["--ray-address", nobody] if not env else []
        command = agenteval_run(store, *MOCK, "--cases", "3", "--executor", "ray", *address)
        code, line = refused(cluster.popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env))
        assert code == 1
        assert line.startswith(f"Error: the Ray cluster at {nobody} ({given}) cannot be reached: "), line
        assert "leave out --ray-address" in line
        assert not store.exists()


PLAIN_HTTP_SERVER = """
import http.server
server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@pytest.mark.heavy
def test_a_server_that_is_not_a_ray_head_is_refused_before_anything_is_written(cluster, tmp_path):
    """Something else listening at the address given (a plain HTTP server): the connection opens, and Ray would
    then retry its handshake without end; the run is refused instead, saying so, and writes nothing."""
    server = cluster.popen([sys.executable, "-c", PLAIN_HTTP_SERVER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        address = f"127.0.0.1:{int(server.stdout.readline())}"
        store = tmp_path / "store"
        command = agenteval_run(store, *MOCK, "--cases", "3", "--executor", "ray", "--ray-address", address)
        code, line = refused(cluster.popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    finally:
        server.kill()
        server.communicate()
    assert code == 1
    assert line.startswith(f"Error: the Ray cluster at {address} (--ray-address) cannot be reached: "), line
    assert "is not a Ray head" in line and "leave out --ray-address" in line
    assert not store.exists()


AUTOSCALERS = pytest.mark.parametrize("autoscaler_v2", [False, True], ids=["autoscaler_v1", "autoscaler_v2"])
"""Ray's two autoscalers: v1, what ``ray start --head`` runs, and v2, what ``ray up`` and KubeRay run since Ray 2.50
(``RAY_enable_autoscaler_v2=1`` on the head). They report what they can do in different places."""
NO_AUTOSCALER = {
    False: "has no CPU for tasks and no autoscaler to add a node",
    True: "has no CPU for tasks and its autoscaler reports that it can add no node with one",
}


@pytest.mark.heavy
@AUTOSCALERS
def test_a_cluster_without_a_cpu_then_a_node_without_the_store_are_refused(tmp_path, autoscaler_v2):
    """No CPU for tasks on a cluster started by hand: refused before anything is written, not after the 10-minute
    wait, whichever autoscaler the head runs. Then a worker node whose file system does not have the store (its own
    empty folder mounted over it): its tasks refuse to run, rather than write spans and scores where the driver
    never sees them while the driver commits their trial rows."""
    hidden = tmp_path / "shared"
    hidden.mkdir()
    store = hidden / "store"
    with LoopbackRayCluster(head_cpus=0, autoscaler_v2=autoscaler_v2) as cluster:  # no autoscaler will add a node
        code, line = refused(start_driver(cluster, store, *MOCK, "--cases", "3"))  # not after the 10-minute wait
        assert code == 1
        assert line.startswith(
            f"Error: the Ray cluster at {cluster.address} (--ray-address) {NO_AUTOSCALER[autoscaler_v2]}"
        ), line
        assert f"ray start --address={cluster.address}" in line
        assert not store.exists()

        cluster.add_node(1, NODE_B, hide=hidden)
        code, line = refused(start_driver(cluster, store, *MOCK, "--cases", "3"))
    assert code == 1
    assert line.startswith(f"Error: the store {store} on a worker of the Ray cluster (at "), line
    assert "every node must reach the store at the same path" in line
    (row,) = Store(store).rows("SELECT experiment_id, status FROM experiments")
    assert row["status"] == "failed" and trial_keys(store, row["experiment_id"]) == {}


@pytest.mark.heavy
def test_a_node_that_sees_another_store_with_the_experiment_at_the_stores_path_is_refused(tmp_path):
    """A worker node whose folder at the store's path is another one, which holds an experiment of the run's id (its
    own store from a run there with ``--experiment``, or a copy of the store taken before a ``--resume``): its tasks
    refuse to run, rather than write spans and scores into that folder while the driver commits their trial rows."""
    shared, elsewhere = tmp_path / "shared", tmp_path / "elsewhere"
    shared.mkdir()
    store = shared / "store"
    own = ["--experiment", "nightly", *MOCK, "--cases", "3"]
    done = subprocess.run(agenteval_run(elsewhere / "store", *own), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    kept = sorted(path.relative_to(elsewhere) for path in elsewhere.rglob("*.parquet"))
    with LoopbackRayCluster(head_cpus=0) as cluster:
        cluster.add_node(1, NODE_B, hide=shared, instead=elsewhere)
        code, line = refused(start_driver(cluster, store, *own))
    assert code == 1
    assert line.startswith(f"Error: the store {store} on a worker of the Ray cluster (at "), line
    assert "is not the driver's: it holds an experiment nightly but not the mark the driver left" in line
    assert "every node must reach the store at the same path" in line
    (row,) = Store(store).rows("SELECT experiment_id, status FROM experiments")
    assert row["status"] == "failed" and trial_keys(store, "nightly") == {}
    assert sorted(path.relative_to(elsewhere) for path in elsewhere.rglob("*.parquet")) == kept


@pytest.mark.heavy
@AUTOSCALERS
def test_a_run_on_an_autoscaling_cluster_without_a_cpu_says_it_waits_and_runs_once_a_node_is_added(
    tmp_path, autoscaler_v2
):
    """An autoscaling cluster starts with no worker: the run says it waits for a CPU, asks the autoscaler for one
    (no task of its own is waiting yet, and an autoscaler adds nodes for what waits), and runs its trials once the
    autoscaler has added a node, rather than being refused (or waiting without a word). Ray's autoscaler on the
    head, with its fake_multinode provider, which starts real nodes on this machine."""
    store = tmp_path / "store"
    with LoopbackRayCluster(head_cpus=0, autoscaled_cpus=1, autoscaler_v2=autoscaler_v2) as cluster:
        driver = start_driver(cluster, store, *MOCK, "--cases", "3", "--attempts", "2", "--quiet")
        waiting = f"the Ray cluster at {cluster.address} (--ray-address) has no CPU for tasks yet: waiting up to"
        said: list[str] = []
        for line in iter(driver.stderr.readline, ""):
            said.append(line)
            if waiting in line:
                break
        assert waiting in said[-1], said
        out, err = driver.communicate(timeout=300)
    assert driver.returncode == 0, out + err
    (row,) = Store(store).rows("SELECT experiment_id, status FROM experiments")
    assert row["status"] == "completed"
    assert sorted(trial_keys(store, row["experiment_id"]).values()) == [1] * 6


@pytest.mark.heavy
def test_an_autoscaling_cluster_that_adds_no_node_is_refused_when_the_wait_ends(tmp_path):
    """Autoscaler v1 says nothing of a node type at its most: the run waits, then says so. A driver killed while it
    waits leaves no demand behind for an autoscaler to add nodes for."""
    store = tmp_path / "store"
    with LoopbackRayCluster(head_cpus=0, autoscaled_cpus=1, autoscaled_nodes=0) as cluster:  # at its most already
        waiting = start_driver(cluster, store, *MOCK, "--cases", "3")
        for line in iter(waiting.stderr.readline, ""):
            if "waiting up to" in line:
                break
        wait_until(lambda: {"CPU": 1.0} in cluster.pending_demands(), "the waiting run's demand for a CPU")
        waiting.kill()  # SIGKILL
        waiting.communicate()
        wait_until(lambda: cluster.pending_demands() == [], "the killed driver's demand gone", timeout=60)
        code, line = refused(start_driver(cluster, store, *MOCK, "--cases", "3", env={"AGENTEVAL_RAY_CPU_WAIT": "2"}))
    assert code == 1
    assert line.startswith(
        f"Error: the Ray cluster at {cluster.address} (--ray-address) has no CPU for tasks after waiting 2 s"
    ), line
    assert f"ray start --address={cluster.address}" in line and "$AGENTEVAL_RAY_CPU_WAIT" in line
    assert not store.exists()


@pytest.mark.heavy
def test_an_autoscaler_v2_that_can_add_no_node_with_a_cpu_is_believed_at_once(tmp_path):
    """Autoscaler v2 reports the run's waiting task as one it cannot place on any node it may add (its one node
    type at its most): refused then, not after the 10-minute wait."""
    store = tmp_path / "store"
    with LoopbackRayCluster(head_cpus=0, autoscaled_cpus=1, autoscaled_nodes=0, autoscaler_v2=True) as cluster:
        code, line = refused(start_driver(cluster, store, *MOCK, "--cases", "3"))
    assert code == 1
    assert line.startswith(f"Error: the Ray cluster at {cluster.address} (--ray-address) {NO_AUTOSCALER[True]}"), line
    assert not store.exists()


@pytest.mark.heavy
def test_what_cannot_be_sent_to_the_workers_is_refused_before_anything_is_written(cluster, tmp_path):
    script = f"""
import json, threading
from agenteval.errors import UsageError
from agenteval.run import evaluate
lock = threading.Lock()
def agent(question):
    with lock:
        return "ok"
def simulator(goal, messages):
    with lock:
        return None
def refusal(**given):
    try:
        evaluate(dataset="arithmetic", cases=3, progress="none", executor="ray", ray_address={cluster.address!r},
                 **given)
    except UsageError as error:
        return str(error)
print(json.dumps([
    refusal(agent=agent, store={str(tmp_path / "a")!r}),
    refusal(agent="reference", model="openai/m", base_url="http://user:s3cret@127.0.0.1:1/v1",
            user_simulator=simulator, store={str(tmp_path / "b")!r}),
]))
"""
    done = cluster.run([sys.executable, "-c", script], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    agent, simulator = json.loads(done.stdout.splitlines()[-1])
    assert agent.startswith("--executor ray: the agent (agent) cannot be sent to the cluster's workers (TypeError: ")
    assert simulator.startswith("--executor ray: the user simulator (simulator) cannot be sent")
    assert "s3cret" not in simulator  # a gateway URL's credentials are never shown
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.heavy
def test_an_error_of_the_users_on_a_worker_is_shown_as_its_own_one_line(cluster, tmp_path):
    """An agent whose import fails on the workers only (a package the driver has and the nodes lack): the run
    fails with that error's own message, as a local run would show it, not Ray's traceback of the task."""
    (tmp_path / "only_here").mkdir()
    (tmp_path / "only_here" / "only_on_the_driver.py").write_text("ANSWER = 'ok'\n")
    (tmp_path / "needs_it.py").write_text(
        "from only_on_the_driver import ANSWER\n\n\ndef answer(question):\n    return ANSWER\n"
    )
    env = {"PYTHONPATH": f"{tmp_path / 'only_here'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    store = tmp_path / "store"
    agent = f"{tmp_path / 'needs_it.py'}:answer"
    code, line = refused(
        start_driver(cluster, store, "--dataset", "arithmetic", "--cases", "3", "--agent", agent, env=env)
    )
    assert code == 1
    assert line.startswith(
        f"Error: --agent {agent}: importing {tmp_path / 'needs_it.py'} raised ModuleNotFoundError: "
    ), line
    assert "ray::" not in line and "Traceback" not in line
    (row,) = Store(store).rows("SELECT status FROM experiments")
    assert row["status"] == "failed"


def test_the_clusters_messages_a_run_shows_as_notes_are_masked():
    """Ray's messages to the driver (a task's error, retried) are shown as the run's notes: a task failing on a URL
    with its key showed the key."""
    import asyncio

    from ray._private import worker

    from agenteval.run._ray import _cluster_messages_to

    notes: list[str] = []

    async def relay() -> None:
        with _cluster_messages_to(notes.append):
            message = "ConnectionError: GET https://gw.example/v1?api-key=PLANTEDray42 refused"
            worker.print_to_stdstream({"lines": [message], "pid": 1, "ip": "127.0.0.1"}, False)
            await asyncio.sleep(0)  # the note is handed to this loop with call_soon_threadsafe

    asyncio.run(relay())
    assert notes == ["ray: ConnectionError: GET https://gw.example/v1?api-key=*** refused"]
