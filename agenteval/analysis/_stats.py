"""Statistics with their uncertainty. Attempts of one case are not independent, so standard errors
are clustered by case (Miller, "Adding Error Bars to Evals", 2024)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from ..run._options import DEFAULT_ALPHA, DEFAULT_TARGET_POWER
from ._student_t import NORMAL, t_cdf, t_quantile, t_upper

Z95 = 1.959963984540054


def clustered_mean(values_by_case: Sequence[Sequence[float]]) -> tuple[float, float]:
    """The mean over every value, and its standard error clustered by case.

    SE² = Σ_c (Σ_{i∈c} (x_i − x̄))² / n², the cluster-robust (sandwich) variance of a mean, with the
    small-sample factor C / (C − 1) for C clusters.
    """
    return clustered_mean_of_totals([(len(values), sum(values)) for values in values_by_case])


def clustered_mean_of_totals(totals_by_case: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """:func:`clustered_mean` from each case's count and sum of values, which is all it needs:
    Σ_{i∈c} (x_i − x̄) = s_c − n_c·x̄. A report need not hold a million outcomes to get its error bars.

    Sums are exact (``math.fsum``), so the figures do not depend on the order the cases come in: a query's
    groups come in any order, and two runs of the same trials must report the same interval to the last bit."""
    n = sum(count for count, _ in totals_by_case)
    clusters = sum(1 for count, _ in totals_by_case if count)
    if n == 0:
        return math.nan, math.nan
    mean = math.fsum(total for _, total in totals_by_case) / n
    spread = math.fsum((total - count * mean) ** 2 for count, total in totals_by_case)
    return mean, clustered_standard_error(spread, clusters, n)


def clustered_standard_error(spread: float, clusters: int, n: int) -> float:
    """The clustered standard error of a mean over ``n`` values in ``clusters``, from ``spread``, Σ_c (s_c − n_c·x̄)²
    (:func:`clustered_mean`); NaN under 2 clusters. Also what SQL that sums the spread itself gives to."""
    if clusters < 2 or n <= 0:
        return math.nan
    return math.sqrt(spread * clusters / (clusters - 1)) / n


def clustered_rate(totals_by_case: Sequence[tuple[int, float]]) -> tuple[float, float, tuple[float, float]]:
    """A pass rate from each case's (attempts, passes): the rate, its standard error clustered by case, and its
    95% interval (:func:`rate_interval95`); NaN for what is unknown."""
    rate, standard_error = clustered_mean_of_totals(totals_by_case)
    return rate, standard_error, rate_interval95(RateCounts.of_cases(totals_by_case))


def interval95(mean: float, standard_error: float) -> tuple[float, float]:
    """The normal 95% interval, clipped to [0, 1] (it is a rate)."""
    if math.isnan(standard_error):
        return math.nan, math.nan
    return max(0.0, mean - Z95 * standard_error), min(1.0, mean + Z95 * standard_error)


@dataclasses.dataclass(frozen=True)
class RateCounts:
    """What a pass rate's interval is computed from (:func:`rate_interval95`), as sums over cases, so that SQL can
    give them (:func:`agenteval.store._snapshots.scorer_figures_sql`) without handing over every case."""

    passes: float
    trials: int
    cases: int
    squares: int
    """Σ n_c², n_c the attempts of case c: what the variance would be if every case passed all or none."""
    discordant: float
    """Σ s_c (n_c − s_c), s_c the passes of case c: the pairs of one case's attempts where one passed and one not."""
    most_attempts: int

    @classmethod
    def of_cases(cls, totals_by_case: Sequence[tuple[int, float]]) -> RateCounts:
        """From each case's (attempts, passes)."""
        counted = [(n, s) for n, s in totals_by_case if n]
        return cls(
            passes=math.fsum(s for _, s in counted),
            trials=sum(n for n, _ in counted),
            cases=len(counted),
            squares=sum(n * n for n, _ in counted),
            discordant=math.fsum(s * (n - s) for n, s in counted),
            most_attempts=max((n for n, _ in counted), default=0),
        )

    def failures(self) -> RateCounts:
        """The same trials counted by failures: the upper end of a pass rate is one minus the lower of its failures."""
        return dataclasses.replace(self, passes=self.trials - self.passes)


