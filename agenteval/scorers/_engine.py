"""Applying scorers to a batch of trials' features: SQL scorers in one DuckDB query over the batch,
Python scorers trial by trial. A scorer that raises gives an error score and the run goes on."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import functools
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from typing import Any

import duckdb
import pyarrow as pa

from agenteval_instrumentation import capture
from agenteval_instrumentation.text import ERROR_CHARS

from ..dataset._cases import SCORED_FIELDS, Case
from ..store._database import open_database
from ..store._schemas import SCORES
from ..store._views import judged_trials
from ._base import FAILED_REASON, PASSED_ON, Score, Scorer, reason_chars
from ._features import FeatureColumns, TrialFeatures, features_sql


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


_PER_PASS = ("experiment_id", "pass_id", "scored_at")
JUDGEMENT_SCHEMA = pa.schema([f for f in SCORES if f.name not in _PER_PASS])
"""One row per (trial, applicable scorer): the ``scores`` table without experiment, pass and time."""


@dataclasses.dataclass
class Judgement:
    """A batch of trials scored: one row per trial and applicable scorer, and whether each trial
    passed (every applicable pass/fail scorer passed; an error does not pass; see
    :func:`agenteval.store._views.judged_trials`)."""

    table: pa.Table
    judge_trials: Callable[[], dict[str, bool]]
    """Computes :attr:`passed` when it is first read: a rescore, which stores scores only, never asks."""
    case_ids: dict[str, str]
    """Each trial's case."""
    not_scored: dict[str, int] = dataclasses.field(default_factory=dict)
    """Scorer -> trials it applies to but did not judge: it needs content the stored trial lacks."""

    @functools.cached_property
    def passed(self) -> dict[str, bool]:
        """Whether each trial passed, by the store's one definition."""
        return self.judge_trials()

    @classmethod
    def empty(cls) -> Judgement:
        return cls(JUDGEMENT_SCHEMA.empty_table(), dict, {})

    @classmethod
    def concat(cls, parts: Sequence[Judgement]) -> Judgement:
        """Judgements of disjoint batches as one."""
        if not parts:
            return cls.empty()
        return cls(
            pa.concat_tables([p.table for p in parts]),
            lambda: {t: ok for p in parts for t, ok in p.passed.items()},
            {t: c for p in parts for t, c in p.case_ids.items()},
            dict(sum((Counter(p.not_scored) for p in parts), Counter())),
        )

    def trials(self) -> list[ScoredTrial]:
        """The same, trial by trial (in batch order, scores in scorer order)."""
        by_trial: dict[str, ScoredTrial] = {}
        for row in self.table.to_pylist():
            trial_id = row["trial_id"]
            scored = by_trial.setdefault(trial_id, ScoredTrial(trial_id, row["case_id"], [], self.passed[trial_id]))
            scored.scores.append(
                Score(
                    row["scorer"],
                    row["scorer_version"],
                    row["value"],
                    row["passed"],
                    row["reason"],
                    row["error"],
                    row["continuous"],
                )
            )
        return [by_trial.get(t) or ScoredTrial(t, self.case_ids[t], [], passed) for t, passed in self.passed.items()]


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A trial's outcome by the store's one definition: ``passed``, ``wrong`` or ``failed``; when failed, why
    (its own failure, or ``scorer_error`` when its answer could not be judged) and whether infrastructure caused it."""

    outcome: str
    failure_type: str | None
    infrastructure: bool | None


@dataclasses.dataclass
class ScoredTrial:
    """A trial's scores and whether it passed (as :class:`Judgement` says)."""

    trial_id: str
    case_id: str
    scores: list[Score]
    passed: bool


LOCKED = {"enable_external_access": False}
"""A scorer's SQL reads the batch (``f``, ``c``) and nothing else, no file nor URL: it may have been read from the
store (a run records a SQL scorer's definition, which ``rescore`` runs again), which someone else may have written."""


