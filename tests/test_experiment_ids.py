"""An experiment id given on the command line names that experiment, or a unique start of one; an empty one names
none. Over real runs of the mock agent into a real store, through the real command line."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from agenteval.cli import main
from agenteval.run import evaluate
from agenteval.store import Store


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    store = tmp_path_factory.mktemp("ids") / "store"

    def run(experiment: str, wrong_rate: float) -> str:
        options = {"wrong_rate": str(wrong_rate), "seed": "1"}
        return evaluate(
            "mock",
            "arithmetic",
            cases=20,
            attempts=3,
            store=store,
            progress="none",
            agent_options=options,
            experiment_id=experiment,
        ).id

    return {"store": store, "baseline": run("baseline-run", 0.05), "newest": run("worse-run", 0.6)}


def scores_written(store) -> int:
    return Store(store).rows("SELECT count(*) AS n FROM score_history")[0]["n"]


def test_an_empty_baseline_is_refused_not_read_as_the_newest_experiment(runs):
    """``--baseline "$BASELINE"`` with the variable unset compared the newest experiment with the candidate: with
    the candidate the newest, the gate compared it with itself and passed a drop of half its pass rate."""
    store = str(runs["store"])
    regression = CliRunner().invoke(
        main, ["gate", "--baseline", runs["baseline"], "--candidate", runs["newest"], "--store", store]
    )
    assert regression.exit_code == 1, regression.output
    for baseline, candidate in (("", runs["newest"]), (runs["baseline"], "")):
        result = CliRunner().invoke(main, ["gate", "--baseline", baseline, "--candidate", candidate, "--store", store])
        assert result.exit_code == 3, result.output
        assert "gate: refused (exit 3)" in result.output and "experiment id is empty" in result.output


@pytest.mark.parametrize(
    "arguments",
    [["report", ""], ["report", "", "--format", "json"], ["compare", "", "worse-run"], ["compare", "baseline-run", ""]],
)
def test_report_and_compare_refuse_an_empty_id(runs, arguments):
    """Exit 2, as docs/reference/cli.md says of an empty id: compare exited 1, as if the two could not be compared."""
    result = CliRunner().invoke(main, [*arguments, "--store", str(runs["store"])])
    assert result.exit_code == 2, result.output
    assert "experiment id is empty" in result.output and "Traceback" not in result.output
    assert "worse-run" not in result.stdout.replace("compare", "")  # nothing reported of the newest


def test_rescore_of_an_empty_id_scores_nothing(runs):
    before = scores_written(runs["store"])
    result = CliRunner().invoke(main, ["rescore", "", "--store", str(runs["store"])])
    assert result.exit_code == 2 and "experiment id is empty" in result.output, result.output
    assert scores_written(runs["store"]) == before


def test_an_id_prefix_still_names_its_experiment(runs):
    result = CliRunner().invoke(main, ["report", "baseline", "--format", "json", "--store", str(runs["store"])])
    assert result.exit_code == 0 and '"id": "baseline-run"' in result.output


def test_power_from_an_empty_id_is_refused_not_the_defaults(runs):
    result = CliRunner().invoke(main, ["power", "--from", "", "--store", str(runs["store"])])
    assert result.exit_code == 2 and "experiment id is empty" in result.output, result.output


def test_resume_of_an_empty_id_is_refused_and_starts_no_run(runs):
    """``run --resume "$EXPERIMENT"`` with the variable unset, the dataset and agent given: it started a new run."""
    store = str(runs["store"])
    before = Store(store).rows("SELECT count(*) AS n FROM experiments")[0]["n"]
    arguments = ["run", "--resume", "", "--dataset", "arithmetic", "--agent", "mock", "--cases", "2", "--store", store]
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 2, result.output
    assert "experiment id to resume is empty" in result.output
    assert Store(store).rows("SELECT count(*) AS n FROM experiments")[0]["n"] == before
    with pytest.raises(ValueError, match="experiment id to resume is empty"):
        evaluate("mock", "arithmetic", cases=2, store=store, progress="none", resume="")
