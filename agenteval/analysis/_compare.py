"""Comparing two experiments case by case, and the CI gate's decision on top of the comparison."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import duckdb

from ..dataset._cases import UNCATEGORIZED
from ..errors import AgentevalError, SeveralProblems
from ..render._text_safety import markdown_cell
from ..run._failures import SCORER_ERROR
from ..run._options import DEFAULT_ALPHA, DEFAULT_MAX_DROP, DEFAULT_MAX_INFRA, MAX_ALPHA
from ..store import NoStore, Store
from ..store import _views as views
from ..store._doctor import damaged_store_message
from ..store._snapshots import judged_connection
from . import _experiments as ex
from ._compare_figures import (
    AT_MOST,
    LABELS,
    QUANTILES,
    difference_dict,
    figure_differences,
    quantile_levels,
    run_quantiles,
)
from ._quantiles import RunQuantile
from ._report_data import ScorerFigures, ScorerVersion, versions_text
from ._stats import (
    PairedDifference,
    detectable_drops,
    no_spread_note,
    one_sided_interval_label,
    paired_difference,
    shown_p,
)

MIN_SHARED_CASES = 10
"""Fewer shared cases than this and a comparison says nothing worth acting on."""

CASE_RATES = f"""
SELECT t.case_id, any_value(c.category) AS category, avg(t.passed::INT) AS rate, count(*) AS attempts,
       count(*) FILTER (WHERE t.outcome = 'failed') AS failed, fsum(t.duration_ms) / count(t.duration_ms) AS latency_ms,
       avg(t.input_tokens + t.output_tokens) AS tokens, fsum(t.cost_usd) / count(t.cost_usd) AS cost_usd,
       count(t.duration_ms) AS timed, {AT_MOST}
FROM judged t LEFT JOIN cases c USING (experiment_id, case_id)
GROUP BY t.case_id
"""
"""Per-case pass rates of the experiment whose trials are in ``judged``, and the per-case means of the figures
compared beside them (:data:`._compare_figures.FIGURES`); its parameters are the run's latency quantiles (AT_MOST)."""

RUN_FIGURES = """
SELECT count(*) AS trials, count(*) FILTER (WHERE infrastructure) AS infrastructure_failures,
       quantile_cont(duration_ms, {levels}) AS latency_quantiles,
       avg(input_tokens + output_tokens) AS tokens_per_trial, fsum(cost_usd) AS cost_usd,
       fsum(duration_ms) / count(duration_ms) AS latency_mean_ms, fsum(cost_usd) / count(cost_usd) AS cost_per_trial_usd
FROM judged
"""
"""The run's figures; ``levels``, those of the latency quantiles (:func:`._compare_figures.quantile_levels`: the p50
and p95, then those their intervals need), in one list: one read of the values for all of them. A literal, not a
parameter: bound as one, DuckDB took 30 ms more at a million trials.
Infrastructure failures are counted here once, from ``judged``'s flag (the taxonomy's, with a
``scorer_error`` from the current scores): the gate refuses on this count and compare warns on it.
Means as exact sums over counts, not ``avg``: a float ``avg`` depends on the order DuckDB's threads add in, and a
comparison read from saved figures must equal the one computed, to the last bit."""

INFRASTRUCTURE_BY_TYPE = "SELECT failure_type, count(*) AS n FROM judged WHERE infrastructure GROUP BY 1"
"""A run's infrastructure failures by type: asked only of a run that had some (a histogram in ``RUN_FIGURES`` cost a
comparison at a million trials 30 ms for none)."""


def case_rates(store: Store, experiment_id: str) -> list[dict[str, Any]]:
    """Each case's pass rate over its attempts, with its category."""
    with judged_connection(store, experiment_id) as con:
        return ex.fetch(con, CASE_RATES, [None] * len(QUANTILES))


INFRASTRUCTURE_BY_CASE = "SELECT case_id, count(*) AS n FROM judged WHERE infrastructure GROUP BY case_id"
"""Each case's infrastructure failures, read only for a run that had some: as a column of CASE_RATES it would be one
more aggregate over every trial of every run compared, most of which have none."""

PLANNED_CASES = "SELECT count(*) AS n FROM cases WHERE experiment_id = ?"
"""How many cases the experiment set out to run (written when it started, before any trial)."""

