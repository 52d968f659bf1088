"""How likely a comparison is to catch a drop: the variance decomposition of Miller (2024), for the
paired comparison that ``compare`` and ``gate`` use and for an unpaired one.

Each case i has a true pass rate p_i; across cases p_i has mean p and variance s² (the between-case
spread). A case's observed rate over K attempts varies around p_i by p_i(1 - p_i) / K (within-case).
The candidate takes d_i off case i where there are passes to lose: each of a share f of the cases
(``affected``, 1 by default; widened to d / p when those cases would otherwise lose more than they pass) keeps
1 - r of its pass rate, r = d / (f p), and the rest keep theirs. So d_i = r p_i for those cases, with mean d and
variance v = f r² E p_i² - d², E p_i² = s² + p²; with q_i = p_i - d_i, E p_i(1 - p_i) = p - E p_i² and
E q_i(1 - q_i) = (p - d) - E q_i², E q_i² = E p_i² (1 - 2 f r + f r²):

- paired, over the same cases: the between-case part cancels, and each case's difference has
  variance  V = v + [E p_i(1 - p_i) + E q_i(1 - q_i)] / K;  over m cases the difference has
  standard error sqrt(V / m), and a one-sided test at alpha catches the drop with probability
  P(d + sqrt(V / m) Z > t(1 - alpha) sqrt(V / m) S), where t is Student's with m - 1 degrees of
  freedom, as the test of ``compare`` and ``gate`` reads it, and S the ratio of the estimated error to
  the true one (the square root of a chi-square over its m - 1 degrees of freedom): the noncentral t's
  power, found by summing over S.
- unpaired: each run's pass rate with its own case-clustered standard error, as when two reports'
  intervals are set side by side. The test divides by sqrt(U / m), U = [s² + E p_i(1 - p_i) / K] +
  [s² + v + E q_i(1 - q_i) / K], which counts the between-case spread twice; but the two runs are
  of the same cases, so the difference still varies by sqrt(V / m) only. It catches the drop with
  probability  P(d + sqrt(V / m) Z > t(1 - alpha) sqrt(U / m) S).

The more the cases' pass rates are spread out (all-or-nothing cases: s² near p(1 - p)), the more
the unpaired test overstates its error and the less it catches.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from ..errors import ExperimentNotFound, UsageError
from ..run._options import DEFAULT_ALPHA, DEFAULT_ATTEMPTS, DEFAULT_MAX_DROP, DEFAULT_PASS_RATE, DEFAULT_TARGET_POWER
from ._student_t import NORMAL, t_quantile, t_upper

DEFAULT_SPREAD_SHARE = 0.5
"""Without a past experiment to estimate from, the between-case variance is taken as half its largest
possible value p(1 - p): cases differ a lot, but not all are all-or-nothing."""


@dataclasses.dataclass(frozen=True)
class Variances:
    """One case's variances under a drop: of its paired difference, and of each run's observed rate."""

    paired: float
    baseline: float
    candidate: float

    @property
    def unpaired(self) -> float:
        """What the unpaired test takes the difference's variance to be: the two runs' added."""
        return self.baseline + self.candidate


@dataclasses.dataclass(frozen=True)
class PowerModel:
    """The assumptions of a power calculation."""

    pass_rate: float
    attempts: int
    between_case_variance: float
    alpha: float = DEFAULT_ALPHA
    affected: float = 1.0
    """The share of cases the drop falls on (1: every case by the same drop)."""
    spread_note: str | None = None
    """Why the between-case variance is not what it seems, said with it in the assumptions: a past run it could not
    be estimated from."""
    max_drop: float = DEFAULT_MAX_DROP
    """The gate's ``--max-drop``: it flags a drop only past it, whatever the test says, so the paired chance is of
    the test rejecting and the observed drop exceeding it (0: the test alone, as compare reads it). Printed as the
    test's alone, a 2-point drop over 1,000 cases read 100% where the gate flagged it half the time."""

    def __post_init__(self) -> None:
        if not 0 < self.pass_rate < 1:
            raise UsageError("--pass-rate must be between 0 and 1")
        if self.attempts < 1:
            raise UsageError("--attempts must be at least 1")
        if not 0 < self.affected <= 1:
            raise UsageError("--affected must be more than 0 and at most 1")
        if not 0 <= self.max_drop <= 1:
            raise UsageError("--max-drop must be from 0 to 1")
        limit = self.pass_rate * (1 - self.pass_rate)
        if not 0 <= self.between_case_variance <= limit:
            raise ValueError(f"the between-case variance must be between 0 and p(1 - p) = {limit:.4f}")

    def affected_share(self, drop: float) -> float:
        """The share of cases ``drop`` falls on: ``affected``, widened to drop / pass rate where the
        affected cases would otherwise have to lose more than they pass."""
        return min(1.0, max(self.affected, drop / self.pass_rate))

    def variances(self, drop: float) -> Variances:
        """Each affected case keeps 1 - r of its pass rate, r = drop / (share x pass rate): the drop is
        taken where there are passes to lose, so no case goes below 0, and the cases lose drop on average."""
        p, s2, k = self.pass_rate, self.between_case_variance, self.attempts
        if drop > p:  # r > 1: cases would pass less than never, and the variances came out as any number
            raise UsageError(
                f"--drop {drop:g} is more than the pass rate {p:g}, which cannot fall below 0; give drops up to {p:g}"
            )
        share = self.affected_share(drop)
        r = drop / (share * p)
        second_moment = s2 + p * p  # E p_i²
        candidate_second_moment = second_moment * (1 - 2 * share * r + share * r * r)  # E q_i²
        within_baseline = p - second_moment  # E p_i(1 - p_i)
        within_candidate = (p - drop) - candidate_second_moment
        return Variances(
            paired=share * r * r * second_moment - drop * drop + (within_baseline + within_candidate) / k,
            baseline=s2 + within_baseline / k,
            candidate=candidate_second_moment - (p - drop) ** 2 + within_candidate / k,
        )

    def difference_variance(self, drop: float) -> float:
        """Variance of one case's candidate-minus-baseline pass rate under ``drop``."""
        return self.variances(drop).paired

    def power(self, cases: int, drop: float) -> float:
        """The probability that a paired comparison over ``cases`` cases catches ``drop``."""
        v = self.variances(drop)
        return self._power(cases, drop, true=v.paired, tested=v.paired, floor=self.max_drop)

    def unpaired_power(self, cases: int, drop: float) -> float:
        """The probability that comparing the two runs' pass rates, each with its own error, catches ``drop``."""
        v = self.variances(drop)
        return self._power(cases, drop, true=v.paired, tested=v.unpaired)

    def _power(self, cases: int, drop: float, true: float, tested: float, floor: float = 0.0) -> float:
        """The chance that the drop's estimate, varying by the true error, is past t(1 - alpha) times the error
        the test estimates (t at cases - 1 degrees of freedom), that estimate varying as the test's does, and past
        ``floor`` (the gate's ``max_drop``)."""
        df = _degrees_of_freedom(cases)
        threshold = t_upper(self.alpha, df) * math.sqrt(tested / cases)
        true_error = math.sqrt(true / cases)
        if true_error == 0:
            return 1.0 if drop > max(threshold, floor) else 0.0
        return _chance_past(drop, threshold, true_error, df, floor)

    def cases_needed(self, drop: float, target: float = DEFAULT_TARGET_POWER, paired: bool = True) -> int | None:
        """The fewest cases for which ``drop`` is caught with probability ``target``. Between the normal's
        m = [(z(1 - alpha) sqrt(U) + z(target) sqrt(V)) / d]², U = V when paired, which promises too much, and the
        same with a central t at m - 1 degrees of freedom, which promises too little. None where no number of cases
        reaches it: paired, a drop not past ``max_drop`` is flagged at most half the time, however many cases."""
        if paired and drop <= self.max_drop and target >= 0.5:
            return None
        v = self.variances(drop)
        tested = v.paired if paired else v.unpaired

        def closed_form(df: float) -> float:
            root = (t_upper(self.alpha, df) * math.sqrt(tested) + t_quantile(target, df) * math.sqrt(v.paired)) / drop
            return root * root

        low = closed_form(math.inf)
        if not math.isfinite(low):  # --drop 1e-200: ceil(inf) raised OverflowError, a traceback
            raise UsageError(f"--drop {drop:g} is too small for any number of cases to catch; give a larger drop")
        low = high = max(2, math.ceil(low))
        while (more := math.ceil(closed_form(_degrees_of_freedom(high)))) > high:
            high = more
        power = self.power if paired else self.unpaired_power
        # The closed form is only a guide: unpaired, it fell a case short (318 cases for a 5-point drop from 0.85,
        # whose own power is 79.96%), and without this check the search below returned it untested.
        while power(high, drop) < target:
            low, high = high + 1, 2 * high
        while low < high:  # the fewest in [low, high] whose power reaches the target: power grows with cases
            middle = (low + high) // 2
            if power(middle, drop) >= target:
                high = middle
            else:
                low = middle + 1
        return low

    def assumptions(self) -> list[str]:
        if self.affected < 1:
            how = (
                f"the drop falls on {self.affected:.0%} of the cases, chosen by chance, each losing drop / "
                f"{self.affected:g} on average; a larger drop than the affected cases pass is spread over more cases"
            )
        else:
            how = "every case loses the same share of its pass rate, drop / pass rate (--affected concentrates it)"
        how += "; a case loses in proportion to its pass rate, so one that always fails cannot get worse"
        return [
            f"baseline pass rate {self.pass_rate:.2f}; {self.attempts} attempt(s) per case",
            f"between-case variance of true pass rates {self.between_case_variance:.4f} "
            f"(spread {math.sqrt(self.between_case_variance):.3f}; "
            f"at most {self.pass_rate * (1 - self.pass_rate):.4f}, when every case is all-or-nothing)"
            + (f": {self.spread_note}" if self.spread_note else ""),
            how,
            "paired: the same cases, each case's difference (compare, gate); unpaired: the same cases, but each "
            "run's pass rate with its own case-clustered error, as when two reports are set side by side",
            f"one-sided t test at alpha {self.alpha} (cases - 1 degrees of freedom), as compare and gate make it; "
            "each case's difference taken as normal",
            f"paired: caught as the gate flags it, when the test rejects and the observed drop exceeds --max-drop "
            f"{self.max_drop:g} (0 for the test alone); a drop not past it is caught at most half the time",
        ]


