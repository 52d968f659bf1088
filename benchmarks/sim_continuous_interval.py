"""How often a continuous scorer's 95% interval holds the true mean, and how wide it is: a seeded simulation.

Each setting draws, 2,000 times, C cases whose true means come from a beta around the overall mean (spread between
cases), and A scores per case around the case's mean: a beta (noise within a case), a mixture whose scores are an
exact 0 or 1 half the time (the case's mean kept), or a recall-like one that is exactly 1 with chance p² and
otherwise a beta around p / (1 + p) (so the case's mean is p). Every candidate interval is computed from what the
report has, the mean, its clustered standard error and the number of cases, and counted as covering where it holds
the overall mean. Prints, per candidate, its coverage on average and at worst, the settings under 93% and 90%, the
median width and the median over settings of its median width over the t interval's; then the same by true mean,
and the figures of a few fixed results. numpy only; about half a minute on one core.

    python benchmarks/sim_continuous_interval.py [--runs 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Callable

import numpy as np

from agenteval.analysis import mean_interval95
from agenteval.analysis._student_t import t_quantile

Z = 1.959963984540054
MEANS = (0.3, 0.5, 0.7, 0.9, 0.97, 0.99, 0.999)
CASES = (5, 10, 20, 50)
ATTEMPTS = (1, 3, 5)
BETWEEN = (2.0, 10.0, 50.0)
"""Concentration of the beta the cases' means come from: 2 spreads them widely, 50 keeps them close."""
WITHIN = (5.0, 50.0)
"""Concentration of the beta a case's scores come from around its mean."""
GENERATORS = ("beta", "mass", "recall")

Interval = tuple[np.ndarray, np.ndarray]


def case_means(rng: np.random.Generator, mean: float, between: float, runs: int, cases: int) -> np.ndarray:
    return rng.beta(mean * between, (1 - mean) * between, size=(runs, cases)).clip(1e-12, 1 - 1e-12)


def scores(rng: np.random.Generator, kind: str, p: np.ndarray, within: float, attempts: int) -> np.ndarray:
    """Scores of shape (runs, cases, attempts) whose expectation in each case is its mean ``p``."""
    p = np.repeat(p[:, :, None], attempts, axis=2)
    if kind == "beta":
        return rng.beta(p * within, (1 - p) * within)
    if kind == "mass":  # half the scores exactly 0 or 1, with the case's chance; the rest a beta around it
        exact = rng.random(p.shape) < 0.5
        return np.where(exact, (rng.random(p.shape) < p).astype(float), rng.beta(p * within, (1 - p) * within))
    # recall-like: exactly 1 with chance p², else a beta around p / (1 + p), so p² + (1 - p²)·p / (1 + p) = p
    rest = p / (1 + p)
    return np.where(rng.random(p.shape) < p * p, 1.0, rng.beta(rest * within, (1 - rest) * within))


