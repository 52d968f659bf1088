"""An experiment's report, every figure from DuckDB over the store and every rate with its uncertainty."""

from __future__ import annotations

import math
from typing import Any

from ..store import Store
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


SPAN_LATENCY = """
SELECT coalesce(operation, 'other') AS operation, count(*) AS spans,
       quantile_cont(duration_ms, 0.5) AS p50_ms, quantile_cont(duration_ms, 0.95) AS p95_ms
FROM spans WHERE experiment_id = ? AND scope_name IS DISTINCT FROM 'agenteval.runner'
GROUP BY ALL ORDER BY spans DESC
"""

TRIAL_LATENCY = """
SELECT quantile_cont(duration_ms, 0.5) AS p50_ms, quantile_cont(duration_ms, 0.95) AS p95_ms FROM judged
"""

LATENCY_SAMPLE = """
SELECT list(duration_ms) AS sample_ms FROM (SELECT duration_ms FROM judged USING SAMPLE 2000 ROWS)
"""
"""For the latency plot: a uniform sample is enough to draw the distribution."""

TOKENS_BY_ROLE = """
SELECT coalesce(role, 'agent') AS role, count(*) AS model_calls,
       sum(input_tokens)::BIGINT AS input_tokens, sum(output_tokens)::BIGINT AS output_tokens,
       coalesce(response_model, request_model) AS model
FROM spans WHERE experiment_id = ? AND operation = 'chat' GROUP BY ALL ORDER BY role, model
"""

WORST_CASES = 10
MAX_K = 10
"""pass@k and pass^k are listed for k up to the attempts, at most this many."""
FLAKY_LISTED = 20


def _rate(values_by_case: list[list[int]]) -> dict[str, Any]:
    mean, standard_error = clustered_mean(values_by_case)
    low, high = interval95(mean, standard_error)
    return {
        "pass_rate": None if math.isnan(mean) else mean,
        "se": None if math.isnan(standard_error) else standard_error,
        "ci95": None if math.isnan(low) else [low, high],
    }


def _k_rates(cases: list[dict[str, Any]], max_k: int) -> list[dict[str, Any]]:
    out = []
    for k in range(1, max_k + 1):
        eligible = [c for c in cases if c["attempts"] >= k]
        if not eligible:
            break
        out.append(
            {
                "k": k,
                "cases": len(eligible),
                "pass_at_k": sum(pass_at_k(c["attempts"], c["passes"], k) for c in eligible) / len(eligible),
                "pass_hat_k": sum(pass_hat_k(c["attempts"], c["passes"], k) for c in eligible) / len(eligible),
            }
        )
    return out


def build_report(store: Store, experiment_id: str | None = None) -> dict[str, Any]:
    """The report of an experiment (the newest by default), as plain data."""
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
            {
                "category": category,
                "cases": len(members),
                "trials": sum(c["attempts"] for c in members),
                **_rate([c["outcomes"] for c in members]),
                "k": _k_rates(members, max_k),
            }
        )
    flaky = [c["case_id"] for c in cases if 0 < c["passes"] < c["attempts"]]
    worst = sorted(cases, key=lambda c: (c["passes"] / c["attempts"], -c["failed"], c["case_id"]))[:WORST_CASES]
    trials = summary["trials"] or 0
    return {
        "experiment": {
            "id": eid,
            "name": experiment.name,
            "dataset": experiment.dataset_name,
            "dataset_hash": experiment.dataset_hash[:12],
            "agent": experiment.agent,
            "version": experiment.version,
            "status": experiment.status,
            "error": experiment.error,
            "started_at": experiment.started_at,
            "ended_at": experiment.ended_at,
            "environment": {
                "python": experiment.environment.get("python"),
                "platform": experiment.environment.get("platform"),
                "git": experiment.environment.get("git"),
            },
        },
        "trials": trials,
        "cases": len(cases),
        "overall": {**_rate([c["outcomes"] for c in cases]), "k": _k_rates(cases, max_k)},
        "categories": categories,
        "scorers": scorers,
        "outcomes": {
            "passed": summary["passed"],
            "wrong": summary["wrong"],
            "failed": summary["failed"],
            "infrastructure_failures": summary["infrastructure_failures"],
            "wrong_share": summary["wrong"] / trials if trials else None,
            "failed_share": summary["failed"] / trials if trials else None,
            "failures_by_type": summary["failures_by_type"],
        },
        "flaky": {"count": len(flaky), "cases": flaky[:FLAKY_LISTED]},
        "latency": {
            "trial_p50_ms": trial_latency["p50_ms"],
            "trial_p95_ms": trial_latency["p95_ms"],
            "trial_sample_ms": sorted(sample),
            "spans": span_latency,
        },
        "tokens": tokens,
        "cost_usd": summary["cost_usd"],
        "cost_usd_all_tries": summary["cost_usd_all_tries"],
        "worst_cases": [
            {
                "case_id": c["case_id"],
                "category": c["category"],
                "passes": c["passes"],
                "attempts": c["attempts"],
                "failed": c["failed"],
                "a_failure": c["a_failure"],
            }
            for c in worst
        ],
    }
