"""Reports, comparisons and the gate, over real runs of the mock agent into a real store."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
import subprocess
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_store_writes_fail import _without_root_powers

from agenteval.analysis import NotComparable, Report, build_report, compare, gate
from agenteval.cli import main
from agenteval.render import to_json
from agenteval.render._text_safety import markdown_cell
from agenteval.run import evaluate
from agenteval.store import Store


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    store = tmp_path_factory.mktemp("runs") / "store"

    def run(**options):
        return evaluate(
            "mock",
            "arithmetic",
            cases=40,
            attempts=3,
            store=store,
            progress="none",
            agent_options={k: str(v) for k, v in options.items()},
        ).id

    return {
        "store": store,
        "good": run(wrong_rate=0.05, seed=1),
        "same": run(wrong_rate=0.05, seed=2),
        "worse": run(wrong_rate=0.35, seed=3),
        "flooded": run(wrong_rate=0.05, fail_rate=0.3, failure="quota_exhausted", seed=4),
        "small": evaluate("mock", "arithmetic", cases=5, attempts=1, store=store, progress="none").id,
    }


def test_report_figures(runs):
    report = build_report(Store(runs["store"]), runs["worse"])
    assert report.trials == 120 and report.cases == 40
    overall = report.overall
    assert overall.ci95 is not None and overall.se is not None and overall.pass_rate is not None
    low, high = overall.ci95
    assert low < overall.pass_rate < high and overall.se > 0
    ks = {k.k: k for k in overall.k}
    assert set(ks) == {1, 2, 3}
    assert ks[1].pass_at_k == pytest.approx(overall.pass_rate) == pytest.approx(ks[1].pass_hat_k)
    assert ks[3].pass_at_k >= ks[2].pass_at_k >= ks[1].pass_at_k >= ks[2].pass_hat_k >= ks[3].pass_hat_k
    assert {c.category for c in report.categories} == {"addition", "subtraction", "multiplication", "division"}
    assert sum(c.trials for c in report.categories) == 120
    outcomes = report.outcomes
    assert outcomes.passed + outcomes.wrong + outcomes.failed == 120 and outcomes.failed == 0
    assert report.flaky.count > 0
    assert {s.scorer for s in report.scorers} == {"answer_match", "tool_use"}
    latency = report.latency
    assert latency.trial_p95_ms is not None and latency.trial_p50_ms is not None
    assert latency.trial_p95_ms >= latency.trial_p50_ms > 0
    assert {s.operation for s in latency.spans} == {"chat", "execute_tool"}
    assert report.tokens[0].role == "agent" and report.cost_usd is not None and report.cost_usd > 0
    worst = report.worst_cases[0]
    assert worst.passes / worst.attempts == min(c.passes / c.attempts for c in report.worst_cases)


def test_report_json_is_the_typed_report_field_for_field(runs):
    """The JSON output is the Report's fields under the same names, nested the same way."""
    report = build_report(Store(runs["store"]), runs["flooded"])
    data = json.loads(to_json(report))
    assert data == json.loads(json.dumps(report.to_dict(), default=str))
    assert set(data) == {f.name for f in dataclasses.fields(report)}
    assert data["overall"]["ci95"] == list(report.overall.ci95 or ())
    assert data["categories"][0]["category"] == report.categories[0].category
    assert data["outcomes"]["failures_by_type"] == report.outcomes.failures_by_type
    assert data["worst_cases"][0]["case_id"] == report.worst_cases[0].case_id


def test_report_separates_failures_by_type_and_infrastructure(runs):
    outcomes = build_report(Store(runs["store"]), runs["flooded"]).outcomes
    assert outcomes.failures_by_type == {"quota_exhausted": outcomes.failed}
    assert outcomes.infrastructure_failures == outcomes.failed > 0
    assert outcomes.failed_share == pytest.approx(outcomes.failed / 120)


def test_worst_cases_say_how_each_attempt_ended_wrong_answers_and_failures_by_type_apart(runs):
    """The table said "failed" for failures only, beside a "passed" column: wrong answers were left to subtract."""
    store = Store(runs["store"])
    report = build_report(store, runs["flooded"])
    rows = store.rows(
        "SELECT case_id, count(*) FILTER (WHERE outcome = 'wrong') AS wrong, "
        "count(*) FILTER (WHERE outcome = 'failed') AS failed FROM trials WHERE experiment_id = ? GROUP BY case_id",
        [runs["flooded"]],
    )
    by_case = {row["case_id"]: row for row in rows}
    for worst in report.worst_cases:
        assert (worst.wrong, worst.failed) == (by_case[worst.case_id]["wrong"], by_case[worst.case_id]["failed"])
        assert worst.passes + worst.wrong + worst.failed == worst.attempts
        assert worst.failures_by_type == ({"quota_exhausted": worst.failed} if worst.failed else {})
    shown = [w for w in report.worst_cases if w.failed and w.wrong] or [w for w in report.worst_cases if w.failed]
    case = shown[0]
    words = f"{case.passes} of 3 passed" + (f", {case.wrong} wrong answer" if case.wrong else "")
    markdown = (
        CliRunner()
        .invoke(main, ["report", runs["flooded"], "--store", str(runs["store"]), "--format", "markdown"])
        .output
    )
    assert "| case | category | its attempts | a failure |" in markdown
    table = markdown.split("## Worst cases")[1].splitlines()
    line = next(line for line in table if line.startswith(f"| {markdown_cell(case.case_id)} |"))
    assert markdown_cell(f"{words}, {case.failed} failed (quota_exhausted)") in line