def clustered(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and clustered standard error per run (agenteval.analysis._stats.clustered_mean)."""
    runs, cases, attempts = values.shape
    n = cases * attempts
    mean = values.sum(axis=(1, 2)) / n
    spread = ((values.sum(axis=2) - attempts * mean[:, None]) ** 2).sum(axis=1)
    return mean, np.sqrt(spread * cases / (cases - 1)) / n


def wilson(rate: np.ndarray, total: np.ndarray | float) -> Interval:
    z2 = Z * Z
    centre = (rate + z2 / (2 * total)) / (1 + z2 / total)
    half = Z * np.sqrt(np.maximum(rate * (1 - rate), 0) / total + z2 / (4 * total * total)) / (1 + z2 / total)
    return np.where(rate <= 0, 0.0, np.maximum(0.0, centre - half)), np.where(
        rate >= 1, 1.0, np.minimum(1.0, centre + half)
    )


def unmeasured(mean: np.ndarray, se: np.ndarray, cases: int, low: np.ndarray, high: np.ndarray) -> Interval:
    """Where the cases show no spread, Wilson's at the cases (as the report has it)."""
    w_low, w_high = wilson(mean, float(cases))
    none = ~(se > 0)
    return np.where(none, w_low, low), np.where(none, w_high, high)


def old(mean: np.ndarray, se: np.ndarray, cases: int) -> Interval:
    """The t interval of the measured spread, clipped; Wilson's at the cases without spread."""
    half = t_quantile(0.975, cases - 1) * se
    return unmeasured(mean, se, cases, np.maximum(0.0, mean - half), np.minimum(1.0, mean + half))


def bounded(mean: np.ndarray, se: np.ndarray, cases: int) -> Interval:
    """agenteval.analysis._stats.bounded_interval95 (pass@k's)."""
    t = t_quantile(0.975, cases - 1)

    def lowest(m: np.ndarray) -> np.ndarray:
        room = 1 - m
        closed = 1 - np.sqrt((1 + t * t / (cases - 1)) * ((cases - 1) * se**2 + room**2))
        return np.where(se * (cases - 1) >= t * room, m - t * se, closed)

    low = np.minimum(lowest(mean), cases / (cases + Z * Z))
    high = np.maximum(1 - lowest(1 - mean), Z * Z / (cases + Z * Z))
    return np.maximum(0.0, low), np.minimum(1.0, high)


def logit_t(mean: np.ndarray, se: np.ndarray, cases: int) -> Interval:
    """t interval on the logit scale, its standard error by the delta method, SE / (m(1 − m))."""
    t = t_quantile(0.975, cases - 1)
    m = mean.clip(1e-12, 1 - 1e-12)
    centre, half = np.log(m / (1 - m)), t * se / (m * (1 - m))
    low, high = 1 / (1 + np.exp(-(centre - half))), 1 / (1 + np.exp(-(centre + half)))
    return unmeasured(mean, se, cases, low, high)


def quasi_score(mean: np.ndarray, se: np.ndarray, cases: int) -> Interval:
    """Wilson's at the effective number of cases m(1 − m) / SE² times (z / t)² (Korn and Graubard): the score
    interval of a quasi-binomial mean, whose variance φ·μ(1 − μ) is taken at each candidate μ."""
    factor = (Z / t_quantile(0.975, cases - 1)) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        effective = np.maximum(mean * (1 - mean) / se**2 * factor, 1.0)
    effective = np.where(se > 0, effective, float(cases))
    low, high = wilson(mean, effective)
    return unmeasured(mean, se, cases, low, high)


def floored(candidate: Callable[[np.ndarray, np.ndarray, int], Interval]) -> Callable[..., Interval]:
    """``candidate`` reaching at least as far as Wilson's for every case at 1 (at 0): C / (C + z²) below."""

    def interval(mean: np.ndarray, se: np.ndarray, cases: int) -> Interval:
        low, high = candidate(mean, se, cases)
        return np.minimum(low, cases / (cases + Z * Z)), np.maximum(high, Z * Z / (cases + Z * Z))

    return interval


CANDIDATES: dict[str, Callable[[np.ndarray, np.ndarray, int], Interval]] = {
    "t (before)": old,
    "bounded (pass@k's)": bounded,
    "logit t": logit_t,
    "logit t + floor": floored(logit_t),  # agenteval's mean_interval95
    "quasi-score": quasi_score,
    "quasi-score + floor": floored(quasi_score),
    "t + floor": floored(old),
}


def agrees(mean: np.ndarray, se: np.ndarray, cases: int, attempts: int) -> None:
    """The simulated logit interval is agenteval's own, so the table speaks of what the report shows."""
    low, high = CANDIDATES["logit t + floor"](mean, se, cases)
    for m, e, lo, hi in zip(mean.tolist(), se.tolist(), low.tolist(), high.tolist(), strict=True):
        shown = mean_interval95(m, e, cases * attempts, cases)
        assert np.allclose(shown, (lo, hi), rtol=1e-9, atol=1e-12), (m, e, cases, shown, (lo, hi))


def settings() -> list[tuple[float, int, int, float, float, str]]:
    grid = itertools.product(MEANS, CASES, ATTEMPTS, BETWEEN, WITHIN, GENERATORS)
    return [(m, c, a, b, w, g) for m, c, a, b, w, g in grid if not (a == 1 and w != WITHIN[0])]


def simulate(runs: int, seed: int) -> dict[str, list[tuple[float, float, tuple]]]:
    """Per candidate, per setting: (coverage, median width, setting)."""
    rng = np.random.default_rng(seed)
    results: dict[str, list[tuple[float, float, tuple]]] = {name: [] for name in CANDIDATES}
    for setting in settings():
        mean, cases, attempts, between, within, kind = setting
        values = scores(rng, kind, case_means(rng, mean, between, runs, cases), within, attempts)
        observed, se = clustered(values)
        agrees(observed[:50], se[:50], cases, attempts)
        for name, candidate in CANDIDATES.items():
            low, high = candidate(observed, se, cases)
            covered = float(np.mean((low <= mean) & (mean <= high)))
            results[name].append((covered, float(np.median(high - low)), setting))
    return results


def fixed_results() -> list[tuple[str, np.ndarray, np.ndarray, int]]:
    """Results the report has met, as (what, mean, SE, cases)."""
    return [
        ("54 cases, mean 0.286, sd 0.033", np.array([0.286]), np.array([0.033 / math.sqrt(54)]), 54),
        ("4 cases all at 0.5", np.array([0.5]), np.array([0.0]), 4),
        ("4 cases 0.4,0.5,0.5,0.6", np.array([0.5]), np.array([math.sqrt(0.02 / 3 / 4)]), 4),
        ("10 cases all at 1", np.array([1.0]), np.array([0.0]), 10),
        ("10 cases, one 1e-6 under 1", np.array([1 - 1e-7]), np.array([1e-7]), 10),
        ("50 cases, one at 0.9, rest 1", np.array([1 - 0.1 / 50]), np.array([0.1 / 50]), 50),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    results = simulate(args.runs, args.seed)
    count = len(next(iter(results.values())))
    print(f"{count} settings, {args.runs} runs each (seed {args.seed})")
    baseline = [w for _, w, _ in results["t (before)"]]
    print(f"{'interval':<22}{'mean cov':>9}{'worst':>8}{'<93%':>6}{'<90%':>6}{'med width':>10}{'med w/t':>9}  worst at")
    for name, rows in results.items():
        coverage = [c for c, _, _ in rows]
        widths = [w for _, w, _ in rows]
        ratio = np.median([w / b for w, b in zip(widths, baseline, strict=True) if b > 0])
        worst = min(rows, key=lambda row: row[0])
        print(
            f"{name:<22}{np.mean(coverage):>9.1%}{worst[0]:>8.1%}{sum(c < 0.93 for c in coverage):>6}"
            f"{sum(c < 0.90 for c in coverage):>6}{np.median(widths):>10.4f}{ratio:>9.2f}  {worst[2]}"
        )
    print("\nby true mean: coverage on average / at worst, and median width")
    print(f"{'':<22}" + " ".join(f"{mean:>20}" for mean in MEANS))
    for name, rows in results.items():
        cells = []
        for mean in MEANS:
            shares = [c for c, _, s in rows if s[0] == mean]
            width = np.median([w for _, w, s in rows if s[0] == mean])
            cells.append(f"{np.mean(shares):.1%}/{min(shares):.1%} {width:.3f}")
        print(f"{name:<22}" + " ".join(f"{cell:>20}" for cell in cells))
    print("\nfixed results:")
    for what, mean, se, cases in fixed_results():
        shown = []
        for name, candidate in CANDIDATES.items():
            low, high = candidate(mean, se, cases)
            shown.append(f"{name}: {low[0]:.4f}-{high[0]:.4f}")
        print(f"{what}:\n  " + "\n  ".join(shown))


if __name__ == "__main__":
    main()
