"""Saved report figures (``.snapshots/``) change how fast a report is, never what it says: a report read from
a snapshot equals one computed from the tables, both equal a computation by hand from the rows as written,
a snapshot is never read once the files it came from changed, and reads never save one."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pytest

from agenteval.analysis import build_report, compare
from agenteval.analysis._stats import clustered_mean
from agenteval.run import evaluate
from agenteval.scorers import rescore, scorer
from agenteval.store import Store, compact
from agenteval.store._snapshots import (
    SNAPSHOTS,
    fingerprint,
    judged_connection,
    save_figures,
    snapshot_folder,
    snapshot_folders,
)
from agenteval.tools import country_facts, fetch_review, get_stock_price


def busy_agent(message: str) -> str:
    """Uses some of the hard dataset's tools, imperfectly, so scorers disagree and tools fail."""
    lowered = message.lower()
    if "stock price" in lowered or "share price" in lowered:
        return f"It is {get_stock_price('ACME')}"  # the quote service fails: a tool error
    if "review" in lowered and "aero blender" in lowered:
        return fetch_review("aero blender")
    if "capital" in lowered and "canada" in lowered:
        return f"The capital is {country_facts('Canada')['capital']}."
    return "I don't know."


@scorer(name="answer_match", version="flipped")
def every_other_attempt(case, features):
    """A rescore that changes answers: odd attempts pass, even ones fail."""
    return features.attempt % 2 == 1


def live(store: Store, experiment_id: str) -> dict:
    """The report computed from the tables, with no snapshot to read."""
    shutil.rmtree(store.root / SNAPSHOTS, ignore_errors=True)
    return build_report(store, experiment_id).to_dict()


def by_hand(store: Store, experiment_id: str) -> dict:
    """Pass rates from the rows as written, in Python: a trial passes when it did not fail and each
    pass/fail scorer's newest score passed; errors clustered by case."""
    trials = store.rows(
        "SELECT trial_id, case_id, failure_type, supersedes FROM trial_history WHERE experiment_id = ?",
        [experiment_id],
    )
    superseded = {t["supersedes"] for t in trials if t["supersedes"]}
    scores = store.rows(
        "SELECT trial_id, scorer, passed, continuous, scored_at, pass_id FROM score_history WHERE experiment_id = ?",
        [experiment_id],
    )
    # Newest first, the smaller pass id first among scores of the same instant: the last one kept wins.
    scores.sort(key=lambda s: s["pass_id"], reverse=True)
    scores.sort(key=lambda s: s["scored_at"])
    newest = {(s["trial_id"], s["scorer"]): s for s in scores}
    categories = {
        row["case_id"]: row["category"] or "uncategorized"
        for row in store.rows("SELECT case_id, category FROM cases WHERE experiment_id = ?", [experiment_id])
    }
    outcomes: dict[str, list[int]] = defaultdict(list)
    for trial in trials:
        if trial["trial_id"] in superseded:
            continue
        scores = [s for (t, _), s in newest.items() if t == trial["trial_id"] and not s["continuous"]]
        passed = trial["failure_type"] is None and all(s["passed"] is True for s in scores)
        outcomes[trial["case_id"]].append(int(passed))
    figures = {"overall": clustered_mean(list(outcomes.values()))}
    for category in sorted(set(categories.values())):
        figures[category] = clustered_mean([v for case, v in outcomes.items() if categories.get(case) == category])
    return figures


def assert_reported_as_by_hand(report: dict, hand: dict) -> None:
    def close(reported: float | None, expected: float) -> bool:
        return (reported is None and math.isnan(expected)) or math.isclose(reported, expected, abs_tol=1e-12)

    rate, se = hand["overall"]
    assert close(report["overall"]["pass_rate"], rate) and close(report["overall"]["se"], se)
    for category in report["categories"]:
        rate, se = hand[category["category"]]
        assert close(category["pass_rate"], rate) and close(category["se"], se), category["category"]


