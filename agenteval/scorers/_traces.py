"""Online evaluation: reference-free scorers over production traces, with the feature query and scoring engine of
trials, their scores in the same ``scores`` table.

A production trace has no case and no expected answer, so only scorers that need none apply: ``tool_errors`` (a tool
failed and the reply hid it), ``step_efficiency`` against a tool-call budget, ``must_not_contain`` guards, and the
LLM judge grading against a rubric instead of an expected answer. Each trace is judged as a case of its own, made
from the trace (its user messages as ``input`` or ``turns``) and the policy given (:class:`TracePolicy`).

How a trace's score is stored: ``experiment_id`` null, ``trial_id`` the trace's id, ``case_id`` null, under
``scores/date=<day>/service=<name>/`` (the trace's day and service, so retention removes scores with their traces).
The ``trace_scores`` view reads them back by ``trace_id``.

The collector's hook is :class:`TraceScorer`: made once with the scorers and a sample rate, then
:meth:`TraceScorer.score` on each batch of trace ids whose spans have been published.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import duckdb
import pyarrow as pa

from agenteval_exporters.files import publish
from agenteval_exporters.partitions import production_partition

from ..analysis._experiments import fetch
from ..dataset._cases import Case
from ..errors import UsageError
from ..run._options import DEFAULT_MAX_RETRIES, DEFAULT_REQUEST_TIMEOUT, DEFAULT_RESCORE_BATCH
from ..store import Store
from ..store._schemas import SCORES
from ..store._trace_views import PRODUCTION
from ._base import Scorer
from ._builtin import _ACKNOWLEDGED, _INVENTED, _TOOL_FAILED, must_not_contain, step_efficiency
from ._engine import Judgement, ScoringEngine
from ._features import features_sql
from ._loading import load_scorers

_TOOL_ERRORS_HANDLED = f"(NOT coalesce({_TOOL_FAILED}, false) OR ({_ACKNOWLEDGED} AND NOT {_INVENTED}))"

tool_errors = Scorer(
    "tool_errors",
    sql=f"""
    struct_pack(
        value := CASE WHEN {_TOOL_ERRORS_HANDLED} THEN 1.0 ELSE 0.0 END,
        passed := {_TOOL_ERRORS_HANDLED},
        reason := CASE WHEN NOT coalesce({_TOOL_FAILED}, false) THEN 'no tool failed'
                       WHEN {_INVENTED} THEN 'a tool failed and the reply states a value it could not have'
                       WHEN NOT {_ACKNOWLEDGED} THEN 'a tool failed and the reply does not say so'
                       ELSE 'a tool failed and the reply acknowledges it' END
    )""",
)
"""Reference-free: passes when no tool failed, or when one did and the final reply says so without stating a value
it could not have got (the rule of ``tool_error_handling``, for traces no case expects a failure of)."""

DEFAULT_RUBRIC = (
    "The reply addresses what the user asked, stays consistent with the tool results in the conversation, "
    "and does not invent facts, figures or actions it did not take."
)
"""What the LLM judge grades a production reply against when no rubric is given: there is no expected answer."""

TRACE_SCORERS: dict[str, Scorer] = {s.name: s for s in (tool_errors, step_efficiency, must_not_contain)}
"""The reference-free scorers by name; the LLM judge joins them with ``judge=``."""

IN_SCOPE = "SELECT trace_id, service, started_at, root_span_id, user_messages, input, output, status FROM traces"
"""What scoring reads of each trace in scope."""

ANSWERED = "status IS DISTINCT FROM 'ERROR'"
"""The traces scored: those whose root did not end in error (a trace that did has a failure type instead)."""

DEFAULT_BATCH = DEFAULT_RESCORE_BATCH
"""Traces scored at a time; memory is bounded by this."""


@dataclasses.dataclass(frozen=True)
class TracePolicy:
    """What a production reply is held to, in place of a case's fields."""

    max_tool_calls: int | None = None
    """The tool-call budget ``step_efficiency`` measures against (it does not apply without one)."""
    must_not_contain: tuple[str, ...] = ()
    """Text no reply may contain (``must_not_contain`` does not apply without any)."""
    rubric: str | None = None
    """What the LLM judge grades against (:data:`DEFAULT_RUBRIC` when there is a judge and no rubric)."""


@dataclasses.dataclass
class TraceScoreResult:
    """What one scoring of production traces did."""

    pass_id: str
    traces: int
    """Traces in scope."""
    sampled: int
    """Of which the sample rate chose."""
    failed: int
    """Of which not scored, since they ended in error (as a failed trial is not scored: its failure type says what
    went wrong; ``agenteval report --traces`` counts them)."""
    scores: int
    scorers: list[str]
    seconds: float
    not_scored: dict[str, int] = dataclasses.field(default_factory=dict)
    """Scorer -> traces it did not judge for want of message content (captured off)."""


def trace_sampled(trace_id: str, rate: float) -> bool:
    """Whether ``trace_id`` is in a sample of ``rate``: its lower 64 bits against ``rate * 2**64``, the rule of
    OpenTelemetry's ``TraceIdRatioBased`` sampler, so a trace sampled at 0.1 is also sampled at 0.2."""
    if rate >= 1:
        return True
    try:
        return int(trace_id[-16:], 16) < round(rate * 2**64)
    except ValueError:
        return False