DEFAULT_DROPS = (0.05, 0.10, 0.15)
"""The drops ``agenteval power`` tabulates without ``--drop``: those up to the pass rate."""


def default_drops(model: PowerModel) -> list[float]:
    """:data:`DEFAULT_DROPS` that the model's pass rate can take; with a pass rate of 0.1, a 15-point drop read
    '78% / 89%' as if it could happen."""
    drops = [d for d in DEFAULT_DROPS if d <= model.pass_rate]
    if not drops:
        raise UsageError(
            f"at a pass rate of {model.pass_rate:g} none of the default drops ({', '.join(map(str, DEFAULT_DROPS))}) "
            f"can happen; give the drops to tabulate with --drop (up to {model.pass_rate:g})"
        )
    return drops


def default_model(
    pass_rate: float,
    attempts: int,
    alpha: float = DEFAULT_ALPHA,
    affected: float = 1.0,
    max_drop: float = DEFAULT_MAX_DROP,
) -> PowerModel:
    spread = DEFAULT_SPREAD_SHARE * pass_rate * (1 - pass_rate)
    return PowerModel(pass_rate, attempts, spread, alpha, affected, max_drop=max_drop)


def estimate_between_case_variance(case_rates: Sequence[float], attempts: int) -> float:
    """Between-case variance from observed per-case pass rates: their variance less the part that
    within-case noise contributes (p_i(1 - p_i) / K, estimated without bias), clipped to [0, p(1 - p)]."""
    m = len(case_rates)
    if m < 2:
        raise ValueError("need at least two cases to estimate the between-case spread")
    if attempts < 2:  # every rate is 0 or 1: its variance is p(1 - p) however alike the cases are
        raise ValueError("need at least two attempts per case to tell the between-case spread from the within-case")
    mean = math.fsum(case_rates) / m
    observed = math.fsum((r - mean) ** 2 for r in case_rates) / (m - 1)
    # E[r(1-r)] = (K-1)/K p(1-p): so p(1-p)/K = E[r(1-r)] / (K-1)
    within = math.fsum(r * (1 - r) for r in case_rates) / m / (attempts - 1)
    return min(max(observed - within, 0.0), mean * (1 - mean))


