"""Comparing two experiments case by case, and the CI gate's decision on top of the comparison."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from . import experiments as ex
from .options import DEFAULT_ALPHA, DEFAULT_MAX_DROP, DEFAULT_MAX_INFRA
from .stats import PairedDifference, paired_difference
from .store import Store

MIN_SHARED_CASES = 10
"""Fewer shared cases than this and a comparison says nothing worth acting on."""

CASE_RATES = """
SELECT t.case_id, any_value(c.category) AS category, avg(t.passed::INT) AS rate, count(*) AS attempts,
       count(*) FILTER (WHERE t.outcome = 'failed') AS failed
FROM judged t LEFT JOIN cases c USING (experiment_id, case_id)
GROUP BY t.case_id
"""
"""Per-case pass rates of the experiment whose trials are in ``judged``."""

RUN_FIGURES = """
SELECT count(*) AS trials, count(*) FILTER (WHERE infrastructure) AS infrastructure_failures,
       quantile_cont(duration_ms, 0.5) AS latency_p50_ms, quantile_cont(duration_ms, 0.95) AS latency_p95_ms,
       avg(input_tokens + output_tokens) AS tokens_per_trial, sum(cost_usd) AS cost_usd
FROM judged
"""


def case_rates(store: Store, experiment_id: str) -> list[dict[str, Any]]:
    """Each case's pass rate over its attempts, with its category."""
    with ex.judged_connection(store, experiment_id) as con:
        return ex.fetch(con, CASE_RATES)


class NotComparable(ValueError):
    """The two experiments cannot be compared (too few shared cases, or one is missing)."""


@dataclasses.dataclass
class Comparison:
    """Candidate against baseline, paired by case."""

    baseline: ex.Experiment
    candidate: ex.Experiment
    overall: PairedDifference
    categories: dict[str, PairedDifference]
    newly_failing: list[dict[str, Any]]
    newly_passing: list[dict[str, Any]]
    failure_types: dict[str, tuple[int, int]]
    figures: dict[str, dict[str, Any]]
    changes: dict[str, tuple[Any, Any]]

    def to_dict(self) -> dict[str, Any]:
        def paired(d: PairedDifference) -> dict[str, Any]:
            low, high = d.interval()
            return {
                **dataclasses.asdict(d),
                "ci95": [low, high],
                "p_drop": d.p_drop(),
                "minimum_detectable_drop": d.minimum_detectable_drop(),
            }

        return {
            "baseline": self.baseline.experiment_id,
            "candidate": self.candidate.experiment_id,
            "overall": paired(self.overall),
            "categories": {k: paired(v) for k, v in self.categories.items()},
            "newly_failing": self.newly_failing,
            "newly_passing": self.newly_passing,
            "failure_types": {k: {"baseline": a, "candidate": b} for k, (a, b) in self.failure_types.items()},
            "figures": self.figures,
            "changes": {k: {"baseline": a, "candidate": b} for k, (a, b) in self.changes.items()},
        }


