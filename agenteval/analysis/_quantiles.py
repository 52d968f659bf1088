"""The difference of two runs' quantiles (p50, p95 latency) with a 95% interval clustered by case.

A quantile has no per-case form to pair, so its standard error comes from its linearisation: the estimated
quantile moves with the share of trials at or below it, F, as dQ = dF / f, f the density there. F is a mean of
per-trial indicators, so its standard error clustered by case is the pass rate's (each case's count at or below the
quantile against its trials); divided by the density it gives the quantile's. The difference of two runs' quantiles
sums the two runs' per-case terms case by case, so a case both ran counts once, with its two terms paired. This is
the cluster-robust sandwich of quantile regression reduced to one quantile (Parente and Santos Silva, "Quantile
regression with clustered data", 2016), with the density estimated from the difference quotient of the quantile
function over Hall and Sheather's bandwidth (Koenker, "Quantile Regression", 2005, 3.4.2).

Not a bootstrap over cases: that resamples every trial a thousand times (seconds at a million trials, where the
whole comparison takes 0.4 s), and its percentile interval would depend on a seed; this is exact arithmetic on sums
that one pass over the trials gives, identical whether the figures were read from a snapshot or computed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from statistics import NormalDist

from ._stats import Z95, PairedDifference


def bandwidth(level: float, trials: int) -> float:
    """Hall and Sheather's bandwidth for the density at quantile ``level`` of ``trials`` values (at 95%):
    n^(-1/3) z^(2/3) (1.5 phi(x)^2 / (2 x^2 + 1))^(1/3), x the normal quantile at ``level``."""
    x = NormalDist().inv_cdf(level)
    density = NormalDist().pdf(x)
    return trials ** (-1 / 3) * Z95 ** (2 / 3) * (1.5 * density**2 / (2 * x * x + 1)) ** (1 / 3)


def density_levels(level: float, trials: int) -> tuple[float, float]:
    """The two levels around ``level`` whose quantiles estimate the density there, within [0, 1]."""
    h = bandwidth(level, max(trials, 1))
    return max(0.0, level - h), min(1.0, level + h)


@dataclasses.dataclass(frozen=True)
class RunQuantile:
    """One run's quantile and what its interval needs: the quantiles at :func:`density_levels`, and per case its
    values (trials with a duration) and how many of them are at or below the quantile."""

    level: float
    value: float | None
    low: tuple[float, float | None]
    """(level, quantile) below ``level``."""
    high: tuple[float, float | None]
    per_case: dict[str, tuple[int, int]]
    """Case id to (values, at or below ``value``)."""

    def sparsity(self) -> float:
        """1 / density at the quantile: the quantile function's slope over the bandwidth."""
        (low_level, low), (high_level, high) = self.low, self.high
        if low is None or high is None or high_level <= low_level:
            return math.nan
        return (high - low) / (high_level - low_level)

    def influence(self) -> dict[str, float]:
        """Each case's term of the quantile's linearisation: (at or below - F x values) x sparsity / all values,
        F the share of all values at or below the quantile (so the terms sum to 0)."""
        values = sum(n for n, _ in self.per_case.values())
        if not values:
            return {}
        share = sum(below for _, below in self.per_case.values()) / values
        scale = self.sparsity() / values
        return {case: (below - share * n) * scale for case, (n, below) in self.per_case.items() if n}


def quantile_difference(
    baseline: RunQuantile, candidate: RunQuantile, shared: Iterable[str]
) -> PairedDifference | None:
    """Candidate minus baseline of one quantile over each run's trials, with its standard error clustered by case:
    sqrt(C / (C - 1) x sum over cases of (candidate's term - baseline's term)^2), C the cases with a value in either
    run (a case one run lacks has only the other's term). None where either run has no value."""
    if baseline.value is None or candidate.value is None:
        return None
    before, after = baseline.influence(), candidate.influence()
    cases = set(before) | set(after)
    terms = [after.get(case, 0.0) - before.get(case, 0.0) for case in cases]
    clusters = len(terms)
    spread = math.fsum(t * t for t in terms)
    standard_error = math.sqrt(spread * clusters / (clusters - 1)) if clusters >= 2 else math.nan
    if not (baseline.sparsity() > 0 and candidate.sparsity() > 0):
        # Values tied around the quantile (durations rounded to the millisecond, a mock's constant latency) give no
        # density to estimate: no interval, rather than a zero-width one that claims certainty.
        standard_error = math.nan
    return PairedDifference(
        cases=len(set(shared) & cases),
        baseline=baseline.value,
        candidate=candidate.value,
        difference=candidate.value - baseline.value,
        standard_error=standard_error,
        no_spread=standard_error == 0,
        rate=False,
        degrees_of_freedom=clusters - 1 if clusters >= 2 else None,
    )
