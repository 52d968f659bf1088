"""How likely a comparison is to catch a drop: the variance decomposition of Miller (2024) for the
paired, case-clustered comparison that ``compare`` and ``gate`` use.

Each case i has a true pass rate p_i; across cases p_i has mean p and variance s² (the between-case
spread). A case's observed rate over K attempts varies around p_i by p_i(1 - p_i) / K (within-case).
In a paired comparison the between-case part cancels: the candidate is assumed to move every case by
the same drop d, so each case's difference has variance

    V = [E(p_i(1 - p_i)) + E(q_i(1 - q_i))] / K,   E(p_i(1 - p_i)) = p(1 - p) - s²,  q_i = p_i - d

and over m cases the difference has standard error sqrt(V / m). A one-sided test at alpha catches the
drop with probability  Phi(d / sqrt(V / m) - z(1 - alpha)).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from .options import DEFAULT_ALPHA, DEFAULT_TARGET_POWER
from .stats import NORMAL

DEFAULT_SPREAD_SHARE = 0.5
"""Without a past experiment to estimate from, the between-case variance is taken as half its largest
possible value p(1 - p): cases differ a lot, but not all are all-or-nothing."""


@dataclasses.dataclass(frozen=True)
class PowerModel:
    """The assumptions of a power calculation."""

    pass_rate: float
    attempts: int
    between_case_variance: float
    alpha: float = DEFAULT_ALPHA

    def __post_init__(self) -> None:
        if not 0 < self.pass_rate < 1:
            raise ValueError("--pass-rate must be between 0 and 1")
        if self.attempts < 1:
            raise ValueError("--attempts must be at least 1")
        limit = self.pass_rate * (1 - self.pass_rate)
        if not 0 <= self.between_case_variance <= limit:
            raise ValueError(f"the between-case variance must be between 0 and p(1 - p) = {limit:.4f}")

    def difference_variance(self, drop: float) -> float:
        """Variance of one case's candidate-minus-baseline pass rate under a uniform ``drop``."""
        p, q, s2 = self.pass_rate, self.pass_rate - drop, self.between_case_variance
        within = max(p * (1 - p) - s2, 0.0) + max(q * (1 - q) - s2, 0.0)
        return within / self.attempts

    def power(self, cases: int, drop: float) -> float:
        """The probability that a comparison over ``cases`` cases catches ``drop``."""
        standard_error = math.sqrt(self.difference_variance(drop) / cases)
        if standard_error == 0:
            return 1.0
        return NORMAL.cdf(drop / standard_error - NORMAL.inv_cdf(1 - self.alpha))

    def cases_needed(self, drop: float, target: float = DEFAULT_TARGET_POWER) -> int:
        """The fewest cases for which ``drop`` is caught with probability ``target``."""
        z = NORMAL.inv_cdf(1 - self.alpha) + NORMAL.inv_cdf(target)
        return max(2, math.ceil(z * z * self.difference_variance(drop) / (drop * drop)))

    def assumptions(self) -> list[str]:
        return [
            f"baseline pass rate {self.pass_rate:.2f}; {self.attempts} attempt(s) per case",
            f"between-case variance of true pass rates {self.between_case_variance:.4f} "
            f"(spread {math.sqrt(self.between_case_variance):.3f}; "
            f"at most {self.pass_rate * (1 - self.pass_rate):.4f})",
            "the candidate moves every case by the same drop (a drop concentrated in some cases is easier to see "
            "per case but noisier overall)",
            f"paired comparison over the same cases, one-sided test at alpha {self.alpha}; normal approximation",
        ]


def default_model(pass_rate: float, attempts: int, alpha: float = DEFAULT_ALPHA) -> PowerModel:
    return PowerModel(pass_rate, attempts, DEFAULT_SPREAD_SHARE * pass_rate * (1 - pass_rate), alpha)


def estimate_between_case_variance(case_rates: Sequence[float], attempts: int) -> float:
    """Between-case variance from observed per-case pass rates: their variance less the part that
    within-case noise contributes (p_i(1 - p_i) / K, estimated without bias), clipped to [0, p(1 - p)]."""
    m = len(case_rates)
    if m < 2 or attempts < 1:
        raise ValueError("need at least two cases to estimate the between-case spread")
    mean = sum(case_rates) / m
    observed = sum((r - mean) ** 2 for r in case_rates) / (m - 1)
    within = (
        sum(r * (1 - r) for r in case_rates) / m / (attempts - 1) if attempts > 1 else 0.0
    )  # E[r(1-r)] = (K-1)/K p(1-p): so p(1-p)/K = E[r(1-r)] / (K-1)
    return min(max(observed - within, 0.0), mean * (1 - mean))


def simulate_power(model: PowerModel, cases: int, drop: float, runs: int = 2000, seed: int = 0) -> float:
    """The same model by Monte Carlo: draw case rates from a Beta with the model's mean and spread,
    attempts as Bernoulli draws, and count how often the paired one-sided test rejects."""
    import numpy as np

    rng = np.random.default_rng(seed)
    p, s2, k = model.pass_rate, model.between_case_variance, model.attempts
    if s2 > 0:
        common = p * (1 - p) / s2 - 1
        rates = rng.beta(p * common, (1 - p) * common, size=(runs, cases))
    else:
        rates = np.full((runs, cases), p)
    baseline = rng.binomial(k, rates) / k
    candidate = rng.binomial(k, np.clip(rates - drop, 0, 1)) / k
    diffs = candidate - baseline
    standard_error = diffs.std(axis=1, ddof=1) / math.sqrt(cases)
    z = np.divide(diffs.mean(axis=1), standard_error, out=np.full(runs, -np.inf), where=standard_error > 0)
    return float(np.mean(z < -NORMAL.inv_cdf(1 - model.alpha)))