def build_model(
    *,
    pass_rate: float | None = None,
    attempts: int | None = None,
    spread: float | None = None,
    alpha: float = DEFAULT_ALPHA,
    affected: float = 1.0,
    store: Any = None,
    from_experiment: str | None = None,
    max_drop: float = DEFAULT_MAX_DROP,
) -> PowerModel:
    """The model ``agenteval power`` uses: what is given, the rest estimated from ``from_experiment``
    (pass rate, attempts, spread) or the defaults. ``spread`` is the standard deviation of the cases'
    true pass rates."""
    if from_experiment is not None:  # "" is an id, refused as one: not "no --from"
        rates, attempts_run = _experiment_rates(store, from_experiment)
        if pass_rate is None:
            pass_rate = math.fsum(rates) / len(rates)
            if not 0 < pass_rate < 1:  # said here: the model's own check names --pass-rate, which was not given
                raise UsageError(
                    f"--from {from_experiment}: its pass rate is {pass_rate:.0%}, from which no drop can be sized; "
                    "give the pass rate to plan for with --pass-rate (e.g. 0.95)"
                )
        attempts = attempts or attempts_run
        if spread is not None:
            return PowerModel(
                pass_rate, attempts, _spread_variance(spread, pass_rate), alpha, affected, max_drop=max_drop
            )
        if attempts_run < 2:
            # Read as all of the rates' variance, a run of one attempt made every case all-or-nothing: 75% power for
            # a 10-point drop over 50 cases at a 70% pass rate, where the default spread gives 38%.
            note = (
                f"the default, since {from_experiment} ran 1 attempt per case, which cannot tell how much the cases "
                "differ from how much one attempt varies; give --spread to set it"
            )
            return dataclasses.replace(default_model(pass_rate, attempts, alpha, affected, max_drop), spread_note=note)
        # The run's rates vary within a case by what its own attempts give, whatever --attempts plans: estimated with
        # the planned attempts, the spread of one run's cases read 0.026 at 3 attempts and 0.062 at 5.
        variance = estimate_between_case_variance(rates, attempts_run)
        return PowerModel(pass_rate, attempts, variance, alpha, affected, max_drop=max_drop)
    pass_rate, attempts = pass_rate or DEFAULT_PASS_RATE, attempts or DEFAULT_ATTEMPTS
    if spread is None:
        return default_model(pass_rate, attempts, alpha, affected, max_drop)
    return PowerModel(pass_rate, attempts, _spread_variance(spread, pass_rate), alpha, affected, max_drop=max_drop)


