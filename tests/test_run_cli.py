"""agenteval run and agenteval experiments on the command line; every built-in dataset with the mock."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest
from click.testing import CliRunner
from terminal import run_with_stderr_on_a_terminal

from agenteval.cli import main
from agenteval.run import evaluate
from agenteval.store import Store


@pytest.mark.parametrize("name", ["mixed", "hard", "extended", "rag"])
def test_every_builtin_dataset_runs_with_the_mock(tmp_path, name):
    experiment = evaluate("mock", name, attempts=1, sample=12, store=tmp_path / "s", progress="none")
    assert experiment.status == "completed" and experiment.summary.trials == 12
    counts = experiment.summary
    assert counts.passed + counts.wrong + counts.failed == 12


def test_a_run_of_one_trial_says_trial_and_case_not_trials_and_cases(tmp_path):
    args = ["run", "-d", "arithmetic", "-a", "mock", "--cases", "1", "--attempts", "1"]
    result = CliRunner().invoke(main, [*args, "--store", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    assert ": 1 trial to run" in result.output and " over 1 trial of 1 case\n" in result.output, result.output


def test_run_json_and_experiments_listing(tmp_path):
    store = str(tmp_path / "s")
    runner = CliRunner()
    result = runner.invoke(
        main,
        [
            "run",
            "-d",
            "arithmetic",
            "-a",
            "mock",
            "--cases",
            "5",
            "--attempts",
            "3",
            "--store",
            store,
            "--name",
            "first",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["trials"] == 15 and summary["name"] == "first" and summary["status"] == "completed"
    assert summary["report"] == f"agenteval report {summary['experiment_id']} --store {store}"
    table = runner.invoke(main, ["run", "-d", "arithmetic", "-a", "mock", "--cases", "2", "--store", store, "-q"])
    assert "pass rate 100.0% (95% CI" in table.output and "passed 6 · wrong answers 0 · failures 0" in table.output
    listing = json.loads(runner.invoke(main, ["experiments", "--store", store, "--format", "json"]).output)
    assert [e["trials"] for e in listing] == [6, 15]  # newest first
    assert listing[1]["name"] == "first" and listing[1]["pass_rate"] == 1.0 and listing[1]["status"] == "completed"


def test_the_report_command_a_run_prints_finds_its_store(tmp_path):
    """A run given --store printed `agenteval report ID` alone, which looked in $AGENTEVAL_STORE or ./.agenteval and
    said there was no store there; a run into the default store still prints the short command."""
    runner = CliRunner()
    store = tmp_path / "my runs"
    arguments = ["run", "-d", "arithmetic", "-a", "mock", "--cases", "2", "--attempts", "1", "--json"]
    summary = json.loads(runner.invoke(main, [*arguments, "--store", str(store)]).output)
    assert summary["report"].endswith(f" --store '{store}'")
    report = runner.invoke(main, shlex.split(summary["report"])[1:])
    assert report.exit_code == 0 and summary["experiment_id"] in report.output, report.output
    default = json.loads(runner.invoke(main, arguments).output)
    assert default["report"] == f"agenteval report {default['experiment_id']}"


def test_a_report_in_tables_written_to_a_file_holds_the_tables_the_terminal_shows(tmp_path):
    """``report --format text -o FILE`` wrote markdown, not the tables asked for; they are now written as plain text
    (no colours), for an experiment and for production traces alike."""
    runner = CliRunner()
    store = str(tmp_path / "s")
    runner.invoke(main, ["run", "-d", "arithmetic", "-a", "mock", "--cases", "4", "--attempts", "1", "--store", store])
    for fmt in ("table", "text"):
        written = tmp_path / f"report-{fmt}.txt"
        result = runner.invoke(main, ["report", "--format", fmt, "-o", str(written), "--store", store])
        assert result.exit_code == 0 and result.output == f"wrote {written}\n", result.output
        text = written.read_text(encoding="utf-8")
        assert "┃ pass rate ┃" in text or "│ pass rate │" in text, text
        assert "## " not in text and "| --- |" not in text and "\x1b" not in text  # neither markdown nor colours
    terminal = runner.invoke(main, ["report", "--store", store])  # the same tables, as a terminal shows them
    (row,) = [line for line in terminal.output.splitlines() if line.startswith("│ pass rate │")]
    assert row in text.splitlines()
    traces = tmp_path / "traces.txt"
    runner.invoke(main, ["report", "--traces", "--format", "text", "-o", str(traces), "--store", store])
    assert "│ calls          │ 0 " in traces.read_text(encoding="utf-8")


def test_run_usage_errors(tmp_path):
    runner = CliRunner()
    missing = runner.invoke(main, ["run", "--agent", "mock"])
    assert missing.exit_code == 2 and "--dataset and --agent (or --model) are required" in missing.output
    option = runner.invoke(main, ["run", "-d", "arithmetic", "-a", "mock", "--agent-option", "wrong_rate"])
    assert option.exit_code == 2 and "'wrong_rate' is not KEY=VALUE" in option.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input": "q"}\n')
    dataset_error = runner.invoke(main, ["run", "-d", str(bad), "-a", "mock", "--store", str(tmp_path / "s")])
    assert dataset_error.exit_code == 1 and f"{bad}:1: expected_output: is required" in dataset_error.output
    unknown = runner.invoke(
        main, ["run", "-d", "arithmetic", "-a", "mock", "--agent-option", "speed=3", "--store", str(tmp_path / "s")]
    )
    assert unknown.exit_code == 2 and "unknown mock agent option 'speed'" in unknown.output  # a usage error


# The run in a process whose address space is capped, so that planning a run too large for memory fails in seconds
# (with a MemoryError) instead of filling the machine's memory for minutes.
CAPPED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))
from agenteval.cli import main
sys.argv = ["agenteval", *sys.argv[1:]]
main()
"""