INCOMPLETE, DIFFERENT_DATASETS, UNSHARED_CASES = "incomplete", "different_datasets", "unshared_cases"
"""Kinds of comparison warning; the gate refuses on the first two unless told otherwise."""
INFRASTRUCTURE = "infrastructure_failures"
"""Either run had infrastructure failures: the gate refuses past ``--max-infra``, compare warns on any."""
DIFFERENT_SCORERS = "different_scorers"
"""A pass/fail scorer judged one run's answers and not the other's (given to one rescore, or a judge in one run): a
trial passes only when every pass/fail scorer that judged it passed, so the pass rates are not like for like."""
DIFFERENT_SCORER_VERSIONS = "different_scorer_versions"
"""A scorer's current scores come from other versions in one run than in the other (another judge model or prompt):
its figures are not like for like."""
UNSCORED = "unscored_trials"
"""Either run has trials no pass/fail scorer judged, which pass whenever they do not fail."""
UNEQUAL_ATTEMPTS = "unequal_attempts"
"""Either run's shared cases ran different numbers of attempts: its pass rate here weighs each case alike, where the
report's counts trials, so the two read differently."""
ABOUT_THE_FIGURES = (
    UNSHARED_CASES,
    INFRASTRUCTURE,
    DIFFERENT_SCORERS,
    DIFFERENT_SCORER_VERSIONS,
    UNSCORED,
    UNEQUAL_ATTEMPTS,
)
"""Warnings about what the figures of two comparable runs mean, left out of why two runs cannot be compared."""
SAME_EXPERIMENT = "same_experiment"
"""A comparison of an experiment with itself, which no difference can come out of: the gate refuses it always."""


class NotComparable(SeveralProblems, ValueError):
    """The two experiments cannot be compared (too few shared cases, one missing, or an ambiguous id)."""


@dataclasses.dataclass(frozen=True)
class ComparisonWarning:
    """Why a comparison is not like for like: one run is unfinished, the datasets differ, or each ran cases the
    other did not."""

    kind: str
    message: str


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
    warnings: list[ComparisonWarning] = dataclasses.field(default_factory=list)
    figure_differences: dict[str, PairedDifference | None] = dataclasses.field(default_factory=dict)
    """Candidate minus baseline of the per-trial means among ``figures``, paired by case (``_compare_figures``)."""
    had_infrastructure_passed: PairedDifference | None = None
    """``overall`` as it would read had every infrastructure failure of the candidate's passed (None: it had none):
    a drop the gate calls a regression must be one on this too, as the API's failures are not the agent's."""

    def to_dict(self) -> dict[str, Any]:
        def paired(d: PairedDifference) -> dict[str, Any]:
            # A category of one shared case has no standard error (NaN): null, as in a report, since NaN is not
            # JSON and `compare --json` must parse everywhere (jq, JSON.parse refused it).
            if math.isnan(d.standard_error):
                unknown = dict.fromkeys(("standard_error", "ci95", "p_drop", "minimum_detectable_drop"))
                return {**dataclasses.asdict(d), **unknown}
            return {
                **dataclasses.asdict(d),
                "ci95": list(d.interval()),
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
            "figure_labels": LABELS,
            "figure_differences": {k: difference_dict(d) for k, d in self.figure_differences.items()},
            "changes": {k: {"baseline": a, "candidate": b} for k, (a, b) in self.changes.items()},
            "warnings": [dataclasses.asdict(w) for w in self.warnings],
        }


@dataclasses.dataclass(frozen=True)
class _Run:
    """One experiment's side of a comparison, from one computation of its trials."""

    rates: dict[str, dict[str, Any]]
    """``CASE_RATES`` rows by case id."""
    figures: dict[str, Any]
    """``RUN_FIGURES``, with each latency quantile under its key, and ``planned_cases``."""
    summary: ex.Figures
    quantiles: dict[str, RunQuantile]
    scorer_versions: dict[str, list[ScorerVersion]]
    """The versions that gave each scorer's current scores (``scorer_figures``)."""
    pass_fail: frozenset[str] = frozenset()
    """The scorers whose current scores decide whether a trial passed (not continuous ones)."""
    infrastructure_by_case: dict[str, int] = dataclasses.field(default_factory=dict)
    """Infrastructure failures by case id, of the cases that had any."""


def _run(store: Store, experiment_id: str) -> _Run:
    with judged_connection(store, experiment_id) as con:
        timed = ex.fetch(con, "SELECT count(duration_ms) AS n FROM judged")[0]["n"]
        levels = quantile_levels(timed)
        row = ex.fetch(con, RUN_FIGURES.format(levels=[float(level) for level in levels]))[0]
        values = row["latency_quantiles"]
        figures: dict[str, Any] = {}
        for key, value in row.items():  # each quantile under its own key, where the list was: the keys keep their order
            if key == "latency_quantiles":
                figures.update({f.key: values[i] if values else None for i, f in enumerate(QUANTILES)})
            else:
                figures[key] = value
        rates = {
            row["case_id"]: row for row in ex.fetch(con, CASE_RATES, [figures[figure.key] for figure in QUANTILES])
        }
        figures["planned_cases"] = ex.fetch(con, PLANNED_CASES, [experiment_id])[0]["n"]
        infra = bool(figures["infrastructure_failures"])
        by_type = ex.fetch(con, INFRASTRUCTURE_BY_TYPE) if infra else []
        figures["infrastructure_by_type"] = {row["failure_type"]: row["n"] for row in by_type}
        by_case = {row["case_id"]: row["n"] for row in ex.fetch(con, INFRASTRUCTURE_BY_CASE)} if infra else {}
        scorers = [ScorerFigures.from_row(row) for row in ex.fetch(con, "SELECT * FROM scorer_figures")]
        versions = {s.scorer: s.versions for s in scorers}
        # The pass/fail scorers that could not judge some answers, each with the version of most of its current
        # scores (a judge's names its model): what the rescore that judges them again must run.
        figures["unjudging_scorers"] = {
            s.scorer: s.versions[0].version for s in scorers if s.errors and not s.continuous and s.versions
        }
        quantiles = run_quantiles(levels, values, rates)
        pass_fail = frozenset(s.scorer for s in scorers if not s.continuous)
        summary = ex.summarize(store, experiment_id, con)
        figures["unscored_trials"] = summary.unscored  # counted once, by the summary
        return _Run(rates, figures, summary, quantiles, versions, pass_fail, by_case)


