"""A continuous scorer's mean and its 95% interval: the t interval of the scores' observed spread on the logit scale,
SE clustered by case, where it was a pass rate's Wilson interval at up to the number of scores, as wide as if every
score were 0 or 1, and then the mean ± t·SE, which held the true mean of scores skewed near 1 too rarely. Each over
a real run of an agent that answers, attempt by attempt, the value its case's input lists, scored by a custom
continuous scorer that reads it back; every expected figure is worked out here from the values."""

from __future__ import annotations

import json
import math
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from dashboard_server import dashboard
from scheduled_agents import answering_by_attempt

from agenteval.cli import main
from agenteval.run import evaluate
from agenteval.scorers import scorer

Z = 1.959963984540054
T975 = {3: 3.18244630528371, 4: 2.77644510519779}
"""Student's t at 0.975 by degrees of freedom, from the tables."""


def scheduled():
    """An agent for cases whose input is "ID:V1,V2,...": attempt i answers Vi; an "x" there raises instead."""

    def answer(message: str, attempt: int) -> str:
        value = message.split(":")[1].split(",")[attempt]
        if value == "x":
            raise RuntimeError("this attempt fails")
        return value

    return answering_by_attempt(answer)


@scorer(continuous=True, needs_content=True)
def said(case, trial):
    """The value the agent said."""
    return float(trial.reply)


def run(tmp_path: Path, schedules: list[list[str]]) -> tuple[str, str]:
    """A run of one case per schedule, as many attempts as the longest; returns the store and the experiment."""
    attempts = max(len(s) for s in schedules)
    lines = [
        json.dumps({"id": f"c{i}", "input": f"c{i}:{','.join(s)}", "expected_output": ""})
        for i, s in enumerate(schedules)
    ]
    dataset = tmp_path / "cases.jsonl"
    dataset.write_text("\n".join(lines) + "\n")
    store = str(tmp_path / "store")
    experiment = evaluate(scheduled(), str(dataset), attempts=attempts, store=store, scorers=[said], progress="none")
    return store, experiment.id


def reported(store: str, experiment: str) -> dict:
    shown = CliRunner().invoke(main, ["report", experiment, "--store", store, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    return next(s for s in json.loads(shown.output)["scorers"] if s["scorer"] == "said")


def clustered(values_by_case: list[list[float]]) -> tuple[float, float]:
    """The mean and its cluster-robust standard error, C / (C - 1) · Σ_c (s_c − n_c·x̄)² / n², by hand."""
    n, c = sum(map(len, values_by_case)), len(values_by_case)
    mean = sum(map(sum, values_by_case)) / n
    spread = sum((sum(v) - len(v) * mean) ** 2 for v in values_by_case)
    return mean, math.sqrt(c / (c - 1) * spread / n**2)


def unclustered(values: list[float]) -> float:
    """The standard error of a mean of independent values, s / √n."""
    n, mean = len(values), sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def logit_t(mean: float, se: float, t: float) -> tuple[float, float]:
    """The t interval on the logit scale read back: log(m / (1 − m)) ± t·SE / (m(1 − m)), the delta method's."""
    centre, half = math.log(mean / (1 - mean)), t * se / (mean * (1 - mean))
    return 1 / (1 + math.exp(half - centre)), 1 / (1 + math.exp(-half - centre))


def wilson(p: float, n: float) -> tuple[float, float]:
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def test_a_continuous_mean_has_the_logit_t_interval_of_its_case_clustered_spread(tmp_path):
    """5 cases of 3 attempts whose attempts agree closely within a case: the case is the unit, so the standard error
    is the clustered one, 1.9 times the one that treats 15 scores as independent. The report said 22.2% to 80.4%,
    Wilson's at the number of scores as if each were a pass or a fail; then 32.4% to 71.6%, the mean ± t·SE; on the
    logit scale 33.0% to 70.4%, a little narrower at 52% and leaning towards 50%. Wilson's for 5 cases all at 1
    (56.6% up) and all at 0 (up to 43.4%) reach no further. The JSON, the table and the dashboard's experiment page
    show the same interval."""
    values = [[0.3, 0.32, 0.34], [0.4, 0.42, 0.44], [0.5, 0.52, 0.54], [0.6, 0.62, 0.64], [0.7, 0.72, 0.74]]
    store, experiment = run(tmp_path, [[str(v) for v in case] for case in values])
    mean, se = clustered(values)
    assert mean == pytest.approx(0.52) and se == pytest.approx(math.sqrt(5 / 4 * 9 * 0.1 / 225))
    flat = [v for case in values for v in case]
    assert se / unclustered(flat) > 1.8  # the clustered error is the wider: scores of one case move together
    figures = reported(store, experiment)
    assert figures["scored"] == 15 and figures["mean"] == pytest.approx(mean)
    low, high = logit_t(mean, se, T975[4])
    assert low < wilson(1.0, 5)[0] and high > wilson(0.0, 5)[1]  # the floors for all at 1 (at 0) reach no further
    assert figures["ci95"] == [pytest.approx(low, rel=1e-9), pytest.approx(high, rel=1e-9)]
    shown = f"{low:.1%} to {high:.1%}"
    assert shown == "33.0% to 70.4%"
    table = CliRunner().invoke(main, ["report", experiment, "--store", store, "--format", "markdown"]).output
    assert f"| said | continuous (mean) | 52.0% | {shown} |" in table, table
    with dashboard(store) as site:
        page = httpx.get(f"{site.rstrip('/')}/experiments/{experiment}").text
    row = page.split("<td>said</td>")[1].split("</tr>")[0]
    assert f"<td>{shown}</td>" in row, row


def test_unequal_attempts_weigh_each_score_and_cluster_by_case(tmp_path):
    """4 cases of 3 attempts, two of whose attempts fail and are never scored: 10 scores in clusters of 3, 2, 2 and
    3. The mean is over the scores (not an average of case means) and the spread Σ_c (s_c − n_c·x̄)². It reads 15.0%
    to 84.0% on the logit scale; the mean ± t·SE read 6.6% to 91.4%, and Wilson's at an effective 3.8 scores 14.0%
    to 85.0%."""
    schedules = [["0.1", "0.2", "0.3"], ["0.5", "x", "0.7"], ["x", "0.9", "0.8"], ["0.4", "0.4", "0.6"]]
    store, experiment = run(tmp_path, schedules)
    values = [[0.1, 0.2, 0.3], [0.5, 0.7], [0.9, 0.8], [0.4, 0.4, 0.6]]
    mean, se = clustered(values)
    assert mean == pytest.approx(4.9 / 10)
    # s_c − n_c·x̄: 0.6 − 1.47, 1.2 − 0.98, 1.7 − 0.98, 1.4 − 1.47
    assert se == pytest.approx(math.sqrt(4 / 3 * (0.87**2 + 0.22**2 + 0.72**2 + 0.07**2) / 100))
    figures = reported(store, experiment)
    assert figures["scored"] == 10 and figures["mean"] == pytest.approx(mean)
    low, high = logit_t(mean, se, T975[3])
    assert figures["ci95"] == [pytest.approx(low, rel=1e-9), pytest.approx(high, rel=1e-9)]
    assert f"{low:.1%} to {high:.1%}" == "15.0% to 84.0%"


def test_the_interval_stays_within_the_scores_range(tmp_path):
    """A low mean with a wide spread: mean − t·SE fell below 0 and was read as 0, a score's least; on the logit scale
    the interval ends above 0 and below 1 of itself, 0.8% to 93.1%."""
    values = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.1, 0.1, 0.1], [0.9, 0.9, 0.9]]
    store, experiment = run(tmp_path, [[str(v) for v in case] for case in values])
    mean, se = clustered(values)
    assert mean == pytest.approx(0.25) and se == pytest.approx(math.sqrt(4 / 3 * 5.13 / 144))
    assert mean - T975[3] * se < 0 < mean + T975[3] * se < 1
    low, high = logit_t(mean, se, T975[3])
    assert reported(store, experiment)["ci95"] == [pytest.approx(low, rel=1e-9), pytest.approx(high, rel=1e-9)]
    assert f"{low:.1%} to {high:.1%}" == "0.8% to 93.1%"