def rate_interval95(counts: RateCounts) -> tuple[float, float]:
    """The 95% interval of a pass rate over trials clustered in cases: Wilson's at an effective number of trials,
    times (z / t)², t Student's with cases - 1 degrees of freedom (Korn and Graubard, 1998), with each end the
    furthest that any result with more passes (or more failures) would give (:func:`_lowest_lower`).

    The effective number is N² / (Σ n_c² − w·Σ n_c(n_c − 1)), between the cases (attempts of one case all alike,
    w = 0) and the trials (attempts independent, w = 1), where w, the within-case share of the variance, is the
    discordant pairs Σ s_c(n_c − s_c) over what independent attempts at the rate would give, Σ n_c(n_c − 1)·p(1 − p).
    It used to come from the clustered standard error, p(1 - p) / SE², and with no spread at all (every trial
    passed) from the cases; so 50 cases of 3 attempts that all passed read 92.9% to 100% and the same with one
    failing attempt 96.2% to 99.9%: one more pass made the rate look less certain. Taken as the lowest any result
    with more passes gives, both read 92.5% (with the (z / t)² the trials without spread now take too), and no
    failing attempt turned into a pass lowers the lower end (nor a pass turned into a failure raises the upper).
    Without the (z / t)² factor the interval held a 99% rate over 5 cases of 3 attempts 86% of the time. In a
    simulation over 5 to 100 cases of 1 to 5 attempts, true rates 0.5 to 0.999 and intra-case correlations 0 to
    0.9 (2,000 runs each), it held the true rate 96.5% of the time on average (the old one 96.3%), in 31 of 380
    settings under 93% (the old one 37), at a median width 10% wider. One case gives no spread between cases to
    measure and is read at one: Wilson's at one, 20.7% to 100% for a case that passed every attempt. NaN where
    there are no trials."""
    if counts.trials <= 0:
        return math.nan, math.nan
    return _lowest_lower(counts), 1.0 - _lowest_lower(counts.failures())


def _lowest_lower(counts: RateCounts) -> float:
    """The lower end of :func:`rate_interval95`: the lowest of the ends that ``counts`` with A more passes give,
    each pass taking away the most discordant pairs one pass can (n − 1, completing a case that failed once).

    Any result with more passes has at least the lower end this gives, so no failing attempt turned into a pass
    lowers it. Past the pass that takes the last discordant pair, more passes only raise the end. Up to it there
    can be many (every case's n − 1 a pass: 210,000 for 1,000 cases of 1,000 attempts at 70%), so whole ranges of
    them are passed over where a floor under every end in the range (:func:`_floor_between`) is no lower than the
    lowest found, the ranges doubling while that holds and halving where it does not: the same lowest end as
    trying each, found in a few hundred tries where trying each took 8,522 for 100 cases of 1,000 attempts."""
    rate = counts.passes / counts.trials
    if counts.cases < 2:
        return _wilson_lower(rate, 1.0)
    factor = (Z95 / t_quantile(0.975, counts.cases - 1)) ** 2
    per_pass = counts.most_attempts - 1
    last = math.ceil(counts.discordant / per_pass) if per_pass > 0 and counts.discordant > 0 else 0
    lowest = _lower_with_more(counts, 0, per_pass, factor)
    start, size = 1, 1
    while start <= last:
        end = min(start + size - 1, last)
        if size > 1 and _floor_between(counts, start, end, per_pass, factor) < lowest:
            size //= 2  # the range may hold a lower end: look closer
            continue
        if size == 1:
            lowest = min(lowest, _lower_with_more(counts, start, per_pass, factor))
        start, size = end + 1, size * 2
    return lowest


def _lower_with_more(counts: RateCounts, more: int, per_pass: int, factor: float) -> float:
    """The lower end of ``counts`` with ``more`` passes, each taking ``per_pass`` discordant pairs."""
    discordant = max(counts.discordant - per_pass * more, 0.0)
    passes = counts.passes + more
    effective = max(_effective_trials(passes, discordant, counts) * factor, 1.0)
    return _wilson_lower(passes / counts.trials, effective)