class ScoringEngine:
    """Scores batches of trials with a fixed list of scorers."""

    def __init__(self, scorers: Sequence[Scorer], config: dict[str, Any] | None = None) -> None:
        """``config``: DuckDB's settings for this engine's database (a run's: one thread, memory handed back)."""
        names = [s.name for s in scorers]
        duplicated = {n for n in names if names.count(n) > 1}
        if duplicated:
            raise ValueError(f"two scorers share a name: {', '.join(sorted(duplicated))}")
        self.scorers = list(scorers)
        self.con = open_database(config={**(config or {}), **LOCKED})
        self._applicable: dict[str, tuple[Scorer, ...]] = {}
        self._scorer_sets: dict[tuple[int, ...], tuple[Scorer, ...]] = {}
        self._when_errors: dict[tuple[str, str], str] = {}
        """(case id, scorer name) -> the error its ``when=`` raised for that case."""

    def features(self, trials: pa.Table, spans: pa.Table | pa.RecordBatch) -> pa.Table:
        """The feature query over trials and spans held in memory (run time)."""
        self.con.register("agenteval_trials", trials)
        self.con.register("agenteval_spans", spans)
        try:
            return self.con.sql(features_sql("agenteval_trials", "agenteval_spans")).to_arrow_table()
        finally:
            self.con.unregister("agenteval_trials")
            self.con.unregister("agenteval_spans")

    def judge(self, features: pa.Table, cases: dict[str, Case]) -> Judgement:
        """Every applicable scorer over every trial in ``features`` (one row per trial, from the feature
        query): SQL and Arrow scorers once over the batch, Python scorers trial by trial, coroutine scorers
        concurrently on an event loop of their own (this call waits for them)."""
        plan = self._parts(features, cases)
        if plan.pending:
            plan.parts.extend(_run_to_end(self._coroutine_parts(plan, cases), [i for i, _ in plan.pending]))
        return plan.judgement()

    async def judge_async(self, features: pa.Table, cases: dict[str, Case]) -> Judgement:
        """:meth:`judge` on the running event loop: coroutine scorers are awaited there, so a run goes on
        while a judge's model calls are in flight."""
        plan = self._parts(features, cases)
        if plan.pending:
            plan.parts.extend(await self._coroutine_parts(plan, cases))
        return plan.judgement()

    def release(self) -> None:
        """Close the engine's DuckDB database: it keeps the memory its queries took (a run's feature queries left
        it 30 to 50 MB) until then. The engine scores nothing afterwards."""
        self.con.close()

    def has_coroutines(self) -> bool:
        return any(item.coroutine is not None for item in self.scorers)

    async def close(self) -> None:
        """Let the coroutine scorers close what they hold on this event loop (their model clients)."""
        for item in self.scorers:
            if item.close is not None:
                await item.close()

    def _parts(self, features: pa.Table, cases: dict[str, Case]) -> _Plan:
        columns = FeatureColumns(features)
        trial_ids, case_ids = columns.column("trial_id"), columns.column("case_id")
        rows_by_scorer = self._rows_by_scorer(case_ids, cases)
        without_content = _rows_without_content(features)
        plan = _Plan(self, features, columns, trial_ids, case_ids)
        self.con.register("agenteval_features", features)
        try:
            for item in self.scorers:
                rows = rows_by_scorer.get(item.name)
                if rows and without_content and item.needs_content:
                    kept = [r for r in rows if r not in without_content]
                    if len(kept) < len(rows):
                        plan.not_scored[item.name] = len(rows) - len(kept)
                    rows = kept
                if rows and self._when_errors:
                    rows, broken = self._split_broken(item, rows, case_ids)
                    plan.parts.extend(
                        _with_scorer(_failed(item, _keys(columns, r), e), item) for e, r in broken.items()
                    )
                if not rows:
                    continue
                if item.coroutine is not None:
                    plan.pending.append((item, rows))
                    continue
                if item.fn is not None:
                    outcomes = self._python_outcomes(item, rows, columns, case_ids, cases)
                elif item.sql is not None:
                    wanted = [cases[cid] for cid in dict.fromkeys(case_ids[i] for i in rows)]
                    outcomes = self._sql_outcomes(item, wanted, _keys(columns, rows))
                else:
                    outcomes = self._arrow_outcomes(item, features.take(pa.array(rows, pa.int64())), case_ids, cases)
                plan.parts.append(_with_scorer(outcomes, item))
        finally:
            self.con.unregister("agenteval_features")
        return plan

    async def _coroutine_parts(self, plan: _Plan, cases: dict[str, Case]) -> list[pa.Table]:
        """Each pending coroutine scorer over its rows, ``concurrency`` trials at a time."""
        parts = []
        for item, rows in plan.pending:
            gate = asyncio.Semaphore(max(1, item.concurrency))
            outcomes = await asyncio.gather(*(_judged(item, gate, plan, row, cases) for row in rows))
            parts.append(_with_scorer(_outcome_table(outcomes, rows, plan.columns), item))
        return parts

    def outcomes(
        self,
        trial_ids: list[str],
        failure_types: list[str | None],
        scores: pa.Table,
        infrastructure: list[bool | None] | None = None,
    ) -> dict[str, Verdict]:
        """Each trial's :class:`Verdict` from its own failure (type, and whether infrastructure caused it) and its
        ``scores`` (rows of a :class:`Judgement` table), by the store's one definition
        (:func:`agenteval.store._views.judged_trials`)."""
        count = len(trial_ids)
        trials = pa.table(
            {
                "trial_id": pa.array(trial_ids, pa.string()),
                "failure_type": pa.array(failure_types, pa.string()),
                "infrastructure": pa.array(infrastructure or [None] * count, pa.bool_()),
                "error_message": pa.nulls(count, pa.string()),
                "outcome": pa.nulls(count, pa.string()),
                "passed": pa.nulls(count, pa.bool_()),
            }
        )
        self.con.register("agenteval_outcome_trials", trials)
        self.con.register("agenteval_outcome_scores", scores)
        try:
            judged = judged_trials("agenteval_outcome_trials", "agenteval_outcome_scores", keys="trial_id")
            # execute(): a relation (con.sql) costs ~5 ms more to build for a result this small.
            rows = self.con.execute(f"SELECT trial_id, outcome, failure_type, infrastructure FROM ({judged})")
            return {trial_id: Verdict(*verdict) for trial_id, *verdict in rows.fetchall()}
        finally:
            self.con.unregister("agenteval_outcome_trials")
            self.con.unregister("agenteval_outcome_scores")

    def score(self, features: pa.Table, cases: dict[str, Case]) -> list[ScoredTrial]:
        """:meth:`judge`, trial by trial."""
        return self.judge(features, cases).trials()

    def _rows_by_scorer(self, case_ids: list[str], cases: dict[str, Case]) -> dict[str, list[int]]:
        """For each scorer, the rows of the batch whose case it applies to."""
        # Which scorers apply depends on the case alone: decided once per case for the engine's life.
        # Cases share one tuple per distinct set, so a run of many cases adds no objects for the
        # garbage collector to walk.
        known = self._applicable
        for cid in set(case_ids) - known.keys():
            chosen = []
            for i, item in enumerate(self.scorers):
                applies = item.applicability(cases[cid])
                if isinstance(applies, str):
                    self._when_errors[cid, item.name] = applies
                if applies:
                    chosen.append(i)
            known[cid] = self._scorer_sets.setdefault(tuple(chosen), tuple(self.scorers[i] for i in chosen))
        rows_by_set: dict[tuple[Scorer, ...], list[int]] = {}
        for row, cid in enumerate(case_ids):
            rows_by_set.setdefault(known[cid], []).append(row)
        rows: dict[str, list[int]] = {}
        for scorer_set, members in rows_by_set.items():
            for item in scorer_set:
                rows.setdefault(item.name, []).extend(members)
        return {name: sorted(members) for name, members in rows.items()}

    def _split_broken(
        self, item: Scorer, rows: list[int], case_ids: list[str]
    ) -> tuple[list[int], dict[str, list[int]]]:
        """``rows`` the scorer can judge, and the rest by the error its ``when=`` raised for their case."""
        fine: list[int] = []
        broken: dict[str, list[int]] = {}
        for row in rows:
            error = self._when_errors.get((case_ids[row], item.name))
            if error is None:
                fine.append(row)
            else:
                broken.setdefault(error, []).append(row)
        return fine, broken

    def failed(
        self, trial_ids: Sequence[str], case_ids: Sequence[str], cases: dict[str, Case], message: str
    ) -> Judgement:
        """An error score from every scorer that applies, for trials that could not be judged at all."""
        parts = []
        for item in self.scorers:
            rows = [i for i, cid in enumerate(case_ids) if item.applicability(cases[cid])]
            if rows:
                keys = pa.table({"trial_id": [trial_ids[i] for i in rows], "case_id": [case_ids[i] for i in rows]})
                parts.append(_with_scorer(_failed(item, keys, message), item))
        table = pa.concat_tables(parts) if parts else JUDGEMENT_SCHEMA.empty_table()
        return Judgement(table, lambda: dict.fromkeys(trial_ids, False), dict(zip(trial_ids, case_ids, strict=True)))

    @staticmethod
    def _python_outcomes(
        item: Scorer, rows: list[int], columns: FeatureColumns, case_ids: list[str], cases: dict[str, Case]
    ) -> pa.Table:
        fn = item.fn
        assert fn is not None
        outcomes = []
        for row in rows:
            try:
                outcomes.append(item.outcome(fn(cases[case_ids[row]], TrialFeatures(columns, row))))
            except PASSED_ON:
                raise
            except BaseException as exc:  # a scorer's bug is recorded on its score, never stops the run
                outcomes.append(item.failure(capture.error_text(exc)))
        return _outcome_table(outcomes, rows, columns)

    def _sql_outcomes(self, item: Scorer, wanted: list[Case], keys: pa.Table) -> pa.Table:
        """The scorer's SQL over the batch's trials whose case it applies to."""
        raw = (
            "SELECT trial_id, case_id, s.value AS value, s.passed AS passed, s.reason AS reason FROM ("
            f"SELECT f.trial_id, f.case_id, {item.sql} AS s "
            "FROM agenteval_features f JOIN agenteval_cases c USING (case_id))"
        )
        self.con.register("agenteval_cases", case_table(wanted))
        try:
            return self._checked(item, raw, keys)
        finally:
            self.con.unregister("agenteval_cases")

    def _arrow_outcomes(self, item: Scorer, subset: pa.Table, case_ids: list[str], cases: dict[str, Case]) -> pa.Table:
        """The scorer's Arrow computation over the batch's trials whose case it applies to."""
        keys = subset.select(["trial_id", "case_id"])
        assert item.arrow is not None
        try:
            returned = _outcome_columns(
                item.arrow(subset, case_table(cases[cid] for cid in subset.column("case_id").to_pylist())),
                subset.num_rows,
            )
        except PASSED_ON:
            raise
        except BaseException as exc:  # a scorer's bug is recorded on its scores, never stops the run
            return _failed(item, keys, capture.error_text(exc))
        self.con.register(
            "agenteval_outcomes",
            pa.table({"trial_id": keys.column("trial_id"), "case_id": keys.column("case_id"), **returned}),
        )
        try:
            return self._checked(item, "SELECT * FROM agenteval_outcomes", keys)
        finally:
            self.con.unregister("agenteval_outcomes")

    def _checked(self, item: Scorer, raw: str, keys: pa.Table) -> pa.Table:
        """``raw`` outcomes (trial_id, case_id, value, passed, reason) under the rules every scorer's
        results follow, as for Python scorers, row by row: no value, one that is not a number (``'x'``, a list) or
        one outside 0..1 is that trial's error score, as is a ``passed`` that is not a bool (``'yes'``, ``1``); a
        pass/fail scorer that gives no ``passed`` passes at 1.0; a continuous one neither passes nor fails; a reason
        is cut at :func:`reason_chars`. A query that fails makes every trial's score an error."""
        passed = "NULL::BOOLEAN" if item.continuous else "coalesce(passed, value >= 1.0)"
        # TRY_CAST, not a cast: one value that is no number must cost its own trial, not the batch's. A passed
        # of another type is refused, not cast ('yes' and 2 read as true), as a Python scorer's is.
        query = f"""
            SELECT trial_id, case_id,
                   CASE WHEN error IS NULL THEN value END AS value,
                   CASE WHEN error IS NULL THEN {passed} END AS passed,
                   CASE WHEN error IS NULL THEN coalesce(reason, '') ELSE '{FAILED_REASON}' END AS reason,
                   left(error, {ERROR_CHARS}) AS error
            FROM (SELECT *, CASE
                        WHEN value IS NULL OR isnan(value) OR value < 0 OR value > 1
                        THEN 'returned ' || {_shown("raw_value")} || ', not a number between 0 and 1'
                        WHEN raw_passed IS NOT NULL AND typeof(raw_passed) <> 'BOOLEAN'
                        THEN 'returned passed=' || {_shown("raw_passed")} || ', not true, false or None'
                    END AS error
                  FROM (SELECT trial_id, case_id, raw_value, TRY_CAST(raw_value AS DOUBLE) AS value, raw_passed,
                               TRY_CAST(raw_passed AS BOOLEAN) AS passed,
                               {_cut("reason", reason_chars())} AS reason
                        FROM (SELECT trial_id, case_id, value AS raw_value, passed AS raw_passed,
                                     reason::VARCHAR AS reason FROM ({raw}))))"""
        try:
            return self.con.sql(query).to_arrow_table()
        except duckdb.Error as exc:
            return _failed(item, keys, capture.error_text(exc))


