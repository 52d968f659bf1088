"""Applying scorers to a batch of trials' features: SQL scorers in one DuckDB query over the batch,
Python scorers trial by trial. A scorer that raises gives an error score and the run goes on."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import duckdb
import pyarrow as pa

from ..cases import Case
from .base import Score, Scorer
from .features import TrialFeatures, features_sql

CASE_SCHEMA = pa.schema(
    [
        pa.field("case_id", pa.string()),
        pa.field("expected_output", pa.string()),
        pa.field("expected_tools", pa.list_(pa.string())),
        pa.field("must_not_contain", pa.list_(pa.string())),
        pa.field("expects_tool_error", pa.bool_()),
        pa.field("relevant_docs", pa.list_(pa.string())),
        pa.field("expected_trajectory", pa.list_(pa.string())),
        pa.field("max_tool_calls", pa.int64()),
    ]
)


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
        rows = features.to_pylist()
        sql_results = self._sql_scores(features, cases) if self.sql_scorers else {}
        scored = []
        for row in rows:
            case = cases[row["case_id"]]
            trial = TrialFeatures.from_row(row)
            scores: list[Score] = []
            for item in self.scorers:
                if not item.applies(case):
                    continue
                if item.sql is not None:
                    scores.append(sql_results[item.name].get(trial.trial_id) or item.error("no result"))
                else:
                    scores.append(self._run_python(item, case, trial))
            scored.append(ScoredTrial(trial.trial_id, trial.case_id, scores))
        return scored

    @staticmethod
    def _run_python(item: Scorer, case: Case, trial: TrialFeatures) -> Score:
        try:
            return item.result(item.fn(case, trial))  # type: ignore[misc]
        except Exception as exc:  # a scorer's bug is recorded on its score, never stops the run
            return item.error(f"{type(exc).__name__}: {exc}")

    def _sql_scores(self, features: pa.Table, cases: dict[str, Case]) -> dict[str, dict[str, Score]]:
        needed = {row for row in features.column("case_id").to_pylist()}
        self.con.register("agenteval_features", features)
        self.con.register("agenteval_cases", case_table(cases[c] for c in needed))
        try:
            return {item.name: self._one_sql_scorer(item) for item in self.sql_scorers}
        finally:
            self.con.unregister("agenteval_features")
            self.con.unregister("agenteval_cases")

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
            try:
                results[trial_id] = item.result({"value": value, "passed": passed, "reason": reason})
            except Exception as exc:
                results[trial_id] = item.error(f"{type(exc).__name__}: {exc}")
        return results


def score_rows(experiment_id: str, scored: Iterable[ScoredTrial], pass_id: str, scored_at: int) -> list[dict]:
    """Rows of the ``scores`` table for scored trials, all of one pass."""
    return [
        {
            "experiment_id": experiment_id,
            "trial_id": trial.trial_id,
            "case_id": trial.case_id,
            "scorer": score.scorer,
            "scorer_version": score.version,
            "pass_id": pass_id,
            "value": score.value,
            "passed": score.passed,
            "reason": score.reason,
            "error": score.error,
            "continuous": score.continuous,
            "scored_at": scored_at,
        }
        for trial in scored
        for score in trial.scores
    ]


class _ErrorForAll(dict):
    """Every trial gets the same error score (the SQL of a scorer failed for the whole batch)."""

    def __init__(self, score: Score) -> None:
        super().__init__()
        self._score = score

    def get(self, key: object, default: object = None) -> Score:  # type: ignore[override]
        return self._score