def _floor_between(counts: RateCounts, first: int, last: int, per_pass: int, factor: float) -> float:
    """No more than :func:`_lower_with_more` for any ``more`` from ``first`` to ``last``: Wilson's lower end rises
    with the rate and with the number of trials, and across the range the rate is at least the first's and the
    effective number at least what the last's discordant pairs give at the largest p(1 − p) in the range (none at
    a rate of 1, where the spread, and so the weight of the discordant pairs, is 0)."""
    low = (counts.passes + first) / counts.trials
    high = min((counts.passes + last) / counts.trials, 1.0)
    pairs = counts.squares - counts.trials
    widest = 0.25 if low <= 0.5 <= high else max(low * (1 - low), high * (1 - high))
    discordant = max(counts.discordant - per_pass * last, 0.0)
    within = 0.0 if high >= 1.0 or pairs * widest <= 0 else min(1.0, discordant / (pairs * widest))
    effective = max(counts.trials**2 / (counts.squares - within * pairs) * factor, 1.0)
    return _wilson_lower(low, effective)


def _effective_trials(passes: float, discordant: float, counts: RateCounts) -> float:
    """N² / (Σ n_c² − w·Σ n_c(n_c − 1)) of :func:`rate_interval95`, w at most 1, and 0 with no rate to weigh by."""
    pairs = counts.squares - counts.trials
    rate = passes / counts.trials
    spread = pairs * rate * (1 - rate)
    within = min(1.0, discordant / spread) if spread > 0 else 0.0
    return counts.trials**2 / (counts.squares - within * pairs)


def _wilson_lower(rate: float, total: float) -> float:
    return _wilson(min(rate, 1.0), total)[0]


def values_interval95(mean: float, standard_error: float, cases: int) -> tuple[float, float]:
    """The 95% interval of a mean over ``cases`` of one value in [0, 1] per case (pass@k, pass^k): the bounded
    interval of their spread (:func:`bounded_interval95`), the standard error the usual one over cases.

    It used to be Wilson's at the effective number the standard error implies, mean(1 − mean) / SE², and with no
    spread Wilson's at the cases: 50 cases of 3 attempts that all passed read 92.9% to 100% for pass@1 and the same
    with one failing attempt 96.2% to 99.9%, so one more pass made the figure look less certain. pass@1 over cases
    of equal attempts is the pass rate and takes its interval instead (:func:`._report._k_rates`)."""
    return bounded_interval95(mean, standard_error, cases)


def mean_interval95(mean: float, standard_error: float, values: int, cases: int) -> tuple[float, float]:
    """The 95% interval of a mean of ``values`` scores in [0, 1] (a continuous scorer's) clustered in ``cases``:
    the t interval on the logit scale, log(m / (1 − m)) ± t·SE / (m(1 − m)) (the delta method's standard error, SE
    clustered by case, :func:`clustered_standard_error`, t Student's with ``cases`` - 1 degrees of freedom) read
    back through the logistic, reaching at least as far as Wilson's for every case at 1 (at 0): the lower end is
    never above C / (C + z²), the upper never below z² / (C + z²).

    Not a pass rate's Wilson: its width comes from p(1 - p), the most a mean p of values in [0, 1] can vary, which
    only the all-or-nothing values of a pass/fail scorer reach. Read that way, a mean of 0.286 with a standard
    deviation of 0.033 over 54 cases (a custom scorer on the mock agent's hard run) read 22.1% to 36.2%; its spread
    gives 27.7% to 29.5%, as the plain t interval of it did. That one, the mean ± t·SE clipped to [0, 1], held the
    true mean of scores skewed near 1 too rarely (their low cases are seldom drawn, so the spread looks small) and
    read one score a hair under 1 far narrower than all at 1 (10 cases: 100.0% to 100.0% against 72.2% to 100%).
    On the logit scale an interval near 1 reaches further down than up, and the floor makes every case at 1, or a
    hair under, read Wilson's at the cases (benchmarks/sim_continuous_interval.py: 2,000 runs in each of 1,260
    settings, 5 to 50 cases of 1 to 5 scores, true means 0.3 to 0.999, case means and scores beta, half exact 0s
    and 1s, or recall-like exact 1s): it held the true mean 96.8% of the time on average (the t interval 87.5%),
    in 6 settings under 93% (586), at worst 92.2% (38.2%), at the t interval's median width for true means 0.3 to
    0.7 and wider above (0.230 against 0.160 at 0.9, 0.218 against 0.022 at 0.99).

    Where the cases show no spread (each case's mean the same), the mean is 0 or 1, or there is one case, the spread
    says nothing and the interval is Wilson's at the cases (:func:`unmeasured_interval95`). NaN where there is no
    mean."""
    if math.isnan(mean) or values <= 0:
        return math.nan, math.nan
    if math.isnan(standard_error) or standard_error <= 0 or cases < 2 or not 0 < mean < 1:
        return unmeasured_interval95(mean, cases)
    centre = math.log(mean / (1 - mean))
    half = t_quantile(0.975, cases - 1) * standard_error / (mean * (1 - mean))
    return min(_logistic(centre - half), _wilson(1.0, cases)[0]), max(_logistic(centre + half), _wilson(0.0, cases)[1])