def _cut(column: str, limit: int) -> str:
    """SQL for text cut at ``limit`` characters as Python cuts it (:func:`agenteval_instrumentation.capture.capped`),
    with the same marker saying how much was left out."""
    left_out = f"length({column}) - {limit}"
    marker = f"printf('{capture.CUT_MARKER}', {left_out})"
    return f"CASE WHEN {left_out} > 0 THEN left({column}, {limit}) || {marker} ELSE {column} END"


def _shown(column: str) -> str:
    """SQL for a returned value as an error message shows it, as Python's ``repr`` would: text quoted, none as None."""
    text = f"{column}::VARCHAR"
    return f"CASE WHEN typeof({column}) = 'VARCHAR' THEN '''' || {text} || '''' ELSE coalesce({text}, 'None') END"


async def _judged(item: Scorer, gate: asyncio.Semaphore, plan: _Plan, row: int, cases: dict[str, Case]) -> Any:
    """One trial's outcome from a coroutine scorer, once the gate lets it in."""
    assert item.coroutine is not None
    features = TrialFeatures(plan.columns, row)
    async with gate:
        with judging(features, item.role):
            try:
                return item.outcome(await item.coroutine(cases[plan.case_ids[row]], features))
            except PASSED_ON:
                raise
            except BaseException as exc:  # a failed judgement is that trial's error score, never a pass
                return item.failure(capture.error_text(exc))


