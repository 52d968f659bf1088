"""Production traces: spans written outside any experiment by real processes (the in-process exporter, as
``agenteval collect`` writes them), partitioned by day and service, read through the traces view, reported with the
trials' failure classifier, scored online into the scores table, turned into dataset cases, pruned by whole days
while a reader reads, and compacted while a writer writes. Everything is counted."""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import model_servers as ms
import pytest
from click.testing import CliRunner
from opentelemetry import trace
from waiting import wait_until

from agenteval import evaluate
from agenteval.analysis._stats import wilson95
from agenteval.analysis._traces import build_traces_report
from agenteval.cli import main
from agenteval.dataset import load_file
from agenteval.render._text_safety import markdown_cell
from agenteval.scorers import Scorer
from agenteval.scorers._judge import REFERENCE_FREE_VERSION
from agenteval.scorers._traces import TracePolicy, TraceScorer, score_traces, trace_sampled
from agenteval.store import Store, compact
from agenteval.store._prune import prune, prunes_left

AGENT = str(Path(__file__).with_name("production_agent.py"))


class DaysRun:
    """The UTC days a test has run on so far: one, or two when it runs across midnight (a day partition is the
    span's own day, so a module-level "today" taken at collection failed every test that ran past midnight)."""

    def __init__(self) -> None:
        self.first = datetime.datetime.now(datetime.UTC).date()

    def partitions(self, service: str) -> set[str]:
        last = datetime.datetime.now(datetime.UTC).date()
        days = [self.first + datetime.timedelta(days=n) for n in range((last - self.first).days + 1)]
        return {f"date={day}/service={service}" for day in days}


@pytest.fixture
def days_run() -> DaysRun:
    return DaysRun()


EXPECTED_FAILURES = {"tool_error": 1, "max_steps_exceeded": 1, "llm_error": 1, "empty_output": 1}
"""Per 7 traces of production_agent.py's scenarios: ok, handled, tool_error, max_steps, unreachable, empty, ok."""