def test_attempts_too_many_to_plan_are_refused_naming_the_option_before_anything_is_written(tmp_path):
    """`--attempts 100000000` over 3 cases planned 300,000,000 trials in memory: minutes of swapping and then a
    MemoryError traceback (or the OOM killer), where a typo deserves one line."""
    dataset = tmp_path / "three.jsonl"
    dataset.write_text("".join(f'{{"id": "c{i}", "input": "q{i}", "expected_output": "a"}}\n' for i in range(3)))
    store = tmp_path / "s"
    done = subprocess.run(
        [sys.executable, "-c", CAPPED, "run", "-d", str(dataset), "-a", "mock", "--attempts", "100000000", "-q"]
        + ["--store", str(store)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "--attempts 100,000,000 over 3 case(s) is 300,000,000 trials" in done.stderr, done.stderr
    assert not (store / "experiments").exists() or not any((store / "experiments").rglob("*.parquet"))


def test_a_model_name_that_cannot_be_read_is_blamed_on_the_option_that_gave_it(tmp_path):
    """``--judge nope`` said "--model 'nope': expected PROVIDER/MODEL", an option the user had not given."""
    runner = CliRunner()
    store = str(tmp_path / "s")
    ran = runner.invoke(main, ["run", "-d", "arithmetic", "-a", "mock", "--cases", "2", "--store", store])
    assert ran.exit_code == 0, ran.output
    experiment_id = Store(store).rows("SELECT experiment_id FROM experiments")[0]["experiment_id"]
    run = ["run", "-d", "arithmetic", "-a", "mock", "--store", store]
    for command, option in (
        (["run", "-d", "arithmetic", "--model", "nope", "--store", store], "--model"),
        ([*run, "--judge", "nope"], "--judge"),
        ([*run, "--simulate-users", "mistral/large"], "--simulate-users"),
        (["rescore", experiment_id, "--judge", "nope", "--store", store], "--judge"),
    ):
        said = runner.invoke(main, command)
        assert said.exit_code == 2 and f"Error: {option} " in said.output, (command, said.output)


def test_a_run_sends_its_spans_to_the_otlp_backend_too(tmp_path, monkeypatch, receiver):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.endpoint)
    experiment = evaluate("mock", "arithmetic", cases=3, attempts=1, store=tmp_path / "s", progress="none")
    stored = Store(tmp_path / "s").rows("SELECT span_id FROM spans WHERE experiment_id = ?", [experiment.id])
    received = {s["span_id"] for s in receiver.spans}
    assert {s["span_id"] for s in stored} <= received and len(stored) == 9


def test_the_progress_bar_is_drawn_on_stderr_where_the_lines_go(tmp_path):
    """The bar is chosen when stderr is a terminal, and the plain lines go to stderr, but the bar was drawn on
    stdout: with stdout redirected (`agenteval run ... > summary.txt`) its last frame landed in the file and nothing
    moved on the terminal."""
    command = [sys.executable, "-m", "agenteval.cli", "run", "-d", "arithmetic", "-a", "mock", "--cases", "3"]
    exit_code, stdout, drawn = run_with_stderr_on_a_terminal([*command, "--attempts", "1", "--store", str(tmp_path)])
    assert exit_code == 0, stdout
    assert b"3 trials to run" in drawn and b"3/3" in drawn and "━".encode() in drawn, drawn[-500:]
    assert b"3/3" not in stdout and "━".encode() not in stdout and b"trials to run" not in stdout, stdout


def test_a_progress_output_that_goes_away_does_not_stop_the_run(tmp_path):
    # `agenteval run ... 2>&1 | head -1`, a CI log collector that died: the progress lines have nowhere to go.
    store = tmp_path / "s"
    process = subprocess.Popen(
        [sys.executable, "-m", "agenteval.cli", "run", "-d", "arithmetic", "-a", "mock", "--cases", "10"]
        + ["--attempts", "2", "-j", "2", "--agent-option", "latency=0.05", "--store", str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stderr is not None and process.stdout is not None
    assert b"20 trials to run" in process.stderr.readline()
    process.stderr.close()  # the reader is gone: every later progress line meets a broken pipe
    output = process.stdout.read().decode()
    assert process.wait(timeout=120) == 0, output
    assert "passed 20" in output
    rows = Store(store).rows("SELECT status FROM experiments")
    assert [row["status"] for row in rows] == ["completed"]
    assert Store(store).rows("SELECT count(*) AS n FROM trials")[0]["n"] == 20


def test_python_dash_m_agenteval_is_the_command(tmp_path):
    """For an environment whose scripts are not on PATH: the same command, its name and exit codes."""
    helped = subprocess.run([sys.executable, "-m", "agenteval", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and helped.stdout.startswith("Usage: agenteval [OPTIONS] COMMAND")
    missing = subprocess.run(
        [sys.executable, "-m", "agenteval", "validate", str(tmp_path / "none.jsonl")], capture_output=True, text=True
    )
    assert missing.returncode == 1 and "none.jsonl: no such file" in missing.stderr


def test_an_agent_that_closes_stdout_still_gets_its_runs_summary(tmp_path):
    """An agent that called sys.stdout.close() (its code runs in the command's process) made the summary raise
    "I/O operation on closed file": a traceback and exit 1 after a run that had saved every trial (found by a
    hostile check). The summary goes to a new stream on the same descriptor, and the command succeeds."""
    agent = tmp_path / "closer.py"
    agent.write_text("import sys\n\ndef answer(question):\n    sys.stdout.close()\n    return 'ok'\n")
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "agenteval",
            "run",
            "--dataset",
            "arithmetic",
            "--cases",
            "2",
            "--attempts",
            "1",
            "--agent",
            f"{agent}:answer",
            "--store",
            str(tmp_path / "store"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    assert "Traceback" not in ran.stderr and "closed sys.stdout" in ran.stderr
    assert "2 trials" in ran.stdout
