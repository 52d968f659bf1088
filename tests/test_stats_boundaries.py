"""The statistics of compare, gate and power at their edges: a drop of exactly the allowed one, a category of one
case, differences near -100%, drops a pass rate cannot take, extreme significance levels. Each over real runs of
an agent that follows a schedule written in its cases, into a real store, through the real command line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from scheduled_agents import answering_by_attempt

from agenteval.cli import main
from agenteval.run import evaluate


def scheduled(which: int):
    """An agent for cases whose input is "ID:BASELINE/CANDIDATE": schedule ``which`` of the two says, attempt by
    attempt, whether it answers right (P) or wrong (F)."""

    def answer(message: str, attempt: int) -> str:
        schedule = message.split(":")[1].split("/")[which]
        return "ok" if schedule[attempt % len(schedule)] == "P" else "wrong"

    return answering_by_attempt(answer)


def pair(tmp_path: Path, groups: list[tuple[int, str, str | None]], attempts: int) -> tuple[str, str, str]:
    """A baseline and a candidate run of one dataset: ``count`` cases following ``schedules`` in each group, of
    ``category``. Returns the store and both ids."""
    lines = []
    for count, schedules, category in groups:
        for _ in range(count):
            n = len(lines)
            row: dict[str, Any] = {"id": f"c{n:04d}", "input": f"c{n}:{schedules}", "expected_output": "ok"}
            if category:
                row["category"] = category
            lines.append(json.dumps(row))
    dataset = tmp_path / "cases.jsonl"
    dataset.write_text("\n".join(lines) + "\n")
    store = str(tmp_path / "store")
    ids = [
        evaluate(scheduled(which), str(dataset), attempts=attempts, store=store, progress="none").id for which in (0, 1)
    ]
    return store, ids[0], ids[1]


def strict_json(text: str) -> Any:
    """JSON as every other parser reads it: NaN and Infinity are not JSON."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_drop_of_exactly_max_drop_is_tolerated(tmp_path):
    """490 of 500 trials passing, then 480: a drop of exactly 2 points, which --max-drop 0.02 tolerates. The mean of
    the per-case differences (0.6 - 0.8 is -0.20000000000000007) came out -0.020000000000000007, and the gate
    exited 1, 'the drop exceeds 2%'."""
    store, baseline, candidate = pair(tmp_path, [(10, "PPPPF/PPPFF", None), (90, "PPPPP/PPPPP", None)], attempts=5)
    args = ["gate", "--baseline", baseline, "--candidate", candidate, "--store", store]
    exact = CliRunner().invoke(main, [*args, "--max-drop", "0.02"])
    assert exact.exit_code == 0 and "the drop is within 2%" in exact.output, exact.output
    below = CliRunner().invoke(main, [*args, "--max-drop", "0.019"])
    assert below.exit_code == 1, below.output


def test_the_gate_names_its_limits_as_given_not_rounded_to_whole_points(tmp_path):
    """--max-drop 0.019 printed 'the drop exceeds 2%' of a drop of 2.0%, and --max-drop 0.025 'the drop is within
    2%' of the same drop: the limit rounded to whole points contradicted the difference beside it."""
    store, baseline, candidate = pair(tmp_path, [(10, "PPPPF/PPPFF", None), (90, "PPPPP/PPPPP", None)], attempts=5)
    args = ["gate", "--baseline", baseline, "--candidate", candidate, "--store", store]
    below = CliRunner().invoke(main, [*args, "--max-drop", "0.019"])
    assert below.exit_code == 1 and "the drop exceeds 1.9% and is significant" in below.output, below.output
    above = CliRunner().invoke(main, [*args, "--max-drop", "0.025"])
    assert above.exit_code == 0 and "the drop is within 2.5%" in above.output, above.output


def test_compare_json_is_strict_json_when_a_category_has_one_shared_case(tmp_path):
    """A category of one case has no standard error: `compare --json` printed NaN for it (standard_error, ci95,
    p_drop, minimum_detectable_drop), which jq and JSON.parse refuse. Now null, as a report gives it."""
    store, baseline, candidate = pair(tmp_path, [(10, "PPP/PPF", "many"), (1, "PPP/PFF", "solo")], attempts=3)
    result = CliRunner().invoke(main, ["compare", baseline, candidate, "--store", store, "--json"])
    assert result.exit_code == 0, result.output
    data = strict_json(result.stdout)
    solo = data["categories"]["solo"]
    assert solo["cases"] == 1 and solo["difference"] == pytest.approx(-2 / 3)
    assert solo["standard_error"] is None and solo["ci95"] is None and solo["p_drop"] is None
    assert data["categories"]["many"]["ci95"] is not None
    table = CliRunner().invoke(main, ["compare", baseline, candidate, "--store", store])
    assert table.exit_code == 0 and "│ solo" in table.output, table.output


