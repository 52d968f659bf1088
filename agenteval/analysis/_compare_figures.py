"""The run figures a comparison sets side by side (latency, tokens, cost, infrastructure failures): one definition
of each, with its label and whether it has a paired difference, for the terminal, ``compare --json`` and the
dashboard's comparison page."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ._quantiles import RunQuantile, density_levels, quantile_difference
from ._stats import PairedDifference, paired_difference


@dataclasses.dataclass(frozen=True)
class RunFigure:
    """One line of a comparison's run figures."""

    key: str
    """Its name in ``RUN_FIGURES`` (the SQL) and under ``figures`` in ``compare --json``."""
    label: str
    case_mean: str | None = None
    """The per-case mean (a column of ``CASE_RATES``) its paired difference is taken over; None for a quantile, and
    for a figure shown as measured, without a difference: a total or a count."""
    quantile: float | None = None
    """For a quantile of the trials' latency, its level: its difference's interval is :mod:`._quantiles`'."""


FIGURES = (
    RunFigure("trials", "trials"),
    RunFigure("latency_mean_ms", "latency mean (ms)", "latency_ms"),
    RunFigure("latency_p50_ms", "latency p50 (ms)", quantile=0.5),
    RunFigure("latency_p95_ms", "latency p95 (ms)", quantile=0.95),
    RunFigure("tokens_per_trial", "tokens per trial", "tokens"),
    RunFigure("cost_per_trial_usd", "cost per trial ($)", "cost_usd"),
    RunFigure("cost_usd", "cost, all trials ($)"),
    RunFigure("infrastructure_failures", "infrastructure failures"),
)
LABELS = {figure.key: figure.label for figure in FIGURES}
QUANTILES = tuple(figure for figure in FIGURES if figure.quantile is not None)

AT_MOST = ", ".join(f"count(*) FILTER (WHERE t.duration_ms <= ?) AS {f.key}_at_most" for f in QUANTILES)
"""Per case (columns of ``CASE_RATES``, one parameter each: the run's quantile): its trials at or below each
quantile, which the quantile's interval is worked out from."""

DIFFERENCE_HEADER = "difference (95% CI)"
DESCRIPTIVE = "–"
"""The difference cell of a figure given as measured."""


def quantile_levels(trials: int) -> list[float]:
    """The levels ``RUN_FIGURES`` takes the latency's quantiles at, for a run of ``trials`` timed trials: each
    quantile figure's, then the two around each that estimate the density there (:func:`._quantiles.density_levels`),
    all in one ``quantile_cont``, which reads the values once."""
    levels = [f.quantile for f in QUANTILES if f.quantile is not None]
    return levels + [bound for level in levels for bound in density_levels(level, trials)]


def run_quantiles(
    levels: list[float], values: list[float | None] | None, per_case: dict[str, dict[str, Any]]
) -> dict[str, RunQuantile]:
    """Each quantile figure of one run: ``values`` are ``RUN_FIGURES``' quantiles at ``levels``
    (:func:`quantile_levels`; None when no trial has a duration), ``per_case`` its ``CASE_RATES`` rows by case id."""
    at = values or [None] * len(levels)
    count = len(QUANTILES)
    return {
        figure.key: RunQuantile(
            levels[i],
            at[i],
            (levels[count + 2 * i], at[count + 2 * i]),
            (levels[count + 2 * i + 1], at[count + 2 * i + 1]),
            {case: (row["timed"], row[f"{figure.key}_at_most"]) for case, row in per_case.items()},
        )
        for i, figure in enumerate(QUANTILES)
    }


def figure_differences(
    baseline: dict[str, dict[str, Any]],
    candidate: dict[str, dict[str, Any]],
    shared: list[str],
    quantiles: tuple[dict[str, RunQuantile], dict[str, RunQuantile]],
) -> dict[str, PairedDifference | None]:
    """Candidate minus baseline of each figure with a per-case mean, paired over the shared cases where both runs
    have it (a case whose trials all lack a cost has none), and of each quantile (``quantiles``: the baseline's and
    the candidate's, :func:`run_quantiles`); None where no case has it in both."""
    differences: dict[str, PairedDifference | None] = {}
    for figure in FIGURES:
        column = figure.case_mean
        if figure.quantile is not None:
            differences[figure.key] = quantile_difference(quantiles[0][figure.key], quantiles[1][figure.key], shared)
        if column is None:
            continue
        known = [c for c in shared if baseline[c][column] is not None and candidate[c][column] is not None]
        differences[figure.key] = (
            paired_difference(
                {c: baseline[c][column] for c in known}, {c: candidate[c][column] for c in known}, rate=False
            )
            if known
            else None
        )
    return differences


def difference_dict(d: PairedDifference | None) -> dict[str, Any] | None:
    """A figure's difference for ``compare --json``; an unknown standard error (one case) and its interval null."""
    if d is None:
        return None
    known = not math.isnan(d.standard_error)
    return {
        "cases": d.cases,
        "baseline": d.baseline,
        "candidate": d.candidate,
        "difference": d.difference,
        "standard_error": d.standard_error if known else None,
        "ci95": list(d.interval()) if known else None,
        "no_spread": d.no_spread,
    }


def figure_rows(comparison: dict[str, Any]) -> list[list[str]]:
    """The figures of ``compare --json``'s dict as table cells: label, baseline, candidate, difference (95% CI)."""
    baseline, candidate = comparison["figures"]["baseline"], comparison["figures"]["candidate"]
    differences = comparison["figure_differences"]
    rows = []
    for figure in FIGURES:
        paired = figure.case_mean is not None or figure.quantile is not None
        difference = difference_text(differences.get(figure.key)) if paired else DESCRIPTIVE
        rows.append([figure.label, number(baseline.get(figure.key)), number(candidate.get(figure.key)), difference])
    return rows


def difference_text(d: dict[str, Any] | None) -> str:
    if d is None:
        return "no case with it in both"
    difference = number(d["difference"], "+")
    if d["ci95"] is None:
        return f"{difference} (one case: no interval)"
    if d["no_spread"]:
        return f"{difference} (alike in every case)"
    low, high = d["ci95"]
    return f"{difference} ({number(low, '+')} to {number(high, '+')})"


def figures_note(comparison: dict[str, Any]) -> str:
    """What the difference column is, and what the figures without one are."""
    cases = comparison["overall"]["cases"]
    return (
        f"difference: candidate minus baseline of the per-trial means, each case's attempts averaged, paired over "
        f"the {cases} cases both ran, 95% interval from the standard error clustered by case. The p50 and p95 "
        "differences are of each run's own quantile, their interval clustered by case through the share of trials "
        "under the quantile (docs/reports.md). The total cost and the failure counts are as measured (no interval)."
    )


def number(value: object, sign: str = "") -> str:
    """A figure as the tables show it: four significant digits without an exponent (a cost per trial reads
    0.00003917, not 3.917e-05), '–' where there is none; ``sign`` "+" for a difference."""
    if value is None:
        return "–"
    if not isinstance(value, float):
        return f"{value:{sign}}"
    if value == 0 or not math.isfinite(value):
        return f"{value:{sign}g}"
    decimals = max(0, 3 - math.floor(math.log10(abs(value))))
    return f"{value:{sign},.{decimals}f}"
