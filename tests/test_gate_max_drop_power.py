"""The gate flags a drop only when it exceeds --max-drop as well as passing the test: what it says it detects, and
what ``agenteval power`` says it catches, count that too. Over real runs into a real store, and against hand
computation and a seeded simulation of the gate's own rule."""

from __future__ import annotations

import json
import math

import numpy as np
from click.testing import CliRunner

from agenteval.analysis import gate
from agenteval.analysis._power import default_model
from agenteval.cli import main
from agenteval.dataset import Case, Dataset
from agenteval.run import evaluate
from agenteval.store import Store

CASES, WRONG = 400, 4


def test_the_gate_detects_no_drop_within_its_max_drop(tmp_path):
    """400 cases, 1 attempt: every case passes in the baseline and all but 4 in the candidate. The paired
    differences are four -1 and 396 zeros: mean -1%, SE = sqrt((4 x 0.99² + 396 x 0.01²) / 399 / 400) = 0.498%.
    The test alone catches (t(0.95, 399) + t(0.8, 399)) x SE = (1.64868 + 0.84252) x 0.498% = 1.24% with 80% power,
    and the gate said "detects drops of 1.2%", though it passes any drop within its 2% whatever the test says (this
    very 1% drop, significant at p = 0.023, among them). What it flags with 80% power is past 2% by t(0.8) x SE:
    2% + 0.84252 x 0.498% = 2.42%."""
    cases = [Case(id=f"c{n}", input=f"What is {n} + 0?", expected_output=str(n), category="sum") for n in range(CASES)]
    dataset = Dataset("sums", "sums(test)", "hash-sums", cases)
    store = tmp_path / "store"

    def candidate(question: str) -> str:
        n = int(question.split()[2])
        return "no idea" if n < WRONG else str(n)

    ids = [
        evaluate(agent, dataset, attempts=1, store=store, progress="none").id
        for agent in (lambda question: question.split()[2], candidate)
    ]
    decision = gate(Store(store), ids[0], ids[1])
    assert decision.exit_code == 0, decision.reasons
    assert decision.comparison is not None
    overall = decision.comparison.overall
    assert overall.difference == -WRONG / CASES
    assert math.isclose(overall.standard_error, math.sqrt((4 * 0.99**2 + 396 * 0.01**2) / 399 / 400), rel_tol=1e-12)
    assert math.isclose(overall.p_drop(), 0.022681857843546788, rel_tol=1e-9)
    assert decision.reasons[1] == "the drop is within 2%"
    assert decision.reasons[2] == "this comparison detects drops of 2.4% with 80% power"
    assert math.isclose(overall.minimum_detectable_drop(), 0.012409107239788528, rel_tol=1e-9)
    assert math.isclose(overall.minimum_detectable_drop(beyond=0.02), 0.024196748298787797, rel_tol=1e-9)


def gate_catches(pass_rate: float, attempts: int, cases: int, drop: float, max_drop: float, runs: int = 4000) -> float:
    """The share of comparisons the gate flags (exit 1) when drawn as the power model says, every case losing drop /
    pass rate of its rate: the paired t test at alpha 0.05 rejects, and the observed drop exceeds ``max_drop``."""
    from agenteval.analysis._student_t import t_upper

    rng = np.random.default_rng(7)
    common = 1 / 0.5 - 1  # the default spread: half the largest between-case variance
    rates = rng.beta(pass_rate * common, (1 - pass_rate) * common, size=(runs, cases))
    baseline = rng.binomial(attempts, rates) / attempts
    candidate = rng.binomial(attempts, rates * (1 - drop / pass_rate)) / attempts
    diffs = candidate - baseline
    mean, error = diffs.mean(axis=1), diffs.std(axis=1, ddof=1) / math.sqrt(cases)
    rejected = mean < -t_upper(0.05, cases - 1) * error
    return float(np.mean(rejected & (-mean > max_drop)))