def _run(store: Store, experiment_id: str) -> tuple[dict[str, dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """Per-case rates, run figures and summary of one experiment, from one computation of its trials."""
    with ex.judged_connection(store, experiment_id) as con:
        rates = {row["case_id"]: row for row in ex.fetch(con, CASE_RATES)}
        return rates, ex.fetch(con, RUN_FIGURES)[0], ex.summarize(store, experiment_id, con)


def _experiment(store: Store, experiment_id: str) -> ex.Experiment:
    found = ex.find(store, experiment_id)
    if found is None:
        raise NotComparable(f"no experiment {experiment_id!r} in {store.root}")
    return found


def compare(store: Store, baseline_id: str, candidate_id: str, min_shared: int = MIN_SHARED_CASES) -> Comparison:
    """Pair the two experiments' trials by case and compare them."""
    baseline, candidate = _experiment(store, baseline_id), _experiment(store, candidate_id)
    a, figures_a, summary_a = _run(store, baseline.experiment_id)
    b, figures_b, summary_b = _run(store, candidate.experiment_id)
    shared = sorted(set(a) & set(b))
    if len(shared) < min_shared:
        raise NotComparable(
            f"{baseline.experiment_id} and {candidate.experiment_id} share {len(shared)} case(s); at least "
            f"{min_shared} are needed to compare. Run both on the same dataset (and --sample seed)."
        )
    overall = paired_difference({c: a[c]["rate"] for c in shared}, {c: b[c]["rate"] for c in shared})
    categories: dict[str, PairedDifference] = {}
    for category in sorted({a[c]["category"] or "uncategorized" for c in shared}):
        members = [c for c in shared if (a[c]["category"] or "uncategorized") == category]
        categories[category] = paired_difference({c: a[c]["rate"] for c in members}, {c: b[c]["rate"] for c in members})

    def moved(c: str) -> dict[str, Any]:
        return {"case_id": c, "category": a[c]["category"], "baseline": a[c]["rate"], "candidate": b[c]["rate"]}

    newly_failing = [moved(c) for c in shared if a[c]["rate"] >= 0.5 > b[c]["rate"]]
    newly_passing = [moved(c) for c in shared if b[c]["rate"] >= 0.5 > a[c]["rate"]]
    types_a, types_b = summary_a["failures_by_type"], summary_b["failures_by_type"]
    failure_types = {t: (types_a.get(t, 0), types_b.get(t, 0)) for t in sorted(set(types_a) | set(types_b))}
    figures = {"baseline": figures_a, "candidate": figures_b}
    return Comparison(
        baseline,
        candidate,
        overall,
        categories,
        newly_failing,
        newly_passing,
        failure_types,
        figures,
        _changes(baseline, candidate),
    )


def _changes(a: ex.Experiment, b: ex.Experiment) -> dict[str, tuple[Any, Any]]:
    """What differs between the two runs' configurations."""
    pairs: dict[str, tuple[Any, Any]] = {
        "agent": (a.agent, b.agent),
        "version": (a.version, b.version),
        "dataset": (a.dataset_name, b.dataset_name),
        "dataset_hash": (a.dataset_hash, b.dataset_hash),
        "git_commit": ((a.environment.get("git") or {}).get("commit"), (b.environment.get("git") or {}).get("commit")),
    }
    options_a, options_b = a.options, b.options
    for key in sorted(set(options_a) | set(options_b)):
        if key != "dataset":
            pairs[f"option {key}"] = (options_a.get(key), options_b.get(key))
    return {k: v for k, v in pairs.items() if json.dumps(v[0], default=str) != json.dumps(v[1], default=str)}


# --- the gate -------------------------------------------------------------------------------

PASS, REGRESSION, REFUSED = 0, 1, 3


@dataclasses.dataclass
class GateDecision:
    """The gate's verdict, its exit code, and why."""

    exit_code: int
    verdict: str
    reasons: list[str]
    comparison: Comparison | None = None


def gate(
    store: Store,
    baseline_id: str,
    candidate_id: str,
    *,
    max_drop: float = DEFAULT_MAX_DROP,
    alpha: float = DEFAULT_ALPHA,
    max_infra: float = DEFAULT_MAX_INFRA,
) -> GateDecision:
    """Exit 0: no regression. Exit 1: a regression, meaning the candidate's pass rate is below the
    baseline's by more than ``max_drop`` AND the one-sided paired test rejects "no drop" at ``alpha``
    (p = Phi(difference / SE) < alpha). Exit 3: refused, when more than ``max_infra`` of either
    experiment's trials failed for infrastructure reasons, or the two cannot be compared."""
    try:
        comparison = compare(store, baseline_id, candidate_id)
    except NotComparable as exc:
        return GateDecision(REFUSED, "refused", [str(exc)])
    refusals = []
    for role, figures in comparison.figures.items():
        trials, infra = figures["trials"], figures["infrastructure_failures"]
        share = infra / trials if trials else 0.0
        if share > max_infra:
            experiment = comparison.baseline if role == "baseline" else comparison.candidate
            refusals.append(
                f"{share:.1%} of the {role}'s trials ({infra} of {trials}) failed for infrastructure reasons "
                f"(limit {max_infra:.0%}): the API, not the agent, decided them. Re-run the failed ones with "
                f"agenteval run --resume {experiment.experiment_id} --retry-failed infra"
            )
    if refusals:
        return GateDecision(REFUSED, "refused", refusals, comparison)
    overall = comparison.overall
    drop, p_value = -overall.difference, overall.p_drop()
    mde = overall.minimum_detectable_drop(alpha)
    numbers = (
        f"baseline {overall.baseline:.1%}, candidate {overall.candidate:.1%} over {overall.cases} shared cases; "
        f"difference {overall.difference:+.1%} (95% CI {overall.interval()[0]:+.1%} to {overall.interval()[1]:+.1%}), "
        f"one-sided p = {p_value:.3f}"
    )
    power_note = f"smallest drop this comparison detects with 80% power: {mde:.1%}"
    if drop > max_drop and p_value < alpha:
        return GateDecision(
            REGRESSION,
            "regression",
            [numbers, f"the drop exceeds {max_drop:.0%} and is significant at alpha {alpha}", power_note],
            comparison,
        )
    why = f"the drop is within {max_drop:.0%}" if drop <= max_drop else f"the drop is not significant at alpha {alpha}"
    if mde > max(max_drop, 0.0) and drop > 0:
        why += f"; this comparison could not reliably see drops under {mde:.1%} (underpowered)"
    return GateDecision(PASS, "no regression", [numbers, why, power_note], comparison)