def _outcome_table(outcomes: Sequence[Any], rows: list[int], columns: FeatureColumns) -> pa.Table:
    """Per-trial outcomes ``(value, passed, reason, error)`` of ``rows`` as an outcome table."""
    value, passed, reason, error = zip(*outcomes, strict=True)
    keys = _keys(columns, rows)
    return pa.table(
        {
            "trial_id": keys.column("trial_id"),
            "case_id": keys.column("case_id"),
            "value": pa.array(value, pa.float64()),
            "passed": pa.array(passed, pa.bool_()),
            "reason": pa.array(reason, pa.string()),
            "error": pa.array(error, pa.string()),
        }
    )


@dataclasses.dataclass
class _Plan:
    """A batch being judged: the parts done, the coroutine scorers still to await, and what was not scored."""

    engine: ScoringEngine
    features: pa.Table
    columns: FeatureColumns
    trial_ids: list[str]
    case_ids: list[str]
    parts: list[pa.Table] = dataclasses.field(default_factory=list)
    pending: list[tuple[Scorer, list[int]]] = dataclasses.field(default_factory=list)
    not_scored: dict[str, int] = dataclasses.field(default_factory=dict)

    def judgement(self) -> Judgement:
        table = pa.concat_tables(self.parts) if self.parts else JUDGEMENT_SCHEMA.empty_table()
        failure_types = self.columns.column("failure_type")
        engine, trial_ids = self.engine, self.trial_ids

        def judge_trials() -> dict[str, bool]:
            verdicts = engine.outcomes(trial_ids, failure_types, table)
            return {trial_id: verdicts[trial_id].outcome == "passed" for trial_id in trial_ids}

        return Judgement(table, judge_trials, dict(zip(trial_ids, self.case_ids, strict=True)), self.not_scored)


