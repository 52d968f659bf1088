"""compare's latency, tokens and cost: labelled, and each per-trial mean with its paired difference and interval,
checked against the same figures worked out by hand from `agenteval sql` over the store's views. Real runs of the
mock agent through the command line, into a real store; the dashboard a real process."""

from __future__ import annotations

import html
import json
import math
import shutil

import httpx
import pytest
from click.testing import CliRunner
from dashboard_server import dashboard

from agenteval.analysis._compare_figures import FIGURES, figure_rows, number
from agenteval.cli import main

Z = 1.959964  # the normal 97.5% quantile
T19 = 2.0930241  # Student's t 97.5% quantile at 19 degrees of freedom (scipy's): the runs' 20 cases, each a cluster


def cli(*args: str) -> str:
    """What the command wrote on stdout (its warnings, on stderr, stay apart from the JSON)."""
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    store = str(tmp_path_factory.mktemp("figures") / "store")

    def run(name: str, cases: int, attempts: int, **options: object) -> str:
        agent_options = [arg for k, v in options.items() for arg in ("--agent-option", f"{k}={v}")]
        cli(
            "run",
            *("-d", "arithmetic", "-a", "mock", "--cases", str(cases), "--attempts", str(attempts)),
            *("--store", store, "--name", name, "-q", *agent_options),
        )
        query = f"SELECT experiment_id FROM experiments WHERE name = '{name}'"
        return json.loads(cli("sql", "--store", store, "--format", "json", query))[0]["experiment_id"]

    # Failing calls use no tokens and cost nothing, so the failure rate makes tokens and cost differ between cases,
    # and the jitter latency; the candidate waits 4 ms more per call and fails less often.
    return {
        "store": store,
        "baseline": run("baseline", 20, 3, latency=0.002, jitter=0.01, fail_rate=0.25, seed=1),
        "candidate": run("candidate", 20, 3, latency=0.006, jitter=0.01, fail_rate=0.05, seed=2),
        "clean": run("clean", 12, 1, wrong_rate=0.2, seed=3),
        "clean_too": run("clean_too", 12, 1, wrong_rate=0.2, seed=4),
    }


def by_hand(store: str, baseline: str, candidate: str, column: str) -> tuple[int, float, float, float]:
    """The paired difference of one per-trial mean: each case's mean over its trials, read with `agenteval sql`;
    candidate minus baseline per case; their mean, and its standard error with each case one cluster,
    sqrt(sum (d_c - mean)^2 * C / (C - 1)) / C."""
    query = f"""
        WITH per_case AS (
            SELECT experiment_id, case_id, avg({column}) AS mean FROM trials
            WHERE experiment_id IN ('{baseline}', '{candidate}') GROUP BY experiment_id, case_id)
        SELECT b.case_id, b.mean AS baseline, c.mean AS candidate
        FROM per_case b JOIN per_case c ON b.case_id = c.case_id
        WHERE b.experiment_id = '{baseline}' AND c.experiment_id = '{candidate}'"""
    rows = json.loads(cli("sql", "--store", store, "--format", "json", query))
    differences = [row["candidate"] - row["baseline"] for row in rows]
    clusters = len(differences)
    assert clusters == 20  # T19's degrees of freedom
    mean = sum(differences) / clusters
    standard_error = math.sqrt(sum((d - mean) ** 2 for d in differences) * clusters / (clusters - 1)) / clusters
    return clusters, mean, mean - T19 * standard_error, mean + T19 * standard_error


@pytest.mark.parametrize(
    ("key", "column"),
    [
        ("tokens_per_trial", "input_tokens + output_tokens"),
        ("cost_per_trial_usd", "cost_usd"),
        ("latency_mean_ms", "duration_ms"),
    ],
)
def test_each_per_trial_mean_has_the_paired_difference_and_interval_worked_out_by_hand(runs, key, column):
    store, a, b = runs["store"], runs["baseline"], runs["candidate"]
    cases, difference, low, high = by_hand(store, a, b, column)
    data = json.loads(cli("compare", a, b, "--store", store, "--json"))
    figure = data["figure_differences"][key]
    assert figure["cases"] == cases == 20
    assert figure["difference"] == pytest.approx(difference, rel=1e-9)
    assert figure["ci95"] == [pytest.approx(low, rel=1e-5), pytest.approx(high, rel=1e-5)]
    assert low < high and not figure["no_spread"]  # the runs differ from case to case: there is a spread to see
    assert data["figure_labels"][key] == {f.key: f.label for f in FIGURES}[key]
    # The raw figures stay under their keys, beside the new ones.
    assert {"latency_p50_ms", "latency_p95_ms", "tokens_per_trial", "cost_usd", "infrastructure_failures"} <= set(
        data["figures"]["baseline"]
    )