def _logistic(x: float) -> float:
    """1 / (1 + e^−x), without overflow far out on either side."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    return math.exp(x) / (1.0 + math.exp(x))


def bounded_interval95(mean: float, standard_error: float, cases: int) -> tuple[float, float]:
    """The 95% interval of a mean of values in [0, 1] over ``cases`` independent cases (pass@k and pass^k, through
    :func:`values_interval95`), monotone in every value: raising one never lowers the lower end, lowering one never
    raises the upper.

    The lower end is the lower of two. The first is the lowest mean − t·SE (t Student's with C − 1 degrees of
    freedom) that any result with values raised by D in all could have: raising values by D adds D / C to the mean
    and at most 2(1 − mean)·D − D² / C to Σ(x − mean)², so it is the least over D of the closed form in
    :func:`_lowest_raised_lower`: mean − t·SE itself where SE ≥ t(1 − mean) / (C − 1), and below that,
    1 − √((1 + t² / (C − 1))·((C − 1)·SE² + (1 − mean)²)). The second is C / (C + z²), Wilson's lower end for C
    cases all at 1. Both are monotone, so their lower is. The upper end mirrors it (each value read as 1 − value).

    It replaces a t (or Wilson) interval of the measured spread with Wilson's at the cases where there was none:
    all cases at 1 read Wilson's at the cases and one case a hair under 1 the narrow interval of its tiny spread
    (10 cases: 72.2% to 100%, and 99.99999997% to 100%), so lowering a value raised the lower end; pass@1 of 50
    cases of 3 attempts read 92.87% to 100% all passing and 96.18% to 99.89% with one failing attempt. Cases
    that all agree now have a width too, about t²(1 − mean) / (2(C − 1)) below. In a seeded simulation of pass@k
    and pass^k (2,000 runs in each of 1,250 settings: 5 to 100 cases of 2 to 5 attempts, true rates 0.5 to 0.999,
    intra-case correlations 0 to 0.9) it held the
    true value 98.5% of the time on average (the one before 96.8%), in 74 settings under 93% (89), at worst 86.3%
    (85.4%), at about the same width (1% wider on average); of continuous means (2,000 runs in each of 144 settings: 5
    to 50 cases of 3 scores, case means beta around 0.3 to 0.999, scores beta around them or exactly 1 with the
    case's chance) 99.2% (t·SE 90.3%), in 3 settings under 93%
    (68), at worst 91.6% (59.6%), but 1.5 times as wide on average: over few cases the raised results reach far
    (4 cases all at 50% read 0% to 100%). One case gives no spread to measure: Wilson's at one. NaN without a mean.

    A clustered mean over cases of unequal size can move Σ(x − mean)² further per value (by the largest case's
    share of the values times C), which the SQL sums do not give; the bound is exact for cases of equal size."""
    if math.isnan(mean):
        return math.nan, math.nan
    if cases < 2 or math.isnan(standard_error):
        return unmeasured_interval95(mean, cases)
    t = t_quantile(0.975, cases - 1)
    low = min(_lowest_raised_lower(mean, standard_error, cases, t), _wilson(1.0, cases)[0])
    high = max(1.0 - _lowest_raised_lower(1.0 - mean, standard_error, cases, t), _wilson(0.0, cases)[1])
    return max(0.0, low), min(1.0, high)


def _lowest_raised_lower(mean: float, standard_error: float, cases: int, t: float) -> float:
    """The least over D of mean + D / C − t·√((Σ + 2(1 − mean)·D − D² / C) / (C(C − 1))), Σ = SE²·C(C − 1), which is
    convex in D: at D = 0 where the slope there is not negative, else where it is 0 (:func:`bounded_interval95`)."""
    room = 1.0 - mean
    if standard_error * (cases - 1) >= t * room:
        return mean - t * standard_error
    return 1.0 - math.sqrt((1 + t * t / (cases - 1)) * ((cases - 1) * standard_error**2 + room * room))


def unmeasured_interval95(rate: float, cases: int) -> tuple[float, float]:
    """The interval of a mean whose cases show no spread to measure (:func:`mean_interval95`), or over one case
    (:func:`bounded_interval95`): Wilson's at the number of cases, since attempts of one case may agree only because
    they are alike; at one case, at one."""
    return _wilson(rate, max(cases, 1))


def known_interval(interval: tuple[float, float] | None) -> tuple[float, float] | None:
    """``interval``, or None where there is none to give (no trials, or no spread to measure: NaN bounds)."""
    return None if interval is None or math.isnan(interval[0]) else interval


def wilson95(count: int, total: int) -> tuple[float, float] | None:
    """The Wilson 95% interval of the rate ``count / total`` of independent events (traces, each its own unit):
    unlike the normal one it does not shrink to nothing at a rate of 0 or 1. None without events."""
    if total <= 0:
        return None
    return _wilson(count / total, total)


def _wilson(rate: float, total: float) -> tuple[float, float]:
    """Wilson's score interval of a rate observed over ``total`` independent events (a real number: an effective
    count may be one), with the ends at a rate of exactly 0 or 1 exact rather than a rounding error off."""
    z2 = Z95 * Z95
    centre = (rate + z2 / (2 * total)) / (1 + z2 / total)
    half = Z95 * math.sqrt(rate * (1 - rate) / total + z2 / (4 * total * total)) / (1 + z2 / total)
    low = 0.0 if rate == 0 else max(0.0, centre - half)
    return low, 1.0 if rate == 1 else min(1.0, centre + half)


def z_upper(alpha: float) -> float:
    """z(1 - alpha), the one-sided critical value, as -z(alpha): the same by symmetry, and defined for every alpha
    the options accept (1 - 1e-17 is 1.0 in floats, where inv_cdf raised and --alpha 1e-17 crashed)."""
    return -NORMAL.inv_cdf(alpha)


def pass_at_k(attempts: int, passes: int, k: int) -> float:
    """The chance that at least one of k attempts drawn from this case's n passes (unbiased estimator)."""
    if k > attempts:
        raise ValueError("k cannot exceed the attempts")
    return 1.0 - math.comb(attempts - passes, k) / math.comb(attempts, k)


