"""Saved reports (``.snapshots/reports/``): what ``agenteval report`` shows without DuckDB is the report computed
from the tables, on every built-in dataset and in every format; it is never shown once a file it came from
changed, nor for the newest experiment once another is newer; the writers that save figures save it."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys

import pytest
from rich.console import Console
from test_report_snapshots import BUILT_IN_RUNS, every_other_attempt, failing_pass

from agenteval.analysis import build_report
from agenteval.analysis._saved_report import NEWEST, REPORTS, saved_report
from agenteval.render import _report_formats
from agenteval.run import evaluate
from agenteval.scorers import rescore
from agenteval.store import Store
from agenteval.store._fingerprints import SNAPSHOTS


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "store")


def computed(store: Store, experiment_id: str):
    """The report computed from the tables, with no saved figures or report to read."""
    shutil.rmtree(store.root / SNAPSHOTS, ignore_errors=True)
    return build_report(store, experiment_id)


def shown(report) -> dict[str, str]:
    """The report in every format the command prints."""
    terminal = io.StringIO()
    Console(file=terminal, width=120, force_terminal=False).print(_report_formats.to_terminal(report))
    return {"table": terminal.getvalue(), **{name: render(report) for name, render in _report_formats.FORMATS.items()}}


def agenteval(store: Store, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", *args, "--store", str(store.root)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize(("agent", "dataset", "options"), BUILT_IN_RUNS)
def test_the_saved_report_is_the_computed_report_in_every_format_on_the_built_in_datasets(
    store, agent, dataset, options
):
    cases = {"cases": 30} if dataset == "arithmetic" else {}
    experiment = evaluate(agent, dataset, attempts=3, store=store, progress="none", agent_options=options, **cases)
    saved = saved_report(store.root, None)
    assert saved is not None, "the run saved its report"
    assert saved_report(store.root, experiment.id) == saved
    live = computed(store, experiment.id)
    assert json.dumps(saved.to_dict()) == json.dumps(live.to_dict())
    assert shown(saved) == shown(live)


def test_the_command_shows_a_saved_report_without_duckdb_and_computes_one_otherwise(store):
    experiment = evaluate("mock", "arithmetic", cases=20, attempts=2, store=store, progress="none").id
    script = (
        "import sys; from agenteval.cli import main; main(sys.argv[1:], standalone_mode=False); "
        "print('duckdb' in sys.modules, file=sys.stderr)"
    )
    command = [sys.executable, "-c", script, "report", "--format", "json", "--store", str(store.root)]
    fast = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    assert fast.stderr.strip() == "False"
    shutil.rmtree(store.root / SNAPSHOTS / REPORTS)
    slow = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    assert slow.stderr.strip() == "True"
    assert json.loads(fast.stdout) == json.loads(slow.stdout)
    assert json.loads(slow.stdout)["experiment"]["id"] == experiment


def test_a_saved_report_is_never_shown_once_its_files_changed_and_compaction_saves_it_again(store):
    experiment = evaluate("mock", "arithmetic", cases=20, attempts=1, store=store, progress="none").id
    assert saved_report(store.root, None).outcomes.passed == 20
    # Another writer (not one that saves reports) adds a pass that fails every trial.
    trials = store.rows("SELECT trial_id, case_id FROM trials WHERE experiment_id = ?", [experiment])
    store.write("scores", failing_pass(experiment, trials))
    assert saved_report(store.root, None) is None and saved_report(store.root, experiment) is None
    assert json.loads(agenteval(store, "report", "--format", "json").stdout)["outcomes"]["passed"] == 0
    # `agenteval compact` merges that file into the partition and saves the report of the files as they are.
    agenteval(store, "compact")
    again = saved_report(store.root, None)
    assert again is not None and again.outcomes.passed == 0 and again.outcomes.wrong == 20
    assert again == computed(store, experiment)


def test_the_newest_experiments_report_is_never_an_older_experiments(store):
    first = evaluate("mock", "arithmetic", cases=20, attempts=2, store=store, progress="none").id
    assert saved_report(store.root, None).experiment.id == first
    second = evaluate("mock", "arithmetic", cases=20, attempts=2, store=store, progress="none").id
    assert saved_report(store.root, None).experiment.id == second
    # Rescoring the first saves its report, which is not the newest experiment's: the pointer may still name
    # the first from before the second ran, and is not followed to it.
    (store.root / SNAPSHOTS / REPORTS / NEWEST).write_text(json.dumps({"experiment_id": first}))
    rescore(store, first, [every_other_attempt])
    assert saved_report(store.root, None) is None
    assert json.loads(agenteval(store, "report", "--format", "json").stdout)["experiment"]["id"] == second
    rescored = saved_report(store.root, first)
    assert rescored is not None and rescored == computed(store, first)


def test_a_damaged_saved_report_is_computed_instead(store):
    experiment = evaluate("mock", "arithmetic", cases=10, attempts=1, store=store, progress="none").id
    (store.root / SNAPSHOTS / REPORTS / f"{experiment}.json").write_text('{"fingerprint": ')
    assert saved_report(store.root, None) is None
    assert json.loads(agenteval(store, "report", "--format", "json").stdout)["trials"] == 10