BUILT_IN_RUNS = [
    ("mock", "arithmetic", {"wrong_rate": "0.2", "fail_rate": "0.1", "failure": "tool_error", "seed": "3"}),
    (busy_agent, "hard", {}),
    (busy_agent, "extended", {}),
    ("mock", "mixed", {}),
]
"""Agents and built-in datasets whose reports are checked read and computed: wrong answers, failures, tools."""


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    return Store(tmp_path_factory.mktemp("snapshots") / "store")


@pytest.mark.parametrize(("agent", "dataset", "options"), BUILT_IN_RUNS)
def test_a_report_from_its_snapshot_is_the_report_from_the_tables_on_the_built_in_datasets(
    store, agent, dataset, options
):
    cases = {"cases": 30} if dataset == "arithmetic" else {}
    experiment = evaluate(
        agent, dataset, attempts=3, store=store, progress="none", agent_options=options or None, **cases
    )
    current = snapshot_folder(store, experiment.id, fingerprint(store, experiment.id))
    assert current.is_dir(), "the run saved its figures"
    saved = build_report(store, experiment.id).to_dict()
    assert saved == live(store, experiment.id)
    assert_reported_as_by_hand(saved, by_hand(store, experiment.id))


def test_rescored_passes_give_the_same_figures_read_or_computed(tmp_path):
    store = Store(tmp_path / "store")
    first = evaluate("mock", "arithmetic", cases=40, attempts=3, store=store, progress="none").id
    second = evaluate(
        "mock", "arithmetic", cases=40, attempts=3, store=store, progress="none", agent_options={"wrong_rate": "0.3"}
    ).id
    before = build_report(store, first).to_dict()
    # A pass that re-runs one scorer only: the current score is the newest of two for answer_match and the
    # only one for the others, so the snapshot has to pick among passes per trial.
    rescore(store, first, [every_other_attempt])
    assert (store.root / SNAPSHOTS).is_dir()
    saved = build_report(store, first).to_dict()
    assert saved != before  # the rescore changed answers, and the report says so at once
    assert saved == live(store, first)
    assert_reported_as_by_hand(saved, by_hand(store, first))
    rescore(store, first)  # the built-in again: back to the run's figures
    assert build_report(store, first).to_dict()["overall"] == before["overall"]

    read = compare(store, first, second)
    shutil.rmtree(store.root / SNAPSHOTS)
    assert compare(store, first, second) == read


def test_a_snapshot_is_never_read_once_its_files_changed_and_reads_never_save_one(tmp_path):
    store = Store(tmp_path / "store")
    experiment = evaluate("mock", "arithmetic", cases=20, attempts=1, store=store, progress="none").id
    saved = build_report(store, experiment).to_dict()
    assert saved["outcomes"]["passed"] == 20
    # Another writer (not one that saves figures) adds a pass that fails every trial.
    trials = store.rows("SELECT trial_id, case_id FROM trials WHERE experiment_id = ?", [experiment])
    store.write("scores", failing_pass(experiment, trials))
    changed = build_report(store, experiment).to_dict()
    assert changed["outcomes"]["passed"] == 0 and changed["outcomes"]["wrong"] == 20
    assert changed == live(store, experiment)
    # live() removed every snapshot; reports, comparisons and summaries save none.
    build_report(store, experiment)
    compare(store, experiment, experiment)
    assert not (store.root / SNAPSHOTS).exists()


def failing_pass(experiment_id: str, trials: list[dict]) -> pa.Table:
    from agenteval.store import SCORES

    rows = [
        {
            "experiment_id": experiment_id,
            "trial_id": t["trial_id"],
            "case_id": t["case_id"],
            "scorer": "answer_match",
            "scorer_version": "strict",
            "pass_id": "strictpass00",
            "value": 0.0,
            "passed": False,
            "reason": "stricter",
            "error": None,
            "continuous": False,
            "scored_at": 4_102_444_800_000_000_000,  # 2100: newer than any run-time score
        }
        for t in trials
    ]
    return pa.Table.from_pylist(rows, schema=SCORES)


