"""What a report holds: its figures as typed objects, and the same objects back from their JSON.

Apart from the SQL that computes them (``_report``) so that a saved report (``_saved_report``) is read and
shown without loading DuckDB.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any


@dataclasses.dataclass(frozen=True)
class ShardProgress:
    """Where one shard of an experiment run in shards stands."""

    shard: str
    """``K/N``."""
    status: str
    """Its newest record's status, or ``not started``."""
    trials: int
    """Its trials in the store, counted by the cases it holds."""


@dataclasses.dataclass(frozen=True)
class PassAtK:
    """pass@k (at least one of k attempts passes) and pass^k (all k pass), averaged over cases with k attempts."""

    k: int
    cases: int
    pass_at_k: float
    pass_hat_k: float
    pass_at_k_ci95: tuple[float, float] | None = None
    """Each case's estimate is one value in [0, 1] (cases are independent): the bounded interval of their spread
    (:func:`._stats.values_interval95`); over one case, Wilson's at one. pass@1 and pass^1 over cases of equal
    attempts are the pass rate, and have its interval (:func:`._stats.rate_interval95`)."""
    pass_hat_k_ci95: tuple[float, float] | None = None


@dataclasses.dataclass(frozen=True)
class PassRate:
    """A pass rate with its case-clustered standard error and 95% interval (None without trials)."""

    pass_rate: float | None
    se: float | None
    ci95: tuple[float, float] | None
    k: list[PassAtK]


@dataclasses.dataclass(frozen=True)
class CategoryPassRate(PassRate):
    """The pass rate of one category's cases."""

    category: str
    cases: int
    trials: int


@dataclasses.dataclass(frozen=True)
class ScorerVersion:
    """One version of a scorer (an LLM judge's: ``PROMPT:MODEL``) and how many of the current scores it gave."""

    version: str
    scored: int


@dataclasses.dataclass(frozen=True)
class ScorerFigures:
    """One scorer over the current scores: pass rate, or mean for a continuous scorer, and its errors."""

    scorer: str
    continuous: bool
    scored: int
    mean: float | None
    pass_rate: float | None
    errors: int
    ci95: tuple[float, float] | None = None
    """Of the pass rate, or of the mean for a continuous scorer, clustered by case (by trace for production
    traces): a pass rate's is Wilson's at the effective number of scores its cases' agreement implies
    (:func:`._stats.rate_interval95`), a mean's the t interval of its observed spread on the logit scale, or
    Wilson's at the cases where they show none (:func:`._stats.mean_interval95`). None without scores."""
    versions: list[ScorerVersion] = dataclasses.field(default_factory=list)
    """The versions that gave the current scores, most scores first: more than one and the figure mixes scorers
    (some trials judged by one judge, some by another), which :func:`mixed_versions` warns of."""

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ScorerFigures:
        """From a row of :func:`agenteval.store._snapshots.scorer_figures_sql`."""
        from ._stats import RateCounts, clustered_standard_error, known_interval, mean_interval95, rate_interval95

        kind = "valued" if row["continuous"] else "judged"
        figure = row["mean"] if row["continuous"] else row["pass_rate"]
        units, count = row[f"{kind}_units"], row[kind]
        spread = row["value_spread" if row["continuous"] else "pass_spread"]
        standard_error = clustered_standard_error(spread, units, count)
        # A pass rate's values are 0 or 1, whose variance p(1 - p) its Wilson interval assumes; a mean's are not.
        interval = None
        if figure is not None and row["continuous"]:
            interval = mean_interval95(figure, standard_error, count, units)
        elif figure is not None:
            counts = RateCounts(
                row["passed"], count, units, row["judged_squares"], row["discordant"], row["most_judged"]
            )
            interval = rate_interval95(counts)
        return cls(
            scorer=row["scorer"],
            continuous=row["continuous"],
            scored=row["scored"],
            mean=row["mean"],
            pass_rate=row["pass_rate"],
            errors=row["errors"],
            ci95=known_interval(interval),
            versions=[ScorerVersion(v["version"], v["scored"]) for v in row["versions"] or []],
        )


def versions_text(versions: list[ScorerVersion]) -> str:
    """A scorer's versions in one cell: the version alone, or each with its count when there are several."""
    if len(versions) == 1:
        return versions[0].version
    return ", ".join(f"{v.version} ({v.scored})" for v in versions)


def mixed_versions(scorers: list[ScorerFigures], unit: str = "trials") -> list[str]:
    """A warning for each scorer whose current scores more than one version gave (``unit``: what was scored)."""
    return [
        f"scorer {s.scorer}'s current scores come from {len(s.versions)} versions, so its figures mix them: "
        + ", ".join(f"{v.version} on {v.scored} {unit}" for v in s.versions)
        + f". Score every one with the same version (agenteval rescore) before reading {s.scorer}'s figures"
        for s in scorers
        if len(s.versions) > 1
    ]


@dataclasses.dataclass(frozen=True)
class Outcomes:
    """Trials that passed, were wrong, or failed (infrastructure apart), and failures by type."""

    passed: int
    wrong: int
    failed: int
    infrastructure_failures: int
    wrong_share: float | None
    failed_share: float | None
    failures_by_type: dict[str, int]
    unscored: int = 0
    """Of the passed, trials that no pass/fail scorer judged (their case gives no expected answer, criteria or
    rubric): they pass whenever they do not fail, which :func:`unscored_warning` says."""


