"""One experiment run as N shards by any scheduler: real processes, one store, every trial exactly once; report
and gate see one experiment and refuse to judge it while a shard is missing; a killed shard resumes alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from waiting import wait_until

from agenteval.analysis import build_report
from agenteval.dataset import load_dataset
from agenteval.run._shards import Shard, shard_of, shared_experiment_id
from agenteval.store import Store

CASES, ATTEMPTS = 40, 2
RUN = [sys.executable, "-m", "agenteval.cli", "run", "--dataset", "arithmetic", "--agent", "mock"]
SIZE = ["--cases", str(CASES), "--attempts", str(ATTEMPTS)]


def agenteval(store: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "AGENTEVAL_STORE": str(store)}
    done = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", *args], env=env, capture_output=True, text=True, timeout=180
    )
    assert not check or done.returncode == 0, done.stdout + done.stderr
    return done


def start_shard(store: Path, shard: str, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "AGENTEVAL_STORE": str(store)}
    command = [*RUN, *SIZE, "--name", "nightly", "--shard", shard, "--json", *extra]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def trial_keys(store: Path, experiment_id: str) -> list[tuple[str, int]]:
    rows = Store(store).rows(
        "SELECT case_id, attempt FROM trial_history WHERE experiment_id = ? ORDER BY 1, 2", [experiment_id]
    )
    return [(r["case_id"], r["attempt"]) for r in rows]


def every_trial() -> list[tuple[str, int]]:
    cases = load_dataset("arithmetic", cases=CASES).cases
    return sorted((c.id, attempt) for c in cases for attempt in range(1, ATTEMPTS + 1))


def test_the_split_is_disjoint_complete_and_the_same_everywhere():
    cases = load_dataset("arithmetic", cases=CASES).cases
    for count in (1, 2, 3, 7):
        shards = [Shard(k, count).cases(cases) for k in range(1, count + 1)]
        assert sorted(c.id for part in shards for c in part) == sorted(c.id for c in cases)
    # A hash of the id, not Python's salted hash(): any process, any machine, any day.
    assert shard_of("arithmetic-0001", 4) == 3 and shard_of("hard-injection-3", 4) == 1
    assert shared_experiment_id("nightly") == "nightly-2a3b62b53ddb"


def test_two_shard_processes_at_once_write_one_experiment_with_every_trial_once(tmp_path):
    store = tmp_path / "store"
    children = [start_shard(store, "1/2"), start_shard(store, "2/2")]
    outputs = [child.communicate(timeout=180) for child in children]
    assert [child.returncode for child in children] == [0, 0], outputs
    summaries = [json.loads(out) for out, _ in outputs]
    experiment_id = shared_experiment_id("nightly")
    assert {s["experiment_id"] for s in summaries} == {experiment_id}
    assert trial_keys(store, experiment_id) == every_trial()
    (row,) = Store(store).rows("SELECT status, name FROM experiments")
    assert row == {"status": "completed", "name": "nightly"}
    report = build_report(Store(store), experiment_id)
    assert [(s.shard, s.status) for s in report.shards] == [("1/2", "completed"), ("2/2", "completed")]
    assert sum(s.trials for s in report.shards) == report.trials == CASES * ATTEMPTS
    # Each shard wrote its own cases, so the experiment's snapshot holds every case once.
    cases = Store(store).rows("SELECT case_id, count(*) AS n FROM cases GROUP BY 1")
    assert len(cases) == CASES and {c["n"] for c in cases} == {1}
    baseline = json.loads(agenteval(store, "run", "--dataset", "arithmetic", "--agent", "mock", *SIZE, "--json").stdout)
    gate = agenteval(store, "gate", "--baseline", baseline["experiment_id"], "--candidate", experiment_id)
    assert gate.stdout.startswith("gate: no regression (exit 0)")


def test_a_missing_shard_makes_the_experiment_partial_and_the_gate_refuses(tmp_path):
    store = tmp_path / "store"
    agenteval(store, "run", "--dataset", "arithmetic", "--agent", "mock", *SIZE, "--shard", "1/3", "--experiment", "x")
    (row,) = Store(store).rows("SELECT status FROM experiments")
    assert row["status"] == "partial"
    baseline = json.loads(agenteval(store, "run", "--dataset", "arithmetic", "--agent", "mock", *SIZE, "--json").stdout)
    gate = agenteval(store, "gate", "--baseline", baseline["experiment_id"], "--candidate", "x", check=False)
    assert gate.returncode == 3
    assert "shard(s) 2/3 (not started), 3/3 (not started) have not completed" in gate.stdout
    report = agenteval(store, "report", "x").stdout
    assert "1/3 completed" in report and "2/3 not started" in report
    # A shard's summary gives the experiment's figures: its own trials and those of the shards before it. It read
    # as if they were the shard's own.
    second = agenteval(
        store, "run", "--dataset", "arithmetic", "--agent", "mock", *SIZE, "--shard", "2/3", "--experiment", "x"
    )
    (trials,) = Store(store).rows(
        "SELECT count(*) AS n, count(DISTINCT case_id) AS cases FROM trials WHERE experiment_id = 'x'"
    )
    wanted = f"over {trials['n']} trials of {trials['cases']} cases (every shard's so far)"
    assert "experiment x shard 2/3 (" in second.stdout and wanted in second.stdout, second.stdout


def test_a_killed_shard_resumes_alone_and_every_trial_is_there_once(tmp_path):
    store = tmp_path / "store"
    slowly = ["--agent-option", "latency=0.05"]  # the agent's options are part of its version: the same for both
    first = start_shard(store, "1/2", *slowly)
    assert first.wait(timeout=180) == 0
    slow = start_shard(store, "2/2", *slowly, "--concurrency", "1")  # how fast may differ between shards

    def trials_published() -> int:
        return sum(pq.read_metadata(f).num_rows for f in (store / "trials").rglob("part-*.parquet"))

    wait_until(lambda: trials_published() > len(every_trial()) // 2 + 4, "the second shard to publish trials")
    os.kill(slow.pid, signal.SIGKILL)
    slow.wait()
    experiment_id = shared_experiment_id("nightly")
    (row,) = Store(store).rows("SELECT status FROM experiments")
    assert row["status"] == "running"  # the killed shard's record still says so
    resumed = agenteval(store, "run", "--resume", experiment_id, "--shard", "2/2", "--json", "--concurrency", "8")
    assert json.loads(resumed.stdout)["experiment_status"] == "completed"
    assert trial_keys(store, experiment_id) == every_trial()


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--shard", "1/2"], 2, "--shard 1/2 needs an experiment every shard shares"),
        (["--shard", "3/2", "--name", "n"], 2, "K must be from 1 to N"),
        (["--shard", "half", "--name", "n"], 2, "expected K/N"),
        # Was run and recorded: the experiment then showed "completed" with 1 of 3e9 shards run (the view's count
        # of shards overflowed to null), and `report` tried to allocate a list of 3e9 ints.
        (["--shard", "1/3000000000", "--name", "n"], 2, "N must be at most 100000"),
        # Was an OverflowError traceback, after the shard's record was written.
        (["--shard", f"1/{10**21}", "--name", "n"], 2, "N must be at most 100000"),
        (["--shard", "1/2", "--experiment", "bad/id"], 2, "an id is letters, digits"),
    ],
)
def test_options_that_cannot_work_say_so(tmp_path, args, code, says):
    done = agenteval(tmp_path / "store", "run", "--dataset", "arithmetic", "--agent", "mock", *SIZE, *args, check=False)
    assert done.returncode == code and says in done.stderr and "Traceback" not in done.stderr


def test_a_shard_joins_only_a_run_of_the_same_shape(tmp_path):
    store = tmp_path / "store"
    shard = ["run", "--dataset", "arithmetic", "--agent", "mock", *SIZE, "--experiment", "x"]
    agenteval(store, *shard, "--shard", "1/2")
    again = agenteval(store, *shard, "--shard", "1/2", check=False)
    assert again.returncode == 1 and "has run already: continue it with --resume x --shard 1/2" in again.stderr
    other_count = agenteval(store, *shard, "--shard", "2/3", check=False)
    assert other_count.returncode == 1 and "runs in 2 shards, not 3" in other_count.stderr
    other_options = agenteval(store, *shard, "--shard", "2/2", "--agent-option", "wrong_rate=0.5", check=False)
    assert other_options.returncode == 1 and "ran another agent or dataset" in other_options.stderr
    whole = agenteval(store, "run", "--resume", "x", check=False)
    assert whole.returncode == 2 and "runs in shards: resume one with --resume x --shard K/N" in whole.stderr
    taken = agenteval(store, "run", "--dataset", "arithmetic", "--agent", "mock", "--experiment", "x", check=False)
    assert taken.returncode == 1 and "experiment x exists already" in taken.stderr


def test_shards_on_two_checkouts_of_the_same_dataset_file_join_one_experiment(tmp_path):
    """Shards on two machines read the dataset from their own checkout: the same content at two paths. The second
    shard was refused ("ran with other options: dataset ('/b/cases.jsonl' given, '/a/cases.jsonl' in the run)");
    a dataset whose content differs is still refused."""
    store = tmp_path / "store"
    lines = "".join(f'{{"id": "c{i}", "input": "What is {i} + 1?", "expected_output": "{i + 1}"}}\n' for i in range(8))
    for checkout in ("a", "b", "c"):
        (tmp_path / checkout).mkdir()
        (tmp_path / checkout / "cases.jsonl").write_text(lines)
    (tmp_path / "c" / "cases.jsonl").write_text(lines.replace("What is 0", "What is zero"))
    run = ["run", "--agent", "mock", "--attempts", "1", "--experiment", "x", "-q"]

    agenteval(store, *run, "--dataset", str(tmp_path / "a" / "cases.jsonl"), "--shard", "1/3")
    agenteval(store, *run, "--dataset", str(tmp_path / "b" / "cases.jsonl"), "--shard", "2/3")
    changed = agenteval(store, *run, "--dataset", str(tmp_path / "c" / "cases.jsonl"), "--shard", "3/3", check=False)

    assert changed.returncode == 1 and "ran another agent or dataset" in changed.stderr, changed.stderr
    shards = Store(store).rows("SELECT DISTINCT json_extract_string(options, '$.shard') AS s FROM experiment_history")
    assert sorted(r["s"] for r in shards) == ["1/3", "2/3"]
    cases = load_dataset(str(tmp_path / "a" / "cases.jsonl")).cases
    in_two = sorted((c.id, 1) for c in cases if shard_of(c.id, 3) in (1, 2))
    assert trial_keys(store, "x") == in_two


@pytest.mark.parametrize("shard", [["--shard", "1/2"], []], ids=["one shard", "a whole run"])
def test_the_same_run_started_twice_at_once_runs_once(tmp_path, shard):
    """A scheduler that starts a job twice (a retried pod, a CI job run again). The second process checked that no
    record of the run existed, then waited for the run's lease while the first ran; the first finished inside that
    wait, and the second ran every trial again: 4 trial rows for 2 cases at one attempt, the report saying "4 trials
    of 2 cases". The check is now made while holding the lease, so exactly one of the two runs."""
    size = ["--cases", "4" if shard else "2", "--attempts", "1"]
    for round_ in range(3):
        store = tmp_path / f"store{round_}"
        env = {**os.environ, "AGENTEVAL_STORE": str(store)}
        command = [*RUN, *size, "--experiment", "x", "-q", *shard]
        twins = [subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        errors = [twin.communicate(timeout=180)[1] for twin in twins]
        assert sorted(twin.returncode for twin in twins) == [0, 1], errors
        refused = next(e for twin, e in zip(twins, errors, strict=True) if twin.returncode == 1)
        said = ("has run already", "exists already", "is running")
        assert "Traceback" not in refused and any(s in refused for s in said), refused
        rows = Store(store).rows("SELECT count(*) AS n, count(DISTINCT (case_id, attempt)) AS d FROM trial_history")
        assert rows[0]["n"] == rows[0]["d"] == 2, f"round {round_}: {rows}"
        (cases,) = Store(store).rows("SELECT count(*) AS n FROM cases")
        assert cases["n"] == 2


def test_two_shards_of_different_counts_started_at_once_never_both_join(tmp_path):
    """``--shard 1/2`` and ``--shard 2/3`` of one experiment started at the same instant. Each holds its own shard's
    lease, so each checked the other shards' records before the other had saved one, and both ran: one experiment
    of 2 and of 3 shards at once (5 of 6 rounds before). Joining is now under one lease per experiment, held until the
    shard's record is saved, so the later one refuses naming --shard."""
    size = ["--cases", "6", "--attempts", "1", "-q"]
    for round_ in range(4):
        store = tmp_path / f"store{round_}"
        env = {**os.environ, "AGENTEVAL_STORE": str(store)}
        shards = ("1/2", "2/3")
        processes = [
            subprocess.Popen([*RUN, *size, "--name", "race", "--shard", s], env=env, stderr=subprocess.PIPE, text=True)
            for s in shards
        ]
        errors = [p.communicate(timeout=180)[1] for p in processes]
        codes = [p.returncode for p in processes]
        assert sorted(codes) == [0, 1], f"round {round_}: {codes} {errors}"
        joined, refused = (shards[codes.index(0)], errors[codes.index(1)])
        count = joined.split("/")[1]
        assert "Traceback" not in refused and f"give --shard K/{count}" in refused, refused
        recorded = "SELECT DISTINCT json_extract_string(options, '$.shard') AS s FROM experiment_history"
        assert [r["s"] for r in Store(store).rows(recorded)] == [joined]
        cases = load_dataset("arithmetic", cases=6).cases
        experiment_id = shared_experiment_id("race")
        mine = sorted((c.id, 1) for c in Shard.parse(joined).cases(cases))
        assert trial_keys(store, experiment_id) == mine  # the winner's trials, each once; none of the other's