def produce(store: Path, service: str, mode: str, count: int, *extra: str) -> tuple[int, int]:
    """Run the production agent in a process of its own; the traces and spans it wrote."""
    done = subprocess.run(
        [sys.executable, AGENT, str(store), service, mode, str(count), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    _, traces, spans = done.stdout.strip().splitlines()[-1].split()
    return int(traces), int(spans)


def cli(store: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, [*args, "--store", str(store)])
    return result.exit_code, result.output


def count(store: Path, sql: str) -> int:
    return Store(store).rows(sql)[0]["n"]


@pytest.fixture
def production(tmp_path, days_run) -> Path:
    """A store with 14 traces of service shop and 7 of service billing, all of the test's day(s)."""
    store = tmp_path / "store"
    produce(store, "shop", "agent", 14)
    produce(store, "billing", "agent", 7)
    return store


def test_production_spans_partition_by_day_and_service_and_every_span_is_read(tmp_path, days_run):
    store = tmp_path / "store"
    written = [produce(store, service, "agent", 7) for service in ("shop", "billing / eu")]
    folders = {str(p.parent.relative_to(store / "spans")) for p in (store / "spans").rglob("part-*.parquet")}
    shop, billing = days_run.partitions("shop"), days_run.partitions("billing%20%2F%20eu")  # one safe folder
    assert folders <= shop | billing and folders & shop and folders & billing
    assert count(store, "SELECT count(*) AS n FROM spans") == sum(spans for _, spans in written)
    assert count(store, "SELECT count(*) AS n FROM traces") == sum(traces for traces, _ in written) == 14
    services = Store(store).rows("SELECT service, count(*) AS n FROM traces GROUP BY service ORDER BY service")
    assert [(r["service"], r["n"]) for r in services] == [("billing / eu", 7), ("shop", 7)]


def test_stores_written_the_old_way_still_read(tmp_path):
    """Before services had folders, production spans went straight under date=YYYY-MM-DD/."""
    store = tmp_path / "store"
    _, spans = produce(store, "shop", "agent", 7)
    (published,) = (store / "spans").rglob("part-*.parquet")
    day = published.parent.parent
    shutil.move(published, day / published.name)
    published.parent.rmdir()
    assert count(store, "SELECT count(*) AS n FROM spans") == spans
    assert count(store, "SELECT count(*) AS n FROM traces WHERE service = 'shop'") == 7
    produce(store, "shop", "agent", 7)  # new spans go into the service's folder beside the old files
    assert count(store, "SELECT count(*) AS n FROM traces") == 14
    assert compact(Store(store)).rows >= 0  # a day folder with files beside sub-folders is left as it is
    assert count(store, "SELECT count(*) AS n FROM spans") == 2 * spans


def test_the_traces_view_gives_one_row_per_trace_with_its_figures(production):
    rows = Store(production).rows("SELECT * FROM traces WHERE service = 'shop' ORDER BY started_at")
    assert len(rows) == 14
    ok, handled, tool_error, max_steps, unreachable, empty = rows[:6]
    assert ok["root_name"] == "invoke_agent assistant" and ok["operation"] == "invoke_agent"
    assert (ok["input"], ok["output"], ok["status"]) == ("weather question 0", "It is sunny in Paris.", "UNSET")
    assert (ok["model_calls"], ok["input_tokens"], ok["output_tokens"], ok["model"]) == (1, 100, 20, "gpt-4o-mini")
    assert ok["cost_usd"] == pytest.approx((100 * 0.15 + 20 * 0.6) / 1e6)  # the shipped price of gpt-4o-mini
    assert (ok["tool_calls"], ok["tool_errors"], ok["tools"], ok["spans"]) == (1, 0, ["lookup"], 3)
    assert handled["tool_errors"] == 1 and handled["status"] == "UNSET" and handled["raised_in"] is None
    assert (tool_error["status"], tool_error["error_type"], tool_error["raised_in"]) == (
        "ERROR",
        "KeyError",
        "execute_tool",
    )
    assert max_steps["error_type"] == "__main__.MaxStepsExceeded" and max_steps["raised_in"] is None
    assert unreachable["raised_in"] == "chat" and unreachable["model_calls"] == 1
    assert empty["output"] == "" and empty["duration_ms"] > 0


def test_report_on_traces_counts_failures_by_the_trials_classifier(production):
    report = build_traces_report(Store(production))
    assert report.calls == 21
    assert report.failures_by_type == {kind: 3 * n for kind, n in EXPECTED_FAILURES.items()}
    assert (report.failures.failed, report.failures.infrastructure) == (12, 3)  # the unreachable API is infrastructure
    low, high = report.failures.ci95
    assert low < 12 / 21 < high
    assert {(s.service, s.calls, s.failed) for s in report.services} == {("shop", 14, 8), ("billing", 7, 4)}
    (model,) = report.models
    assert (model.model, model.model_calls, model.input_tokens) == ("gpt-4o-mini", 21, 1800)  # 3 raised: no usage
    assert model.cost_usd == pytest.approx(report.cost_usd) and report.cost_usd > 0
    (lookup,) = report.tools
    assert (lookup.tool, lookup.calls, lookup.errors) == ("lookup", 12, 6)
    assert report.latency.p50_ms <= report.latency.p95_ms <= report.latency.p99_ms
    assert len(report.latency.sample_ms) == 21
    only_billing = build_traces_report(Store(production), service="billing")
    assert only_billing.calls == 7 and only_billing.failures.failed == 4
    later = build_traces_report(Store(production), since=datetime.datetime.now(datetime.UTC))
    assert later.calls == 0 and later.failures.ci95 is None


def test_a_trace_whose_answer_a_scorer_could_not_judge_fails_as_a_scorer_error_as_a_trial_does(production):
    """An evaluation's trial whose answer a pass/fail scorer could not judge is a scorer_error failure,
    infrastructure; the traces report showed the scorer's errors only, and counted such a trace as fine."""
    store = Store(production)
    before = build_traces_report(store)

    def judge_down(case, features):
        raise ConnectionError("the judge's API is down")

    scorers = [
        Scorer("judge", fn=judge_down),
        Scorer("length", fn=lambda case, features: True),
        Scorer("style", fn=judge_down, continuous=True),  # continuous scores are reported beside, never folded in
    ]
    result = score_traces(store, scorers=scorers)
    report = build_traces_report(store)
    answered = before.calls - before.failures.failed  # the traces that gave an answer: each was scored
    assert answered > 0 and result.sampled - result.failed >= answered
    assert report.failures.failed == before.failures.failed + answered == report.calls
    assert report.failures.infrastructure == before.failures.infrastructure + answered
    assert report.failures_by_type == {**before.failures_by_type, "scorer_error": answered}
    assert report.failures.rate == 1.0 and report.failures.ci95 == wilson95(report.calls, report.calls)
    assert sum(s.failed for s in report.services) == report.calls
    unjudged = [f for f in report.latest_failures if f.failure_type == "scorer_error"]
    assert unjudged and all(f.infrastructure for f in unjudged)
    # The message a trial gets, from the same SQL.
    assert unjudged[0].message == "scorer judge could not judge the answer: ConnectionError: the judge's API is down"
    assert {s.scorer: s.errors for s in report.scorers}["judge"] == result.sampled - result.failed
    code, text = cli(production, "report", "--traces", "--format", "markdown")
    assert code == 0 and f"| {markdown_cell('  scorer_error')} | {answered} |" in text


def test_report_traces_command_formats(production, tmp_path):
    code, text = cli(production, "report", "--traces", "--format", "json", "--service", "shop", "--since", "1d")
    assert code == 0
    data = json.loads(text)
    assert data["calls"] == 14 and data["failures_by_type"]["tool_error"] == 2
    page = tmp_path / "traces.html"
    code, _ = cli(production, "report", "--traces", "--format", "html", "-o", str(page))
    html = page.read_text()
    assert code == 0 and html.startswith("<!doctype html>") and "<svg" in html and "<script" not in html
    assert "Failures by type" in html and "tool_error" in html
    code, text = cli(production, "report", "--traces", "--format", "text")
    assert code == 0 and "Production traces: all services" in text
    code, text = cli(production, "report", "--traces", "--since", "last tuesday")
    assert code == 2 and "--since 'last tuesday'" in text
    code, text = cli(production, "report", "--since", "1d")
    assert code == 2 and "go with --traces" in text


def timestamps(value: object, key: str = "") -> list[tuple[str, str]]:
    """Every (key, value) of a report's JSON whose key names a time: ``since`` and the ``*_at`` fields."""
    if isinstance(value, dict):
        return [found for k, v in value.items() for found in timestamps(v, k)]
    if isinstance(value, list):
        return [found for v in value for found in timestamps(v, key)]
    return [(key, value)] if value is not None and (key == "since" or key.endswith("_at")) else []


def test_report_traces_gives_every_time_in_utc_whatever_the_machines_zone(production):
    """In a zone other than UTC, the JSON gave ``since`` in UTC and every trace's time in the local zone."""
    local = {**os.environ, "TZ": "America/New_York"}

    def report(*args: str) -> str:
        command = [sys.executable, "-m", "agenteval.cli", "report", "--traces", "--store", str(production), *args]
        done = subprocess.run(command, capture_output=True, text=True, env=local, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    data = json.loads(report("--format", "json", "--since", "1d"))
    found = timestamps(data)
    assert {key for key, _ in found} == {"since", "first_started_at", "last_started_at", "started_at"}
    for key, text in found:
        when = datetime.datetime.fromisoformat(text)
        assert "T" in text and when.utcoffset() == datetime.timedelta(0) and text.endswith("+00:00"), (key, text)
    first = datetime.datetime.fromisoformat(data["window"]["first_started_at"])
    latest = datetime.datetime.fromisoformat(data["latest_failures"][0]["started_at"])
    markdown = report("--format", "markdown")
    assert f"{first:%Y-%m-%d %H:%M:%S} UTC" in markdown and f"{latest:%Y-%m-%d %H:%M:%S} UTC" in markdown


def test_the_sql_command_reads_the_traces_views(production):
    code, text = cli(production, "sql", "SELECT count(*) AS n FROM traces WHERE status = 'ERROR'", "--format", "json")
    assert code == 0 and json.loads(text) == [{"n": 9}]


def test_online_evaluation_scores_traces_into_the_scores_table(production, days_run):
    store = Store(production)
    experiment = evaluate("mock", "arithmetic", cases=3, attempts=1, store=str(production), progress="none")
    before = count(production, "SELECT count(*) AS n FROM score_history WHERE experiment_id IS NOT NULL")
    result = score_traces(store, policy=TracePolicy(max_tool_calls=0, must_not_contain=("sunny",)))
    assert (result.traces, result.sampled, result.failed) == (21, 21, 9)  # failed traces are not scored, as trials
    assert result.scorers == ["tool_errors", "step_efficiency", "must_not_contain"]
    stored = count(production, "SELECT count(*) AS n FROM score_history WHERE experiment_id IS NULL")
    assert stored == result.scores == 12 * 3  # nothing dropped on the way to the store
    assert count(production, "SELECT count(*) AS n FROM score_history WHERE experiment_id IS NOT NULL") == before
    folders = {p.parent.relative_to(production / "scores").as_posix() for p in (production / "scores").rglob("part-*")}
    assert folders & days_run.partitions("shop") and folders & days_run.partitions("billing")
    scores = {
        (r["trace_id"], r["scorer"]): r
        for r in store.rows("SELECT t.input, s.* FROM trace_scores s JOIN traces t USING (trace_id)")
    }
    by_input = {r["input"]: r for r in store.rows("SELECT trace_id, input FROM traces")}
    handled, tool_error = by_input["weather question 1"]["trace_id"], by_input["weather question 2"]["trace_id"]
    assert scores[handled, "tool_errors"]["passed"] is True  # a tool failed and the reply says so
    assert (tool_error, "tool_errors") not in scores  # it failed: a tool_error in the report
    ok = by_input["weather question 0"]["trace_id"]
    assert scores[ok, "must_not_contain"]["passed"] is False and "sunny" in scores[ok, "must_not_contain"]["reason"]
    assert scores[ok, "step_efficiency"]["value"] == 0.0
    again = score_traces(store, scorers=["tool_errors"])  # a second pass replaces what it re-ran
    assert again.scores == 12
    assert count(production, "SELECT count(*) AS n FROM trace_scores") == 12 * 3
    assert count(production, "SELECT count(*) AS n FROM scores WHERE experiment_id IS NULL") == 12 * 3
    assert count(production, "SELECT count(*) AS n FROM score_history WHERE experiment_id IS NULL") == 12 * 4
    report = build_traces_report(store)
    assert {s.scorer: s.scored for s in report.scorers} == {
        "must_not_contain": 12,
        "step_efficiency": 12,
        "tool_errors": 12,
    }
    # The experiment's own report and trials are untouched by the traces' scores.
    assert (
        count(production, f"SELECT count(*) AS n FROM trials WHERE experiment_id = '{experiment.experiment_id}'") == 3
    )


def test_rows_without_an_experiment_are_refused_by_the_experiment_writer_never_dropped(tmp_path):
    row = {"trial_id": "t", "scorer": "s", "scorer_version": "1", "pass_id": "p", "scored_at": 1}
    with pytest.raises(ValueError, match="1 scores rows have no experiment_id"):
        Store(tmp_path / "store").write("scores", [{**row, "experiment_id": None}, {**row, "experiment_id": "e"}])
    assert count(tmp_path / "store", "SELECT count(*) AS n FROM score_history") == 0


def test_the_collectors_hook_scores_a_sample_of_arriving_traces(production):
    ids = [r["trace_id"] for r in Store(production).rows("SELECT trace_id FROM traces")]
    hook = TraceScorer(Store(production), ["tool_errors"], sample=0.5)
    result = hook.score(ids[:10])
    result_rest = hook.score(ids[10:])
    wanted = [t for t in ids if trace_sampled(t, 0.5)]
    assert result.sampled + result_rest.sampled == len(wanted)
    scored = len(wanted) - result.failed - result_rest.failed
    assert count(production, "SELECT count(*) AS n FROM trace_scores") == scored == result.scores + result_rest.scores
    assert set(t for t in ids if trace_sampled(t, 0.2)) <= set(wanted)  # a smaller sample is a subset
    code, text = cli(production, "rescore", "--traces", "--sample", "0.5", "--scorer", "tool_errors", "--json")
    assert code == 0 and json.loads(text)["sampled"] == len(wanted) and json.loads(text)["scores"] == scored


def test_the_judge_grades_production_replies_against_a_rubric(production, model_server):
    def respond(request: ms.Request) -> ms.Reply:
        assert "<expected_answer>" not in json.dumps(request.messages)
        assert "<rubric>\\nbe polite\\n</rubric>" in json.dumps(request.messages)
        assert "There is no expected answer" in request.system_text()
        return ms.tool_call("grade", {"score": 1.0, "passed": True, "reasoning": "polite"})

    model_server.responder = respond
    result = score_traces(
        Store(production),
        scorers=["tool_errors"],
        service="billing",
        policy=TracePolicy(rubric="be polite"),
        judge="openai/judge-model",
        judge_base_url=model_server.openai_url,
    )
    assert result.scorers == ["tool_errors", "llm_judge"] and (result.sampled, result.failed) == (7, 3)
    assert len(model_server.requests) == 4
    judged = Store(production).rows(
        "SELECT count(*) FILTER (WHERE passed) AS n FROM trace_scores WHERE scorer = 'llm_judge'"
    )
    assert judged[0]["n"] == 4
    versions = Store(production).rows("SELECT DISTINCT scorer_version FROM trace_scores WHERE scorer = 'llm_judge'")
    assert versions == [{"scorer_version": f"{REFERENCE_FREE_VERSION}:openai/judge-model"}]


def test_cases_from_traces_become_valid_cases_once_filled(production, tmp_path):
    out = tmp_path / "cases.jsonl"
    code, text = cli(
        production, "cases-from-traces", "--where", "status = 'ERROR' AND service = 'shop'", "-o", str(out)
    )
    assert code == 0, text
    records = [json.loads(line) for line in out.read_text().splitlines()]
    errors = Store(production).rows("SELECT trace_id, input FROM traces WHERE status = 'ERROR' AND service = 'shop'")
    assert len(records) == len(errors) == 6
    assert {r["metadata"]["trace_id"] for r in records} == {e["trace_id"] for e in errors}
    assert all(r["expected_output"] == "" and r["input"].startswith("weather question") for r in records)
    for record in records:
        record["expected_output"] = "It is sunny in Paris."
    out.write_text("".join(json.dumps(r) + "\n" for r in records))
    done = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", "validate", str(out)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and "6 cases" in done.stdout, done.stderr
    assert len(load_file(out)) == 6


def test_cases_from_traces_runs_its_condition_read_only_and_names_the_option(production, tmp_path):
    out = tmp_path / "cases.jsonl"
    for where in ("true; DELETE FROM traces", "nonsense > 1", "trace_id IN (SELECT * FROM read_csv('/etc/passwd'))"):
        code, text = cli(production, "cases-from-traces", "--where", where, "-o", str(out))
        assert code != 0 and "--where" in text and not out.exists(), text
    out.write_text("filled by a person\n")
    code, text = cli(production, "cases-from-traces", "--where", "true", "-o", str(out))
    assert code != 0 and "--force" in text and out.read_text() == "filled by a person\n"
    code, _ = cli(production, "cases-from-traces", "--where", "true", "-o", str(out), "--force")
    assert code == 0 and len(out.read_text().splitlines()) == 21
    # A condition that gives every trace twice wrote two cases of each id, which validate refused.
    columns = "trace_id, service, started_at, user_messages, input, output, status, error_type"
    twice = f"true) UNION ALL SELECT {columns} FROM traces WHERE (true"
    code, text = cli(production, "cases-from-traces", "--where", twice, "-o", str(out), "--force")
    assert code == 0 and len(out.read_text().splitlines()) == 21, text
    assert len(load_file(out)) == 21


def test_cases_from_traces_to_a_file_that_cannot_be_written_is_one_line_naming_it(production, tmp_path):
    out = tmp_path / "no such folder" / "cases.jsonl"
    code, text = cli(production, "cases-from-traces", "--where", "true", "-o", str(out))
    assert code == 1 and text.strip().splitlines() == [
        f"Error: -o {out}: cannot be written (No such file or directory); check that its folder exists and can "
        "be written, or choose another file"
    ], text


def test_prune_removes_whole_old_days_and_never_experiments(tmp_path):
    store = tmp_path / "store"
    old = [produce(store, "shop", "past", 20, days)[1] for days in ("40", "35")]
    _, recent = produce(store, "shop", "past", 20, "1")
    _, other = produce(store, "billing", "past", 10, "40")
    experiment = evaluate("mock", "arithmetic", cases=3, attempts=1, store=str(store), progress="none")
    experiment_spans = count(
        store, f"SELECT count(*) AS n FROM spans WHERE experiment_id = '{experiment.experiment_id}'"
    )
    score_traces(Store(store), policy=TracePolicy(max_tool_calls=3))  # the old traces' scores go with them
    assert count(store, "SELECT count(*) AS n FROM trace_scores WHERE scorer = 'step_efficiency'") == 70
    dry = prune(Store(store), datetime.timedelta(days=30), dry_run=True)
    assert dry.rows == sum(old) + other + 50 and count(store, "SELECT count(*) AS n FROM traces") == 70
    result = prune(Store(store), datetime.timedelta(days=30), service="shop")
    assert result.rows == sum(old) + 40 and result.kept_unsorted == 0
    assert count(store, "SELECT count(*) AS n FROM spans WHERE experiment_id IS NULL") == recent + other
    code, text = cli(store, "prune", "--older-than", "30d")
    assert code == 0 and f"{other + 10:,} rows" in text
    assert count(store, "SELECT count(*) AS n FROM spans WHERE experiment_id IS NULL") == recent
    assert count(store, "SELECT count(*) AS n FROM trace_scores WHERE scorer = 'step_efficiency'") == 20
    assert count(store, f"SELECT count(*) AS n FROM spans WHERE experiment_id = '{experiment.experiment_id}'") == (
        experiment_spans
    )
    assert count(store, "SELECT count(*) AS n FROM trials") == 3
    assert prunes_left(store) == [] and not (store / ".pruning").exists()
    code, text = cli(store, "prune", "--older-than", "soon")
    assert code == 2 and "--older-than" in text
    # Ages past what a date reaches were a traceback (OverflowError): nothing is that old, or none is that long.
    code, text = cli(store, "prune", "--older-than", "99999999d")
    assert code == 0 and "Traceback" not in text, text
    assert count(store, "SELECT count(*) AS n FROM spans WHERE experiment_id IS NULL") == recent
    code, text = cli(store, "prune", "--older-than", "9999999999999w")
    assert code == 2 and "'9999999999999w': longer than any date reaches" in text, text
    code, text = cli(store, "report", "--traces", "--since", "99999999d")
    assert code == 0 and "Traceback" not in text, text


def test_prune_of_a_service_the_store_does_not_hold_names_the_option_and_the_services(tmp_path):
    """A mistyped --service removed nothing and exited 0, so the user believed the prune had run."""
    store = tmp_path / "store"
    _, old = produce(store, "shop", "past", 5, "40")
    _, recent = produce(store, "billing", "past", 5, "1")
    for dry in ((), ("--dry-run",)):
        code, text = cli(store, "prune", "--older-than", "1d", "--service", "shopp", *dry)
        assert code == 2 and text.strip().splitlines() == [
            "Error: --service 'shopp': no production trace in the store has this service; it holds 'billing', 'shop'"
        ], text
    assert count(store, "SELECT count(*) AS n FROM spans") == old + recent
    code, text = cli(store, "prune", "--older-than", "30d", "--service", "billing")  # a real one, nothing old
    assert code == 0 and "nothing to remove" in text, text
    code, text = cli(store, "prune", "--older-than", "30d", "--service", "shop")
    assert code == 0 and f"{old:,} rows" in text, text
    assert count(store, "SELECT count(*) AS n FROM spans") == recent
    (published,) = (store / "spans").rglob("part-*.parquet")  # billing's, as written before services had folders
    shutil.move(published, published.parent.parent / published.name)
    published.parent.rmdir()
    code, text = cli(store, "prune", "--older-than", "30d", "--service", "billing")
    assert code == 0 and "nothing to remove" in text, text
    empty = tmp_path / "empty"
    evaluate("mock", "arithmetic", cases=1, attempts=1, store=str(empty), progress="none")  # experiments only
    code, text = cli(empty, "prune", "--older-than", "1d", "--service", "shop")
    assert code == 2 and "--service 'shop'" in text and "it holds no production traces" in text, text


READER = """
import sys, time
from pathlib import Path
from agenteval.store import Store
store, done = Store(sys.argv[1]), Path(sys.argv[2])
seen = []
print("ready", flush=True)
while not done.exists() or len(seen) < 3:
    rows = store.rows("SELECT count(*) AS n FROM spans WHERE experiment_id IS NULL AND service_name = 'shop'")
    seen.append(rows[0]["n"])
print(*seen)
"""


def test_a_reader_sees_a_day_being_pruned_file_by_file_never_a_row_twice(tmp_path):
    """Prune deletes a day's files in place, in order (no rename, so no glob beside the store ever counts them): a
    reader sees the files not deleted yet, each whole, and counts that only go down."""
    import pyarrow.parquet as pq

    store = tmp_path / "store"
    _, spans = produce(store, "shop", "past", 80, "40", "40")  # one day of 40 files
    files = sorted((store / "spans").rglob("*.parquet"))
    assert len(files) == 40
    sizes = [pq.read_metadata(f).num_rows for f in files]
    still_there = {sum(sizes[deleted:]) for deleted in range(len(sizes) + 1)}
    done = tmp_path / "done"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(store), str(done)], stdout=subprocess.PIPE, text=True, env=os.environ
    )
    assert reader.stdout.readline().strip() == "ready"
    result = prune(Store(store), datetime.timedelta(days=30))
    done.touch()
    out, _ = reader.communicate(timeout=120)
    assert result.rows == spans == sum(sizes)
    seen = [int(n) for n in out.split()]
    assert set(seen) <= still_there  # whole files, deleted in order: never part of a file, never a row twice
    assert seen == sorted(seen, reverse=True)
    assert count(store, "SELECT count(*) AS n FROM spans") == 0


def test_prune_while_a_writer_publishes_into_the_day_loses_nothing_it_did_not_count(tmp_path):
    """Late spans of an old day arriving while it is pruned: each either went with a prune, which counted it, or
    is in the store after; none is lost on the way."""
    store = tmp_path / "store"
    writer = subprocess.Popen(
        [sys.executable, AGENT, str(store), "shop", "past-stream", "600", "40"], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout.readline().strip() == "ready"
    wait_until(lambda: (store / "spans").is_dir(), "the writer's first file")
    pruned = 0
    while writer.poll() is None:
        pruned += prune(Store(store), datetime.timedelta(days=30)).rows
    out, _ = writer.communicate(timeout=120)
    _, _, spans = out.strip().splitlines()[-1].split()
    assert pruned + count(store, "SELECT count(*) AS n FROM spans") == int(spans) == 1800
    pruned += prune(Store(store), datetime.timedelta(days=30)).rows  # what arrived after the last one
    assert pruned == 1800 and count(store, "SELECT count(*) AS n FROM spans") == 0


PRUNE_REPEATEDLY = """
import os, sys, time
from pathlib import Path
day, moved, stop = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
n = 0
print("ready", flush=True)
while not stop.exists():
    try:
        os.replace(day, moved / str(n))
        n += 1
    except FileNotFoundError:
        pass
    time.sleep(0.002)  # a prune's rename, then its measuring and deleting
"""


def test_a_file_published_while_its_day_folder_is_renamed_away_lands_in_a_new_one(tmp_path):
    """What a prune does to a day (one rename out of the table, from another process) racing a writer's
    publish, 300 times: the folder can vanish between the writer creating it and moving its file in, which
    lost the file before."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from agenteval_exporters.files import publish

    root, moved, stop = tmp_path / "store", tmp_path / "moved", tmp_path / "stop"
    moved.mkdir()
    pruner = subprocess.Popen(
        [sys.executable, "-c", PRUNE_REPEATEDLY, str(root / "spans" / "date=2026-01-01"), str(moved), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert pruner.stdout.readline().strip() == "ready"
    try:
        for i in range(300):
            publish(root, "spans", "date=2026-01-01/service=shop", pa.table({"i": [i]}))
    finally:
        stop.touch()
        pruner.wait(timeout=30)
    landed = [*moved.rglob("*.parquet"), *(root / "spans").rglob("*.parquet")]
    assert sorted(pq.read_table(p)["i"][0].as_py() for p in landed) == list(range(300))


def test_compaction_merges_day_partitions_while_a_writer_appends(tmp_path, days_run):
    store = tmp_path / "store"
    writer = subprocess.Popen(
        [sys.executable, AGENT, str(store), "shop", "stream", "700"], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout.readline().strip() == "ready"
    wait_until(store.is_dir, "the writer's first file")  # compaction refuses a store folder not there yet
    compactions = []
    while writer.poll() is None:
        compactions.append(compact(Store(store), ["spans"]))
    out, _ = writer.communicate(timeout=120)
    _, traces, spans = out.strip().splitlines()[-1].split()
    final = compact(Store(store), ["spans"])
    assert count(store, "SELECT count(*) AS n FROM spans") == int(spans)
    assert count(store, "SELECT count(*) AS n FROM traces") == int(traces) == 700
    assert sum(c.files_before for c in [*compactions, final]) > 0
    merged = [p.parent.relative_to(store / "spans").as_posix() for p in (store / "spans").rglob("part-*.parquet")]
    assert len(merged) == len(set(merged)) and set(merged) <= days_run.partitions("shop")  # one file a day


def test_a_conversation_becomes_a_case_with_turns(tmp_path, spans):
    """An agent given the whole conversation: its user messages become the case's turns."""
    from agenteval_exporters import ParquetSpanExporter
    from agenteval_instrumentation import agent

    @agent
    def support(messages: list[dict[str, str]]) -> str:
        return "Your order ships on Monday."

    conversation = [
        {"role": "user", "content": "Where is my order?"},
        {"role": "assistant", "content": "Which order?"},
        {"role": "user", "content": "Number 42."},
    ]
    support(conversation)
    store = tmp_path / "store"
    exporter = ParquetSpanExporter(store)
    exporter.export(spans.get_finished_spans())  # the real spans, through the real exporter
    exporter.shutdown()
    (trace,) = Store(store).rows("SELECT user_messages, input, output FROM traces")
    assert trace == {
        "user_messages": ["Where is my order?", "Number 42."],
        "input": "Number 42.",
        "output": "Your order ships on Monday.",
    }
    out = tmp_path / "cases.jsonl"
    code, _ = cli(store, "cases-from-traces", "--where", "output LIKE '%Monday%'", "-o", str(out))
    (case,) = load_file(out)
    assert code == 0 and case.turns == ("Where is my order?", "Number 42.") and case.expected_output == ""
    assert case.metadata["observed_output"] == "Your order ships on Monday."


def test_cases_from_traces_tells_a_blank_input_from_capture_off_in_words_that_fit_the_count(tmp_path, spans):
    """A trace whose user sent only whitespace was "left out 1 traces that recorded no input (content capture off)"
    (found by a hostile check): capture was on, and turning it on is no fix for a blank message."""
    from agenteval_exporters import ParquetSpanExporter
    from agenteval_instrumentation import agent

    @agent
    def support(question: str) -> str:
        return "Your order ships on Monday."

    @agent(name="support", capture=False)
    def private(question: str) -> str:
        return "Your order ships on Monday."

    support("Where is my order?")
    support(" ")
    private("Where is my order?")
    private("And the other one?")
    store = tmp_path / "store"
    exporter = ParquetSpanExporter(store)
    exporter.export(spans.get_finished_spans())
    exporter.shutdown()
    out = tmp_path / "cases.jsonl"
    code, text = cli(store, "cases-from-traces", "--where", "true", "-o", str(out))
    assert code == 0 and text.splitlines() == [
        f"wrote 1 case from 4 matching traces to {out}; fill in each expected_output, then check the file with "
        "agenteval validate",
        "left out 2 traces that recorded no input (content capture off)",
        "left out 1 trace whose input was blank (only whitespace)",
    ], text
    code, text = cli(store, "cases-from-traces", "--where", "input = ' '", "-o", str(out), "--force")
    assert code == 1 and text.strip().splitlines() == [
        f"Error: --where \"input = ' '\": 1 trace matched, all left out: 1 trace whose input was blank (only "
        f"whitespace), so nothing was written to -o {out}; widen the condition "
        '(agenteval sql "SELECT * FROM traces" shows what there is)'
    ], text


def test_untrusted_names_are_shown_safely_in_every_format(tmp_path):
    store = tmp_path / "store"
    produce(store, "<img src=x onerror=alert(1)>\x1b[31mred", "agent", 7)
    page = tmp_path / "traces.html"
    code, _ = cli(store, "report", "--traces", "--format", "html", "-o", str(page))
    html = page.read_text()
    assert code == 0 and "<img" not in html and "&lt;img src=x" in html and "\x1b" not in html
    code, text = cli(store, "report", "--traces")
    assert code == 0 and "\x1b[31m" not in text


def test_cases_from_traces_matching_none_writes_nothing_and_says_so(production, tmp_path):
    """A condition no trace met wrote an empty file and exit 0 ("wrote 0 cases"), a file validate and run refuse;
    with --force it replaced cases a person had filled in with nothing."""
    out = tmp_path / "cases.jsonl"
    out.write_text("filled by a person\n")
    code, text = cli(production, "cases-from-traces", "--where", "service = 'nobody'", "-o", str(out), "--force")
    assert code == 1 and text.strip().splitlines() == [
        f"Error: --where \"service = 'nobody'\": no trace matches it, so nothing was written to -o {out}; widen the "
        'condition (agenteval sql "SELECT * FROM traces" shows what there is)'
    ], text
    assert out.read_text() == "filled by a person\n"


def test_rescore_traces_counts_the_traces_that_ended_in_error_in_words_that_fit_the_count(tmp_path, days_run):
    """It printed "1 sampled traces ended in error and are counted ...", and "0 sampled traces ended in error" when
    none had."""
    store = tmp_path / "store"
    produce(store, "shop", "agent", 2)  # ok, handled
    code, text = cli(store, "rescore", "--traces")
    assert code == 0 and "ended in error" not in text, text
    produce(store, "shop", "agent", 3)  # ok, handled, tool_error
    code, text = cli(store, "rescore", "--traces")
    assert code == 0 and "; 1 sampled trace ended in error and is counted by type in agenteval report" in text, text


def test_sub_millisecond_tool_calls_show_their_duration_in_every_format(tmp_path):
    """A tool call of 0.25 ms was reported as "0.2 ms", and one of 40 µs as "0.0 ms", as if it took no time. Spans
    of known durations, through the real SDK and exporter: below 1 ms a duration is shown in µs, in every format."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from agenteval_exporters import ParquetSpanExporter
    from agenteval_instrumentation import attributes as A

    store = tmp_path / "store"
    exporter = ParquetSpanExporter(store)
    provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer(__name__)
    start = time.time_ns()
    root = tracer.start_span("agent", start_time=start)
    for tool, offset, took in (
        ("lookup", 1_000_000, 250_000),
        ("ping", 2_000_000, 40_000),
        ("fetch", 3_000_000, 2_500_000),
    ):
        with trace.use_span(root):
            span = tracer.start_span(
                f"execute_tool {tool}",
                start_time=start + offset,
                attributes={A.GEN_AI_OPERATION_NAME: A.OPERATION_EXECUTE_TOOL, A.GEN_AI_TOOL_NAME: tool},
            )
        span.end(end_time=start + offset + took)
    root.end(end_time=start + 10_000_000)
    provider.shutdown()
    rows = Store(store).rows("SELECT tool_name, duration_ms FROM spans WHERE tool_name IS NOT NULL")
    durations = {row["tool_name"]: row["duration_ms"] for row in rows}
    assert durations == {"lookup": 0.25, "ping": 0.04, "fetch": 2.5}  # as the spans said, to the nanosecond
    shown = {"lookup": "250.0 µs", "ping": "40.0 µs", "fetch": "2.5 ms"}
    page = tmp_path / "traces.html"
    wide = CliRunner().invoke(main, ["report", "--traces", "--store", str(store)], env={"COLUMNS": "200"})
    reports = {
        "text": (wide.exit_code, wide.output),
        "markdown": cli(store, "report", "--traces", "--format", "markdown"),
    }
    reports["html"] = cli(store, "report", "--traces", "--format", "html", "-o", str(page))[0], page.read_text()
    for fmt, (code, report) in reports.items():
        assert code == 0, report
        rows = report.replace("<tr>", "\n<tr>").splitlines()  # a page's table rows, a terminal's or markdown's lines
        for tool, duration in shown.items():
            row = next(line for line in rows if tool in line and "execute_tool" not in line)
            assert row.count(duration) == 2, (fmt, tool, row)  # its p50 and p95
        assert not re.search(r"(?<![\d,])0\.\d ms", report), fmt
