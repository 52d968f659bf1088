"""An experiment's report, every figure from DuckDB over the store and every rate with its uncertainty."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from agenteval_instrumentation import attributes as A

from ..store import Store
from ..store._views import COUNTED_MODEL_CALL
from . import _experiments as ex
from ._stats import clustered_mean, interval95, pass_at_k, pass_hat_k

PER_CASE = """
SELECT t.case_id, coalesce(any_value(c.category), 'uncategorized') AS category,
       count(*) AS attempts, count(*) FILTER (WHERE t.passed) AS passes,
       list(t.passed::INT ORDER BY t.attempt) AS outcomes,
       count(*) FILTER (WHERE t.outcome = 'failed') AS failed,
       any_value(t.error_message) FILTER (WHERE t.outcome = 'failed') AS a_failure
FROM judged t LEFT JOIN cases c USING (experiment_id, case_id)
GROUP BY t.case_id ORDER BY t.case_id
"""


SCORERS = """
SELECT scorer, bool_or(coalesce(continuous, false)) AS continuous, count(*) AS scored,
       avg(value) AS mean, avg(passed::INT) AS pass_rate, count(*) FILTER (WHERE error IS NOT NULL) AS errors
FROM current_scores GROUP BY scorer ORDER BY scorer
"""


SPAN_LATENCY = f"""
SELECT coalesce(operation, 'other') AS operation, count(*) AS spans,
       quantile_cont(duration_ms, 0.5) AS p50_ms, quantile_cont(duration_ms, 0.95) AS p95_ms
FROM spans WHERE experiment_id = ? AND scope_name IS DISTINCT FROM '{A.RUNNER_SCOPE}'
GROUP BY ALL ORDER BY spans DESC
"""

TRIAL_LATENCY = """
SELECT quantile_cont(duration_ms, 0.5) AS p50_ms, quantile_cont(duration_ms, 0.95) AS p95_ms FROM judged
"""

LATENCY_SAMPLE = """
SELECT list(duration_ms) AS sample_ms FROM (SELECT duration_ms FROM judged USING SAMPLE 2000 ROWS)
"""
"""For the latency plot: a uniform sample is enough to draw the distribution."""

TOKENS_BY_ROLE = f"""
SELECT coalesce(role, 'agent') AS role, count(*) AS model_calls,
       sum(input_tokens)::BIGINT AS input_tokens, sum(output_tokens)::BIGINT AS output_tokens,
       coalesce(response_model, request_model) AS model
FROM spans WHERE experiment_id = ? AND {COUNTED_MODEL_CALL} GROUP BY ALL ORDER BY role, model
"""

WORST_CASES = 10
MAX_K = 10
"""pass@k and pass^k are listed for k up to the attempts, at most this many."""
FLAKY_LISTED = 20


@dataclasses.dataclass(frozen=True)
class PassAtK:
    """pass@k (at least one of k attempts passes) and pass^k (all k pass), averaged over cases with k attempts."""

    k: int
    cases: int
    pass_at_k: float
    pass_hat_k: float


@dataclasses.dataclass(frozen=True)
class PassRate:
    """A pass rate with its case-clustered standard error and 95% interval (None without trials)."""

    pass_rate: float | None
    se: float | None
    ci95: tuple[float, float] | None
    k: list[PassAtK]


@dataclasses.dataclass(frozen=True)
class CategoryPassRate(PassRate):
    """The pass rate of one category's cases."""

    category: str
    cases: int
    trials: int


@dataclasses.dataclass(frozen=True)
class ScorerFigures:
    """One scorer over the current scores: pass rate, or mean for a continuous scorer, and its errors."""

    scorer: str
    continuous: bool
    scored: int
    mean: float | None
    pass_rate: float | None
    errors: int


@dataclasses.dataclass(frozen=True)
class Outcomes:
    """Trials that passed, were wrong, or failed (infrastructure apart), and failures by type."""

    passed: int
    wrong: int
    failed: int
    infrastructure_failures: int
    wrong_share: float | None
    failed_share: float | None
    failures_by_type: dict[str, int]


@dataclasses.dataclass(frozen=True)
class FlakyCases:
    """Cases whose attempts disagree: how many, and the first of them."""

    count: int
    cases: list[str]


@dataclasses.dataclass(frozen=True)
class SpanLatency:
    """Latency of one kind of span (``operation``: chat, execute_tool, ...)."""

    operation: str
    spans: int
    p50_ms: float | None
    p95_ms: float | None


@dataclasses.dataclass(frozen=True)
class Latency:
    """Trial latency percentiles, a uniform sample of trial latencies (sorted) for plots, and span latencies."""

    trial_p50_ms: float | None
    trial_p95_ms: float | None
    trial_sample_ms: list[float]
    spans: list[SpanLatency]


@dataclasses.dataclass(frozen=True)
class TokenUse:
    """Model calls and tokens by role (the agent's apart from the judge's and the simulated user's) and model."""

    role: str
    model_calls: int
    input_tokens: int | None
    output_tokens: int | None
    model: str | None


@dataclasses.dataclass(frozen=True)
class CaseOutcomes:
    """One case's attempts: how many passed and failed, and one failure's message."""

    case_id: str
    category: str
    passes: int
    attempts: int
    failed: int
    a_failure: str | None


@dataclasses.dataclass(frozen=True)
class ReportedExperiment:
    """What the report says about the experiment itself: identity, status and where it ran."""

    id: str
    name: str | None
    dataset: str
    dataset_hash: str
    """The dataset's content hash, first 12 characters."""
    agent: str
    version: str
    status: str
    error: str | None
    started_at: int
    ended_at: int | None
    environment: dict[str, Any]
    """``python``, ``platform`` and ``git`` (commit and dirty flag) of the run."""


