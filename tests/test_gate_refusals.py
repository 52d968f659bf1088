"""The gate judges only what it can: an unfinished run, or runs of different datasets, are refused (exit 3)
unless an option says otherwise, and every error ends with exit 3, never 1 (a regression) nor a traceback.
All through the real command line, over stores made by real runs of the mock agent."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

from agenteval.agents import mock_agent
from agenteval.analysis import _experiments as ex
from agenteval.cli import main
from agenteval.dataset import load_dataset
from agenteval.run import evaluate
from agenteval.store import Store

CASES, ATTEMPTS, STOP_AFTER_TRIALS = 30, 3, 40


def write_cases(path: Path, seed: int, cases: int = 20) -> Path:
    """Arithmetic cases without ids, so their ids are line numbers, as in a hand-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"input": c.input, "expected_output": c.expected_output, "category": c.category})
        for c in load_dataset("arithmetic", cases=cases, seed=seed).cases
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def interrupted_run(store: Path) -> str:
    """A run stopped by a real SIGINT after STOP_AFTER_TRIALS trials: about 13 of its 30 cases have trials."""
    mock = mock_agent(wrong_rate="0.05", seed="1")
    calls = 0

    async def agent(message: str) -> str:
        nonlocal calls
        calls += 1
        if calls == STOP_AFTER_TRIALS:
            os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends; the run's handler stops it
        return await mock(message)

    experiment = evaluate(
        agent, "arithmetic", cases=CASES, attempts=ATTEMPTS, concurrency=1, store=store, progress="none"
    )
    assert experiment.status == "interrupted"
    return experiment.id


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate")
    store = root / "store"

    def run(dataset: str | Path, cases: int | None = None, **options: object) -> str:
        return evaluate(
            "mock",
            str(dataset),
            cases=cases or (CASES if dataset == "arithmetic" else None),
            attempts=ATTEMPTS,
            store=store,
            progress="none",
            agent_options={"wrong_rate": "0.05", "seed": "1"},
            **options,
        ).id

    first = write_cases(root / "a" / "cases.jsonl", seed=0)
    changed = write_cases(root / "b" / "cases.jsonl", seed=1)  # the same name, other content
    renamed = root / "other.jsonl"
    renamed.write_bytes(first.read_bytes())  # the same content under another name
    return {
        "store": store,
        "baseline": run("arithmetic"),
        "interrupted": interrupted_run(store),
        "file": run(first),
        "changed": run(changed),
        "renamed": run(renamed),
        "sample_0": run(first, sample=15, sample_seed=0),
        "sample_1": run(first, sample=15, sample_seed=1),
        "arithmetic_20": run("arithmetic", cases=20),  # the first 20 of the baseline's 30 cases
    }


def gate(runs, baseline: str, candidate: str, *options: str, env: dict | None = None):
    arguments = ["gate", "--baseline", baseline, "--candidate", candidate, "--store", str(runs["store"]), *options]
    return CliRunner().invoke(main, arguments, env=env)


def test_an_interrupted_candidate_is_refused_not_passed(runs):
    result = gate(runs, runs["baseline"], runs["interrupted"])
    assert result.exit_code == 3, result.output
    assert "gate: refused (exit 3)" in result.output
    assert f"{runs['interrupted']} is interrupted, not completed" in result.output
    assert f"agenteval run --resume {runs['interrupted']}" in result.output and "--allow-incomplete" in result.output


def test_an_interrupted_baseline_is_refused_too(runs):
    result = gate(runs, runs["interrupted"], runs["baseline"])
    assert result.exit_code == 3 and f"the baseline {runs['interrupted']} is interrupted" in result.output


@pytest.mark.parametrize("status", [ex.RUNNING, ex.FAILED])
def test_a_candidate_left_running_or_failed_is_refused(runs, status):
    # A run killed with SIGKILL keeps "running" as its newest status row; a harness error records "failed".
    store = Store(runs["store"])
    candidate = evaluate("mock", "arithmetic", cases=CASES, attempts=ATTEMPTS, store=store, progress="none")
    record = ex.find(store, candidate.id)
    record.status = status
    ex.save(store, record)
    result = gate(runs, runs["baseline"], candidate.id)
    # A "running" record that no live process holds is a run that was killed: it is shown interrupted.
    shown = "interrupted" if status == "running" else status
    assert result.exit_code == 3 and f"{candidate.id} is {shown}, not completed" in result.output


def test_allow_incomplete_judges_the_shared_cases_and_says_so(runs):
    result = gate(runs, runs["baseline"], runs["interrupted"], "--allow-incomplete")
    assert result.exit_code in (0, 1), result.output
    assert "warning: the candidate" in result.output and "only the baseline ran" in result.output


@pytest.mark.parametrize("candidate", ["changed", "renamed"])
def test_different_datasets_are_refused(runs, candidate):
    result = gate(runs, runs["file"], runs[candidate])
    assert result.exit_code == 3, result.output
    assert "the same case id may name different cases" in result.output
    assert "--allow-different-datasets" in result.output
    allowed = gate(runs, runs["file"], runs[candidate], "--allow-different-datasets")
    assert allowed.exit_code in (0, 1) and "warning: " in allowed.output


def test_changed_content_of_a_same_named_dataset_names_both_hashes(runs):
    result = gate(runs, runs["file"], runs["changed"])
    assert "the dataset 'cases' changed between the runs (content hash" in result.output
    assert re.search(r"\d+ of the 20 cases both\s+ran differ", result.output), result.output