def _experiment(store: Store, experiment_id: str) -> ex.Experiment:
    try:
        found = ex.find(store, experiment_id)
    except ex.EmptyId:  # a usage error (exit 2), as for every other command, not an incomparable pair
        raise
    except ValueError as exc:  # an id prefix that matches several experiments (its message says to give more)
        raise NotComparable(str(exc)) from exc
    if found is None:
        raise NotComparable(f"no experiment {experiment_id!r} in {store.root}")
    return found


def _status_warning(
    store: Store, role: str, experiment: ex.Experiment, cases_run: int, planned: int
) -> list[ComparisonWarning]:
    if experiment.status == ex.COMPLETED:
        return []
    if experiment.options.get("shard"):
        eid = experiment.experiment_id
        unfinished = [s for s in ex.shard_progress(store, eid, {}) if s.status != ex.COMPLETED]
        return [
            ComparisonWarning(
                INCOMPLETE,
                f"the {role} {eid} is {experiment.status}, not completed: shard(s) "
                + ", ".join(f"{s.shard} ({s.status})" for s in unfinished)
                + f" have not completed. Run each with --experiment {eid} --shard K/N (or continue one with "
                f"agenteval run --resume {eid} --shard K/N{store.as_option()})",
            )
        ]
    return [
        ComparisonWarning(
            INCOMPLETE,
            f"the {role} {experiment.experiment_id} is {experiment.status}, not completed: {cases_run} of its "
            f"{planned} cases have trials, and its pass rate covers only those. Finish it with "
            f"agenteval run --resume {experiment.experiment_id}{store.as_option()}",
        )
    ]


def _same_warning(a: ex.Experiment, b: ex.Experiment) -> list[ComparisonWarning]:
    if a.experiment_id != b.experiment_id:
        return []
    return [
        ComparisonWarning(
            SAME_EXPERIMENT,
            f"the baseline and the candidate are the same experiment, {a.experiment_id}: every difference is 0 "
            "whatever it is worth: give two different experiments",
        )
    ]


def _dataset_warning(store: Store, a: ex.Experiment, b: ex.Experiment, shared: list[str]) -> list[ComparisonWarning]:
    """Case ids pair cases only within one dataset: a line number in one file is another case in another file.
    Samples of one dataset share its name and hash, so they stay comparable on the cases both ran; so do runs of one
    dataset whose hashes differ but whose shared cases are the same, as each run stored them (the generated
    ``arithmetic`` at another ``--cases``: its first cases are the same)."""
    if a.dataset_name != b.dataset_name:
        why = f"the baseline ran dataset {a.dataset_name!r} and the candidate {b.dataset_name!r}"
    elif a.dataset_hash != b.dataset_hash:
        differing = _differing_cases(store, a.experiment_id, b.experiment_id, shared)
        if differing == 0:
            return []
        which = "" if differing is None else f": {differing} of the {len(shared)} cases both ran differ"
        why = (
            f"the dataset {a.dataset_name!r} changed between the runs (content hash {a.dataset_hash[:12]} -> "
            f"{b.dataset_hash[:12]}{which})"
        )
    else:
        return []
    return [
        ComparisonWarning(
            DIFFERENT_DATASETS, f"{why}: the same case id may name different cases. Run both on the same dataset"
        )
    ]


def _differing_cases(store: Store, baseline_id: str, candidate_id: str, shared: list[str]) -> int | None:
    """How many of the ``shared`` case ids name another case in each run (the whole case, as each run stored it);
    None when that cannot be told (a case of either run stored without its whole text, or not at all)."""
    (row,) = store.rows(
        'WITH a AS (SELECT case_id, any_value("case") AS body FROM cases WHERE experiment_id = ? GROUP BY case_id),'
        ' b AS (SELECT case_id, any_value("case") AS body FROM cases WHERE experiment_id = ? GROUP BY case_id)'
        " SELECT count(*) AS found, count(*) FILTER (a.body IS DISTINCT FROM b.body) AS differing,"
        " count(*) FILTER (a.body IS NULL OR b.body IS NULL) AS unknown"
        " FROM a JOIN b USING (case_id) WHERE case_id IN (SELECT unnest(?::VARCHAR[]))",
        [baseline_id, candidate_id, shared],
    )
    if row["found"] != len(shared) or row["unknown"]:
        return None
    return int(row["differing"])