def test_the_interval_of_a_difference_stays_within_100_points(tmp_path):
    """9 of 10 cases passing, then none: a difference of -90% with a standard error of 10 points, whose normal
    interval read -109.6% to -70.4%, a drop no pass rate can take. Clipped to [-1, 1] as a rate's is to [0, 1].
    (Its ends are t's with 9 degrees of freedom: 2.2621572 at 95%, 1.8331129 at 90%, scipy's.)"""
    store, baseline, candidate = pair(tmp_path, [(9, "P/F", None), (1, "F/F", None)], attempts=1)
    data = strict_json(CliRunner().invoke(main, ["compare", baseline, candidate, "--store", store, "--json"]).stdout)
    overall = data["overall"]
    assert overall["difference"] == pytest.approx(-0.9) and overall["standard_error"] == pytest.approx(0.1)
    assert overall["ci95"] == [-1.0, pytest.approx(-0.9 + 2.2621572 * 0.1)]
    gate = CliRunner().invoke(main, ["gate", "--baseline", baseline, "--candidate", candidate, "--store", store])
    assert gate.exit_code == 1 and "(90% CI -100.0% to -71.7%)" in gate.output, gate.output


def test_the_gate_shows_the_interval_of_its_own_test(tmp_path):
    """The gate's test is one-sided at alpha, and it printed a 95% interval beside it: 3 of 50 cases going from
    PPP to PPF read "difference -2.0% (95% CI -4.2% to +0.2%), one-sided p = 0.038 ... significant at alpha 0.05".
    Its interval is the 1 - 2 alpha one, whose upper end is below 0 exactly when the test rejects."""
    store, baseline, candidate = pair(tmp_path, [(3, "PPP/PPF", None), (47, "P/P", None)], attempts=3)
    for alpha, level, verdict in (("0.05", "90%", 1), ("0.01", "98%", 0)):
        gate = CliRunner().invoke(
            main,
            ["gate", "--baseline", baseline, "--candidate", candidate, "--store", store, "--max-drop", "0.01"]
            + ["--alpha", alpha],
        )
        assert gate.exit_code == verdict, gate.output
        line = " ".join(gate.output.split())
        high = float(line.split(f"({level} CI ")[1].split(" to ")[1].split("%")[0])
        assert (high < 0) == (verdict == 1), line


def test_power_refuses_a_drop_larger_than_the_pass_rate_and_leaves_it_out_of_the_defaults():
    """At a pass rate of 0.1 the default 15-point drop cannot happen, yet `power --pass-rate 0.1` printed it
    caught '78% / 89%' at 25 cases (unpaired above paired), and --pass-rate 1e-300 --drop 0.5 crashed on a NaN."""
    defaults = CliRunner().invoke(main, ["power", "--pass-rate", "0.1", "--json"])
    assert defaults.exit_code == 0, defaults.output
    assert strict_json(defaults.output)["drops"] == [0.05, 0.1]  # a drop of the whole pass rate can happen
    for rate, drop in (("0.1", "0.15"), ("1e-300", "0.5")):
        result = CliRunner().invoke(main, ["power", "--pass-rate", rate, "--drop", drop])
        assert result.exit_code == 2 and result.output.strip().splitlines() == [
            f"Error: --drop {float(drop):g} is more than the pass rate {float(rate):g}, which cannot fall below 0; "
            f"give drops up to {float(rate):g}"
        ], result.output
    none_fit = CliRunner().invoke(main, ["power", "--pass-rate", "0.04"])
    assert none_fit.exit_code == 2 and "give the drops to tabulate with --drop (up to 0.04)" in none_fit.output


