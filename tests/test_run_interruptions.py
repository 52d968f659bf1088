"""A run cut short keeps what it finished: kill -9 loses at most the last second, Ctrl-C loses nothing
finished, and --resume completes the experiment with every trial present exactly once."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

import pyarrow.parquet as pq
import pytest
from waiting import wait_until

from agenteval.analysis import find
from agenteval.cli import STOPPED_OUTSIDE_THE_RUN
from agenteval.dashboard._queries import experiments as dashboard_experiments
from agenteval.run._starting import STOPPED_STARTING
from agenteval.store import Store

CASES, ATTEMPTS = 60, 3
RUN = [
    sys.executable,
    "-m",
    "agenteval.cli",
    "run",
    "--dataset",
    "arithmetic",
    "--agent",
    "mock",
    "--cases",
    str(CASES),
    "--attempts",
    str(ATTEMPTS),
    "--concurrency",
    "2",
    "--agent-option",
    "latency=0.02",
    "--agent-option",
    "wrong_rate=0.2",
]


def start(store: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "AGENTEVAL_STORE": str(store)}
    return subprocess.Popen([*RUN, *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def trial_count(store: Path) -> int:
    files = list((store / "trials").rglob("*.parquet"))
    return sum(pq.read_metadata(f).num_rows for f in files)


def wait_for_trials(store: Path, at_least: int) -> None:
    wait_until(lambda: trial_count(store) >= at_least, f"the run to publish {at_least} trials")


def wait_for_line(stream: IO[str], start: str) -> None:
    """Read ``stream`` until a line starts with ``start`` (the process says it got somewhere)."""
    seen = []
    while not (line := stream.readline()).startswith(start):
        seen.append(line)
        assert line, f"the process ended without a line starting {start!r}: {''.join(seen)}"


def resume(store: Path, *extra: str) -> dict:
    env = {**os.environ, "AGENTEVAL_STORE": str(store)}
    done = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", "run", "--resume", "--json", *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def assert_complete_and_unique(store: Path, experiment_id: str) -> None:
    rows = Store(store).rows(
        "SELECT case_id, attempt, count(*) AS n FROM trial_history WHERE experiment_id = ? GROUP BY ALL",
        [experiment_id],
    )
    assert len(rows) == CASES * ATTEMPTS and all(r["n"] == 1 for r in rows)
    # Every trial's spans and scores are there too (they are published before the trial row).
    missing = Store(store).rows(
        "SELECT count(*) AS n FROM trial_history t "
        "WHERE NOT EXISTS (SELECT 1 FROM spans s WHERE s.trial_id = t.trial_id) "
        "OR NOT EXISTS (SELECT 1 FROM score_history c WHERE c.trial_id = t.trial_id)"
    )
    assert missing == [{"n": 0}]


def test_sigkill_then_resume_runs_each_trial_exactly_once(tmp_path):
    store = tmp_path / "store"
    child = start(store)
    wait_for_trials(store, 20)
    before = trial_count(store)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert before < CASES * ATTEMPTS
    for path in store.rglob("*.parquet"):
        pq.read_table(path)  # nothing half-written
    summary = resume(store)
    assert summary["status"] == "completed"
    # The resume ran only what was missing: nothing saved before the kill was run again.
    assert summary["this_run"]["trials"] <= CASES * ATTEMPTS - before
    assert_complete_and_unique(store, summary["experiment_id"])


def test_sigint_stops_marks_interrupted_and_says_how_to_resume(tmp_path):
    store = tmp_path / "store"
    child = start(store)
    wait_for_trials(store, 10)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 130
    assert "interrupted; continue with: agenteval run --resume" in out
    experiment_id = out.split("experiment ", 1)[1].split()[0]
    saved = trial_count(store)
    (row,) = Store(store).rows(
        "SELECT status FROM experiments WHERE experiment_id = ? ORDER BY updated_at DESC LIMIT 1", [experiment_id]
    )
    assert row["status"] == "interrupted"
    summary = resume(store)
    assert summary["experiment_id"] == experiment_id and summary["status"] == "completed"
    assert summary["this_run"]["trials"] == CASES * ATTEMPTS - saved  # nothing finished was lost or redone
    assert_complete_and_unique(store, experiment_id)


def test_a_second_sigint_stops_at_once_and_the_run_still_resumes(tmp_path):
    store = tmp_path / "store"
    child = start(store)
    wait_for_trials(store, 10)
    child.send_signal(signal.SIGINT)
    wait_for_line(child.stderr, "stopping:")  # the run took the first in: the next one is a second Ctrl-C
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 130
    (row,) = Store(store).rows("SELECT experiment_id, status FROM experiments ORDER BY updated_at DESC LIMIT 1")
    assert (
        f"stopped at once; what finished is saved; continue with: agenteval run --resume {row['experiment_id']}" in err
    )
    # Never "failed": "interrupted", or "running" when the second signal cut the wind-down short (as
    # kill -9 would); --resume picks either up.
    assert row["status"] in ("interrupted", "running")
    experiment_id = row["experiment_id"]
    summary = resume(store)
    assert summary["experiment_id"] == experiment_id and summary["status"] == "completed"
    assert_complete_and_unique(store, experiment_id)


STUBBORN_AGENT = """
import asyncio