ERROR_RATIO_POINTS = 801
"""Points of the sum over the ratio of a test's estimated error to the true one: the power is within 1e-6 of the
integral's (checked against 100,001)."""

NORMAL_FROM_DF = 10_000
"""From this many degrees of freedom the estimated error is taken as the true one (the ratio's spread, 1 / sqrt(2
df), is under 1%): the normal's power."""


def _chance_past(drop: float, threshold: float, true_error: float, df: float, floor: float = 0.0) -> float:
    """P(drop + true_error Z > max(threshold S, floor)), Z standard normal and S the chi of ``df`` degrees of freedom
    over sqrt(df): summed over S on a grid of its density (v^(df - 1) e^(-v² / 2) for v = S sqrt(df)), normalised on
    that grid, so its density's constant and the grid's spacing cancel."""
    if math.isinf(df) or df >= NORMAL_FROM_DF:
        return NORMAL.cdf((drop - max(threshold, floor)) / true_error)
    centre = math.sqrt(max(df - 1, 0.0))  # the chi's mode
    low, high = max(centre - 12.0, 0.0), centre + 12.0
    step = (high - low) / (ERROR_RATIO_POINTS - 1)
    weights = caught = 0.0
    for point in range(ERROR_RATIO_POINTS):
        v = low + point * step
        if v <= 0:
            continue
        weight = math.exp((df - 1) * math.log(v / centre if centre else v) - (v * v - centre * centre) / 2)
        weights += weight
        caught += weight * NORMAL.cdf((drop - max(threshold * v / math.sqrt(df), floor)) / true_error)
    return caught / weights


def _degrees_of_freedom(cases: int) -> float:
    """Of the t that compare and gate read over ``cases`` shared cases; the normal's where there are too few to
    estimate a spread from (one case)."""
    return cases - 1 if cases >= 2 else math.inf