def pass_hat_k(attempts: int, passes: int, k: int) -> float:
    """tau-bench's pass^k: the chance that all k attempts drawn from the case's n pass, C(c,k) / C(n,k)."""
    if k > attempts:
        raise ValueError("k cannot exceed the attempts")
    return math.comb(passes, k) / math.comb(attempts, k)


def mean_over_cases(values: Sequence[float]) -> tuple[float, float]:
    """The mean of per-case values and its standard error (cases independent); exact sums, whatever the order."""
    return mean_over_counted_cases([(value, 1) for value in values])


def mean_over_counted_cases(counted: Sequence[tuple[float, int]]) -> tuple[float, float]:
    """:func:`mean_over_cases` of ``count`` cases holding each ``(value, count)``: cases share a few values (pass@k
    of 2 passes in 3 attempts), which are then weighed rather than repeated."""
    m = sum(count for _, count in counted)
    if m == 0:
        return math.nan, math.nan
    mean = math.fsum(count * value for value, count in counted) / m
    if m < 2:
        return mean, math.nan
    variance = math.fsum(count * (value - mean) ** 2 for value, count in counted) / (m - 1)
    return mean, math.sqrt(variance / m)


@dataclasses.dataclass(frozen=True)
class PairedDifference:
    """Candidate minus baseline over the cases both ran, paired by case (each case one cluster)."""

    cases: int
    baseline: float
    candidate: float
    difference: float
    standard_error: float
    """Clustered by case; where no case's difference departs from their mean, :func:`unseen_spread_error`."""
    no_spread: bool = False
    """No case's difference departed from their mean (every case passed, or changed alike, in both runs): the
    spread is unknown rather than zero, and ``standard_error`` is the most the unchanged cases leave possible."""
    rate: bool = True
    """A difference of two rates, which is within [-1, 1]; False for a mean with no bound, such as tokens per trial."""
    degrees_of_freedom: int | None = None
    """Of the Student t its interval, test and detectable drop are read from: the clusters the standard error was
    estimated over less one (at 10 cases the normal's 95% interval held the true difference about 92% of the time);
    None for the normal, as for an unseen spread, which is a bound of its own."""

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        """The t interval; of rates clipped to [-1, 1]: a difference of two rates is no larger (9 of 10 cases
        passing, then none, read -109.6% to -70.4%)."""
        return self._within(t_quantile(0.5 + level / 2, self._df()))

    def test_interval(self, alpha: float) -> tuple[float, float]:
        """The 1 - 2 alpha interval (90% at alpha 0.05), clipped: its upper end is below 0 exactly when the
        one-sided test at ``alpha`` rejects "no drop"."""
        return self._within(t_upper(alpha, self._df()))

    def _df(self) -> float:
        return math.inf if self.degrees_of_freedom is None else self.degrees_of_freedom

    def _within(self, critical: float) -> tuple[float, float]:
        low = self.difference - critical * self.standard_error
        high = self.difference + critical * self.standard_error
        return (max(-1.0, low), min(1.0, high)) if self.rate else (low, high)

    def p_drop(self) -> float:
        """One-sided p-value of "the candidate is no worse": small when the drop is real."""
        if self.standard_error == 0:
            return 0.0 if self.difference < 0 else 1.0
        return t_cdf(self.difference / self.standard_error, self._df())

    def minimum_detectable_drop(
        self, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_TARGET_POWER, beyond: float = 0.0
    ) -> float:
        """The smallest drop a one-sided test at ``alpha`` catches with ``power``, at this standard error; with
        ``beyond``, when the observed drop must also exceed it (the gate's ``--max-drop``): the drop is caught past
        the larger of the test's threshold and ``beyond``. Without it, the gate over 1,000 cases said it detected
        drops of 1.2% with 80% power, drops it passes whatever the test says, being within its 2%."""
        threshold = max(t_upper(alpha, self._df()) * self.standard_error, beyond)
        return threshold + t_quantile(power, self._df()) * self.standard_error