def _unshared_warning(a: dict[str, Any], b: dict[str, Any], shared: int) -> list[ComparisonWarning]:
    only_a, only_b = len(a) - shared, len(b) - shared
    if not only_a and not only_b:
        return []
    return [
        ComparisonWarning(
            UNSHARED_CASES,
            f"compared on the {shared} cases both ran; {only_a} case(s) only the baseline ran and {only_b} only "
            "the candidate ran are left out",
        )
    ]


def _unequal_attempts_warning(
    runs: Mapping[str, Mapping[str, dict[str, Any]]], shared: list[str]
) -> list[ComparisonWarning]:
    """Warn of each run (its ``CASE_RATES`` rows by role) whose shared cases ran unequal attempts: a comparison pairs
    cases, so each run's rate is the mean of its cases' rates, which then differs from the share of its trials that
    passed (a case of 1 attempt weighs as much as one of 3); the gate's "baseline X%" read as the report's pass rate."""
    warnings = []
    for role, rates in runs.items():
        attempts = [rates[c]["attempts"] for c in shared]
        if min(attempts, default=0) == max(attempts, default=0):
            continue
        case_mean = sum(rates[c]["rate"] for c in shared) / len(shared)
        trial_share = sum(rates[c]["rate"] * rates[c]["attempts"] for c in shared) / sum(attempts)
        warnings.append(
            ComparisonWarning(
                UNEQUAL_ATTEMPTS,
                f"the {role}'s cases ran {min(attempts)} to {max(attempts)} attempts: its pass rate here, "
                f"{case_mean:.1%}, is the mean of its cases' rates (each case weighs alike, as the pairing needs), "
                f"where the share of its trials that passed in these cases is {trial_share:.1%}",
            )
        )
    return warnings


def _judging(store: Store, experiment_id: str, run: _Run, scorers: frozenset[str], shared: list[str]) -> list[str]:
    """Those of ``scorers`` (of the run's pass/fail ones) that judged an answer of a ``shared`` case: all of them when
    the run ran no other case; else read from its current scores, since a scorer may apply to its other cases only
    (a must_contain of one case that one sample drew), which the figures, summed over cases, cannot tell."""
    if not scorers or len(run.rates) == len(shared):
        return sorted(scorers)
    sql = (
        f"SELECT DISTINCT scorer FROM ({views.counted_scores(experiment_id)}) WHERE NOT coalesce(continuous, false) "
        "AND list_contains(?, scorer) AND list_contains(?, case_id) ORDER BY scorer"
    )
    return [row["scorer"] for row in store.rows(sql, [sorted(scorers), shared])]


def _scorer_version_warning(a: _Run, b: _Run) -> list[ComparisonWarning]:
    """Scorers both runs have whose current scores come from different versions (an LLM judge's: prompt and model):
    a pass rate judged by one judge against one judged by another measures the judges as much as the agents."""
    differing = []
    for scorer in sorted(set(a.scorer_versions) & set(b.scorer_versions)):
        sides = [versions_text(run.scorer_versions[scorer]) for run in (a, b)]
        if sorted(v.version for v in a.scorer_versions[scorer]) != sorted(v.version for v in b.scorer_versions[scorer]):
            differing.append(f"{scorer} is {sides[0]} in the baseline and {sides[1]} in the candidate")
    if not differing:
        return []
    return [
        ComparisonWarning(
            DIFFERENT_SCORER_VERSIONS,
            f"the current scores come from different scorer versions: {'; '.join(differing)}. The difference may "
            "come from the scorers, not the agents: rescore both with the same judge (agenteval rescore ID --judge "
            "MODEL)",
        )
    ]


def _scorer_set_warning(store: Store, runs: dict[str, tuple[str, _Run]], shared: list[str]) -> list[ComparisonWarning]:
    """Pass/fail scorers that judged one run's answers of the shared cases and not the other's: two identical runs,
    one rescored with a scorer the other never had, read as a regression of 40 points and the gate said so (exit 1)
    without a word. ``runs``: each role's experiment id and run. A run that answered none of the shared cases has no
    scores to miss (every trial failed)."""
    (a_id, a), (b_id, b) = runs["baseline"], runs["candidate"]
    answered = [any(run.rates[c]["attempts"] > run.rates[c]["failed"] for c in shared) for run in (a, b)]
    only = {
        "baseline": _judging(store, a_id, a, a.pass_fail - b.pass_fail, shared) if answered[1] else [],
        "candidate": _judging(store, b_id, b, b.pass_fail - a.pass_fail, shared) if answered[0] else [],
    }
    said = [f"{', '.join(names)} judged only the {role}'s answers" for role, names in only.items() if names]
    if not said:
        return []
    return [
        ComparisonWarning(
            DIFFERENT_SCORERS,
            f"the pass/fail scorers differ: {' and '.join(said)}. A trial passes only when every pass/fail scorer "
            "that judged it passed, so the difference may come from the scorers, not the agents: rescore both with "
            "the same scorers (agenteval rescore ID --scorer NAME, or --judge MODEL for a judge)",
        )
    ]