def test_a_tiny_alpha_the_options_accept_is_judged_not_an_internal_error(tmp_path):
    """--alpha takes any share strictly between 0 and 1, but z(1 - alpha) was computed from 1 - alpha, which is 1.0
    for alpha 1e-17: power crashed with a traceback (StatisticsError) and the gate refused, 'internal error'."""
    power = CliRunner().invoke(main, ["power", "--alpha", "1e-17", "--cases", "25", "--drop", "0.5", "--json"])
    assert power.exit_code == 0, power.output
    table = strict_json(power.output)
    assert 0 < table["paired"][0][0] < 0.5 and table["cases_needed"][0] > 25  # z(1 - 1e-17) is 8.5: strict
    # 30 cases, 29 of them lost: t = -29 with 29 degrees of freedom, p about 1e-24 (10 cases, t = -9 with 9, gave
    # p = 4e-6, which no alpha of 1e-17 calls significant).
    store, baseline, candidate = pair(tmp_path, [(29, "P/F", None), (1, "F/F", None)], attempts=1)
    args = ["gate", "--baseline", baseline, "--candidate", candidate, "--store", store, "--alpha", "1e-17"]
    gate = CliRunner().invoke(main, args)
    assert gate.exit_code == 1 and "significant at alpha 1e-17" in gate.output, gate.output
    # At 1e-300 and 10 cases t's density at the critical value is below the smallest float: a ZeroDivisionError.
    tiniest = CliRunner().invoke(main, ["power", "--alpha", "1e-300", "--cases", "10", "--drop", "0.5", "--json"])
    assert tiniest.exit_code == 0 and strict_json(tiniest.output)["paired"][0][0] < 1e-6, tiniest.output


def test_power_says_a_drop_is_too_small_to_size_instead_of_a_traceback():
    """--drop accepts any share above 0; at 1e-200 the cases needed overflowed ('OverflowError: cannot convert
    float infinity to integer'). 1e-10, far below any drop worth catching, still gets its count from the test alone
    (--max-drop 0; past the gate's default 0.02 no number of cases flags it 80% of the time: null)."""
    tiny = CliRunner().invoke(main, ["power", "--drop", "1e-200", "--cases", "25", "--max-drop", "0"])
    assert tiny.exit_code == 2 and tiny.output.strip().splitlines() == [
        "Error: --drop 1e-200 is too small for any number of cases to catch; give a larger drop"
    ], tiny.output
    small = CliRunner().invoke(main, ["power", "--drop", "1e-10", "--cases", "25", "--max-drop", "0", "--json"])
    assert small.exit_code == 0 and strict_json(small.output)["cases_needed"][0] > 10**19, small.output
    within = CliRunner().invoke(main, ["power", "--drop", "1e-10", "--cases", "25", "--json"])
    assert strict_json(within.output)["cases_needed"][0] is None, within.output


def test_runs_where_every_case_passes_are_not_reported_as_certain(tmp_path):
    """11 cases passing all 3 attempts, twice. The report read "95% CI 100.0% to 100.0%", and compare and the gate
    an interval of +0.0% to +0.0% and "detects drops of 0.0%": certainty no 11 cases give. Now the report gives
    Wilson's interval of 11 passes in 11 (times (z / t)², t with 10 degrees of freedom), and the comparison the most
    that 11 unchanged cases leave possible."""
    store, baseline, candidate = pair(tmp_path, [(11, "PPP/PPP", None)], attempts=3)
    report = strict_json(CliRunner().invoke(main, ["report", candidate, "--store", store, "--format", "json"]).output)
    assert report["overall"]["pass_rate"] == 1.0
    assert report["overall"]["ci95"] == [pytest.approx(0.6890, abs=1e-4), 1.0]
    shown = CliRunner().invoke(main, ["report", candidate, "--store", store])
    assert "68.9%" in shown.output and "100.0% to 100.0%" not in shown.output, shown.output
    compared = CliRunner().invoke(main, ["compare", baseline, candidate, "--store", store, "--json"])
    overall = strict_json(compared.output)["overall"]
    assert overall["no_spread"] and overall["ci95"] == [pytest.approx(-0.259, abs=1e-3), pytest.approx(0.259, abs=1e-3)]
    assert overall["minimum_detectable_drop"] == pytest.approx(0.328, abs=1e-3)
    table = " ".join(CliRunner().invoke(main, ["compare", baseline, candidate, "--store", store]).output.split())
    assert "detects drops of 32.8% with 80% power" in table and "the spread is unknown" in table, table
    gate = CliRunner().invoke(main, ["gate", "--baseline", baseline, "--candidate", candidate, "--store", store])
    line = " ".join(gate.output.split())
    assert gate.exit_code == 0 and "detects drops of 32.8% with 80% power (no case's pass rate moved" in line, line


def test_a_gate_too_weak_to_see_any_drop_says_so_not_a_drop_past_100_points(tmp_path):
    """10 cases, 3 lost and 3 gained: a standard error of 26 points with 9 degrees of freedom, and at alpha 0.001
    the gate read "smallest drop this comparison detects with 80% power: 134.0%", a drop no pass rate can take.
    (compare tests at 0.05, where 10 cases, the fewest it compares, detect at worst a drop of 90.5%.)"""
    store, baseline, candidate = pair(tmp_path, [(3, "P/F", None), (3, "F/P", None), (4, "P/P", None)], attempts=1)
    args = ["gate", "--baseline", baseline, "--candidate", candidate, "--store", store, "--alpha", "0.001"]
    line = " ".join(CliRunner().invoke(main, args).output.split())
    assert "detects no drop a pass rate can have (at most 100 points) with 80% power" in line, line
    assert "could not reliably see any drop a pass rate can have (underpowered)" in line, line
    assert max(float(figure) for figure in re.findall(r"(\d+(?:\.\d+)?)%", line)) <= 100, line