def trace_case(row: dict[str, Any], policy: TracePolicy, judged: bool) -> Case:
    """A production trace as the case its scorers read: its user messages, no expected answer, the policy."""
    users = [str(u) for u in row.get("user_messages") or () if u]
    text = users[-1] if users else str(row.get("input") or "")
    return Case(
        id=str(row["trace_id"]),
        input=text or "(no input recorded)",
        expected_output="",
        turns=tuple(users) if len(users) > 1 else None,
        must_not_contain=policy.must_not_contain,
        max_tool_calls=policy.max_tool_calls,
        rubric=(policy.rubric or DEFAULT_RUBRIC) if judged else policy.rubric,
    )


def trace_scorers(names: Sequence[Scorer | str], policy: TracePolicy) -> list[Scorer]:
    """The scorers named (reference-free names first, then as ``--scorer`` reads them), or by default
    ``tool_errors`` plus those the policy gives something to check."""
    if not names:
        chosen = [tool_errors]
        if policy.max_tool_calls is not None:
            chosen.append(step_efficiency)
        if policy.must_not_contain:
            chosen.append(must_not_contain)
        return chosen
    found: list[Scorer] = []
    for name in names:
        if isinstance(name, str) and name in TRACE_SCORERS:
            found.append(TRACE_SCORERS[name])
        else:
            found += load_scorers([name], only=True)
    return found