@contextlib.contextmanager
def judging(features: TrialFeatures, role: str) -> Iterator[None]:
    """Spans started inside are the trial's (its ids stamped, marked with ``role``) and children of its root
    span, so a judge's model calls sit in the trial's trace yet never count as the agent's."""
    from opentelemetry import context, trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    from ..run._collect import TrialTag, current_trial, trial_context

    tag = TrialTag(features.experiment_id, features.case_id, features.trial_id, features.attempt or 0, role)
    token = trial_context(tag)
    attached = None
    if features.trace_id and features.root_span_id:
        root = SpanContext(
            int(features.trace_id, 16), int(features.root_span_id, 16), False, TraceFlags(TraceFlags.SAMPLED)
        )
        attached = context.attach(trace.set_span_in_context(NonRecordingSpan(root)))
    try:
        yield
    finally:
        if attached is not None:
            context.detach(attached)
        current_trial.reset(token)


def _run_to_end(work: Coroutine[Any, Any, list[pa.Table]], scorers: Sequence[Scorer]) -> list[pa.Table]:
    """``work`` on an event loop of its own (a worker thread's when this thread runs one), its coroutine
    scorers closed there afterwards."""

    async def main() -> list[pa.Table]:
        try:
            return await work
        finally:
            for item in scorers:
                if item.close is not None:
                    await item.close()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(contextvars.copy_context().run, asyncio.run, main()).result()