def paired_difference(
    baseline: dict[str, float], candidate: dict[str, float], *, rate: bool = True
) -> PairedDifference:
    """Per-case pass rates (attempts averaged) of two experiments, compared over their shared cases; with ``rate``
    False, per-case means of any other figure (tokens, cost, latency), whose difference has no bound to clip its
    interval to or to take an unseen spread from: where no case's difference departs from the rest, its standard
    error stays the 0 measured, and ``no_spread`` says so."""
    shared = sorted(set(baseline) & set(candidate))
    diffs = [candidate[c] - baseline[c] for c in shared]
    difference, standard_error = mean_over_cases(diffs)
    base = math.fsum(baseline[c] for c in shared) / len(shared) if shared else math.nan
    cand = math.fsum(candidate[c] for c in shared) / len(shared) if shared else math.nan
    # 11 cases passing in both runs had a standard error of 0: an interval of +0.0% to +0.0%, and "detects drops
    # of 0.0%", from a comparison that could miss a drop of a quarter.
    no_spread = standard_error == 0
    if no_spread and rate:
        standard_error = unseen_spread_error(len(shared))
    measured = len(shared) >= 2 and not (no_spread and rate)
    return PairedDifference(
        len(shared), base, cand, difference, standard_error, no_spread, rate, len(shared) - 1 if measured else None
    )