class TraceScorer:
    """Scores production traces with a fixed set of scorers: the hook a collector calls as traces arrive.

    Make it once (the scorers load, a judge's client opens), then call :meth:`score` with the ids of traces whose
    spans have been published to the store (after the span writer's flush). A trace is judged as it stands then;
    ``agenteval rescore --traces`` judges it again later. ``sample`` keeps that share of traces, chosen by trace
    id as OpenTelemetry's ratio sampler chooses, so the same traces are chosen whoever asks.
    """

    def __init__(
        self,
        store: Store,
        scorers: Sequence[Scorer | str] = (),
        *,
        policy: TracePolicy | None = None,
        sample: float = 1.0,
        judge: str | None = None,
        judge_base_url: str | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
    ) -> None:
        if not 0 < sample <= 1:
            raise UsageError(f"--sample {sample}: give a share of traces above 0 and at most 1")
        self.store = store
        self.policy = policy or TracePolicy()
        self.sample = sample
        chosen = trace_scorers(scorers, self.policy)
        if judge is not None:
            from ..models._model import named_model
            from ._judge import llm_judge

            model = named_model(
                judge, "--judge", base_url=judge_base_url, request_timeout=request_timeout, max_retries=max_retries
            )
            chosen = [s for s in chosen if s.name != "llm_judge"] + [llm_judge(model, reference_free=True)]
        self.judged = any(s.name == "llm_judge" for s in chosen)
        self.scorers = chosen
        self.engine = ScoringEngine(chosen)

    def score(self, trace_ids: Iterable[str], *, pass_id: str | None = None) -> TraceScoreResult:
        """Score the sampled ones of ``trace_ids`` and append their scores (one pass, ``pass_id`` or a new one)."""
        ids = list(dict.fromkeys(trace_ids))
        with contextlib.closing(self.store.connect()) as con:
            in_scope = f"CREATE TEMP TABLE in_scope AS {IN_SCOPE} WHERE trace_id IN (SELECT unnest(?::VARCHAR[]))"
            _run(self.store, con, in_scope, [ids])
            return self._score(con, ids, pass_id or uuid.uuid4().hex[:12])

    def score_window(
        self,
        *,
        since: datetime.datetime | None = None,
        service: str | None = None,
        batch_size: int = DEFAULT_BATCH,
        on_batch: Callable[[int, int], None] = lambda done, total: None,
    ) -> TraceScoreResult:
        """Score every trace started since ``since`` (all by default) of ``service`` (all by default), as one pass,
        ``batch_size`` traces at a time (the traces view is computed once, not per batch)."""
        pass_id = uuid.uuid4().hex[:12]
        total = TraceScoreResult(pass_id, 0, 0, 0, 0, [s.name for s in self.scorers], 0.0)
        with contextlib.closing(self.store.connect()) as con:
            window = "WHERE started_at >= coalesce(?::TIMESTAMPTZ, '-infinity') AND (?::VARCHAR IS NULL OR service = ?)"
            _run(self.store, con, f"CREATE TEMP TABLE in_scope AS {IN_SCOPE} {window}", [since, service, service])
            ids = [
                row[0] for row in con.execute("SELECT trace_id FROM in_scope ORDER BY started_at, trace_id").fetchall()
            ]
            on_batch(0, len(ids))  # the work is known: a display can start before the first batch ends
            for start in range(0, len(ids), batch_size):
                part = self._score(con, ids[start : start + batch_size], pass_id)
                total.traces += part.traces
                total.sampled += part.sampled
                total.failed += part.failed
                total.scores += part.scores
                total.seconds += part.seconds
                for name, count in part.not_scored.items():
                    total.not_scored[name] = total.not_scored.get(name, 0) + count
                on_batch(min(start + batch_size, len(ids)), len(ids))
        return total

    def _score(self, con: duckdb.DuckDBPyConnection, trace_ids: list[str], pass_id: str) -> TraceScoreResult:
        """Score the sampled ones of ``trace_ids``, which are in ``in_scope``."""
        started = time.perf_counter()
        chosen = [t for t in trace_ids if trace_sampled(t, self.sample)]
        result = TraceScoreResult(pass_id, len(trace_ids), len(chosen), 0, 0, [s.name for s in self.scorers], 0.0)
        if chosen:
            rows, features = self._features(con, chosen)
            result.failed = len(chosen) - len(rows)
            cases = {row["trace_id"]: trace_case(row, self.policy, self.judged) for row in rows}
            judged = self.engine.judge(features, cases)
            result.not_scored = dict(judged.not_scored)
            result.scores = self._write(judged, rows, pass_id)
        result.seconds = time.perf_counter() - started
        return result

    def _features(self, con: duckdb.DuckDBPyConnection, trace_ids: list[str]) -> tuple[list[dict[str, Any]], pa.Table]:
        _run(
            self.store,
            con,
            "CREATE OR REPLACE TEMP TABLE chosen AS SELECT * FROM in_scope "
            f"WHERE trace_id IN (SELECT unnest(?::VARCHAR[])) AND {ANSWERED}",
            [trace_ids],
        )
        rows = fetch(con, "SELECT * FROM chosen ORDER BY trace_id")
        trials = """(SELECT NULL::VARCHAR AS experiment_id, trace_id AS trial_id, trace_id AS case_id, 1 AS attempt,
                            trace_id, root_span_id, NULL::VARCHAR AS failure_type, output AS reply,
                            NULL::VARCHAR[] AS replies FROM chosen)"""
        spans = (
            f"(SELECT * REPLACE (trace_id AS trial_id) FROM spans "
            f"WHERE {PRODUCTION} AND trace_id IN (SELECT trace_id FROM chosen))"
        )
        root = "span_id IN (SELECT root_span_id FROM chosen)"
        query = features_sql(trials, spans, root=root)
        return rows, self.store.retry_on(con, lambda: con.sql(query).to_arrow_table())

    def _write(self, judged: Judgement, rows: list[dict[str, Any]], pass_id: str) -> int:
        """The pass's scores, one file per (day, service) of the traces judged; returns the rows written."""
        table = judged.table
        if not table.num_rows:
            return 0
        self.store.ensure()
        count = table.num_rows
        scores = pa.table(
            [
                pa.nulls(count, pa.string())
                if f.name in ("experiment_id", "case_id")
                else pa.repeat(pa.scalar(pass_id), count)
                if f.name == "pass_id"
                else pa.repeat(pa.scalar(time.time_ns(), f.type), count)
                if f.name == "scored_at"
                else table.column(f.name)
                for f in SCORES
            ],
            schema=SCORES,
        )
        where = {
            row["trace_id"]: production_partition(row["started_at"].astimezone(datetime.UTC).date(), row["service"])
            for row in rows
        }
        partitions = [where[t] for t in scores.column("trial_id").to_pylist()]
        for partition in dict.fromkeys(partitions):
            mask = pa.array([p == partition for p in partitions], pa.bool_())
            publish(self.store.root, "scores", partition, scores.filter(mask))
        return count


def _run(store: Store, con: duckdb.DuckDBPyConnection, sql: str, parameters: list[Any]) -> None:
    """``sql`` on ``con``, again when a compaction swapped a file under it."""
    store.retry_on(con, lambda: con.execute(sql, parameters))


def score_traces(
    store: Store,
    trace_ids: Iterable[str] | None = None,
    scorers: Sequence[Scorer | str] = (),
    *,
    since: datetime.datetime | None = None,
    service: str | None = None,
    policy: TracePolicy | None = None,
    sample: float = 1.0,
    judge: str | None = None,
    judge_base_url: str | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    max_retries: int = DEFAULT_MAX_RETRIES,
    batch_size: int = DEFAULT_BATCH,
    on_batch: Callable[[int, int], None] = lambda done, total: None,
) -> TraceScoreResult:
    """Score production traces with reference-free scorers and append the scores as one pass: the traces named
    by ``trace_ids``, or else every trace started since ``since`` of ``service``; ``sample`` of them (by trace
    id), ``on_batch(done, total)`` told of the traces as the batches go. See :class:`TraceScorer` for a scorer
    kept across calls (a collector scoring traces as they arrive)."""
    scorer = TraceScorer(
        store,
        scorers,
        policy=policy,
        sample=sample,
        judge=judge,
        judge_base_url=judge_base_url,
        request_timeout=request_timeout,
        max_retries=max_retries,
    )
    if trace_ids is not None:
        return scorer.score(trace_ids)
    return scorer.score_window(since=since, service=service, batch_size=batch_size, on_batch=on_batch)