def quantile_by_hand(values: list[float], level: float) -> float:
    """DuckDB's quantile_cont: the value at position (n - 1) x level of the sorted values, interpolated."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * level
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (position - below) * (ordered[above] - ordered[below])


def quantile_interval_by_hand(durations: dict[str, list[float]], other: dict[str, list[float]], level: float):
    """The 95% interval of other's quantile minus durations' (each: case id to its trials' durations), worked out
    as docs/reports.md says: Hall and Sheather's bandwidth h; the sparsity (Q(level + h) - Q(level - h)) / 2h; each
    case's term (its trials at or below the quantile - F x its trials) x sparsity / all trials; the candidate's
    term minus the baseline's per case; SE = sqrt(sum of squares x C / (C - 1)); t with C - 1 degrees of freedom."""
    from statistics import NormalDist

    normal = NormalDist()

    def terms(run: dict[str, list[float]]) -> tuple[float, dict[str, float]]:
        values = [d for case in run.values() for d in case]
        n, x = len(values), normal.inv_cdf(level)
        h = n ** (-1 / 3) * Z ** (2 / 3) * (1.5 * normal.pdf(x) ** 2 / (2 * x * x + 1)) ** (1 / 3)
        low, high = max(0.0, level - h), min(1.0, level + h)
        sparsity = (quantile_by_hand(values, high) - quantile_by_hand(values, low)) / (high - low)
        q = quantile_by_hand(values, level)
        share = sum(d <= q for d in values) / n
        return q, {c: (sum(d <= q for d in ds) - share * len(ds)) * sparsity / n for c, ds in run.items()}

    (qa, ta), (qb, tb) = terms(durations), terms(other)
    cases = set(ta) | set(tb)
    spread = sum((tb.get(c, 0.0) - ta.get(c, 0.0)) ** 2 for c in cases)
    se = math.sqrt(spread * len(cases) / (len(cases) - 1))
    assert len(cases) == 20  # T19's degrees of freedom
    return qb - qa, (qb - qa - T19 * se, qb - qa + T19 * se)


@pytest.mark.parametrize(("key", "level"), [("latency_p50_ms", 0.5), ("latency_p95_ms", 0.95)])
def test_the_p50_and_p95_differences_have_an_interval_clustered_by_case_worked_out_by_hand(runs, key, level):
    """They were "as measured", with no interval, beside means that had one."""
    store, a, b = runs["store"], runs["baseline"], runs["candidate"]
    query = f"SELECT experiment_id, case_id, duration_ms FROM trials WHERE experiment_id IN ('{a}', '{b}')"
    durations: dict[str, dict[str, list[float]]] = {a: {}, b: {}}
    for row in json.loads(cli("sql", "--store", store, "--format", "json", query)):
        durations[row["experiment_id"]].setdefault(row["case_id"], []).append(row["duration_ms"])
    difference, (low, high) = quantile_interval_by_hand(durations[a], durations[b], level)
    data = json.loads(cli("compare", a, b, "--store", store, "--json"))
    figure = data["figure_differences"][key]
    assert figure["difference"] == pytest.approx(difference, rel=1e-9)
    assert figure["difference"] == data["figures"]["candidate"][key] - data["figures"]["baseline"][key]
    assert figure["ci95"] == [pytest.approx(low, rel=1e-5), pytest.approx(high, rel=1e-5)]
    assert low < difference < high and figure["cases"] == 20 and not figure["no_spread"]
    # Nothing random: the same bytes from the figures the runs saved and from figures computed afresh.
    saved = cli("compare", a, b, "--store", store, "--json")
    shutil.rmtree(f"{store}/.snapshots", ignore_errors=True)
    assert cli("compare", a, b, "--store", store, "--json") == saved


def test_the_terminal_table_labels_each_figure_and_gives_the_difference_column(runs):
    store, a, b = runs["store"], runs["baseline"], runs["candidate"]
    data = json.loads(cli("compare", a, b, "--store", store, "--json"))
    wide = CliRunner(env={"COLUMNS": "250"}).invoke(main, ["compare", a, b, "--store", store])
    shown = " ".join(wide.output.split())
    assert "difference (95% CI)" in shown
    for label, baseline, candidate, difference in figure_rows(data):
        assert f"{label} │ {baseline} │ {candidate} │ {difference} │" in shown
    _, difference, low, high = by_hand(store, a, b, "input_tokens + output_tokens")
    assert f"tokens per trial │ {number(data['figures']['baseline']['tokens_per_trial'])} │" in shown
    assert f"│ {number(difference, '+')} ({number(low, '+')} to {number(high, '+')}) │" in shown
    assert "cost, all trials ($) │" in shown and "│ – │" in shown  # a total: no difference drawn
    p95 = data["figure_differences"]["latency_p95_ms"]
    assert f"latency p95 (ms) │ {number(p95['baseline'])} │ {number(p95['candidate'])} │ " in shown
    for raw in ("latency_p50_ms", "tokens_per_trial", "cost_usd", "infrastructure_failures"):
        assert raw not in shown
    assert "latency p50 (ms)" in shown and "cost per trial ($)" in shown and "infrastructure failures" in shown
    assert "The total cost and the failure counts are as measured (no interval)" in shown


def test_no_failures_in_either_run_is_one_line_not_an_empty_table(runs):
    store, a, b = runs["store"], runs["clean"], runs["clean_too"]
    shown = cli("compare", a, b, "--store", store)
    assert "Failure types: no failures in either run" in shown
    assert "failure type" not in shown
    assert json.loads(cli("compare", a, b, "--store", store, "--json"))["failure_types"] == {}
    with_failures = cli("compare", runs["baseline"], runs["candidate"], "--store", store)
    assert "no failures in either run" not in with_failures and "failure type" in with_failures


def test_the_dashboard_comparison_page_shows_the_same_labelled_figures(runs):
    store, a, b = runs["store"], runs["baseline"], runs["candidate"]
    data = json.loads(cli("compare", a, b, "--store", store, "--json"))
    with dashboard(store) as site:
        page = html.unescape(httpx.get(f"{site.rstrip('/')}/compare/{a}/{b}").text)
        clean = html.unescape(httpx.get(f"{site.rstrip('/')}/compare/{runs['clean']}/{runs['clean_too']}").text)
    assert "<th>difference (95% CI)</th>" in page
    for row in figure_rows(data):
        assert "<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" in page
    assert "tokens_per_trial" not in page
    assert "No failures in either run." in clean and "<th>type</th>" not in clean