def test_categories_show_their_pass_hat_k_intervals_in_text_and_markdown(runs):
    """They were only in --format json."""
    report = build_report(Store(runs["store"]), runs["worse"])
    category = report.categories[0]
    cells = [f"{k.pass_hat_k:.1%} ({k.pass_hat_k_ci95[0] * 100:.1f}–{k.pass_hat_k_ci95[1]:.1%})" for k in category.k]
    assert len(cells) == 3
    for fmt in ("markdown", "text"):
        shown = CliRunner(env={"COLUMNS": "300"}).invoke(
            main, ["report", runs["worse"], "--store", str(runs["store"]), "--format", fmt]
        )
        assert shown.exit_code == 0 and "pass^k (95% CI) for k = 1.." in shown.output
        assert " / ".join(cells) in shown.output, fmt


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []
        self.sources: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.sources += [v for k, v in attrs if k in ("src", "href") and v]

    def handle_data(self, data):
        self.text.append(data)


def test_html_report_is_one_self_contained_page_with_plots(runs, tmp_path):
    target = tmp_path / "report.html"
    result = CliRunner().invoke(
        main, ["report", runs["flooded"], "--store", str(runs["store"]), "--format", "html", "-o", str(target)]
    )
    assert result.exit_code == 0
    page = _Page()
    page.feed(target.read_text())
    assert page.sources == []  # nothing to fetch: it opens offline
    assert "script" not in page.tags
    assert page.tags.count("svg") == 3  # categories with interval bars, latency distribution, failure types
    text = " ".join(page.text)
    assert "Pass rate" in text and "By category" in text and "Worst cases" in text and runs["flooded"] in text
    assert "quota_exhausted" in text


