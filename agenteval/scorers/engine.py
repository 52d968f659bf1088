"""Applying scorers to a batch of trials' features: SQL scorers in one DuckDB query over the batch,
Python scorers trial by trial. A scorer that raises gives an error score and the run goes on."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import duckdb
import pyarrow as pa

from ..cases import SCORED_FIELDS, Case
from .base import Score, Scorer
from .features import FeatureColumns, TrialFeatures, features_sql


def _arrow_type(annotation: str) -> pa.DataType:
    """The Arrow type of a Case field, from its annotation (the dataclass is the one definition)."""
    if annotation.startswith("tuple"):
        return pa.list_(pa.string())
    if annotation.startswith("bool"):
        return pa.bool_()
    if annotation.startswith("int"):
        return pa.int64()
    return pa.string()


_ANNOTATIONS = {f.name: str(f.type) for f in dataclasses.fields(Case)}
CASE_SCHEMA = pa.schema(
    [pa.field("case_id", pa.string())] + [pa.field(n, _arrow_type(_ANNOTATIONS[n])) for n in SCORED_FIELDS]
)
"""The case fields SQL scorers read, as the relation ``c``."""


def case_table(cases: Iterable[Case]) -> pa.Table:
    """The case fields SQL scorers read, one row per case."""
    columns: dict[str, list] = {name: [] for name in CASE_SCHEMA.names}
    for case in cases:
        columns["case_id"].append(case.id)
        for name in CASE_SCHEMA.names[1:]:
            value = getattr(case, name)
            columns[name].append(list(value) if isinstance(value, tuple) else value)
    return pa.Table.from_pydict(columns, schema=CASE_SCHEMA)


@dataclasses.dataclass
class ScoredTrial:
    """A trial's scores and whether it passed: every applicable pass/fail scorer passed (an error does
    not pass); continuous scores are beside, not folded in."""

    trial_id: str
    case_id: str
    scores: list[Score]

    @property
    def passed(self) -> bool:
        return all(s.passed is True for s in self.scores if not s.continuous)


class ScoringEngine:
    """Scores batches of trials with a fixed list of scorers."""

    def __init__(self, scorers: Sequence[Scorer]) -> None:
        names = [s.name for s in scorers]
        duplicated = {n for n in names if names.count(n) > 1}
        if duplicated:
            raise ValueError(f"two scorers share a name: {', '.join(sorted(duplicated))}")
        self.scorers = list(scorers)
        self.sql_scorers = [s for s in scorers if s.sql is not None]
        self.python_scorers = [s for s in scorers if s.fn is not None]
        self.con = duckdb.connect()
        self._applicable: dict[str, tuple[Scorer, ...]] = {}
        self._scorer_sets: dict[tuple[int, ...], tuple[Scorer, ...]] = {}

    def features(self, trials: pa.Table, spans: pa.Table | pa.RecordBatch) -> pa.Table:
        """The feature query over trials and spans held in memory (run time)."""
        self.con.register("agenteval_trials", trials)
        self.con.register("agenteval_spans", spans)
        try:
            return self.con.sql(features_sql("agenteval_trials", "agenteval_spans")).to_arrow_table()
        finally:
            self.con.unregister("agenteval_trials")
            self.con.unregister("agenteval_spans")

    def score(self, features: pa.Table, cases: dict[str, Case]) -> list[ScoredTrial]:
        """Scores for every trial in ``features`` (one row per trial, from the feature query)."""
        columns = FeatureColumns(features)
        trial_ids, case_ids = columns.column("trial_id"), columns.column("case_id")
        # Which scorers apply depends on the case alone: decided once per case for the engine's life.
        # Cases share one tuple per distinct set, so a run of many cases adds no objects for the
        # garbage collector to walk.
        known = self._applicable
        for cid in set(case_ids) - known.keys():
            chosen = tuple(i for i, s in enumerate(self.scorers) if s.applies(cases[cid]))
            known[cid] = self._scorer_sets.setdefault(chosen, tuple(self.scorers[i] for i in chosen))
        applicable = {cid: known[cid] for cid in set(case_ids)}
        sql_results = self._sql_scores(features, cases, applicable)
        scored = []
        for index, (trial_id, case_id) in enumerate(zip(trial_ids, case_ids, strict=True)):
            case, trial, scores = cases[case_id], TrialFeatures(columns, index), []
            for item in applicable[case_id]:
                if item.sql is not None:
                    scores.append(sql_results[item.name].get(trial_id) or item.error("no result"))
                else:
                    scores.append(self._run_python(item, case, trial))
            scored.append(ScoredTrial(trial_id, case_id, scores))
        return scored

    @staticmethod
    def _run_python(item: Scorer, case: Case, trial: TrialFeatures) -> Score:
        try:
            return item.result(item.fn(case, trial))  # type: ignore[misc]
        except Exception as exc:  # a scorer's bug is recorded on its score, never stops the run
            return item.error(f"{type(exc).__name__}: {exc}")

    def _sql_scores(
        self, features: pa.Table, cases: dict[str, Case], applicable: dict[str, tuple[Scorer, ...]]
    ) -> dict[str, dict[str, Score]]:
        """Each SQL scorer's scores, computed in one query over the trials whose case it applies to."""
        results: dict[str, dict[str, Score]] = {}
        self.con.register("agenteval_features", features)
        try:
            for item in self.sql_scorers:
                wanted = [cases[cid] for cid, scorers in applicable.items() if item in scorers]
                if not wanted:
                    continue
                self.con.register("agenteval_cases", case_table(wanted))
                try:
                    results[item.name] = self._one_sql_scorer(item)
                finally:
                    self.con.unregister("agenteval_cases")
        finally:
            self.con.unregister("agenteval_features")
        return results

    def _one_sql_scorer(self, item: Scorer) -> dict[str, Score]:
        query = (
            "SELECT trial_id, s.value::DOUBLE, s.passed::BOOLEAN, s.reason::VARCHAR FROM ("
            f"SELECT f.trial_id, {item.sql} AS s FROM agenteval_features f JOIN agenteval_cases c USING (case_id))"
        )
        try:
            rows = self.con.execute(query).fetchall()
        except duckdb.Error as exc:
            message = f"{type(exc).__name__}: {exc}"
            return _ErrorForAll(item.error(message))
        results = {}
        for trial_id, value, passed, reason in rows:
            if value is None or value != value or not 0.0 <= value <= 1.0:
                results[trial_id] = item.error(f"returned {value!r}, not a number between 0 and 1")
            else:
                if not item.continuous and passed is None:
                    passed = value >= 1.0
                results[trial_id] = Score(
                    item.name,
                    item.version,
                    value,
                    None if item.continuous else passed,
                    reason or "",
                    continuous=item.continuous,
                )
        return results


