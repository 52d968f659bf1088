"""An experiment's report, every figure from DuckDB over the store and every rate with its uncertainty."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from collections import Counter
from typing import Any

import duckdb

from agenteval_instrumentation import attributes as A

from ..dataset._cases import UNCATEGORIZED
from ..errors import ExperimentNotFound
from ..run._prices import cost
from ..store import Store
from ..store._snapshots import judged_connection
from . import _experiments as ex
from ._report_data import (
    CaseOutcomes,
    CategoryPassRate,
    Conversation,
    FlakyCases,
    Latency,
    Outcomes,
    PassAtK,
    PassRate,
    Report,
    ReportedExperiment,
    ScorerFigures,
    SpanLatency,
    TokenUse,
    mixed_versions,
    unscored_warning,
)
from ._stats import (
    RateCounts,
    clustered_rate,
    known_interval,
    mean_over_counted_cases,
    pass_at_k,
    pass_hat_k,
    rate_interval95,
    values_interval95,
)

PER_CASE = f"""
SELECT t.case_id, coalesce(any_value(c.category), '{UNCATEGORIZED}') AS category,
       count(*) AS attempts, count(*) FILTER (WHERE t.passed) AS passes,
       count(*) FILTER (WHERE t.outcome = 'failed') AS failed,
       arg_min(t.error_message, t.attempt) FILTER (WHERE t.outcome = 'failed') AS a_failure,
       count(*) FILTER (WHERE t.outcome = 'wrong') AS wrong
FROM judged t LEFT JOIN cases c USING (experiment_id, case_id)
GROUP BY t.case_id ORDER BY t.case_id
"""

CASE_FAILURE_TYPES = """
SELECT case_id, failure_type, count(*) AS n FROM judged WHERE outcome = 'failed' AND list_contains(?, case_id)
GROUP BY ALL ORDER BY case_id, n DESC, failure_type
"""
"""Failures by type of some cases (the worst): asked of those alone, since a histogram per case cost a report at a
million trials 17 ms."""


UNSCORED_CASES = "SELECT count(DISTINCT case_id) AS n FROM judged WHERE unscored"
"""The cases of the trials that passed on no scorer's word (the summary counts the trials; ``unscored``: see
:func:`agenteval.store._views.judged_trials`)."""

TRIAL_LATENCY = """
SELECT quantile_cont(duration_ms, 0.5) AS p50_ms, quantile_cont(duration_ms, 0.95) AS p95_ms FROM judged
"""

LATENCY_SAMPLE = """
SELECT list(duration_ms ORDER BY duration_ms) AS sample_ms FROM (SELECT duration_ms FROM judged USING SAMPLE 2000 ROWS)
"""
"""For the latency plot: a uniform sample is enough to draw the distribution."""

CONVERSATIONS = f"""
SELECT t.trial_id, t.case_id, t.attempt,
       json_extract_string(r.attributes, '$."{A.GEN_AI_INPUT_MESSAGES}"') AS asked,
       json_extract_string(r.attributes, '$."{A.GEN_AI_OUTPUT_MESSAGES}"') AS answered
FROM judged j JOIN trial_history t USING (experiment_id, trial_id, case_id) JOIN cases c USING (experiment_id, case_id)
JOIN spans r ON r.experiment_id = t.experiment_id AND r.trial_id = t.trial_id AND r.trace_id = t.trace_id
     AND r.scope_name = '{A.RUNNER_SCOPE}' AND r.role IS NULL
WHERE json_extract_string(c."case", '$.simulated_user') IS NOT NULL AND r.experiment_id = ?
ORDER BY t.attempt, t.case_id LIMIT {{limit}}
"""
"""The conversations of trials with a simulated user, first attempts first: the user's turns and the replies
as the trial's root span recorded them."""
CONVERSATIONS_SHOWN = 10
SIMULATED_CASES = """
SELECT count(*) AS n FROM cases WHERE experiment_id = ? AND json_extract_string("case", '$.simulated_user') IS NOT NULL
"""

WORST_CASES = 10
MAX_K = 10
"""pass@k and pass^k are listed for k up to the attempts, at most this many."""
FLAKY_LISTED = 20


def _texts(messages: str | None) -> list[str]:
    try:
        parsed = json.loads(messages) if messages else []
        return [str(m["parts"][0]["content"]) for m in parsed]
    except (ValueError, KeyError, IndexError, TypeError):
        return []


