"""The views people query by name give the report's numbers; the rows as written stay under names that say so."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from click.testing import CliRunner

from agenteval.analysis import build_report
from agenteval.analysis._experiments import list_experiments, summarize
from agenteval.cli import main
from agenteval.run import evaluate
from agenteval.scorers import rescore, scorer
from agenteval.store import TRIALS, Store
from agenteval_exporters.files import publish


@scorer(name="never", requires=("expected_output",))
def never(case, trial):
    return False, "a stricter reading that no answer meets"


def sql(store, query: str) -> list[dict]:
    result = CliRunner().invoke(main, ["sql", query, "--store", str(store), "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.fixture
def rescored(tmp_path):
    """A run where most trials pass, then a rescore that fails every answered trial."""
    store = tmp_path / "s"
    options = {"wrong_rate": "0.25", "fail_rate": "0.1", "failure": "llm_error", "seed": "3"}
    experiment = evaluate(
        "mock", "arithmetic", cases=12, attempts=2, store=store, progress="none", agent_options=options
    )
    assert experiment.summary.pass_rate > 0.5
    rescore(Store(store), experiment.id, [never])
    return store, experiment


def test_sql_over_trials_gives_the_report_s_pass_rate_after_a_rescore(rescored):
    store, experiment = rescored
    report = build_report(Store(store), experiment.id)
    assert report.overall.pass_rate == 0.0
    (by_hand,) = sql(store, f"SELECT avg(passed::INT) AS rate FROM trials WHERE experiment_id = '{experiment.id}'")
    assert by_hand["rate"] == report.overall.pass_rate
    outcomes = sql(store, "SELECT outcome, count(*) AS n FROM trials GROUP BY ALL ORDER BY ALL")
    assert outcomes == [
        {"outcome": "failed", "n": report.outcomes.failed},
        {"outcome": "wrong", "n": report.outcomes.wrong},
    ]
    (listed,) = list_experiments(Store(store))
    assert listed["pass_rate"] == 0.0 == summarize(Store(store), experiment.id).pass_rate
    # What the run judged stays in the history.
    (as_run,) = sql(store, "SELECT avg(passed::INT) AS rate FROM trial_history")
    assert as_run["rate"] == experiment.summary.pass_rate


def test_scores_holds_the_current_pass_and_score_history_every_pass(rescored):
    store, experiment = rescored
    again = rescore(Store(store), experiment.id)  # the run's scorers again: a whole new pass of them
    passes = sql(store, "SELECT pass_id, scorer, count(*) AS n FROM scores GROUP BY ALL ORDER BY scorer")
    assert {(row["pass_id"], row["scorer"]) for row in passes} == {
        (again.pass_id, "answer_match"),
        (again.pass_id, "tool_use"),
        (passes[1]["pass_id"], "never"),  # not re-run: the previous rescore's stays current
    }
    assert passes[1]["pass_id"] != again.pass_id
    (history,) = sql(store, "SELECT count(DISTINCT pass_id) AS passes, count(*) AS n FROM score_history")
    current = sum(row["n"] for row in passes)
    assert history == {"passes": 3, "n": current + again.scores}
    (one_each,) = sql(store, "SELECT count(*) = count(DISTINCT (trial_id, scorer)) AS unique FROM scores")
    assert one_each["unique"] is True


def test_experiments_has_one_row_per_experiment_with_its_latest_status(rescored):
    store, experiment = rescored
    query = (
        f"SELECT count(*) AS n, any_value(status) AS status FROM experiments WHERE experiment_id = '{experiment.id}'"
    )
    assert sql(store, query) == [{"n": 1, "status": "completed"}]
    statuses = sql(store, "SELECT status FROM experiment_history ORDER BY updated_at")
    assert [row["status"] for row in statuses] == ["running", "completed"]


def test_trials_written_before_usage_was_split_read_as_every_try(tmp_path):
    store = Store(tmp_path / "s")
    old_fields = [f for f in TRIALS if not f.name.endswith("_all_tries")]
    old_schema = pa.schema(old_fields, metadata={b"agenteval.schema_version": b"2", b"agenteval.table": b"trials"})
    row = {f.name: None for f in old_fields}
    row.update(experiment_id="e-old", trial_id="t1", case_id="c1", attempt=1, outcome="passed", passed=True)
    row.update(started_at=1, ended_at=2, input_tokens=100, output_tokens=20, cost_usd=0.5)
    publish(store.root, "trials", "experiment_id=e-old", pa.Table.from_pylist([row], schema=old_schema))
    usage = "input_tokens, output_tokens, cost_usd, input_tokens_all_tries, output_tokens_all_tries, cost_usd_all_tries"
    expected = {
        "input_tokens": None,  # the try that counts was not recorded apart then
        "output_tokens": None,
        "cost_usd": None,
        "input_tokens_all_tries": 100,
        "output_tokens_all_tries": 20,
        "cost_usd_all_tries": 0.5,
    }
    assert store.rows(f"SELECT {usage} FROM trials") == [expected]
    assert store.rows(f"SELECT {usage} FROM trial_history") == [expected]
    figures = summarize(store, "e-old")
    assert (figures.pass_rate, figures.input_tokens, figures.input_tokens_all_tries) == (1.0, None, 100)


def test_the_run_judges_its_trials_as_the_views_do(tmp_path):
    options = {"wrong_rate": "0.3", "fail_rate": "0.2", "failure": "tool_error", "seed": "5"}
    evaluate("mock", "arithmetic", cases=20, attempts=2, store=tmp_path / "s", progress="none", agent_options=options)
    (row,) = sql(
        tmp_path / "s",
        "SELECT count(*) AS n, count(DISTINCT t.outcome) AS kinds, "
        "count(*) FILTER (WHERE t.outcome <> h.outcome OR t.passed <> h.passed) AS disagree "
        "FROM trials t JOIN trial_history h USING (experiment_id, trial_id)",
    )
    assert row == {"n": 40, "kinds": 3, "disagree": 0}