async def agent(question: str) -> str:
    if question.startswith("stubborn"):
        while True:  # catches its cancellation and carries on, for ever
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                pass
    return "fine"
"""


def stubborn_run(tmp_path: Path, stubborn: int, fine: int, timeout: str) -> subprocess.Popen:
    (tmp_path / "stubborn.py").write_text(STUBBORN_AGENT)
    cases = [{"id": f"s{i}", "input": f"stubborn {i}", "expected_output": "fine"} for i in range(stubborn)]
    cases += [{"id": f"f{i}", "input": f"fine {i}", "expected_output": "fine"} for i in range(fine)]
    (tmp_path / "cases.jsonl").write_text("".join(json.dumps(case) + "\n" for case in cases))
    command = [sys.executable, "-m", "agenteval.cli", "run", "--dataset", str(tmp_path / "cases.jsonl")]
    command += ["--agent", f"{tmp_path / 'stubborn.py'}:agent", "--attempts", "1", "--timeout", timeout]
    env = {**os.environ, "AGENTEVAL_STORE": str(tmp_path / "store")}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_an_async_agent_that_ignores_its_cancellation_costs_only_its_own_trials(tmp_path):
    # It once held the run for ever: the trial waited on the agent after cancelling it, and so did the
    # event loop's close.
    child = stubborn_run(tmp_path, stubborn=3, fine=20, timeout="0.5")
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0 and "Traceback" not in err, err
    rows = Store(tmp_path / "store").rows("SELECT case_id, outcome, failure_type, error_message FROM trials")
    assert len(rows) == 23
    assert sorted(r["case_id"] for r in rows if r["outcome"] == "passed") == sorted(f"f{i}" for i in range(20))
    left = [r for r in rows if r["case_id"].startswith("s")]
    assert {(r["failure_type"], r["outcome"]) for r in left} == {("timeout", "failed")}
    assert all("it was left running" in r["error_message"] for r in left)


def test_ctrl_c_stops_a_run_whose_agent_ignores_its_cancellation(tmp_path):
    child = stubborn_run(tmp_path, stubborn=2, fine=30, timeout="300")
    wait_until(lambda: (tmp_path / "store").exists() and trial_count(tmp_path / "store") >= 30, "the fine trials")
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 130 and "Traceback" not in err, err
    assert "interrupted; continue with: agenteval run --resume" in out
    store = Store(tmp_path / "store")
    assert store.rows("SELECT status FROM experiments") == [{"status": "interrupted"}]
    # The stubborn trials stay missing (a resume runs them); what finished is kept.
    assert store.rows("SELECT count(*) AS n FROM trials") == [{"n": 30}]


def statuses_shown(store: Path) -> dict[str, str]:
    """The experiment's status as each place that shows it says it."""
    env = {**os.environ, "AGENTEVAL_STORE": str(store)}

    def command(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "agenteval.cli", *args], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    (listed,) = json.loads(command("experiments", "--format", "json"))
    (row,) = dashboard_experiments(Store(store)).rows
    return {
        "experiments": listed["status"],
        "report": json.loads(command("report", "--format", "json"))["experiment"]["status"],
        "find": find(Store(store)).status,
        "dashboard": row.status,
    }