def _conversation(row: dict[str, Any]) -> Conversation:
    users, replies = _texts(row["asked"]), _texts(row["answered"])
    turns: list[tuple[str, str]] = []
    for index in range(max(len(users), len(replies))):
        if index < len(users):
            turns.append(("user", users[index]))
        if index < len(replies):
            turns.append(("assistant", replies[index]))
    return Conversation(row["trial_id"], row["case_id"], row["attempt"], turns)


def _rate(cases: list[dict[str, Any]], k: list[PassAtK]) -> dict[str, Any]:
    mean, standard_error, (low, high) = clustered_rate([(c["attempts"], c["passes"]) for c in cases])
    return {
        "pass_rate": None if math.isnan(mean) else mean,
        "se": None if math.isnan(standard_error) else standard_error,
        "ci95": None if math.isnan(low) else (low, high),
        "k": k,
    }


def category_rates(cases: list[dict[str, Any]], max_k: int) -> list[CategoryPassRate]:
    """Each category's pass rate, by name, from the per-case figures."""
    # Grouped in one pass: scanning every case once per category cost cases squared where each case has its own.
    members: dict[str, list[dict[str, Any]]] = {}
    for c in cases:
        members.setdefault(c["category"], []).append(c)
    return [
        CategoryPassRate(
            category=category,
            cases=len(group),
            trials=sum(c["attempts"] for c in group),
            **_rate(group, _k_rates(group, max_k)),
        )
        for category, group in sorted(members.items())
    ]


def _k_rates(cases: list[dict[str, Any]], max_k: int) -> list[PassAtK]:
    # Cases share a few (attempts, passes) pairs: each pair's terms are computed once and weighed by its cases
    # (at 33,000 cases, 0.66 s of a 1.1 s report went to computing the same few terms per case).
    counts = Counter((c["attempts"], c["passes"]) for c in cases)
    out = []
    for k in range(1, max_k + 1):
        eligible = {pair: m for pair, m in counts.items() if pair[0] >= k}
        n = sum(eligible.values())
        if not n:
            break
        at_k, at_k_ci95 = _mean_of_cases({pair: pass_at_k(*pair, k) for pair in eligible}, eligible)
        hat_k, hat_k_ci95 = _mean_of_cases({pair: pass_hat_k(*pair, k) for pair in eligible}, eligible)
        if k == 1 and len({attempts for attempts, _ in eligible}) == 1:
            at_k_ci95 = hat_k_ci95 = _pass_rate_interval(eligible)
        out.append(PassAtK(k, n, at_k, hat_k, at_k_ci95, hat_k_ci95))
    return out


def _pass_rate_interval(cases: dict[tuple[int, int], int]) -> tuple[float, float] | None:
    """pass@1 (and pass^1) over cases of equal attempts: the mean of s_c / n is Σ s_c / Σ n, the pass rate, so it
    has the pass rate's interval (:func:`._stats.rate_interval95`), or the one figure would read two intervals.
    Over unequal attempts pass@1 weighs each case alike and the pass rate each attempt alike: two figures, and
    pass@1, a mean of one value per case, keeps the interval of such means (:func:`._stats.values_interval95`)."""
    each_case = [pair for pair, held_by in cases.items() for _ in range(held_by)]
    return known_interval(rate_interval95(RateCounts.of_cases(each_case)))


def _mean_of_cases(
    values: dict[tuple[int, int], float], cases: dict[tuple[int, int], int]
) -> tuple[float, tuple[float, float] | None]:
    """The mean of per-case values (each ``values[pair]`` held by ``cases[pair]`` cases) and its interval
    (:func:`._stats.values_interval95`): cases are independent, so the standard error is the usual one over cases."""
    mean, standard_error = mean_over_counted_cases([(values[pair], m) for pair, m in cases.items()])
    return mean, known_interval(values_interval95(mean, standard_error, sum(cases.values())))


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
        dataset_card=experiment.environment.get("dataset_card"),
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
        unscored=summary["unscored"],
    )