def test_a_generated_dataset_at_two_sizes_is_judged_on_the_cases_both_ran(runs):
    """arithmetic at --cases 30 and --cases 20 has two content hashes, though its first 20 cases are the same: the
    gate refused the pair as different datasets (exit 3). The cases both ran are now compared as each run stored
    them, and only a case id that names another case is warned of."""
    result = gate(runs, runs["baseline"], runs["arithmetic_20"])
    assert result.exit_code in (0, 1), result.output
    assert "changed between the runs" not in result.output and "refused" not in result.output
    assert "warning: compared on the 20 cases both ran" in result.output


def test_two_samples_of_one_dataset_are_judged_on_the_cases_both_ran(runs):
    result = gate(runs, runs["sample_0"], runs["sample_1"])
    assert result.exit_code in (0, 1), result.output
    assert "warning: compared on the" in result.output and "refused" not in result.output


def test_compare_warns_about_what_the_gate_refuses(runs):
    store = str(runs["store"])
    table = CliRunner().invoke(main, ["compare", runs["baseline"], runs["interrupted"], "--store", store])
    assert table.exit_code == 0 and "warning: the candidate" in table.output
    as_json = CliRunner().invoke(main, ["compare", runs["file"], runs["changed"], "--store", store, "--json"])
    assert as_json.exit_code == 0
    payload = json.loads(as_json.stdout)
    assert [w["kind"] for w in payload["warnings"]] == ["different_datasets"]
    assert "warning: the dataset 'cases' changed" in as_json.stderr


def test_an_ambiguous_experiment_id_exits_3_without_a_traceback(runs):
    prefix = os.path.commonprefix([runs["baseline"], runs["interrupted"]])
    result = gate(runs, prefix, runs["interrupted"])
    assert result.exit_code == 3, result.output
    assert "is ambiguous" in result.output and "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_an_unknown_experiment_id_exits_3(runs):
    result = gate(runs, "no-such-experiment", runs["baseline"])
    assert result.exit_code == 3 and "no experiment 'no-such-experiment'" in result.output


def test_a_missing_store_exits_3_saying_so_and_creates_nothing(tmp_path):
    """A mistyped --store was refused as "no experiment 'a' in ...", sending the user to check ids that were right."""
    missing = tmp_path / "mistyped"
    result = CliRunner().invoke(main, ["gate", "--baseline", "a", "--candidate", "b", "--store", str(missing)])
    assert result.exit_code == 3, result.output
    assert result.output.splitlines() == [
        "gate: refused (exit 3)",
        f"  there is no store at {missing}: check --store (or AGENTEVAL_STORE), or run `agenteval run` first",
    ]
    assert not missing.exists()


@pytest.mark.parametrize("where", ["a directory", "a missing folder"])
def test_a_step_summary_that_cannot_be_written_exits_3(runs, tmp_path, where):
    path = tmp_path if where == "a directory" else tmp_path / "missing" / "summary.md"
    result = gate(runs, runs["sample_0"], runs["sample_1"], env={"GITHUB_STEP_SUMMARY": str(path)})
    assert result.exit_code == 3, result.output
    assert f"cannot write the GitHub step summary to {path}" in result.output
    assert "The gate's own decision was: no regression (exit 0)" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_an_experiment_gated_against_itself_is_refused_and_compare_warns(runs):
    """Baseline and candidate the same experiment (one id pasted twice, or two prefixes of it): every case's
    difference is 0, so the gate said "no regression (exit 0)" whatever the run was worth."""
    prefix = runs["baseline"][:-2]
    for candidate in (runs["baseline"], prefix):
        result = gate(runs, runs["baseline"], candidate)
        assert result.exit_code == 3, result.output
        assert f"the baseline and the candidate are the same experiment, {runs['baseline']}" in result.output
    shown = CliRunner().invoke(main, ["compare", runs["baseline"], runs["baseline"], "--store", str(runs["store"])])
    assert shown.exit_code == 0 and "warning: the baseline and the candidate are the same experiment" in shown.output


def test_unequal_attempts_are_said_beside_the_case_mean_the_gate_reads(runs):
    """The interrupted run stopped inside a case, so its cases ran 1 to 3 attempts: the gate's "candidate X%" is the
    mean of its cases' rates, which differs from the share of its trials that passed; it said nothing of it."""
    from agenteval.analysis import compare

    comparison = compare(Store(runs["store"]), runs["baseline"], runs["interrupted"])
    rows = Store(runs["store"]).query(
        "SELECT case_id, count(*) AS attempts, avg(passed::INT) AS rate FROM trials WHERE experiment_id = ? "
        "GROUP BY case_id",
        [comparison.candidate.experiment_id],
    )
    trials = {row["case_id"]: row for row in rows.to_pylist()}
    attempts = sorted({row["attempts"] for row in trials.values()})
    assert len(attempts) > 1, attempts  # the run stopped inside a case
    case_mean = sum(row["rate"] for row in trials.values()) / len(trials)
    trial_share = sum(row["rate"] * row["attempts"] for row in trials.values()) / sum(
        row["attempts"] for row in trials.values()
    )
    assert comparison.overall.candidate == pytest.approx(case_mean)
    result = gate(runs, runs["baseline"], runs["interrupted"], "--allow-incomplete")
    assert result.exit_code in (0, 1), result.output
    text = " ".join(result.output.split())
    assert (
        f"warning: the candidate's cases ran {attempts[0]} to {attempts[-1]} attempts: its pass rate here, "
        f"{case_mean:.1%}, is the mean of its cases' rates" in text
    ), text
    assert f"the share of its trials that passed in these cases is {trial_share:.1%}" in text
    assert "the baseline's cases ran" not in text  # a complete run of 3 attempts a case has nothing to say