def _infrastructure_warning(
    baseline: ex.Experiment, candidate: ex.Experiment, figures: dict[str, dict[str, Any]], store_option: str
) -> list[ComparisonWarning]:
    """A pass rate moved by rate limits or a judge that was down is not the agent's doing: say how many trials the
    infrastructure decided in each run, by type, and what clears them."""
    counted = {role: figures[role]["infrastructure_failures"] for role in ("baseline", "candidate")}
    if not any(counted.values()):
        return []
    sides = [f"the {role} {_infrastructure_count(figures[role])}" for role in counted]
    remedies = []
    for role, experiment in (("baseline", baseline), ("candidate", candidate)):
        if counted[role]:
            remedy = _infrastructure_remedy(experiment, figures[role], store_option)
            remedies.append(f"For the {role}, {remedy[0].lower()}{remedy[1:]}.")
    return [
        ComparisonWarning(
            INFRASTRUCTURE,
            f"{sides[0]} and {sides[1]}: the API that day (rate limits, quotas, outages) or a scorer that could not "
            f"judge decided those trials, not the agent, so the difference may reflect them. {' '.join(remedies)}",
        )
    ]


def _unscored_warning(figures: dict[str, dict[str, Any]]) -> list[ComparisonWarning]:
    """Trials that passed on no scorer's word: on their cases the difference says only whether the agent answered."""
    counted = {role: figures[role]["unscored_trials"] for role in ("baseline", "candidate")}
    if not any(counted.values()):
        return []
    sides = " and ".join(f"{n} of the {role}'s {figures[role]['trials']} trials" for role, n in counted.items())
    return [
        ComparisonWarning(
            UNSCORED,
            f"{sides} count as passed with no pass/fail scorer judging them (their cases give no expected answer, "
            "criteria or rubric), so on those cases the difference says only whether the agent answered; agenteval "
            "audit names the cases",
        )
    ]


def _infrastructure_count(figures: dict[str, Any]) -> str:
    """A run's infrastructure failures, of its trials and by type: "had 12 infrastructure failures of 120 trials
    (10.0%: quota_exhausted 12)"."""
    infra, trials = figures["infrastructure_failures"], figures["trials"]
    if not infra:
        return f"had no infrastructure failures in {trials} trials"
    by_type = sorted(figures["infrastructure_by_type"].items(), key=lambda kv: (-kv[1], kv[0]))
    types = ", ".join(f"{kind} {n}" for kind, n in by_type)
    failures = "failure" if infra == 1 else "failures"
    return f"had {infra} infrastructure {failures} of {trials} trials ({infra / trials:.1%}: {types})"


def category_differences(
    a: Mapping[str, dict[str, Any]], b: Mapping[str, dict[str, Any]], shared: list[str]
) -> dict[str, PairedDifference]:
    """The paired difference within each category of the shared cases (by the baseline's category), by name."""
    # Grouped in one pass: scanning every case once per category cost cases squared where each case has its own.
    members: dict[str, tuple[dict[str, float], dict[str, float]]] = {}
    for c in shared:
        rates = a[c]
        base, cand = members.setdefault(rates["category"] or UNCATEGORIZED, ({}, {}))
        base[c], cand[c] = rates["rate"], b[c]["rate"]
    return {category: paired_difference(*members[category]) for category in sorted(members)}