def test_a_killed_run_is_shown_interrupted_not_running_and_still_resumes(tmp_path):
    store = tmp_path / "store"
    child = start(store, "--agent-option", "latency=0.2")  # about 18 s: still running when it is killed
    wait_for_trials(store, 20)
    assert set(statuses_shown(store).values()) == {"running"}
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    # Its record cannot say otherwise (nothing ran to write it), but no process holds the run any more.
    assert Store(store).rows("SELECT status FROM experiments") == [{"status": "running"}]
    assert set(statuses_shown(store).values()) == {"interrupted"}
    (shown,) = dashboard_experiments(Store(store), status="interrupted").rows
    assert dashboard_experiments(Store(store), status="running").rows == []
    summary = resume(store, "--concurrency", "32")  # the rest at 0.2 s a trial: about 1 s, not 16
    assert summary["experiment_id"] == shown.experiment_id and summary["status"] == "completed"
    assert set(statuses_shown(store).values()) == {"completed"}


def blocked_at_its_summary(store: Path, *extra: str) -> subprocess.Popen:
    """A run whose stdout is a pipe already full: it runs and saves every trial, then blocks writing its summary,
    past the trials' own signal handling, until the test signals it."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(write_end, b"x" * 4096)
    os.set_blocking(write_end, True)
    env = {**os.environ, "AGENTEVAL_STORE": str(store)}
    command = [*RUN[:8], "--cases", "4", "--attempts", "1", *extra]  # a handful of trials, done at once
    child = subprocess.Popen(command, env=env, stdout=write_end, stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    child.stdout_pipe = read_end  # closed by the test once the child ended
    return child


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_after_the_trials_are_saved_says_so_and_exits_130(tmp_path, sig):
    # Was click's "Aborted!" with exit 1 for Ctrl-C, and for SIGTERM a silent death (exit -15), when the signal
    # came after the run's trials were saved: while it compacted, computed or printed its summary.
    store = tmp_path / "store"
    child = blocked_at_its_summary(store)
    wait_until(
        lambda: (
            (store / "experiments").exists()
            and Store(store).rows("SELECT status FROM experiments") == [{"status": "completed"}]
        ),
        "the run to record its end",
    )
    child.send_signal(sig)
    _, err = child.communicate(timeout=60)
    os.close(child.stdout_pipe)
    assert child.returncode == 130, err
    (row,) = Store(store).rows("SELECT experiment_id FROM experiments")
    # Where the signal lands is the scheduler's choice: the summary (said by the run), or letting go of the store.
    said = err.strip().splitlines()[-1]
    assert said in (
        f"stopped; the run completed and every trial is saved: agenteval report {row['experiment_id']}",
        STOPPED_OUTSIDE_THE_RUN,
    ), err
    assert "Aborted" not in err and "Traceback" not in err
    assert trial_count(store) == 4


SLOW_TO_START = '''
import pathlib
import time


def starting():
    """The test's cue: the run is loading the agent (a heavy import or model load would take its time here)."""
    pathlib.Path(__file__).with_name("starting").write_text("")
    time.sleep(600)


def answer(message):
    return "4"


def make(**options):
    starting()
    return answer
'''


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("slow", ["import", "factory"])
def test_a_signal_while_the_run_starts_stops_it_at_once(tmp_path, sig, slow):
    # A Ctrl-C during a slow import of the agent (or a slow factory) waited for the import to end, then ran the
    # trials: asyncio's own handler only asked the run's task to cancel, which took effect at its first await.
    # SIGTERM stopped at once, but said "what finished is saved" and pointed to --resume, with nothing to resume.
    agent = tmp_path / "slow_agent.py"
    agent.write_text(SLOW_TO_START + ("starting()\n" if slow == "import" else ""))
    spec = ["--agent", f"{agent}:answer"] if slow == "import" else ["--agent", f"{agent}:make", "--agent-option", "x=1"]
    store = tmp_path / "store"
    child = subprocess.Popen(
        [*RUN[:6], "--cases", "2", *spec],
        env={**os.environ, "AGENTEVAL_STORE": str(store)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until((tmp_path / "starting").exists, "the run to start loading its agent")
        child.send_signal(sig)
        _, err = child.communicate(timeout=30)  # the agent would hold it for 600 s
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 130, err
    assert err.strip().splitlines()[-1] == STOPPED_STARTING, err
    assert "Traceback" not in err
    assert trial_count(store) == 0
    assert not (store / "experiments").exists()  # nothing to resume