def _spread_variance(spread: float, pass_rate: float) -> float:
    """The between-case variance ``--spread`` gives, refused, naming the option, past what ``pass_rate`` allows:
    "the between-case variance must be between 0 and p(1 - p) = 0.0099" named neither option."""
    largest = math.sqrt(pass_rate * (1 - pass_rate)) if 0 < pass_rate < 1 else 0.0
    if spread**2 > pass_rate * (1 - pass_rate):
        raise UsageError(
            f"--spread {spread:g} is more than cases with a pass rate of {pass_rate:g} can differ by: at most "
            f"sqrt(p(1 - p)) = {largest:.4f}, when every case is all-or-nothing; give --spread up to that"
        )
    return spread**2


def _experiment_rates(store: Any, experiment_id: str) -> tuple[list[float], int]:
    from ..store import Store
    from ._compare import case_rates
    from ._experiments import find

    target = store if isinstance(store, Store) else Store(store)
    target.require()  # a mistyped --store is named as such, not as an experiment missing from it
    found = find(target, experiment_id)
    if found is None:
        raise ExperimentNotFound(f"no experiment {experiment_id!r} in {target.root}")
    rows = case_rates(target, found.experiment_id)
    if len(rows) < 2:
        raise ValueError(f"{found.experiment_id} has trials for {len(rows)} case(s); at least 2 are needed")
    return [r["rate"] for r in rows], max(r["attempts"] for r in rows)


@dataclasses.dataclass(frozen=True)
class PowerTable:
    """What ``agenteval power`` prints: for each number of cases (rows) and drop (columns), the chance
    that a paired and an unpaired comparison catch it, and the cases each needs for ``target``."""

    model: PowerModel
    cases: list[int]
    drops: list[float]
    target: float
    paired: list[list[float]]
    unpaired: list[list[float]]
    cases_needed: list[int | None]
    """None where no number of cases reaches the target (a drop not past ``max_drop``)."""
    cases_needed_unpaired: list[int | None]
    assumptions: list[str]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def power_table(model: PowerModel, cases: Sequence[int], drops: Sequence[float], target: float) -> PowerTable:
    return PowerTable(
        model,
        list(cases),
        list(drops),
        target,
        [[model.power(m, d) for d in drops] for m in cases],
        [[model.unpaired_power(m, d) for d in drops] for m in cases],
        [model.cases_needed(d, target) for d in drops],
        [model.cases_needed(d, target, paired=False) for d in drops],
        model.assumptions(),
    )


@dataclasses.dataclass(frozen=True)
class SimulatedPower:
    paired: float
    unpaired: float


def simulate_power(model: PowerModel, cases: int, drop: float, runs: int = 2000, seed: int = 0) -> SimulatedPower:
    """The same model by Monte Carlo: draw case rates from a Beta with the model's mean and spread, the
    affected cases at random, attempts as Bernoulli draws, and count how often each one-sided test
    rejects: the paired one on per-case differences (and the drop past ``max_drop``, as the gate flags it), the
    unpaired one on the two pass rates, each with its standard error clustered by case."""
    import numpy as np

    rng = np.random.default_rng(seed)
    p, s2, k = model.pass_rate, model.between_case_variance, model.attempts
    if s2 >= p * (1 - p):  # the Beta's limit: every case all-or-nothing
        rates = (rng.random((runs, cases)) < p).astype(float)
    elif s2 > 0:
        common = p * (1 - p) / s2 - 1
        rates = rng.beta(p * common, (1 - p) * common, size=(runs, cases))
    else:
        rates = np.full((runs, cases), p)
    share = model.affected_share(drop)
    hit = rng.random((runs, cases)) < share
    baseline = rng.binomial(k, rates) / k
    candidate = rng.binomial(k, rates * (1 - hit * drop / (share * p))) / k
    critical = -t_upper(model.alpha, _degrees_of_freedom(cases))  # the test compare and gate make

    def rejects(difference: Any, standard_error: Any, floor: float = 0.0) -> float:
        # No error at all: the test rejects exactly when the candidate is worse.
        z = np.divide(
            difference, standard_error, out=np.where(difference < 0, -np.inf, np.inf), where=standard_error > 0
        )
        return float(np.mean((z < critical) & (-difference > floor)))

    diffs = candidate - baseline
    paired = rejects(diffs.mean(axis=1), diffs.std(axis=1, ddof=1) / math.sqrt(cases), model.max_drop)
    unpaired_error = np.sqrt((baseline.var(axis=1, ddof=1) + candidate.var(axis=1, ddof=1)) / cases)
    unpaired = rejects(candidate.mean(axis=1) - baseline.mean(axis=1), unpaired_error)
    return SimulatedPower(paired, unpaired)