def compare(store: Store, baseline_id: str, candidate_id: str, min_shared: int = MIN_SHARED_CASES) -> Comparison:
    """Pair the two experiments' trials by case and compare them."""
    baseline, candidate = _experiment(store, baseline_id), _experiment(store, candidate_id)
    run_a, run_b = _run(store, baseline.experiment_id), _run(store, candidate.experiment_id)
    a, figures_a, summary_a = run_a.rates, run_a.figures, run_a.summary
    b, figures_b, summary_b = run_b.rates, run_b.figures, run_b.summary
    shared = sorted(set(a) & set(b))
    warnings = [
        *_same_warning(baseline, candidate),
        *_status_warning(store, "baseline", baseline, len(a), figures_a["planned_cases"]),
        *_status_warning(store, "candidate", candidate, len(b), figures_b["planned_cases"]),
        *_dataset_warning(store, baseline, candidate, shared),
        *_unshared_warning(a, b, len(shared)),
        *_scorer_set_warning(
            store, {"baseline": (baseline.experiment_id, run_a), "candidate": (candidate.experiment_id, run_b)}, shared
        ),
        *_scorer_version_warning(run_a, run_b),
        *_infrastructure_warning(
            baseline, candidate, {"baseline": figures_a, "candidate": figures_b}, store.as_option()
        ),
        *_unscored_warning({"baseline": figures_a, "candidate": figures_b}),
    ]
    if len(shared) < min_shared:
        raise NotComparable(
            f"{baseline.experiment_id} and {candidate.experiment_id} share {len(shared)} case(s); at least "
            f"{min_shared} are needed to compare. Run both on the same dataset (and --sample seed).",
            *(w.message for w in warnings if w.kind not in ABOUT_THE_FIGURES),
        )
    warnings += _unequal_attempts_warning({"baseline": a, "candidate": b}, shared)
    overall = paired_difference({c: a[c]["rate"] for c in shared}, {c: b[c]["rate"] for c in shared})
    categories = category_differences(a, b, shared)

    def moved(c: str) -> dict[str, Any]:
        return {"case_id": c, "category": a[c]["category"], "baseline": a[c]["rate"], "candidate": b[c]["rate"]}

    newly_failing = [moved(c) for c in shared if a[c]["rate"] >= 0.5 > b[c]["rate"]]
    newly_passing = [moved(c) for c in shared if b[c]["rate"] >= 0.5 > a[c]["rate"]]
    types_a, types_b = summary_a.failures_by_type, summary_b.failures_by_type
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
        warnings,
        figure_differences(a, b, shared, (run_a.quantiles, run_b.quantiles)),
        _had_infrastructure_passed(a, b, run_b.infrastructure_by_case, shared),
    )


def _had_infrastructure_passed(
    a: Mapping[str, dict[str, Any]], b: Mapping[str, dict[str, Any]], infra: Mapping[str, int], shared: list[str]
) -> PairedDifference | None:
    """The paired difference with each infrastructure failure of the candidate's (``infra``, by case) counted a
    pass, or None where it had none in the shared cases."""
    if not any(infra.get(c) for c in shared):
        return None
    passed = {c: b[c]["rate"] + infra.get(c, 0) / b[c]["attempts"] for c in shared}
    return paired_difference({c: a[c]["rate"] for c in shared}, passed)


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

ALLOW_OPTIONS = {INCOMPLETE: "--allow-incomplete", DIFFERENT_DATASETS: "--allow-different-datasets"}
ALLOW_DIFFERENT_SCORERS = "--allow-different-scorers"
"""Judge runs whose pass/fail scorers, or their versions, differ (the gate refuses them by default)."""
"""The warnings the gate refuses on, and the option that lets it judge anyway."""


@dataclasses.dataclass
class GateDecision:
    """The gate's verdict, its exit code, and why."""

    exit_code: int
    verdict: str
    reasons: list[str]
    comparison: Comparison | None = None

    def markdown(self, baseline_id: str, candidate_id: str) -> str:
        """The decision as a GitHub step summary; ids and reasons (which quote stored names) read literally."""
        reasons = "".join(f"- {markdown_cell(reason)}\n" for reason in self.reasons)
        return (
            f"### agenteval gate: {markdown_cell(self.verdict)}\n\nBaseline {markdown_cell(baseline_id)}, "
            f"candidate {markdown_cell(candidate_id)}.\n\n{reasons}\n"
        )


def gate(
    store: Store,
    baseline_id: str,
    candidate_id: str,
    *,
    max_drop: float = DEFAULT_MAX_DROP,
    alpha: float = DEFAULT_ALPHA,
    max_infra: float = DEFAULT_MAX_INFRA,
    allow_incomplete: bool = False,
    allow_different_datasets: bool = False,
    allow_different_scorers: bool = False,
) -> GateDecision:
    """Exit 0: no regression. Exit 1: a regression, meaning the candidate's pass rate is below the
    baseline's by more than ``max_drop`` AND the one-sided paired test rejects "no drop" at ``alpha``
    (p = F(difference / SE) < alpha, F Student's t with shared cases - 1 degrees of freedom). Exit 3: refused,
    when the two cannot be compared, when either is not completed (unless ``allow_incomplete``), when their
    datasets differ (unless ``allow_different_datasets``), when a pass/fail scorer (or its version) judged one
    run and not the other (unless ``allow_different_scorers``), or when more than ``max_infra`` of either
    experiment's trials failed for infrastructure reasons. Never raises for what a user can cause: that is a
    refusal too."""
    limits = {"max_drop": max_drop, "alpha": alpha, "max_infra": max_infra}
    # NaN fails this test too: it compares false with any bound, so every check it took part in passed.
    unusable = [f"{name} {value!r}" for name, value in limits.items() if not 0 <= value <= 1]
    if unusable:
        return GateDecision(REFUSED, "refused", [f"{', '.join(unusable)}: each limit is a share from 0 to 1"])
    if not 0 < alpha < MAX_ALPHA:  # 0 and 1 raised in the normal quantile; 0.5 to 1 judged a gain a regression
        return GateDecision(
            REFUSED, "refused", [f"alpha {alpha!r}: the one-sided test's level must be above 0 and below {MAX_ALPHA}"]
        )
    try:
        store.require()  # a mistyped --store is said as such, not as two experiments missing from it
        comparison = compare(store, baseline_id, candidate_id)
    except (NoStore, NotComparable, ex.EmptyId, duckdb.Error, OSError) as exc:
        damaged = damaged_store_message(exc)
        reasons = [damaged] if damaged else exc.lines() if isinstance(exc, AgentevalError) else [str(exc)]
        return GateDecision(REFUSED, "refused", reasons)
    allowed = {INCOMPLETE: allow_incomplete, DIFFERENT_DATASETS: allow_different_datasets}
    refusals = [w.message for w in comparison.warnings if w.kind == SAME_EXPERIMENT]
    refusals += [
        f"{w.message}; or pass {ALLOW_OPTIONS[w.kind]} to judge the cases both ran anyway"
        for w in comparison.warnings
        if w.kind in allowed and not allowed[w.kind]
    ]
    # Scorers that differ decide the difference as much as the agents do: a scorer one rescore added read as a
    # regression of 40 points, exit 1, with only a warning.
    refusals += [
        f"{w.message}; or pass {ALLOW_DIFFERENT_SCORERS} to judge them anyway"
        for w in comparison.warnings
        if w.kind in (DIFFERENT_SCORERS, DIFFERENT_SCORER_VERSIONS) and not allow_different_scorers
    ]
    refusals += _infrastructure_refusals(comparison, max_infra, store)
    if refusals:
        return GateDecision(REFUSED, "refused", refusals, comparison)
    decision = _judge(comparison, max_drop, alpha, store.as_option())
    decision.reasons += [f"warning: {w.message}" for w in comparison.warnings]
    return decision


