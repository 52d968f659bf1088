"""A rescore of more than one batch shows its progress on stderr, as a run does: plain lines when stderr is not a
terminal, a bar when it is; never on stdout, and nothing with --json or --quiet."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from terminal import run_with_stderr_on_a_terminal
from test_production_traces import produce

TRIALS = 12


def rescore(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "agenteval.cli", "rescore", *args, "--store", str(store)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=True)


def experiment_of_12_trials(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    run = ["run", "-d", "arithmetic", "-a", "mock", "--cases", "6", "--attempts", "2", "-q", "--store", str(store)]
    subprocess.run([sys.executable, "-m", "agenteval.cli", *run], capture_output=True, timeout=300, check=True)
    return store


def test_a_rescore_of_several_batches_says_what_it_scores_and_ends_at_every_trial(tmp_path):
    store = experiment_of_12_trials(tmp_path)
    done = rescore(store, "--batch-size", "5")
    lines = done.stderr.splitlines()
    assert lines[0] == f"rescoring {TRIALS} trials", lines
    assert lines[1] == f"0/{TRIALS} done", lines
    assert lines[-2:] == [f"{TRIALS}/{TRIALS} done", "saving the figures for reports"], lines
    assert done.stdout.startswith("pass ") and "done" not in done.stdout and "rescoring" not in done.stdout


def test_rescore_progress_stays_off_stdout_json_and_quiet_and_a_single_batch(tmp_path):
    store = experiment_of_12_trials(tmp_path)
    as_json = rescore(store, "--batch-size", "5", "--json")
    assert json.loads(as_json.stdout)["trials"] == TRIALS and as_json.stderr == ""
    assert rescore(store, "--batch-size", "5", "-q").stderr == ""
    assert rescore(store).stderr == ""  # one batch: over in a second or two


def test_on_a_terminal_a_rescore_draws_a_bar_on_stderr_and_its_result_alone_on_stdout(tmp_path):
    store = experiment_of_12_trials(tmp_path)
    command = [sys.executable, "-m", "agenteval.cli", "rescore", "--batch-size", "5", "--store", str(store)]
    exit_code, stdout, drawn = run_with_stderr_on_a_terminal(command)
    assert exit_code == 0
    total = f"{TRIALS}/{TRIALS}".encode()
    assert b"rescoring 12 trials" in drawn and total in drawn and "━".encode() in drawn, drawn[-500:]
    assert total not in stdout and b"rescoring" not in stdout and stdout.startswith(b"pass ")


def test_rescore_traces_of_several_batches_counts_every_trace(tmp_path):
    store = tmp_path / "store"
    traces, _ = produce(store, "shop", "agent", 7)
    done = rescore(store, "--traces", "--batch-size", "3")
    lines = done.stderr.splitlines()
    assert lines[0] == f"scoring {traces} production traces" and lines[1] == f"0/{traces} done", lines
    assert lines[-1] == f"{traces}/{traces} done" and lines.count(f"{traces}/{traces} done") == 1, lines
    assert "done" not in done.stdout
    as_json = rescore(store, "--traces", "--batch-size", "3", "--json")
    assert json.loads(as_json.stdout)["traces"] == traces and as_json.stderr == ""