def detectable_drops(mde: float) -> str:
    """What a comparison whose smallest detectable drop is ``mde`` catches, in words: a pass rate drops at most 100
    points, and few cases (or a tiny alpha) gave figures beyond that, '416%' at ``--alpha 1e-300``."""
    if mde > 1:
        return "no drop a pass rate can have (at most 100 points)"
    return f"drops of {mde:.1%}"


def one_sided_interval_label(alpha: float) -> str:
    """The 1 - 2 alpha interval's name (``90% CI`` at 0.05) with the digits its level needs: ``.4g`` read '100% CI'
    at --alpha 1e-6, a certainty no interval has. A level floats cannot tell from 100% is written from alpha."""
    level = 100 * (1 - 2 * alpha)
    for decimals in range(13):
        shown = f"{level:.{decimals}f}"
        if float(shown) not in (0, 100) and abs(float(shown) - level) <= 0.05 * min(level, 100 - level):
            return f"{shown}% CI"
    return f"level 1 - {2 * alpha:g} CI"


def shown_p(p: float) -> str:
    """A p-value to three decimals, or in exponent form below 0.0005, where 'p = 0.000' sat beside 'not significant
    at alpha 1e-06'."""
    return f"{p:.3f}" if p == 0 or p >= 0.0005 else f"{p:.1e}"


def no_spread_note(cases: int) -> str:
    """What a comparison whose cases show no spread says of its interval and detectable drop."""
    return (
        f"no case's pass rate moved apart from the rest, so the spread is unknown: the interval and the detectable "
        f"drop assume the most that {cases} such cases leave possible"
    )


def unseen_spread_error(cases: int) -> float:
    """The standard error given to a paired difference when no case's difference departed from the mean.

    Seeing none of ``cases`` change leaves a share of up to z²/(n + z²) possible at 95% (the upper end of Wilson's
    interval of 0 in n): that share is taken as the interval's half-width, so z / (n + z²) as a standard error.
    It is 25.9% of half-width at 11 cases, 1.9% at 200."""
    return Z95 / (cases + Z95 * Z95)


@dataclasses.dataclass(frozen=True)
class Kappa:
    """Cohen's kappa of two raters' pass/fail verdicts, with a percentile-bootstrap 95% interval."""

    agreement: float
    kappa: float | None
    """None when it is undefined: both raters gave one and the same verdict to every item."""
    ci95: tuple[float, float] | None
    method: str


BOOTSTRAP_RESAMPLES = 2000


def cohens_kappa(first: Sequence[bool], second: Sequence[bool], seed: int = 0) -> Kappa:
    """Agreement and Cohen's kappa of two raters over the same items. The interval is a percentile bootstrap
    over the items (:data:`BOOTSTRAP_RESAMPLES` resamples, ``seed`` fixed): it holds for the small label sets
    judges are checked on, where kappa's asymptotic standard error does not; resamples where kappa is
    undefined are left out."""
    import numpy as np

    a = np.asarray(first, dtype=bool)
    b = np.asarray(second, dtype=bool)
    if len(a) != len(b) or len(a) == 0:
        raise ValueError("kappa needs the same, non-zero number of verdicts from each rater")
    method = f"percentile bootstrap over items, {BOOTSTRAP_RESAMPLES} resamples"
    point = _kappa(a, b)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(a), size=(BOOTSTRAP_RESAMPLES, len(a)))
    draws = [k for row in picks if (k := _kappa(a[row], b[row])) is not None]
    interval = (float(np.quantile(draws, 0.025)), float(np.quantile(draws, 0.975))) if draws else None
    return Kappa(float((a == b).mean()), point, interval if point is not None else None, method)


def _kappa(a: Any, b: Any) -> float | None:
    observed = float((a == b).mean())
    pa, pb = float(a.mean()), float(b.mean())
    expected = pa * pb + (1 - pa) * (1 - pb)
    if expected >= 1.0:
        return None
    return (observed - expected) / (1 - expected)