def _infrastructure_refusals(comparison: Comparison, max_infra: float, store: Store) -> list[str]:
    refusals = []
    for role, figures in comparison.figures.items():
        trials, infra = figures["trials"], figures["infrastructure_failures"]
        share = infra / trials if trials else 0.0
        if share > max_infra:
            refusals.append(
                f"{share:.1%} of the {role}'s trials ({infra} of {trials}) failed for infrastructure reasons "
                f"(limit {_share(max_infra)}): the API, not the agent, decided them. "
                + _infrastructure_remedy(
                    comparison.baseline if role == "baseline" else comparison.candidate, figures, store.as_option()
                )
            )
    return refusals


def _infrastructure_remedy(experiment: ex.Experiment, figures: dict[str, Any], store_option: str) -> str:
    """What clears a run's infrastructure failures (``figures``: its :data:`RUN_FIGURES`): re-running the trials
    that failed, and judging again the answers a scorer could not judge (re-running the agent would not help those;
    a run's LLM judge is asked again only when rescore names it). ``store_option``: :meth:`Store.as_option`."""
    eid = experiment.experiment_id
    infra = figures["infrastructure_failures"]
    unjudged = figures["infrastructure_by_type"].get(SCORER_ERROR, 0)
    rerun = f"Re-run the failed ones with agenteval run --resume {eid} --retry-failed infra{store_option}"
    rescore = _rescore(experiment, figures, store_option)
    rejudge = f"judge the {unjudged} answer(s) a scorer could not judge again with {rescore}"
    if not unjudged:
        return rerun
    if unjudged == infra:
        return rejudge[0].upper() + rejudge[1:]
    return f"{rerun}; {rejudge}"


def _rescore(experiment: ex.Experiment, figures: dict[str, Any], store_option: str) -> str:
    """The rescore that runs again the scorers that could not judge (``figures["unjudging_scorers"]``). A rescore
    without ``--judge`` never calls a judge, and re-runs only the built-ins and the run's own scorers: after a
    ``rescore --judge`` whose API was down, "agenteval rescore ID" left every answer unjudged. So the judge is the
    one whose scores are current (its version is ``PROMPT:MODEL``), and a scorer that is neither a built-in nor the
    run's own (given to an earlier rescore) is asked for by ``--scorer``. ``--only-errors``: the answers that were
    judged keep their grades, and are not paid for again."""
    from ..scorers._judge import NAME as JUDGE  # here: only a run with scorer errors needs the scorers
    from ..scorers._loading import BUILTIN_BY_NAME

    eid, unjudging = experiment.experiment_id, figures["unjudging_scorers"]
    judge = unjudging[JUDGE].partition(":")[2] if JUDGE in unjudging else experiment.options.get("judge")
    command = f"agenteval rescore {eid} --only-errors" + (f" --judge {judge}" if judge else "") + store_option
    own = {spec.rpartition(":")[2] for spec in experiment.options.get("scorers") or []}
    others = sorted(set(unjudging) - own - set(BUILTIN_BY_NAME) - {JUDGE})
    if others:
        command += (
            f" --scorer MODULE:ATTR, naming {', '.join(others)} as given before (a rescore runs again only the "
            "built-ins and the run's own scorers unless told)"
        )
    return command