@pytest.mark.parametrize("args", [["--format", "html"], ["--format", "json"], ["--traces", "--format", "markdown"]])
def test_a_report_to_a_file_that_cannot_be_written_is_one_line_naming_it(runs, tmp_path, args):
    target = tmp_path / "no such folder" / "report.out"
    result = CliRunner().invoke(main, ["report", *args, "--store", str(runs["store"]), "-o", str(target)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    assert result.output.strip().splitlines() == [
        f"Error: -o {target}: cannot be written (No such file or directory); check that its folder exists and can "
        "be written, or choose another file"
    ]


@pytest.mark.parametrize("args", [["--format", "html"], ["--format", "json"], []])
def test_a_report_to_an_empty_file_name_is_refused_not_printed(runs, args):
    """``-o "$OUT"`` with the variable unset: the report went to the terminal (as markdown even for the table
    format) with exit 0, and the file the script then read was never written."""
    result = CliRunner().invoke(main, ["report", *args, "--store", str(runs["store"]), "-o", ""])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == "Error: -o is empty: give the name of a file to write"


# The command under a file-size limit far below a report's size: a write past it fails with EFBIG, as one on a full
# disk fails with ENOSPC (SIGXFSZ, which would kill the process instead, is ignored).
SMALL_FILES_ONLY = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (2_000, 2_000))
from agenteval.cli import main
sys.argv = ["agenteval", *sys.argv[1:]]
main()
"""


def test_a_report_that_fails_half_way_leaves_the_old_one_as_it_was(runs, tmp_path):
    """`report -o FILE` truncated the file, then wrote: a write that failed half way (here past a file-size
    limit, as on a full disk) left a piece of the new report where the old one had been."""
    target = tmp_path / "report.html"
    target.write_text("the report of last week")
    args = ["report", runs["flooded"], "--store", str(runs["store"]), "--format", "html", "-o", str(target)]
    done = subprocess.run([sys.executable, "-c", SMALL_FILES_ONLY, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"Error: -o {target}: cannot be written (File too large); check that its folder exists and can be "
        "written, or choose another file"
    )
    assert target.read_text() == "the report of last week"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # nothing staged left behind


def test_a_report_written_over_keeps_the_files_permissions_and_a_link_stays_a_link(runs, tmp_path):
    private, real = tmp_path / "private.md", tmp_path / "real.md"
    for path in (private, real):
        path.write_text("old")
    private.chmod(0o600)
    link = tmp_path / "link.md"
    link.symlink_to(real)
    for path in (private, link, Path(os.devnull)):
        result = CliRunner().invoke(
            main, ["report", "--store", str(runs["store"]), "--format", "markdown", "-o", str(path)]
        )
        assert result.exit_code == 0, result.output
    assert private.stat().st_mode & 0o777 == 0o600 and "Pass rate" in private.read_text()
    assert link.is_symlink() and "Pass rate" in real.read_text()
    assert Path(os.devnull).is_char_device()  # written to as a stream, not replaced


def test_a_report_into_a_pipe_is_streamed_to_its_reader(runs, tmp_path):
    fifo = tmp_path / "report.pipe"
    os.mkfifo(fifo)
    read: list[str] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_text()))
    reader.start()
    result = CliRunner().invoke(main, ["report", "--store", str(runs["store"]), "--format", "json", "-o", str(fifo)])
    reader.join()
    assert result.exit_code == 0, result.output
    assert json.loads(read[0])["experiment"]["id"] == runs["small"] and stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_read_only_report_is_not_replaced(runs, tmp_path):
    """A rename needs only the folder's permission: a report kept read-only would have been replaced."""
    target = tmp_path / "kept.md"
    target.write_text("kept")
    target.chmod(0o444)
    args = ["report", "--store", str(runs["store"]), "--format", "markdown", "-o", str(target)]
    done = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_without_root_powers,
    )
    assert done.returncode == 1 and "cannot be written (Permission denied)" in done.stderr, done.stderr
    assert target.read_text() == "kept"


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_a_report_to_dash_goes_to_standard_output(runs, tmp_path, monkeypatch, fmt):
    """`-o -` wrote a file named "-"; it is standard output, as for most commands."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["report", "--store", str(runs["store"]), "--format", fmt, "-o", "-"])
    assert result.exit_code == 0, result.output
    assert "Pass rate" in result.output and "wrote" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_untrusted_text_is_escaped_in_html_and_markdown(tmp_path):
    from agenteval.render import to_html, to_markdown

    report = build_report_stub("<script>alert(1)</script>", "a|b")
    page = to_html(report)
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "a\\|b" in to_markdown(report)


def build_report_stub(case_id: str, category: str) -> Report:
    from agenteval.analysis import (
        CaseOutcomes,
        CategoryPassRate,
        FlakyCases,
        Latency,
        Outcomes,
        PassRate,
        ReportedExperiment,
    )

    return Report(
        experiment=ReportedExperiment(
            id="e1",
            name=None,
            dataset="d",
            dataset_hash="h",
            agent="a",
            version="v",
            status="completed",
            error=None,
            started_at=0,
            ended_at=0,
            environment={"python": "3", "platform": "p", "git": None},
        ),
        trials=1,
        cases=1,
        overall=PassRate(pass_rate=0.0, se=None, ci95=None, k=[]),
        categories=[CategoryPassRate(category=category, cases=1, trials=1, pass_rate=0.0, se=None, ci95=None, k=[])],
        scorers=[],
        outcomes=Outcomes(
            passed=0,
            wrong=1,
            failed=0,
            infrastructure_failures=0,
            wrong_share=1.0,
            failed_share=0.0,
            failures_by_type={},
        ),
        flaky=FlakyCases(count=0, cases=[]),
        latency=Latency(trial_p50_ms=1.0, trial_p95_ms=1.0, trial_sample_ms=[1.0], spans=[]),
        tokens=[],
        cost_usd=None,
        cost_usd_all_tries=None,
        worst_cases=[CaseOutcomes(case_id=case_id, category=category, passes=0, attempts=1, failed=0, a_failure=None)],
    )


def test_report_formats_from_the_command_line(runs):
    runner = CliRunner()
    as_json = json.loads(
        runner.invoke(main, ["report", runs["good"], "--store", str(runs["store"]), "--format", "json"]).output
    )
    assert as_json["experiment"]["id"] == runs["good"]
    markdown = runner.invoke(main, ["report", runs["good"], "--store", str(runs["store"]), "--format", "markdown"])
    assert "## By category" in markdown.output and "| addition |" in markdown.output
    table = runner.invoke(main, ["report", "--store", str(runs["store"])])  # the newest experiment
    assert table.exit_code == 0 and runs["small"] in table.output


def test_compare_pairs_by_case(runs):
    result = compare(Store(runs["store"]), runs["good"], runs["worse"])
    overall = result.overall
    assert overall.cases == 40 and overall.difference < 0
    low, high = overall.interval()
    assert high < 0  # a real drop
    assert result.newly_failing and not result.newly_passing
    assert set(result.categories) == {"addition", "subtraction", "multiplication", "division"}
    assert result.changes["option agent_options"][0]["wrong_rate"] == "0.05"
    assert "version" in result.changes
    with pytest.raises(NotComparable, match="share 5 case"):
        compare(Store(runs["store"]), runs["good"], runs["small"])


def test_compare_says_how_many_infrastructure_failures_each_run_had(runs):
    """The gate refuses past --max-infra; compare said nothing, so a drop a rate-limited API caused read as the
    agent's. It warns in every output, with the counts the gate judges by (the runs' figures)."""
    store = str(runs["store"])
    comparison = compare(Store(store), runs["good"], runs["flooded"])
    infra = comparison.figures["candidate"]["infrastructure_failures"]
    assert infra > 0 and comparison.figures["baseline"]["infrastructure_failures"] == 0
    (warning,) = [w for w in comparison.warnings if w.kind == "infrastructure_failures"]
    expected = (
        f"the baseline had no infrastructure failures in 120 trials and the candidate had {infra} infrastructure "
        f"failures of 120 trials ({infra / 120:.1%}: quota_exhausted {infra})"
    )
    assert warning.message.startswith(expected) and "the difference may reflect them" in warning.message
    assert f"agenteval run --resume {runs['flooded']} --retry-failed infra" in warning.message
    table = CliRunner(env={"COLUMNS": "400"}).invoke(main, ["compare", runs["good"], runs["flooded"], "--store", store])
    assert table.exit_code == 0 and f"warning: {expected}" in " ".join(table.output.split())
    as_json = CliRunner().invoke(main, ["compare", runs["good"], runs["flooded"], "--store", store, "--json"])
    payload = json.loads(as_json.stdout)
    assert {"kind": "infrastructure_failures", "message": warning.message} in payload["warnings"]
    assert f"warning: {expected}" in as_json.stderr
    assert payload["figures"]["candidate"]["infrastructure_by_type"] == {"quota_exhausted": infra}
    # Under the gate's limit it judges, and its decision (and GitHub step summary) carries the warning: here a
    # refusal, as the drop would be none had the quota failures passed.
    lenient = gate(Store(store), runs["good"], runs["flooded"], max_infra=0.9)
    assert lenient.exit_code == 3 and f"warning: {warning.message}" in lenient.reasons
    assert "infrastructure failure(s) passed" in lenient.reasons[1]
    assert warning.message in lenient.markdown(runs["good"], runs["flooded"]).replace("\\", "")
    assert not [w for w in compare(Store(store), runs["good"], runs["same"]).warnings if w.kind == warning.kind]


def test_gate_exit_codes(runs, tmp_path, monkeypatch):
    store = Store(runs["store"])
    regression = gate(store, runs["good"], runs["worse"])
    assert regression.exit_code == 1 and "significant" in " ".join(regression.reasons)
    fine = gate(store, runs["good"], runs["same"])
    assert fine.exit_code == 0 and "80% power" in " ".join(fine.reasons)
    flooded = gate(store, runs["good"], runs["flooded"])
    assert flooded.exit_code == 3
    # With the store, not the default one: the command printed without it looked in $AGENTEVAL_STORE.
    remedy = f"agenteval run --resume {runs['flooded']} --retry-failed infra --store {runs['store']}"
    assert remedy in " ".join(flooded.reasons)
    assert gate(store, runs["good"], runs["small"]).exit_code == 3
    lenient = gate(store, runs["good"], runs["worse"], max_drop=0.5)
    assert lenient.exit_code == 0  # the drop is real but within the allowed margin


def test_gate_command_and_github_step_summary(runs, tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    runner = CliRunner()
    result = runner.invoke(
        main, ["gate", "--baseline", runs["good"], "--candidate", runs["worse"], "--store", str(runs["store"])]
    )
    assert result.exit_code == 1 and "gate: regression (exit 1)" in result.output
    assert summary.read_text().startswith("### agenteval gate: regression")
    refused = runner.invoke(
        main, ["gate", "--baseline", runs["good"], "--candidate", runs["flooded"], "--store", str(runs["store"])]
    )
    assert refused.exit_code == 3
    usage = runner.invoke(main, ["gate", "--baseline", runs["good"]])
    assert usage.exit_code == 2  # click's usage error stays 2


@pytest.mark.parametrize("option", ["--max-drop", "--max-infra", "--alpha"])
def test_gate_refuses_nan_for_its_limits_instead_of_letting_a_regression_through(runs, option):
    """NaN compares false with every bound, so click's ranges let it in and every check it took part in
    passed: a significant drop, or a flood of infrastructure failures, was 'no regression (exit 0)'."""
    for candidate in ("worse", "flooded"):
        args = ["gate", "--baseline", runs["good"], "--candidate", runs[candidate], "--store", str(runs["store"])]
        result = CliRunner().invoke(main, [*args, option, "nan"])
        assert result.exit_code == 2 and f"Invalid value for '{option}'" in result.output, result.output


def test_a_max_drop_of_minus_zero_reads_as_0(runs):
    args = ["gate", "--baseline", runs["worse"], "--candidate", runs["good"], "--store", str(runs["store"])]
    result = CliRunner().invoke(main, [*args, "--max-drop", "-0"])
    assert result.exit_code == 0 and "the drop is within 0%" in result.output, result.output
    assert "-0%" not in result.output


@pytest.mark.parametrize(
    ("alpha", "interval"), [("1e-6", "99.9998% CI"), ("2.87e-7", "99.99994% CI"), ("1e-300", "level 1 - 2e-300 CI")]
)
def test_a_tiny_alpha_gets_figures_a_pass_rate_can_have(runs, alpha, interval):
    """--alpha 1e-300 printed a '100% CI' and a smallest detectable drop of 1638174160.3%; 1e-6 a '100% CI' too,
    a certainty no interval has."""
    args = ["gate", "--baseline", runs["good"], "--candidate", runs["worse"], "--store", str(runs["store"])]
    result = CliRunner().invoke(main, [*args, "--alpha", alpha])
    line = " ".join(result.output.split())
    assert f"({interval} " in line and "100% CI" not in line, line
    assert max(float(figure) for figure in re.findall(r"(\d+(?:\.\d+)?)%", line)) <= 100, line
    if alpha == "1e-300":
        assert result.exit_code == 0 and "detects no drop a pass rate can have" in line, line
        assert "p = 0.000" not in line  # a p below 0.0005 is in exponent form, beside the alpha it is held to


def test_the_gate_from_python_refuses_limits_that_are_not_shares(runs):
    store = Store(runs["store"])
    for limits in ({"max_drop": float("nan")}, {"alpha": float("nan")}, {"max_infra": float("nan")}, {"alpha": 2.0}):
        decision = gate(store, runs["good"], runs["worse"], **limits)
        assert decision.exit_code == 3 and "each limit is a share from 0 to 1" in decision.reasons[0], limits


def test_power_refuses_nan_in_one_line():
    result = CliRunner().invoke(main, ["power", "--pass-rate", "0.85", "--drop", "nan"])
    assert result.exit_code == 2 and "Invalid value for '--drop'" in result.output, result.output


def test_power_command(runs):
    runner = CliRunner()
    result = runner.invoke(main, ["power", "--pass-rate", "0.85", "--attempts", "3", "--cases", "55", "--drop", "0.1"])
    assert result.exit_code == 0 and "Assumptions" in result.output and "cases for 80% power" in result.output
    from_run = runner.invoke(main, ["power", "--from", runs["worse"], "--store", str(runs["store"])])
    assert from_run.exit_code == 0 and "3 attempt(s) per case" in from_run.output


def test_power_from_a_run_estimates_its_spread_with_the_attempts_it_ran_whatever_attempts_are_planned(runs):
    """The cases' spread is the run's: each case's rate varies within by what the run's 3 attempts give, so planning
    other attempts (--attempts 5 or 1) must not change it. It was estimated with the planned attempts instead: from
    this run of 40 cases, 0.026 as run, 0.062 at --attempts 5 and 0.098 at 1, so the cases for a 10-point drop read
    51 at 5 attempts and 204 at 1 where the run's own spread gives 58 and 278."""
    from agenteval.analysis._compare import case_rates
    from agenteval.analysis._power import estimate_between_case_variance

    rates = [row["rate"] for row in case_rates(Store(runs["store"]), runs["worse"])]
    expected = estimate_between_case_variance(rates, 3)
    for planned in ([], ["--attempts", "5"], ["--attempts", "1"]):
        setting = ["power", "--from", runs["worse"], "--store", str(runs["store"]), "--json", *planned]
        result = CliRunner().invoke(main, setting)
        assert result.exit_code == 0, result.output
        model = json.loads(result.output)["model"]
        assert model["between_case_variance"] == pytest.approx(expected), planned
        assert model["attempts"] == (int(planned[1]) if planned else 3)