def test_no_spread_between_cases_or_one_case_reads_as_a_pass_rate_does(tmp_path):
    """Every case's mean the same (its attempts vary, 0.3 to 0.7): the clustered standard error is 0, which would
    be an interval of no width; as for a pass rate with no spread, Wilson's at the number of cases, 4, instead.
    One case has no spread between cases at all: Wilson's at one."""
    values = [[0.3, 0.5, 0.7], [0.7, 0.5, 0.3], [0.5, 0.5, 0.5], [0.4, 0.6, 0.5]]
    store, experiment = run(tmp_path, [[str(v) for v in case] for case in values])
    mean, se = clustered(values)
    assert mean == pytest.approx(0.5) and se == pytest.approx(0.0, abs=1e-12)
    assert unclustered([v for case in values for v in case]) > 0.03  # the scores vary: only their case means do not
    low, high = wilson(0.5, 4)
    assert reported(store, experiment)["ci95"] == [pytest.approx(low), pytest.approx(high)]
    assert (low, high) == pytest.approx((0.1500, 0.8500), abs=1e-4)

    (tmp_path / "one").mkdir()
    one_store, one = run(tmp_path / "one", [["0.2", "0.4", "0.6"]])
    assert reported(one_store, one)["ci95"] == pytest.approx(list(wilson(0.4, 1)))


def test_a_score_a_hair_under_1_reads_no_narrower_than_every_score_at_1(tmp_path):
    """5 cases of 2 attempts all at 1 read Wilson's at 5 cases, 56.6% to 100%; with one score at 0.999999 the report
    read 99.99996% to 100%, the narrow t interval of a spread of a millionth, as if one score a hair under 1 made the
    mean far more certain. Both now read 56.6% from below, C / (C + z²)."""
    all_at_1 = reported(*run(tmp_path, [["1", "1"]] * 5))["ci95"]
    assert all_at_1 == [pytest.approx(5 / (5 + Z * Z)), 1.0]
    (tmp_path / "under").mkdir()
    under = reported(*run(tmp_path / "under", [["0.999999", "1"]] + [["1", "1"]] * 4))
    assert under["mean"] < 1 and under["ci95"][0] == pytest.approx(5 / (5 + Z * Z)) and under["ci95"][1] < 1
    assert f"{under['ci95'][0]:.1%}" == "56.6%"