def build_report(
    store: Store, experiment_id: str | None = None, *, con: duckdb.DuckDBPyConnection | None = None
) -> Report:
    """The report of an experiment (the newest by default); ``con``: a connection of the store's already open
    (binding the views of a new one costs tens of ms), which the caller closes."""
    if con is not None:
        return _report(store, experiment_id, con)
    with contextlib.closing(store.connect(traces=False)) as opened:  # an experiment's report reads none
        return _report(store, experiment_id, opened)


def _report(store: Store, experiment_id: str | None, opened: duckdb.DuckDBPyConnection) -> Report:
    experiment = ex.find(store, experiment_id, con=opened)
    if experiment is None:
        raise ExperimentNotFound(
            f"no experiment {experiment_id!r} in {store.root}" if experiment_id else "the store is empty"
        )
    eid = experiment.experiment_id
    with judged_connection(store, eid, con=opened) as con:
        cases = ex.fetch(con, PER_CASE)
        scorers = ex.fetch(con, "SELECT * FROM scorer_figures")
        span_latency = ex.fetch(con, "SELECT * FROM span_latency")
        trial_latency = ex.fetch(con, TRIAL_LATENCY)[0]
        sample = ex.fetch(con, LATENCY_SAMPLE)[0]["sample_ms"] or []
        tokens = ex.fetch(con, "SELECT * FROM tokens_by_role")
        simulated = ex.fetch(con, SIMULATED_CASES, [eid])[0]["n"]
        conversations = ex.fetch(con, CONVERSATIONS.format(limit=CONVERSATIONS_SHOWN), [eid]) if simulated else []
        summary = ex.counts(con)  # the pass rate and its interval come from the cases below
        unscored_cases = ex.fetch(con, UNSCORED_CASES)[0]["n"] if summary["unscored"] else 0
        worst = sorted(cases, key=lambda c: (c["passes"] / c["attempts"], -c["failed"], c["case_id"]))[:WORST_CASES]
        worst_cases = _case_outcomes(con, worst)
    max_k = min(max((c["attempts"] for c in cases), default=0), MAX_K)
    categories = category_rates(cases, max_k)
    flaky = [c["case_id"] for c in cases if 0 < c["passes"] < c["attempts"]]
    scorer_figures = [ScorerFigures.from_row(s) for s in scorers]
    return Report(
        experiment=_reported_experiment(experiment),
        trials=summary["trials"] or 0,
        cases=len(cases),
        overall=PassRate(**_rate(cases, _k_rates(cases, max_k))),
        categories=categories,
        scorers=scorer_figures,
        outcomes=_outcomes(summary),
        flaky=FlakyCases(count=len(flaky), cases=flaky[:FLAKY_LISTED]),
        latency=Latency(
            trial_p50_ms=trial_latency["p50_ms"],
            trial_p95_ms=trial_latency["p95_ms"],
            trial_sample_ms=sorted(sample),
            spans=[SpanLatency(**s) for s in span_latency],
        ),
        tokens=[
            TokenUse(**t, cost_usd=cost(experiment.prices, t["model"], t["input_tokens"], t["output_tokens"]))
            for t in tokens
        ],
        cost_usd=summary["cost_usd"],
        cost_usd_all_tries=summary["cost_usd_all_tries"],
        worst_cases=worst_cases,
        conversations=[_conversation(row) for row in conversations],
        shards=ex.shard_progress(store, eid, {c["case_id"]: c["attempts"] for c in cases}, opened),
        warnings=[
            *unscored_warning(summary["unscored"], unscored_cases, summary["trials"] or 0),
            *mixed_versions(scorer_figures),
        ],
    )


CASE_OUTCOME_FIELDS = tuple(f.name for f in dataclasses.fields(CaseOutcomes) if f.name != "failures_by_type")


def _case_outcomes(con: duckdb.DuckDBPyConnection, cases: list[dict[str, Any]]) -> list[CaseOutcomes]:
    """``cases`` (rows of :data:`PER_CASE`) with their failures by type, over a judged connection."""
    by_type: dict[str, dict[str, int]] = {}
    failing = [c["case_id"] for c in cases if c["failed"]]
    for row in ex.fetch(con, CASE_FAILURE_TYPES, [failing]) if failing else []:
        by_type.setdefault(row["case_id"], {})[row["failure_type"]] = row["n"]
    return [
        CaseOutcomes(
            **{field: c[field] for field in CASE_OUTCOME_FIELDS}, failures_by_type=by_type.get(c["case_id"], {})
        )
        for c in cases
    ]