def test_every_rate_the_report_prints_has_its_interval(tmp_path):
    """pass@k, pass^k and each scorer's pass rate were printed bare, against the rule that every figure a report
    prints comes with its uncertainty. 10 cases passing 2 of 3 attempts and 10 passing all 3: each interval is the
    one computed by hand from the per-case counts."""
    from agenteval.analysis import clustered_rate, values_interval95

    store, _, candidate = pair(tmp_path, [(10, "PPF/PPF", None), (10, "PPP/PPP", None)], attempts=3)
    data = strict_json(CliRunner().invoke(main, ["report", candidate, "--store", store, "--format", "json"]).output)
    scorer = next(s for s in data["scorers"] if s["scorer"] == "answer_match")
    assert scorer["pass_rate"] == pytest.approx(50 / 60)
    assert scorer["ci95"] == pytest.approx(list(clustered_rate([(3, 2)] * 10 + [(3, 3)] * 10)[2]))
    by_k = {k["k"]: k for k in data["overall"]["k"]}
    # pass^2 of a case passing 2 of 3 is C(2,2)/C(3,2) = 1/3; pass@2 is 1. Cases are independent units here.
    hat = [1 / 3] * 10 + [1.0] * 10
    mean = sum(hat) / 20
    standard_error = (sum((v - mean) ** 2 for v in hat) / 19 / 20) ** 0.5
    assert by_k[2]["pass_hat_k"] == pytest.approx(mean)
    assert by_k[2]["pass_hat_k_ci95"] == pytest.approx(list(values_interval95(mean, standard_error, 20)))
    assert by_k[2]["pass_at_k"] == 1.0 and by_k[2]["pass_at_k_ci95"] == pytest.approx(
        list(values_interval95(1.0, 0.0, 20))  # all at 1: Wilson's lower end for 20 of 20 cases
    )
    table = " ".join(CliRunner().invoke(main, ["report", candidate, "--store", store]).output.split())
    low, high = scorer["ci95"]
    assert f"{low:.1%} to {high:.1%}" in table and "83.9% to 100.0%" in table, table


def test_a_one_case_experiment_reports_every_rate_with_an_interval(tmp_path):
    """One case gives no spread to measure: its rates are read at one case (Wilson's: 20.7% to 100% for a case that
    passed every attempt), where they were printed with no interval at all."""
    dataset = tmp_path / "one.jsonl"
    dataset.write_text('{"id": "only", "input": "What is 2 + 2?", "expected_output": "4", "category": "solo"}\n')
    store = tmp_path / "store"
    evaluate("mock", dataset, attempts=3, store=store, progress="none")
    shown = CliRunner().invoke(main, ["report", "--format", "json", "--store", str(store)])
    assert shown.exit_code == 0, shown.output
    report = json.loads(shown.output)
    one_case = [pytest.approx(0.2065, abs=1e-4), 1.0]
    assert report["overall"]["ci95"] == one_case
    assert [c["ci95"] for c in report["categories"]] == [one_case]
    for k in report["overall"]["k"]:
        assert k["pass_at_k_ci95"] == k["pass_hat_k_ci95"] == one_case, k
    text = CliRunner().invoke(main, ["report", "--store", str(store)]).output
    assert "–" not in text.split("By category")[0], text  # no rate of the overview without its interval


def test_power_names_spread_when_it_is_more_than_the_pass_rate_allows():
    """--spread 0.2 at --pass-rate 0.99 (whose cases can differ by at most sqrt(0.99 x 0.01) = 0.0995) read "the
    between-case variance must be between 0 and p(1 - p) = 0.0099", naming no option, and exited 1."""
    result = CliRunner().invoke(main, ["power", "--pass-rate", "0.99", "--spread", "0.2"])
    assert result.exit_code == 2 and result.output.strip().splitlines() == [
        "Error: --spread 0.2 is more than cases with a pass rate of 0.99 can differ by: at most sqrt(p(1 - p)) = "
        "0.0995, when every case is all-or-nothing; give --spread up to that"
    ], result.output
    at_most = CliRunner().invoke(main, ["power", "--pass-rate", "0.99", "--spread", "0.0994", "--drop", "0.05"])
    assert at_most.exit_code == 0, at_most.output