def test_power_from_a_run_of_one_attempt_per_case_takes_the_default_spread_and_says_so(tmp_path):
    """One attempt per case makes every case's rate 0 or 1, whose variance is p(1 - p) however alike the cases are:
    it tells nothing of the spread between them. It was read as all of it (every case all-or-nothing, the most the
    paired comparison can gain): 0.21 at a 70% pass rate, 75% power for a 10-point drop over 50 cases and 58 cases
    for 80%, where the default spread gives 38% and 169."""
    store = tmp_path / "store"
    run = evaluate(
        "mock",
        "arithmetic",
        cases=40,
        attempts=1,
        store=store,
        progress="none",
        agent_options={"wrong_rate": "0.3", "seed": "5"},
    )
    result = CliRunner().invoke(main, ["power", "--from", run.id, "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    typed = json.loads(result.output)
    pass_rate = typed["model"]["pass_rate"]
    assert 0 < pass_rate < 1 and typed["model"]["attempts"] == 1
    assert typed["model"]["between_case_variance"] == pytest.approx(0.5 * pass_rate * (1 - pass_rate))
    (said,) = [line for line in typed["assumptions"] if "between-case variance" in line]
    assert f"{run.id} ran 1 attempt per case" in said and "--spread" in said, said
    given = CliRunner().invoke(main, ["power", "--from", run.id, "--spread", "0.2", "--store", str(store), "--json"])
    assert json.loads(given.output)["model"]["between_case_variance"] == pytest.approx(0.04)


def test_power_prints_the_unpaired_chance_beside_the_paired_one():
    from agenteval.analysis._power import default_model

    setting = ["power", "--pass-rate", "0.85", "--attempts", "3", "--cases", "55", "--drop", "0.1"]
    model = default_model(0.85, 3)
    paired, unpaired = model.power(55, 0.1), model.unpaired_power(55, 0.1)
    assert unpaired < paired - 0.2  # spread-out cases: two runs' own error bars see much less
    table = CliRunner().invoke(main, setting)
    assert table.exit_code == 0 and "paired (compare, gate) / unpaired" in table.output.replace("\n", " ")
    assert f"{paired:.0%} / {unpaired:.0%}" in table.output
    needed = f"{model.cases_needed(0.1)} / {model.cases_needed(0.1, paired=False)}"
    assert needed in table.output
    typed = json.loads(CliRunner().invoke(main, [*setting, "--json"]).output)
    assert typed["paired"] == [[pytest.approx(paired)]] and typed["unpaired"] == [[pytest.approx(unpaired)]]
    assert typed["cases"] == [55] and typed["drops"] == [0.1] and typed["model"]["affected"] == 1.0


def test_power_with_a_drop_concentrated_in_a_share_of_the_cases():
    from agenteval.analysis._power import default_model

    setting = ["power", "--pass-rate", "0.85", "--attempts", "3", "--cases", "55", "--drop", "0.1"]
    result = CliRunner().invoke(main, [*setting, "--affected", "0.2", "--json"])
    assert result.exit_code == 0, result.output
    typed = json.loads(result.output)
    concentrated = default_model(0.85, 3, affected=0.2)
    assert typed["paired"] == [[pytest.approx(concentrated.power(55, 0.1))]]
    assert typed["paired"][0][0] < default_model(0.85, 3).power(55, 0.1)
    assert any("falls on 20% of the cases" in line for line in typed["assumptions"])
    bad = CliRunner().invoke(main, [*setting, "--affected", "0"])
    assert bad.exit_code == 2  # out of range: click's usage error


def test_power_from_an_unknown_experiment_says_so(runs):
    result = CliRunner().invoke(main, ["power", "--from", "nope", "--store", str(runs["store"])])
    assert result.exit_code == 1 and "no experiment 'nope'" in result.output and "Traceback" not in result.output


def test_a_continuous_scorers_mean_is_the_exact_mean_of_its_scores(tmp_path):
    """Scores summed one after another lose their last bits, differently for each order the query gives them in:
    60 scores of 0.1 reported a mean of 0.09999999999999991, and a report saved and one computed could differ."""
    from agenteval.scorers import Scorer

    tenth = Scorer("tenth", continuous=True, sql="struct_pack(value := 0.1, passed := NULL, reason := NULL)")
    store = tmp_path / "store"
    run = evaluate("mock", "arithmetic", cases=20, attempts=3, store=store, scorers=[tenth], progress="none")
    for report in (
        build_report(Store(store), run.id),
        json.loads(CliRunner().invoke(main, ["report", run.id, "--store", str(store), "--format", "json"]).output),
    ):
        scorers = report["scorers"] if isinstance(report, dict) else [dataclasses.asdict(s) for s in report.scorers]
        (figures,) = [s for s in scorers if s["scorer"] == "tenth"]
        assert figures["scored"] == 60 and figures["mean"] == 0.1


def test_power_from_an_experiment_that_passed_everything_says_what_to_give(runs):
    """A baseline that passed every trial has no variance to size a drop from: the error named --pass-rate, which
    the user had not given."""
    result = CliRunner().invoke(main, ["power", "--from", runs["small"], "--store", str(runs["store"])])
    assert result.exit_code == 2 and result.output.strip().splitlines() == [
        f"Error: --from {runs['small']}: its pass rate is 100%, from which no drop can be sized; give the pass rate "
        "to plan for with --pass-rate (e.g. 0.95)"
    ], result.output
    given = CliRunner().invoke(
        main, ["power", "--from", runs["small"], "--pass-rate", "0.95", "--store", str(runs["store"])]
    )
    assert given.exit_code == 0 and "baseline pass rate 0.95" in given.output, given.output


@pytest.mark.parametrize("alpha", ["0.5", "0.7", "0.9"])
def test_an_alpha_of_a_half_or_more_is_refused(runs, alpha):
    """A one-sided test at alpha 0.5 or more rejects "no drop" for a candidate no worse than its baseline: the gate
    printed a "-80% CI" whose ends were swapped and a "smallest drop this comparison detects" below 0, and power a
    handful of cases as enough."""
    args = ["gate", "--baseline", runs["good"], "--candidate", runs["same"], "--store", str(runs["store"])]
    for command in (args, ["power", "--pass-rate", "0.85", "--cases", "55", "--drop", "0.1"]):
        result = CliRunner().invoke(main, [*command, "--alpha", alpha])
        assert result.exit_code == 2 and "Invalid value for '--alpha'" in result.output, result.output
        assert "CI" not in result.output and "cases for" not in result.output


@pytest.mark.parametrize("alpha", [0.0, 0.5, 0.7, 1.0])
def test_the_gate_from_python_refuses_an_alpha_outside_its_range_without_raising(runs, alpha):
    decision = gate(Store(runs["store"]), runs["good"], runs["worse"], alpha=alpha)
    assert decision.exit_code == 3 and "alpha" in decision.reasons[0] and "below 0.5" in decision.reasons[0]


def test_the_experiment_listing_gives_each_pass_rate_its_interval(runs):
    """The listing printed a pass rate alone (0.25 of 5 trials read like 0.25 of 120): it gives the report's
    case-clustered 95% interval beside it, in every format."""
    runner = CliRunner()
    listing = json.loads(runner.invoke(main, ["experiments", "--store", str(runs["store"]), "--format", "json"]).output)
    store = Store(runs["store"])
    for row in listing:
        report = build_report(store, row["experiment_id"])
        assert row["pass_rate"] == pytest.approx(report.overall.pass_rate, abs=5e-4)
        assert row["pass_rate_ci95"] == pytest.approx(list(report.overall.ci95), abs=5e-4), row["experiment_id"]
    table = runner.invoke(main, ["experiments", "--store", str(runs["store"]), "--format", "csv"])
    assert "pass_rate,pass_rate_ci95" in table.output.splitlines()[0]


def test_a_pass_that_could_not_have_seen_the_drop_says_so_whichever_way_the_runs_moved(runs):
    """A pass said "underpowered" only when the candidate had dropped a little: no change, or a gain, on too few
    cases read "the drop is within 2%" with nothing more, beside an interval reaching far below -2%."""
    store = Store(runs["store"])
    decision = gate(store, runs["worse"], runs["good"])  # a gain: the drop is negative
    assert decision.exit_code == 0
    assert decision.comparison is not None and decision.comparison.overall.difference > 0
    assert decision.comparison.overall.minimum_detectable_drop() > 0.02
    assert "could not reliably see drops under" in decision.reasons[1] and "(underpowered)" in decision.reasons[1]
    result = CliRunner().invoke(
        main, ["gate", "--baseline", runs["worse"], "--candidate", runs["good"], "--store", str(runs["store"])]
    )
    assert result.exit_code == 0 and "(underpowered)" in result.output
    tolerant = gate(store, runs["worse"], runs["good"], max_drop=0.5)  # a drop of half could not be missed here
    assert tolerant.exit_code == 0 and "underpowered" not in " ".join(tolerant.reasons)


def test_trials_no_scorer_judged_are_counted_and_warned_of_in_the_report_and_compare(tmp_path):
    """Cases with no expected answer, criteria or rubric pass whenever their trials do not fail: 12 of 24 such cases
    lifted a pass rate of wrong-half answers to 81.9% with nothing in the report or the comparison saying so."""
    from agenteval.dataset import Case, Dataset
    from agenteval.render._console import run_summary

    cases = [Case(id=f"open-{n}", input=f"What is {n} + 0?", expected_output="", category="open") for n in range(12)]
    cases += [Case(id=f"sum-{n}", input=f"What is {n} + 0?", expected_output=str(n), category="sum") for n in range(12)]
    dataset = Dataset("half-judged", "half-judged(test)", "hash-half", cases)
    store = tmp_path / "store"
    runs = [
        evaluate(agent, dataset, attempts=3, store=store, progress="none")
        for agent in (lambda question: "no idea", lambda question: question.split()[2])
    ]
    ids = [run.id for run in runs]
    # The end of the run says it too, under its pass rate.
    assert runs[0].summary.unscored == 36
    assert "warning: 36 passed with no pass/fail scorer to judge them" in run_summary(runs[0].summary)
    report = build_report(Store(store), ids[0])
    # By hand: the 36 trials of the open cases passed, those of the sum cases (a wrong answer each) did not.
    assert (report.outcomes.passed, report.outcomes.wrong, report.outcomes.unscored) == (36, 36, 36)
    assert any(
        "36 of the 72 trials (12 case(s)) count as passed with no pass/fail scorer" in w for w in report.warnings
    )
    assert build_report(Store(store), ids[1]).outcomes.unscored == 36
    comparison = compare(Store(store), ids[0], ids[1])
    assert comparison.overall.difference == pytest.approx(0.5)
    (warning,) = [w for w in comparison.warnings if w.kind == "unscored_trials"]
    assert "36 of the baseline's 72 trials and 36 of the candidate's 72 trials" in warning.message
    assert comparison.figures["baseline"]["unscored_trials"] == 36
    shown = CliRunner().invoke(main, ["report", ids[0], "--store", str(store)], env={"COLUMNS": "300"}).output
    assert "no pass/fail scorer judging them" in shown


def test_the_rescore_said_for_a_scorer_given_to_an_earlier_rescore_asks_for_it(tmp_path):
    """A scorer given to `rescore --scorer` that could not judge is not re-run by a plain `agenteval rescore ID`
    (only the built-ins and the run's own are): the remedy said that command, which left its answers unjudged."""
    from agenteval.scorers import rescore, scorer

    @scorer
    def judge_down(case, trial):
        raise RuntimeError("the grading service is down")

    store = Store(tmp_path / "store")
    baseline, candidate = (
        evaluate("mock", "arithmetic", cases=10, attempts=1, store=store.root, progress="none").id for _ in range(2)
    )
    rescore(store, candidate, [judge_down])
    (warning,) = [w for w in compare(store, baseline, candidate).warnings if w.kind == "infrastructure_failures"]
    assert f"again with agenteval rescore {candidate}" in warning.message
    assert "--scorer MODULE:ATTR, naming judge_down as given before" in warning.message


def test_a_report_of_no_trials_gives_no_share_rather_than_none_passed(tmp_path):
    """A run that ran no trial (its one case has a simulated user, left out) showed "passed 0 · 0.0%" beside
    "wrong answers 0 · –": a run that passed nothing, where it ran nothing."""
    from agenteval.dataset import Case, Dataset
    from agenteval.render import to_markdown

    case = Case(id="s", input="Hello", expected_output="", simulated_user="a customer")
    dataset = Dataset("simulated", "simulated(test)", "hash-simulated", [case])
    store = tmp_path / "store"
    experiment = evaluate(lambda question: "hi", dataset, attempts=1, skip_simulated=True, store=store, progress="none")
    report = build_report(Store(store), experiment.id)
    assert report.trials == 0 and report.overall.pass_rate is None
    text = to_markdown(report)
    assert "| passed | 0 | – |" in text and "|   of which infrastructure | 0 | – |" in text


def test_a_pass_fail_scorer_only_one_run_had_is_warned_of(tmp_path):
    """Two identical runs, the candidate rescored with a scorer the baseline never had, read as a regression of
    40 points, and the gate said "regression" (exit 1) with no word of it. A run whose every trial failed has no
    scores to miss, and is not warned of."""
    from agenteval.scorers import rescore, scorer

    @scorer
    def strict(case, trial):
        return int(case.id[-1]) % 3 != 0  # a third of the cases fail it, whatever the answer

    store = Store(tmp_path / "store")

    def run(**options: str) -> str:
        return evaluate("mock", "arithmetic", cases=30, store=store.root, agent_options=options, progress="none").id

    baseline, candidate, failing = run(), run(), run(fail_rate="1", failure="tool_error")
    rescore(store, candidate, [strict])
    # The gate refuses it (exit 3): the scorers, not the agents, made the difference. A hostile check found it said
    # "regression", exit 1, with the warning beside; told to judge anyway, it does, and warns.
    refused = gate(store, baseline, candidate)
    assert refused.exit_code == 3 and "--allow-different-scorers" in refused.reasons[0]
    decision = gate(store, baseline, candidate, allow_different_scorers=True)
    assert decision.exit_code == 1 and decision.comparison is not None
    assert decision.comparison.overall.difference == pytest.approx(-12 / 30)  # the ids ending in 0, 3, 6 or 9
    (warning,) = [w for w in decision.comparison.warnings if w.kind == "different_scorers"]
    assert "strict judged only the candidate's answers" in warning.message
    assert any("warning: the pass/fail scorers differ" in reason for reason in decision.reasons)
    assert not [w for w in compare(store, baseline, failing).warnings if w.kind == "different_scorers"]


def test_a_scorer_of_a_case_only_one_run_ran_is_not_a_difference_of_scorers(tmp_path):
    """Two samples of one dataset: must_contain applies to one case, which only the baseline drew. On the cases both
    ran the same scorers judged, and the warning that they differ would be false."""
    from agenteval.dataset import Case, Dataset

    cases = [Case(id=f"c{n:02d}", input=f"What is {n} + 0?", expected_output=str(n)) for n in range(21)]
    cases[0] = dataclasses.replace(cases[0], must_contain=["0"])
    store = Store(tmp_path / "store")
    baseline, candidate = (
        evaluate(
            lambda question: question.split()[2],
            Dataset("s", "s(test)", "hash-s", drawn),
            store=store.root,
            progress="none",
        ).id
        for drawn in (cases[:20], cases[1:])
    )
    kinds = [w.kind for w in compare(store, baseline, candidate).warnings]
    assert kinds == ["unshared_cases"]


class _CountingRates(dict):
    """A run's per-case rates that count how often a case is looked up: the work a comparison does, counted
    rather than timed."""

    lookups = 0

    def __getitem__(self, case_id):
        self.lookups += 1
        return super().__getitem__(case_id)


def test_per_category_differences_look_each_case_up_a_bounded_number_of_times():
    """Found by a hostile check: each category scanned every shared case, so a dataset whose cases each have their
    own category cost cases squared (20,000 cases took 45 s in compare, holding a dashboard thread meanwhile). Now
    the cases are grouped by category in one pass; the figures are those of each category's cases compared alone."""
    from agenteval.analysis._compare import category_differences
    from agenteval.analysis._stats import paired_difference

    cases = 400
    shared = [f"q{i:04d}" for i in range(cases)]
    # Most cases have a category of their own; some share one, some have none ("uncategorized").
    category = {c: None if i % 10 == 0 else f"cat{i // 2 if i % 3 == 0 else i}" for i, c in enumerate(shared)}
    a = _CountingRates({c: {"category": category[c], "rate": (i % 4) / 3} for i, c in enumerate(shared)})
    b = _CountingRates({c: {"category": category[c], "rate": (i % 3) / 2} for i, c in enumerate(shared)})
    found = category_differences(a, b, shared)
    assert a.lookups <= 2 * cases and b.lookups <= cases  # the quadratic scan made 160,400 lookups of a
    names = {category[c] or "uncategorized" for c in shared}
    assert list(found) == sorted(names)
    for name in names:
        members = [c for c in shared if (category[c] or "uncategorized") == name]
        alone = paired_difference({c: a[c]["rate"] for c in members}, {c: b[c]["rate"] for c in members})
        assert found[name] == alone


class _CountingCase(dict):
    """A case's figures that count how often its category is read: the work a report does, counted rather than
    timed."""

    reads = [0]

    def __getitem__(self, key):
        if key == "category":
            self.reads[0] += 1
        return super().__getitem__(key)


def test_per_category_pass_rates_read_each_case_a_bounded_number_of_times():
    """Found by the review of the dashboard's bounds: the report scanned every case once per category (as compare
    did before c5d25c9), so a dataset whose cases each have their own category cost cases squared, 18 s of scanning
    at 20,000 cases in every report and every load of the experiment's dashboard page. Now the cases are grouped in
    one pass; each category's figures are those of its cases alone."""
    from agenteval.analysis._report import _k_rates, _rate, category_rates

    count = 400
    category = {i: f"cat{i // 2 if i % 3 == 0 else i}" for i in range(count)}
    cases = [_CountingCase(case_id=f"q{i:04d}", category=category[i], attempts=3, passes=i % 4) for i in range(count)]
    _CountingCase.reads[0] = 0
    found = category_rates(cases, 3)
    assert _CountingCase.reads[0] <= 2 * count  # the quadratic scan read 400 categories per category
    assert [c.category for c in found] == sorted(set(category.values()))
    for rate in found:
        members = [c for c in cases if dict.__getitem__(c, "category") == rate.category]
        assert rate.cases == len(members) and rate.trials == 3 * len(members)
        assert rate.pass_rate == _rate(members, _k_rates(members, 3))["pass_rate"]
