"""A report on production traces: calls, failures by type (the trials' classifier), latency, tokens and cost by model
and by tool, and the current scores of online evaluation; every figure from DuckDB over the store's views."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import math
from typing import Any, overload

import duckdb

from ..run._prices import Prices, cost, load_prices
from ..run._recorded import classify_recorded
from ..store import Store
from ..store._snapshots import scorer_figures_sql
from ..store._trace_views import PRODUCTION
from ..store._views import COUNTED_MODEL_CALL, SCORER_ERROR, scorer_verdicts, unjudged_message
from ._experiments import fetch
from ._report_data import ScorerFigures, SpanLatency
from ._stats import wilson95

MAX_DEPTH = 32
"""How deep beneath a tool span model calls are looked for (a malformed trace cannot loop the query)."""
RECENT_FAILURES = 10
LATENCY_SAMPLE = 2000

SELECTED = """
CREATE TEMP TABLE selected AS
SELECT * FROM traces WHERE started_at >= coalesce(?::TIMESTAMPTZ, '-infinity') AND (?::VARCHAR IS NULL OR service = ?)
"""
SELECTED_SPANS = f"(SELECT * FROM spans WHERE {PRODUCTION} AND trace_id IN (SELECT trace_id FROM selected))"

SUMMARY = f"""
SELECT count(*) AS calls, quantile_cont(duration_ms, 0.5) AS p50_ms, quantile_cont(duration_ms, 0.9) AS p90_ms,
       quantile_cont(duration_ms, 0.95) AS p95_ms, quantile_cont(duration_ms, 0.99) AS p99_ms,
       min(started_at) AS first_started_at, max(started_at) AS last_started_at, fsum(cost_usd) AS cost_usd,
       (SELECT list(duration_ms ORDER BY duration_ms)
        FROM (SELECT duration_ms FROM selected USING SAMPLE {LATENCY_SAMPLE} ROWS)) AS sample_ms
FROM selected
"""

CLASSIFIED = """
SELECT trace_id, service, started_at, status, error_type, error_message, raised_in, error_http_status, error_code,
       error_kind, finish_reason, output
FROM selected WHERE status = 'ERROR' OR output = '' OR finish_reason IN ('length', 'max_tokens')
ORDER BY started_at DESC
"""
"""The traces that may have failed, with what the classifier reads (a trace with a reply that did not end in error
or at the token limit did not fail)."""

BY_SERVICE = """
SELECT service, count(*) AS calls, quantile_cont(duration_ms, 0.5) AS p50_ms, quantile_cont(duration_ms, 0.95) AS p95_ms
FROM selected GROUP BY service ORDER BY calls DESC, service
"""

SPAN_LATENCY = f"""
SELECT coalesce(operation, 'other') AS operation, count(*) AS spans,
       quantile_cont(duration_ms, 0.5) AS p50_ms, quantile_cont(duration_ms, 0.95) AS p95_ms
FROM {SELECTED_SPANS} WHERE role IS NULL GROUP BY ALL ORDER BY spans DESC, operation
"""

BY_MODEL = f"""
SELECT coalesce(response_model, request_model) AS model, count(*) AS model_calls,
       sum(input_tokens)::BIGINT AS input_tokens, sum(output_tokens)::BIGINT AS output_tokens
FROM {SELECTED_SPANS} WHERE {COUNTED_MODEL_CALL} AND role IS NULL GROUP BY ALL ORDER BY model_calls DESC, model
"""

TOOL_CALLS = f"""
SELECT tool_name AS tool, count(*) AS calls, count(*) FILTER (WHERE status_code = 'ERROR') AS errors,
       quantile_cont(duration_ms, 0.5) AS p50_ms, quantile_cont(duration_ms, 0.95) AS p95_ms
FROM {SELECTED_SPANS} WHERE operation = 'execute_tool' AND role IS NULL GROUP BY ALL ORDER BY calls DESC, tool
"""

BENEATH_TOOLS = f"""
WITH RECURSIVE s AS MATERIALIZED (SELECT * FROM {SELECTED_SPANS}),
beneath(tool, trace_id, span_id, depth) AS (
    SELECT tool_name, trace_id, span_id, 0 FROM s WHERE operation = 'execute_tool' AND role IS NULL
    UNION ALL
    SELECT b.tool, c.trace_id, c.span_id, b.depth + 1
    FROM beneath b JOIN s c ON c.trace_id = b.trace_id AND c.parent_span_id = b.span_id
    WHERE b.depth < {MAX_DEPTH}
)
SELECT b.tool, coalesce(response_model, request_model) AS model, count(*) AS model_calls,
       sum(input_tokens)::BIGINT AS input_tokens, sum(output_tokens)::BIGINT AS output_tokens