def _rows_without_content(features: pa.Table) -> frozenset[int]:
    """Rows whose replies are unknown (stored with content capture off); usually none."""
    if "has_content" not in features.column_names:
        return frozenset()
    # Plain Python, not pyarrow.compute: a batch is small, and the run need not load compute's 8 MB.
    return frozenset(row for row, known in enumerate(features.column("has_content").to_pylist()) if not known)


def _keys(columns: FeatureColumns, rows: list[int]) -> pa.Table:
    """``trial_id`` and ``case_id`` of ``rows``, picked in Python: ``Table.take`` would load pyarrow.compute
    (8 MB, 28 ms) into every run for this alone."""
    types = columns.table.schema
    picked = {name: [columns.column(name)[row] for row in rows] for name in ("trial_id", "case_id")}
    return pa.table({name: pa.array(values, types.field(name).type) for name, values in picked.items()})


def _failed(item: Scorer, keys: pa.Table, message: str) -> pa.Table:
    """An error score for every trial in ``keys``."""
    _, _, reason, error = item.failure(message)
    count = keys.num_rows
    return pa.table(
        {
            "trial_id": keys.column("trial_id"),
            "case_id": keys.column("case_id"),
            "value": pa.nulls(count, pa.float64()),
            "passed": pa.nulls(count, pa.bool_()),
            "reason": pa.repeat(pa.scalar(reason), count),
            "error": pa.repeat(pa.scalar(error), count),
        }
    )


def _outcome_columns(returned: Any, count: int) -> dict[str, Any]:
    """What an Arrow scorer returned, as ``value``, ``passed`` and ``reason`` columns of ``count`` rows."""
    if isinstance(returned, pa.RecordBatch):
        returned = pa.Table.from_batches([returned])
    if isinstance(returned, pa.StructArray):
        returned = pa.table({field.name: returned.field(field.name) for field in returned.type})
    if isinstance(returned, pa.Table):
        if "value" not in returned.column_names:
            raise ValueError(f"returned a table without a value column (columns: {', '.join(returned.column_names)})")
        columns = {
            name: returned.column(name) for name in ("value", "passed", "reason") if name in returned.column_names
        }
    else:
        columns = {"value": returned if isinstance(returned, (pa.Array, pa.ChunkedArray)) else pa.array(returned)}
    if len(columns["value"]) != count:
        raise ValueError(f"returned {len(columns['value'])} rows; the batch has {count} trials")
    columns.setdefault("passed", pa.nulls(count, pa.bool_()))
    columns.setdefault("reason", pa.nulls(count, pa.string()))
    return columns


def _with_scorer(outcomes: pa.Table, item: Scorer) -> pa.Table:
    """Outcomes (trial_id, case_id, value, passed, reason, error) with the scorer's columns added."""
    count = outcomes.num_rows
    constant = {
        "scorer": pa.repeat(pa.scalar(item.name), count),
        "scorer_version": pa.repeat(pa.scalar(item.version), count),
        "continuous": pa.repeat(pa.scalar(item.continuous), count),
    }
    return pa.table(
        [outcomes.column(f.name) if f.name in outcomes.column_names else constant[f.name] for f in JUDGEMENT_SCHEMA],
        schema=JUDGEMENT_SCHEMA,
    )


def score_table(experiment_id: str, judgement: Judgement, pass_id: str, scored_at: int) -> pa.Table:
    """The ``scores`` table rows of a judged batch, all of one pass."""
    table, count = judgement.table, judgement.table.num_rows
    added = {
        "experiment_id": pa.repeat(pa.scalar(experiment_id), count),
        "pass_id": pa.repeat(pa.scalar(pass_id), count),
        "scored_at": pa.repeat(pa.scalar(scored_at, SCORES.field("scored_at").type), count),
    }
    return pa.table([added[f.name] if f.name in added else table.column(f.name) for f in SCORES], schema=SCORES)