def test_compaction_saves_again_the_figures_it_put_out_of_date(tmp_path, monkeypatch):
    monkeypatch.setattr("agenteval.store._snapshots.STALE_SNAPSHOT_SECONDS", 0.0)
    store = Store(tmp_path / "store")
    experiment = evaluate("mock", "arithmetic", cases=20, attempts=1, store=store, progress="none").id
    trials = store.rows("SELECT trial_id, case_id FROM trials WHERE experiment_id = ?", [experiment])
    half = len(trials) // 2
    store.write("scores", failing_pass(experiment, trials[:half]))
    store.write("scores", failing_pass(experiment, trials[half:]))  # two files: something to compact
    assert not snapshot_folder(store, experiment, fingerprint(store, experiment)).is_dir()
    result = compact(store)
    assert experiment in result.figures_refreshed
    current = snapshot_folder(store, experiment, fingerprint(store, experiment))
    assert current.is_dir() and snapshot_folders(store) == [current]  # the stale one went
    report = build_report(store, experiment).to_dict()
    assert report["outcomes"]["wrong"] == 20 and report == live(store, experiment)


READ_AN_OLD_SNAPSHOT = """
import os, sys, time
from agenteval.store import Store
from agenteval.store._snapshots import SNAPSHOTS, judged_connection, snapshot_folders

store, experiment = Store(sys.argv[1]), sys.argv[2]
(saved,) = snapshot_folders(store)
an_hour_ago = time.time() - 3600
os.utime(saved, (an_hour_ago, an_hour_ago))  # saved an hour ago, and current ever since
with judged_connection(store, experiment) as con:
    (view,) = con.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'judged'").fetchone()
    print("chosen", SNAPSHOTS in view, flush=True)
    assert sys.stdin.readline() == "go\\n"  # a writer replaced it meanwhile
    print(con.execute("SELECT count(*) FROM judged").fetchone()[0], flush=True)
"""