FROM (SELECT DISTINCT tool, trace_id, span_id FROM beneath WHERE depth > 0) b JOIN s USING (trace_id, span_id)
WHERE {COUNTED_MODEL_CALL} AND role IS NULL
GROUP BY ALL
"""
"""The agent's model calls beneath each tool's spans (a tool that is itself an agent, or calls one), by model."""

SELECTED_SCORES = "(SELECT * FROM trace_scores WHERE trace_id IN (SELECT trace_id FROM selected))"

SCORER_FIGURES = scorer_figures_sql(SELECTED_SCORES, "trace_id")
"""Each trace is its own unit: its scores are independent of other traces'."""

UNJUDGED = f"""
SELECT t.trace_id, t.service, t.started_at, {unjudged_message("j")} AS message
FROM ({scorer_verdicts(SELECTED_SCORES, "trace_id")}) j JOIN selected t USING (trace_id)
WHERE j.errored_scorer IS NOT NULL
"""
"""The traces whose answer an applicable pass/fail scorer could not judge: ``scorer_error`` failures, infrastructure,
as an evaluation's trials are (:func:`agenteval.store._views.judged_trials`), with the same message."""


@dataclasses.dataclass(frozen=True)
class TraceWindow:
    """Which traces the report covers: started from ``since`` (all, when None), of ``service`` (all, when None).
    Every time in the report is in UTC."""

    since: datetime.datetime | None
    service: str | None
    first_started_at: datetime.datetime | None
    last_started_at: datetime.datetime | None


@dataclasses.dataclass(frozen=True)
class ErrorRate:
    """Traces that failed (a failure type by the trials' classifier, or a ``scorer_error`` as trials have), of all,
    with a Wilson 95% interval."""

    failed: int
    calls: int
    rate: float | None
    ci95: tuple[float, float] | None
    infrastructure: int
    """Of which the API that day caused (rate limits, quotas, outages), as for trials."""


@dataclasses.dataclass(frozen=True)
class TraceLatency:
    """Trace duration percentiles, and a uniform sample of durations (sorted) for plots."""

    p50_ms: float | None
    p90_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    sample_ms: list[float]


@dataclasses.dataclass(frozen=True)
class ServiceFigures:
    """One service's traces: calls, failures with their interval, latency."""

    service: str
    calls: int
    failed: int
    failure_rate: float | None
    ci95: tuple[float, float] | None
    p50_ms: float | None
    p95_ms: float | None


@dataclasses.dataclass(frozen=True)
class ModelUse:
    """The agent's model calls of one model, their tokens and cost (None when the model has no price)."""

    model: str | None
    model_calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None


@dataclasses.dataclass(frozen=True)
class ToolUse:
    """One tool: calls, errors, latency, and the model calls beneath its spans with their tokens and cost."""

    tool: str | None
    calls: int
    errors: int
    p50_ms: float | None
    p95_ms: float | None
    model_calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None


@dataclasses.dataclass(frozen=True)
class TraceFailure:
    """One failed trace, as listed among the latest."""

    trace_id: str
    service: str
    started_at: datetime.datetime
    failure_type: str
    infrastructure: bool
    message: str


@dataclasses.dataclass(frozen=True)
class TracesReport:
    """A report on production traces: every figure the formats show, as typed fields (``to_dict()`` is the JSON)."""

    window: TraceWindow
    calls: int
    failures: ErrorRate
    failures_by_type: dict[str, int]
    latency: TraceLatency
    services: list[ServiceFigures]
    spans: list[SpanLatency]
    models: list[ModelUse]
    tools: list[ToolUse]
    cost_usd: float | None
    """Of every model call, at the report's prices; None when no model has one."""
    scorers: list[ScorerFigures]
    """Online evaluation: each scorer over the traces' current scores (``agenteval rescore --traces``)."""
    latest_failures: list[TraceFailure]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@overload
def _utc(value: datetime.datetime) -> datetime.datetime: ...
@overload
def _utc(value: None) -> None: ...
def _utc(value: datetime.datetime | None) -> datetime.datetime | None:
    """A time from DuckDB in UTC: it gives ``TIMESTAMPTZ`` values in the machine's zone, and a report mixing them
    with ``since`` (UTC) showed two offsets for one clock."""
    return None if value is None else value.astimezone(datetime.UTC)


def trace_failure(row: dict[str, Any]) -> TraceFailure | None:
    """A ``traces`` row's failure by the classifier trials use, or None when it produced an answer."""
    failure = classify_recorded(
        row["status"],
        row["error_type"],
        row["error_message"],
        raised_in=row["raised_in"],
        http_status=row["error_http_status"],
        error_code=row["error_code"],
        error_kind=row["error_kind"],
        finish_reason=row["finish_reason"],
        reply=row["output"],
    )
    if failure is None:
        return None
    return TraceFailure(
        row["trace_id"], row["service"], _utc(row["started_at"]), failure.type, failure.infrastructure, failure.message
    )