def test_power_is_the_chance_the_gate_flags_the_drop_past_its_max_drop():
    """``power`` read the test alone while calling it the gate's: a 2.5-point drop over 400 cases at 0.95 and 5
    attempts read 99.5%, where the gate (--max-drop 0.02) flags 79% of such comparisons; a drop of exactly 2 points
    over 1,000 cases read 100% and "206 cases for 80% power", where the gate flags half of them at any size."""
    runner = CliRunner()
    common = ["power", "--pass-rate", "0.95", "--attempts", "5", "--json"]
    result = runner.invoke(main, [*common, "--cases", "400", "--drop", "0.025"])
    assert result.exit_code == 0, result.output
    table = json.loads(result.output)
    assert abs(table["paired"][0][0] - gate_catches(0.95, 5, 400, 0.025, 0.02)) <= 0.03
    assert table["paired"][0][0] < 0.85  # the test alone: 99.5%
    at_the_limit = json.loads(runner.invoke(main, [*common, "--cases", "1000", "--drop", "0.02"]).output)
    assert abs(at_the_limit["paired"][0][0] - 0.5) <= 0.01
    assert at_the_limit["cases_needed"] == [None]
    shown = runner.invoke(main, ["power", "--pass-rate", "0.95", "--attempts", "5", "--drop", "0.02"]).output
    assert "never /" in shown
    # --max-drop 0 is the test alone, as compare reads it.
    alone = json.loads(runner.invoke(main, [*common, "--cases", "400", "--drop", "0.025", "--max-drop", "0"]).output)
    assert abs(alone["paired"][0][0] - gate_catches(0.95, 5, 400, 0.025, 0.0)) <= 0.03
    assert alone["paired"][0][0] > 0.95


def test_the_printed_drops_keep_the_digits_that_tell_them_apart():
    """Drops of 0.02 and 0.025 were both headed "drop 2%"."""
    shown = CliRunner().invoke(
        main, ["power", "--drop", "0.02", "--drop", "0.025", "--cases", "100"], env={"COLUMNS": "200"}
    )
    assert "drop 2%" in shown.output and "drop 2.5%" in shown.output


def test_cases_needed_is_none_only_where_the_gate_cannot_get_there():
    model = default_model(0.85, 3)
    assert model.cases_needed(0.02) is None and model.cases_needed(0.01) is None
    needed = model.cases_needed(0.03)
    assert needed is not None and model.power(needed, 0.03) >= 0.8 > model.power(needed - 1, 0.03)


def test_a_drop_the_candidates_infrastructure_failures_could_make_is_refused_not_a_regression(tmp_path):
    """Below --max-infra the gate judged infrastructure failures as the agent's: 8 cases of 100 whose one attempt
    hit a quota made a candidate that answered every other case right a regression, exit 1, at p = 0.002 (found by
    a hostile check). A drop must still be one had the candidate's infrastructure failures passed; this one would
    not be, so the gate refuses (exit 3) and names the resume that runs them again. A real drop beside a few
    quota failures is still a regression."""
    import json

    from agenteval.agents._mock import MockProviderError
    from agenteval.analysis import gate
    from agenteval.run import evaluate
    from agenteval.store import Store

    ids = [f"q{i}" for i in range(100)]
    cases = tmp_path / "cases.jsonl"
    cases.write_text("".join(json.dumps({"id": i, "input": i, "expected_output": "right"}) + "\n" for i in ids))

    def agent_with(quota: set[str], wrong: set[str]):
        def agent(question: str) -> str:
            if question in quota:
                raise MockProviderError("You exceeded your current quota", 429, "insufficient_quota")
            return "wrong" if question in wrong else "right"

        return agent

    store = tmp_path / "store"

    def run(quota=(), wrong=()):
        return evaluate(agent_with(set(quota), set(wrong)), str(cases), attempts=1, store=store, progress="none").id

    baseline = run()
    decision = gate(Store(store), baseline, run(quota=ids[:8]))
    assert (decision.exit_code, decision.verdict) == (3, "refused"), decision.reasons
    assert "not had the candidate's 8 infrastructure failure(s) passed" in decision.reasons[1]
    assert "--retry-failed infra" in decision.reasons[1]
    real = gate(Store(store), baseline, run(quota=ids[:2], wrong=ids[10:20]))
    assert (real.exit_code, real.verdict) == (1, "regression"), real.reasons