def test_a_report_reading_an_old_snapshot_keeps_it_when_a_writer_replaces_it(tmp_path):
    # A snapshot an hour old was removed by the save that replaced it, under a report that had just chosen it:
    # "IO Error: No files found that match the pattern .../judged*.figures".
    store = Store(tmp_path / "store")
    experiment = evaluate("mock", "arithmetic", cases=10, attempts=2, store=store, progress="none").id
    reader = subprocess.Popen(
        [sys.executable, "-c", READ_AN_OLD_SNAPSHOT, str(store.root), experiment],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout.readline().split() == ["chosen", "True"], reader.communicate()[1]
    command = [sys.executable, "-m", "agenteval.cli", "rescore", experiment, "--store", str(store.root)]
    rescored = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert rescored.returncode == 0, rescored.stderr
    out, err = reader.communicate("go\n", timeout=60)
    assert reader.returncode == 0, err
    assert out.split() == ["20"]
    assert len(snapshot_folders(store)) == 2  # the rescore's own, and the one read, gone at a save a minute on


def test_snapshot_files_are_never_reached_by_a_glob_over_the_store(tmp_path):
    store = Store(tmp_path / "store")
    evaluate("mock", "arithmetic", cases=5, attempts=1, store=store, progress="none")
    assert snapshot_folders(store)
    assert not any(SNAPSHOTS in p.parts for p in Path(store.root).rglob("*.parquet"))


def test_agenteval_compact_saves_figures_for_experiments_written_without_them(tmp_path):
    from click.testing import CliRunner

    from agenteval.cli import main

    store = Store(tmp_path / "store")
    experiment = evaluate("mock", "arithmetic", cases=10, attempts=1, store=store, progress="none").id
    shutil.rmtree(store.root / SNAPSHOTS)  # as a store written before snapshots
    compact(store)  # a run's own compaction saves figures only where they were saved before
    assert not (store.root / SNAPSHOTS).exists()
    done = CliRunner().invoke(main, ["compact", "--store", str(store.root)])
    assert done.exit_code == 0 and "saved the report figures of 1 experiment(s)" in done.output
    assert snapshot_folder(store, experiment, fingerprint(store, experiment)).is_dir()


@pytest.mark.parametrize("bucket_trials", [1, 7, 45])
def test_figures_do_not_depend_on_how_many_trials_are_judged_at_a_time(tmp_path, monkeypatch, bucket_trials):
    store = Store(tmp_path / "store")
    experiment = evaluate(
        "mock", "arithmetic", cases=30, attempts=3, store=store, progress="none", agent_options={"wrong_rate": "0.3"}
    ).id
    rescore(store, experiment, [every_other_attempt])
    whole = live(store, experiment)
    monkeypatch.setattr("agenteval.store._snapshots.BUCKET_TRIALS", bucket_trials)
    assert live(store, experiment) == whole


def test_scores_of_retried_and_lost_tries_count_in_no_figure_however_the_trials_are_bucketed(tmp_path, monkeypatch):
    """A try retried by ``--retry-failed`` and a try lost before its trial row was written both leave scores that
    no figure counts: the scorer table counts what the ``scores`` view holds, whether computed a bucket at a time
    (of any size) or read from the saved figures."""
    store = Store(tmp_path / "store")
    options = {"wrong_rate": "0.3", "fail_rate": "0.3", "failure": "quota_exhausted", "seed": "2"}
    run = {"cases": 30, "attempts": 3, "store": store, "progress": "none", "agent_options": options}
    experiment = evaluate("mock", "arithmetic", **run).id
    evaluate("mock", "arithmetic", resume=experiment, retry_failed="infra", **run)
    rescore(store, experiment, [every_other_attempt])
    retried = store.rows(
        "SELECT trial_id, case_id FROM trial_history WHERE trial_id IN (SELECT supersedes FROM trial_history)"
    )
    lost = [{"trial_id": f"{t['trial_id']}-lost", "case_id": t["case_id"]} for t in retried]  # no trial row
    assert retried
    store.write("scores", failing_pass(experiment, retried + lost))  # the newest pass: it would win if counted

    counted = store.rows(
        "SELECT scorer, count(*) AS scored, avg(passed::INT) AS pass_rate, "
        "list(DISTINCT scorer_version ORDER BY scorer_version) AS versions "
        "FROM scores WHERE experiment_id = ? GROUP BY scorer ORDER BY scorer",
        [experiment],
    )
    whole = live(store, experiment)
    reported = [
        {
            **{key: s[key] for key in ("scorer", "scored", "pass_rate")},
            "versions": sorted(v["version"] for v in s["versions"]),
        }
        for s in whole["scorers"]
    ]
    assert reported == counted and all("strict" not in s["versions"] for s in counted)
    for bucket_trials in (1, 7, 45):
        monkeypatch.setattr("agenteval.store._snapshots.BUCKET_TRIALS", bucket_trials)
        assert live(store, experiment) == whole
    save_figures(store, experiment)
    assert build_report(store, experiment).to_dict() == whole


def test_saving_figures_finds_each_buckets_current_trials_once(tmp_path, monkeypatch):
    """Judging a bucket's trials and counting its scores both need the bucket's current trials: one statement finds
    them. (Found twice, once for each, saving the figures of a million trials took a tenth longer and more memory.)"""
    store = Store(tmp_path / "store")
    experiment = evaluate("mock", "arithmetic", cases=30, attempts=3, store=store, progress="none").id
    shutil.rmtree(store.root / SNAPSHOTS)
    monkeypatch.setattr("agenteval.store._snapshots.BUCKET_TRIALS", 40)  # 90 trials: 3 buckets
    con = store.connect()
    con.execute("CALL enable_logging('FileSystem', level = 'trace', storage = 'memory')")
    with judged_connection(store, experiment, save=True, con=con):
        pass
    trial_files = str(store.root / "trials" / f"experiment_id={experiment}")
    (statements,) = con.execute(
        "SELECT count(DISTINCT query_id) FROM duckdb_logs WHERE type = 'FileSystem' "
        "AND json_extract_string(message, '$.op') = 'OPEN' AND starts_with(json_extract_string(message, '$.path'), ?)",
        [trial_files],
    ).fetchone()
    con.close()
    assert snapshot_folder(store, experiment, fingerprint(store, experiment)).is_dir()
    # Splitting the trials into buckets counts them and finds the buckets' bounds: two statements; then one a bucket.
    assert statements == 2 + 3