def _sum_costs(costs: list[float | None]) -> float | None:
    known = [c for c in costs if c is not None]
    return math.fsum(known) if known else None


def build_traces_report(
    store: Store,
    *,
    since: datetime.datetime | None = None,
    service: str | None = None,
    prices: Prices | None = None,
) -> TracesReport:
    """The report on production traces started from ``since`` (all by default), of ``service`` (all by default);
    costs at ``prices`` (the shipped table by default)."""
    table = load_prices() if prices is None else prices
    with contextlib.closing(store.connect()) as con:
        return _report(con, since, service, table)


def _report(
    con: duckdb.DuckDBPyConnection, since: datetime.datetime | None, service: str | None, prices: Prices
) -> TracesReport:
    con.execute(SELECTED, [since, service, service])
    summary = fetch(con, SUMMARY)[0]
    failures = _failures(con)
    by_type: dict[str, int] = {}
    for failure in failures:
        by_type[failure.failure_type] = by_type.get(failure.failure_type, 0) + 1
    calls = summary["calls"]
    failed_by_service: dict[str, int] = {}
    for failure in failures:
        failed_by_service[failure.service] = failed_by_service.get(failure.service, 0) + 1
    models = [
        ModelUse(**row, cost_usd=cost(prices, row["model"], row["input_tokens"], row["output_tokens"]))
        for row in fetch(con, BY_MODEL)
    ]
    return TracesReport(
        window=TraceWindow(_utc(since), service, _utc(summary["first_started_at"]), _utc(summary["last_started_at"])),
        calls=calls,
        failures=ErrorRate(
            len(failures),
            calls,
            len(failures) / calls if calls else None,
            wilson95(len(failures), calls),
            sum(f.infrastructure for f in failures),
        ),
        failures_by_type=dict(sorted(by_type.items(), key=lambda kv: (-kv[1], kv[0]))),
        latency=TraceLatency(
            summary["p50_ms"], summary["p90_ms"], summary["p95_ms"], summary["p99_ms"], summary["sample_ms"] or []
        ),
        services=[
            ServiceFigures(
                row["service"],
                row["calls"],
                failed_by_service.get(row["service"], 0),
                failed_by_service.get(row["service"], 0) / row["calls"],
                wilson95(failed_by_service.get(row["service"], 0), row["calls"]),
                row["p50_ms"],
                row["p95_ms"],
            )
            for row in fetch(con, BY_SERVICE)
        ],
        spans=[SpanLatency(**row) for row in fetch(con, SPAN_LATENCY)],
        models=models,
        tools=_tools(con, prices),
        cost_usd=_sum_costs([m.cost_usd for m in models]),
        scorers=[ScorerFigures.from_row(row) for row in fetch(con, SCORER_FIGURES)],
        latest_failures=failures[:RECENT_FAILURES],
    )


def _failures(con: duckdb.DuckDBPyConnection) -> list[TraceFailure]:
    """The selected traces that failed, latest first: by the trials' classifier, or, for a trace that answered, as a
    ``scorer_error`` when a pass/fail scorer could not judge its answer (what fails a trial too)."""
    failures = [f for f in map(trace_failure, fetch(con, CLASSIFIED)) if f is not None]
    failed = {f.trace_id for f in failures}
    failures += [
        TraceFailure(row["trace_id"], row["service"], _utc(row["started_at"]), SCORER_ERROR, True, row["message"])
        for row in fetch(con, UNJUDGED)
        if row["trace_id"] not in failed
    ]
    return sorted(failures, key=lambda f: (f.started_at, f.trace_id), reverse=True)


def _tools(con: duckdb.DuckDBPyConnection, prices: Prices) -> list[ToolUse]:
    beneath: dict[str | None, list[dict[str, Any]]] = {}
    for row in fetch(con, BENEATH_TOOLS):
        beneath.setdefault(row["tool"], []).append(row)
    tools = []
    for row in fetch(con, TOOL_CALLS):
        usage = beneath.get(row["tool"], [])
        tools.append(
            ToolUse(
                **row,
                model_calls=sum(u["model_calls"] for u in usage),
                input_tokens=sum(u["input_tokens"] or 0 for u in usage),
                output_tokens=sum(u["output_tokens"] or 0 for u in usage),
                cost_usd=_sum_costs([cost(prices, u["model"], u["input_tokens"], u["output_tokens"]) for u in usage]),
            )
        )
    return tools