def unscored_warning(trials: int, cases: int, of_trials: int) -> list[str]:
    """A warning when ``trials`` of ``of_trials`` (in ``cases`` cases) passed with no pass/fail scorer to judge them."""
    if not trials:
        return []
    return [
        f"{trials} of the {of_trials} trials ({cases} case(s)) count as passed with no pass/fail scorer judging them: "
        "their cases give no expected answer, criteria or rubric, so they pass whenever they do not fail. Give those "
        "cases something to judge (agenteval audit names them) before reading the pass rate"
    ]


@dataclasses.dataclass(frozen=True)
class FlakyCases:
    """Cases whose attempts disagree: how many, and the first of them."""

    count: int
    cases: list[str]


@dataclasses.dataclass(frozen=True)
class SpanLatency:
    """Latency of one kind of span (``operation``: chat, execute_tool, ...)."""

    operation: str
    spans: int
    p50_ms: float | None
    p95_ms: float | None


@dataclasses.dataclass(frozen=True)
class Latency:
    """Trial latency percentiles, a uniform sample of trial latencies (sorted) for plots, and span latencies."""

    trial_p50_ms: float | None
    trial_p95_ms: float | None
    trial_sample_ms: list[float]
    spans: list[SpanLatency]


@dataclasses.dataclass(frozen=True)
class TokenUse:
    """Model calls and tokens by role (the agent's apart from the judge's and the simulated user's) and model."""

    role: str
    model_calls: int
    input_tokens: int | None
    output_tokens: int | None
    model: str | None
    cost_usd: float | None = None
    """At the experiment's stored prices; None when the model has none. Cache hits spent nothing."""


@dataclasses.dataclass(frozen=True)
class Conversation:
    """One trial's conversation with a simulated user: ``(role, text)`` turns in order."""

    trial_id: str
    case_id: str
    attempt: int
    turns: list[tuple[str, str]]


@dataclasses.dataclass(frozen=True)
class CaseOutcomes:
    """One case's attempts: how many passed, gave a wrong answer and failed (by failure type), and one failure's
    message."""

    case_id: str
    category: str
    passes: int
    attempts: int
    failed: int
    a_failure: str | None
    wrong: int = 0
    failures_by_type: dict[str, int] = dataclasses.field(default_factory=dict)
    """Most first, then by name."""


@dataclasses.dataclass(frozen=True)
class ReportedExperiment:
    """What the report says about the experiment itself: identity, status and where it ran."""

    id: str
    name: str | None
    dataset: str
    dataset_hash: str
    """The dataset's content hash, first 12 characters."""
    agent: str
    version: str
    status: str
    error: str | None
    started_at: int
    ended_at: int | None
    environment: dict[str, Any]
    """``python``, ``platform`` and ``git`` (commit and dirty flag) of the run."""
    dataset_card: dict[str, Any] | None = None
    """The dataset's card as the run found it (``version``, ``owner``, ``last_reviewed``, ``review_due``,
    ``changed_since_review``); None when the dataset had none."""


@dataclasses.dataclass(frozen=True)
class Report:
    """An experiment's report: every figure the report formats show, as typed fields.

    ``to_dict()`` is the JSON output (``agenteval report --format json``)."""

    experiment: ReportedExperiment
    trials: int
    cases: int
    overall: PassRate
    categories: list[CategoryPassRate]
    scorers: list[ScorerFigures]
    outcomes: Outcomes
    flaky: FlakyCases
    latency: Latency
    tokens: list[TokenUse]
    cost_usd: float | None
    """Agent cost of the tries that count; None without prices."""
    cost_usd_all_tries: float | None
    """Agent cost of every try, rate-limited ones included."""
    worst_cases: list[CaseOutcomes]
    """The cases with the lowest pass rate, most failures first among equals."""
    shards: list[ShardProgress] = dataclasses.field(default_factory=list)
    """Each shard of an experiment run in shards, with its status and trials (empty otherwise)."""
    conversations: list[Conversation] = dataclasses.field(default_factory=list)
    """Conversations with simulated users (at most :data:`CONVERSATIONS_SHOWN`, first attempts first)."""
    warnings: list[str] = dataclasses.field(default_factory=list)
    """What makes the figures less than they seem: a scorer whose current scores mix versions."""

    def to_dict(self) -> dict[str, Any]:
        """As JSON output shows it."""
        return dataclasses.asdict(self)


def report_from_dict(figures: dict[str, Any]) -> Report:
    """The :class:`Report` whose ``to_dict()`` (read back from JSON) is ``figures``."""
    return _from_json(Report, figures)


def _from_json(kind: Any, value: Any) -> Any:
    """``value`` as JSON gives it, made the ``kind`` a field declares: dataclasses, lists, tuples, optionals."""
    if value is None:
        return None
    if dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind)
        made: Any = kind
        return made(**{f.name: _from_json(hints[f.name], value[f.name]) for f in dataclasses.fields(kind)})
    origin, arguments = typing.get_origin(kind), typing.get_args(kind)
    if origin in (types.UnionType, typing.Union):  # X | None: None was handled above
        (inner,) = [a for a in arguments if a is not type(None)]
        return _from_json(inner, value)
    if origin is list:
        return [_from_json(arguments[0], item) for item in value]
    if origin is tuple:
        return tuple(_from_json(a, item) for a, item in zip(arguments, value, strict=True))
    return value  # str, int, float, bool, and dicts of JSON values