@dataclasses.dataclass(frozen=True)
class Report:
    """An experiment's report: every figure the report formats show, as typed fields.

    ``to_dict()`` is the JSON output (``agenteval report --format json``)."""

    experiment: ReportedExperiment
    trials: int
    cases: int
    overall: PassRate
    categories: list[CategoryPassRate]
    scorers: list[ScorerFigures]
    outcomes: Outcomes
    flaky: FlakyCases
    latency: Latency
    tokens: list[TokenUse]
    cost_usd: float | None
    """Agent cost of the tries that count; None without prices."""
    cost_usd_all_tries: float | None
    """Agent cost of every try, rate-limited ones included."""
    worst_cases: list[CaseOutcomes]
    """The cases with the lowest pass rate, most failures first among equals."""

    def to_dict(self) -> dict[str, Any]:
        """As JSON output shows it."""
        return dataclasses.asdict(self)


def _rate(values_by_case: list[list[int]], k: list[PassAtK]) -> dict[str, Any]:
    mean, standard_error = clustered_mean(values_by_case)
    low, high = interval95(mean, standard_error)
    return {
        "pass_rate": None if math.isnan(mean) else mean,
        "se": None if math.isnan(standard_error) else standard_error,
        "ci95": None if math.isnan(low) else (low, high),
        "k": k,
    }


def _k_rates(cases: list[dict[str, Any]], max_k: int) -> list[PassAtK]:
    out = []
    for k in range(1, max_k + 1):
        eligible = [c for c in cases if c["attempts"] >= k]
        if not eligible:
            break
        out.append(
            PassAtK(
                k=k,
                cases=len(eligible),
                pass_at_k=sum(pass_at_k(c["attempts"], c["passes"], k) for c in eligible) / len(eligible),
                pass_hat_k=sum(pass_hat_k(c["attempts"], c["passes"], k) for c in eligible) / len(eligible),
            )
        )
    return out


def _reported_experiment(experiment: ex.Experiment) -> ReportedExperiment:
    return ReportedExperiment(
        id=experiment.experiment_id,
        name=experiment.name,
        dataset=experiment.dataset_name,
        dataset_hash=experiment.dataset_hash[:12],
        agent=experiment.agent,
        version=experiment.version,
        status=experiment.status,
        error=experiment.error,
        started_at=experiment.started_at,
        ended_at=experiment.ended_at,
        environment={key: experiment.environment.get(key) for key in ("python", "platform", "git")},
    )


def _outcomes(summary: dict[str, Any]) -> Outcomes:
    trials = summary["trials"] or 0
    return Outcomes(
        passed=summary["passed"],
        wrong=summary["wrong"],
        failed=summary["failed"],
        infrastructure_failures=summary["infrastructure_failures"],
        wrong_share=summary["wrong"] / trials if trials else None,
        failed_share=summary["failed"] / trials if trials else None,
        failures_by_type=summary["failures_by_type"],
    )


def build_report(store: Store, experiment_id: str | None = None) -> Report:
    """The report of an experiment (the newest by default)."""
    experiment = ex.find(store, experiment_id)
    if experiment is None:
        raise ValueError(f"no experiment {experiment_id!r} in {store.root}" if experiment_id else "the store is empty")
    eid = experiment.experiment_id
    with ex.judged_connection(store, eid) as con:
        cases = ex.fetch(con, PER_CASE)
        scorers = ex.fetch(con, SCORERS)
        span_latency = ex.fetch(con, SPAN_LATENCY, [eid])
        trial_latency = ex.fetch(con, TRIAL_LATENCY)[0]
        sample = ex.fetch(con, LATENCY_SAMPLE)[0]["sample_ms"] or []
        tokens = ex.fetch(con, TOKENS_BY_ROLE, [eid])
        summary = ex.counts(con)  # the pass rate and its interval come from the cases below
    max_k = min(max((c["attempts"] for c in cases), default=0), MAX_K)
    categories = []
    for category in sorted({c["category"] for c in cases}):
        members = [c for c in cases if c["category"] == category]
        categories.append(
            CategoryPassRate(
                category=category,
                cases=len(members),
                trials=sum(c["attempts"] for c in members),
                **_rate([c["outcomes"] for c in members], _k_rates(members, max_k)),
            )
        )
    flaky = [c["case_id"] for c in cases if 0 < c["passes"] < c["attempts"]]
    worst = sorted(cases, key=lambda c: (c["passes"] / c["attempts"], -c["failed"], c["case_id"]))[:WORST_CASES]
    return Report(
        experiment=_reported_experiment(experiment),
        trials=summary["trials"] or 0,
        cases=len(cases),
        overall=PassRate(**_rate([c["outcomes"] for c in cases], _k_rates(cases, max_k))),
        categories=categories,
        scorers=[ScorerFigures(**s) for s in scorers],
        outcomes=_outcomes(summary),
        flaky=FlakyCases(count=len(flaky), cases=flaky[:FLAKY_LISTED]),
        latency=Latency(
            trial_p50_ms=trial_latency["p50_ms"],
            trial_p95_ms=trial_latency["p95_ms"],
            trial_sample_ms=sorted(sample),
            spans=[SpanLatency(**s) for s in span_latency],
        ),
        tokens=[TokenUse(**t) for t in tokens],
        cost_usd=summary["cost_usd"],
        cost_usd_all_tries=summary["cost_usd_all_tries"],
        worst_cases=[CaseOutcomes(**{field: c[field] for field in CASE_OUTCOME_FIELDS}) for c in worst],
    )


CASE_OUTCOME_FIELDS = tuple(f.name for f in dataclasses.fields(CaseOutcomes))