def score_table(experiment_id: str, scored: Iterable[ScoredTrial], pass_id: str, scored_at: int) -> pa.Table:
    """The ``scores`` table rows for scored trials, all of one pass (built column by column)."""
    from ..store import SCORES

    flat = [(trial, score) for trial in scored for score in trial.scores]
    trial_ids = [trial.trial_id for trial, _ in flat]
    case_ids = [trial.case_id for trial, _ in flat]
    fields = {
        "scorer": [score.scorer for _, score in flat],
        "scorer_version": [score.version for _, score in flat],
        "value": [score.value for _, score in flat],
        "passed": [score.passed for _, score in flat],
        "reason": [score.reason for _, score in flat],
        "error": [score.error for _, score in flat],
        "continuous": [score.continuous for _, score in flat],
    }
    count = len(trial_ids)
    columns = {
        "experiment_id": pa.repeat(pa.scalar(experiment_id), count),
        "trial_id": trial_ids,
        "case_id": case_ids,
        **fields,
        "pass_id": pa.repeat(pa.scalar(pass_id), count),
        "scored_at": pa.repeat(pa.scalar(scored_at, SCORES.field("scored_at").type), count),
    }
    return pa.table({name: columns[name] for name in SCORES.names}, schema=SCORES)


class _ErrorForAll(dict):
    """Every trial gets the same error score (the SQL of a scorer failed for the whole batch)."""

    def __init__(self, score: Score) -> None:
        super().__init__()
        self._score = score

    def get(self, key: object, default: object = None) -> Score:  # type: ignore[override]
        return self._score
