"""Statistics with their uncertainty. Attempts of one case are not independent, so standard errors
are clustered by case (Miller, "Adding Error Bars to Evals", 2024)."""

from __future__ import annotations

import math
from collections.abc import Sequence

Z95 = 1.959963984540054


def clustered_mean(values_by_case: Sequence[Sequence[float]]) -> tuple[float, float]:
    """The mean over every value, and its standard error clustered by case.

    SE² = Σ_c (Σ_{i∈c} (x_i − x̄))² / n², the cluster-robust (sandwich) variance of a mean, with the
    small-sample factor C / (C − 1) for C clusters.
    """
    n = sum(len(values) for values in values_by_case)
    clusters = sum(1 for values in values_by_case if values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(sum(values) for values in values_by_case) / n
    if clusters < 2:
        return mean, math.nan
    spread = sum(sum(x - mean for x in values) ** 2 for values in values_by_case)
    return mean, math.sqrt(spread * clusters / (clusters - 1)) / n


def interval95(mean: float, standard_error: float) -> tuple[float, float]:
    """The normal 95% interval, clipped to [0, 1] (it is a rate)."""
    if math.isnan(standard_error):
        return math.nan, math.nan
    return max(0.0, mean - Z95 * standard_error), min(1.0, mean + Z95 * standard_error)