def _share(limit: float) -> str:
    """A limit as the percentage given: rounded to whole points, --max-drop 0.019 read 'the drop exceeds 2%' of a
    2.0% drop, and 0.025 'within 2%' of a 2.2% one. Adding 0.0 makes -0.0 (``--max-drop -0``) 0.0: it read
    'within -0%'."""
    return f"{limit * 100 + 0.0:g}%"


def _judge(comparison: Comparison, max_drop: float, alpha: float, store_option: str) -> GateDecision:
    """The verdict on a comparison the gate accepted to judge (``store_option``: :meth:`Store.as_option`, for the
    command a refusal names)."""
    overall = comparison.overall
    drop, p_value = -overall.difference, overall.p_drop()
    mde = overall.minimum_detectable_drop(alpha)
    # The interval whose upper end is below 0 exactly when the one-sided test at alpha rejects "no drop" (90% at
    # alpha 0.05): beside a 95% one, "significant" was printed next to an interval that held 0.
    low, high = overall.test_interval(alpha)
    numbers = (
        f"baseline {overall.baseline:.1%}, candidate {overall.candidate:.1%} over {overall.cases} shared cases; "
        f"difference {overall.difference:+.1%} ({one_sided_interval_label(alpha)} {low:+.1%} to {high:+.1%}), "
        f"one-sided p = {shown_p(p_value)}"
    )
    # What the gate flags, which also needs the drop past max_drop: the test's own detectable drop may be below it.
    caught = overall.minimum_detectable_drop(alpha, beyond=max_drop)
    power_note = f"this comparison detects {detectable_drops(caught)} with 80% power"
    if overall.no_spread:
        power_note += f" ({no_spread_note(overall.cases)})"
    exceeds = _past(drop, max_drop)
    if exceeds and p_value < alpha and not _regression_without_infrastructure(comparison, max_drop, alpha):
        infra = comparison.figures["candidate"]["infrastructure_failures"]
        return GateDecision(
            REFUSED,
            "refused",
            [
                numbers,
                f"the drop exceeds {_share(max_drop)} and is significant at alpha {alpha}, but not had the "
                f"candidate's {infra} infrastructure failure(s) passed: the API, not the agent, may have made it. "
                + _infrastructure_remedy(comparison.candidate, comparison.figures["candidate"], store_option),
                power_note,
            ],
            comparison,
        )
    if exceeds and p_value < alpha:
        return GateDecision(
            REGRESSION,
            "regression",
            [numbers, f"the drop exceeds {_share(max_drop)} and is significant at alpha {alpha}", power_note],
            comparison,
        )
    why = f"the drop is within {_share(max_drop)}" if not exceeds else f"the drop is not significant at alpha {alpha}"
    # Whichever way the runs moved: a change of +0.0% on too few cases is as blind to a drop of max_drop as a small
    # drop is (its interval reaches as far below 0), and read "the drop is within 2%" with nothing more.
    if mde > max(max_drop, 0.0):
        blind = f"drops under {mde:.1%}" if mde <= 1 else "any drop a pass rate can have"
        why += f"; this comparison could not reliably see {blind} (underpowered)"
    return GateDecision(PASS, "no regression", [numbers, why, power_note], comparison)


def _past(drop: float, max_drop: float) -> bool:
    """Whether ``drop`` exceeds ``max_drop``. The difference is a mean of float rates (0.6 - 0.8 is
    -0.20000000000000007), so a drop of exactly max_drop (490 of 500 trials passing, then 480) came out a rounding
    error above it and was judged a regression. Real drops differ from max_drop by a share of a trial, far more
    than the tolerance."""
    return drop > max_drop and not math.isclose(drop, max_drop, rel_tol=1e-9, abs_tol=1e-12)


def _regression_without_infrastructure(comparison: Comparison, max_drop: float, alpha: float) -> bool:
    """Whether the drop is still a regression had the candidate's infrastructure failures all passed (below
    ``--max-infra`` they are judged, and a case whose attempts all hit a quota counted as a real drop: 8 such cases
    of 100 made a candidate that answered every other one right a regression, exit 1)."""
    adjusted = comparison.had_infrastructure_passed
    return adjusted is None or (_past(-adjusted.difference, max_drop) and adjusted.p_drop() < alpha)


def with_step_summary(decision: GateDecision, path: str | Path, baseline_id: str, candidate_id: str) -> GateDecision:
    """Append the decision to the GitHub step summary at ``path``. A summary that cannot be written makes
    the gate refuse (exit 3): CI reads exit 1 as a regression, so no error may end with it."""
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(decision.markdown(baseline_id, candidate_id))
    except OSError as exc:
        return GateDecision(
            REFUSED,
            "refused",
            [
                f"cannot write the GitHub step summary to {path} ({exc.strerror or exc}): check GITHUB_STEP_SUMMARY "
                f"names a writable file. The gate's own decision was: {decision.verdict} (exit {decision.exit_code})",
                *decision.reasons,
            ],
            decision.comparison,
        )
    return decision
