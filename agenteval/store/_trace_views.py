"""Production traces as the store's views show them: ``traces`` (one row per trace of spans outside any experiment)
and ``trace_scores`` (each trace's current score from each scorer).

A production trace is the spans that share a ``trace_id`` and carry no experiment id: what the in-process exporter
writes for decorated code called outside ``agenteval run``, and what ``agenteval collect`` receives over OTLP. Its
root is its earliest span whose parent is not in the store (none, or a caller's span in another service). Its
failure type is not a column: it comes from the classifier trials use (``agenteval.run._failures``), fed with the
columns here (:func:`agenteval.analysis._traces.trace_failure`).
"""

from __future__ import annotations

import functools

from agenteval_exporters.partitions import UNKNOWN_SERVICE
from agenteval_instrumentation import attributes as A

from ..run._prices import load_prices, prices_sql
from ._views import COUNTED_MODEL_CALL, current_scores, sql_string

PRODUCTION = "experiment_id IS NULL"
"""The spans (and scores) of production traces: no experiment."""

_MESSAGES = """try(from_json(json_extract_string({row}.attributes, '$."{name}"'),
                       '[{{"role": "VARCHAR", "parts": [{{"type": "VARCHAR", "content": "VARCHAR"}}]}}]'))"""
"""try(): a span's messages may be JSON cut short by an SDK's attribute length limit, or not JSON at all (another
instrumentation's text); from_json raised on it and failed the whole view. Such a trace's messages are NULL."""


def _texts(row: str, name: str, role: str | None) -> str:
    """SQL: the text of each message (its text parts joined) in attribute ``name`` of ``row``, of ``role`` or any."""
    keep = f"m.role = {sql_string(role)}" if role else "true"
    messages = _MESSAGES.format(row=row, name=name)
    return f"""list_transform(list_filter({messages}, lambda m: {keep}),
        lambda m: array_to_string(
            list_transform(list_filter(m.parts, lambda p: p.content IS NOT NULL), lambda p: p.content), ''))"""


def _attribute(row: str, *names: str) -> str:
    return "coalesce(" + ", ".join(f"json_extract_string({row}.attributes, '$.\"{n}\"')" for n in names) + ")"


def _status(row: str) -> str:
    return f"TRY_CAST({_attribute(row, A.HTTP_RESPONSE_STATUS_CODE)} AS INTEGER)"


def _exception_type(row: str) -> str:
    """SQL: the last ``exception.type`` among ``row``'s events: the error type of a span that recorded no
    ``error.type`` (OpenInference's), read from its exception event."""
    types = f"""json_extract_string({row}.events, '$[*].attributes."exception.type"')"""
    return f"list_filter({types}, lambda t: t IS NOT NULL)[-1]"


def traces_sql(prices_relation: str) -> str:
    """The ``traces`` view, costs from ``prices_relation`` (model, input, output: USD per million tokens)."""
    users = _texts("r", A.GEN_AI_INPUT_MESSAGES, "user")
    replies = _texts("r", A.GEN_AI_OUTPUT_MESSAGES, None)
    raw_input = _attribute("r", A.INPUT, A.GEN_AI_TOOL_CALL_ARGUMENTS)
    raw_output = _attribute("r", A.OUTPUT, A.GEN_AI_TOOL_CALL_RESULT)
    return f"""
WITH p AS (SELECT * FROM spans WHERE {PRODUCTION}),
roots AS (
    SELECT s.* FROM p s ANTI JOIN p q ON q.trace_id = s.trace_id AND q.span_id = s.parent_span_id
    QUALIFY row_number() OVER (PARTITION BY s.trace_id ORDER BY s.start_time, s.span_id) = 1
),
extent AS (
    SELECT trace_id, min(start_time) AS started_at, max(end_time) AS ended_at, count(*) AS spans
    FROM p GROUP BY trace_id
),
raised AS (
    SELECT p.trace_id, arg_max(p.operation, p.start_time) AS raised_in,
           arg_max({_status("p")}, p.start_time) AS error_http_status,
           arg_max(json_extract_string(p.attributes, '$."{A.PROVIDER_ERROR_CODE}"'), p.start_time) AS error_code,
           arg_max(json_extract_string(p.attributes, '$."{A.PROVIDER_ERROR_TYPE}"'), p.start_time) AS error_kind
    FROM p JOIN roots r USING (trace_id)
    WHERE r.status_code = 'ERROR' AND p.status_code = 'ERROR' AND p.role IS NULL AND p.span_id <> r.span_id
      AND (r.error_type IS NULL OR p.error_type = r.error_type)
    GROUP BY p.trace_id
),
usage AS (
    SELECT trace_id, coalesce(response_model, request_model) AS model, count(*) AS calls,
           sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
           arg_max(finish_reason, end_time) AS finish_reason, max(end_time) AS last_end
    FROM p WHERE {COUNTED_MODEL_CALL} AND role IS NULL GROUP BY ALL
),
models AS (
    SELECT u.trace_id, sum(u.calls)::BIGINT AS model_calls,
           sum(u.input_tokens)::BIGINT AS input_tokens, sum(u.output_tokens)::BIGINT AS output_tokens,
           sum((coalesce(u.input_tokens, 0) * pr.input + coalesce(u.output_tokens, 0) * pr.output) / 1e6) AS cost_usd,
           arg_max(u.model, u.calls) AS model, arg_max(u.finish_reason, u.last_end) AS finish_reason
    FROM usage u LEFT JOIN ({prices_relation}) pr USING (model) GROUP BY u.trace_id
),
tools AS (
    SELECT trace_id, count(*) AS tool_calls, count(*) FILTER (WHERE status_code = 'ERROR') AS tool_errors,
           list(DISTINCT tool_name ORDER BY tool_name) FILTER (WHERE tool_name IS NOT NULL) AS tools
    FROM p WHERE operation = '{A.OPERATION_EXECUTE_TOOL}' AND role IS NULL GROUP BY trace_id
)
SELECT e.trace_id, coalesce(r.service_name, '{UNKNOWN_SERVICE}') AS service, e.started_at, e.ended_at,
       (epoch_ns(e.ended_at) - epoch_ns(e.started_at)) / 1e6 AS duration_ms, e.spans,
       r.span_id AS root_span_id, r.name AS root_name, r.operation,
       {users} AS user_messages,
       coalesce(user_messages[-1], {raw_input}) AS input,
       coalesce({replies}[-1], {raw_output}) AS output,
       r.status_code AS status, coalesce(r.error_type, {_exception_type("r")}) AS error_type,
       CASE WHEN r.status_code = 'ERROR' THEN r.status_message END AS error_message,
       x.raised_in,
       coalesce(x.error_http_status, {_status("r")}) AS error_http_status,
       coalesce(x.error_code, {_attribute("r", A.PROVIDER_ERROR_CODE)}) AS error_code,
       coalesce(x.error_kind, {_attribute("r", A.PROVIDER_ERROR_TYPE)}) AS error_kind,
       coalesce(m.model_calls, 0) AS model_calls, coalesce(m.input_tokens, 0) AS input_tokens,
       coalesce(m.output_tokens, 0) AS output_tokens, m.cost_usd, m.model, m.finish_reason,
       coalesce(t.tool_calls, 0) AS tool_calls, coalesce(t.tool_errors, 0) AS tool_errors,
       coalesce(t.tools, []) AS tools
FROM extent e JOIN roots r USING (trace_id)
LEFT JOIN raised x USING (trace_id) LEFT JOIN models m USING (trace_id) LEFT JOIN tools t USING (trace_id)
"""


@functools.cache
def traces() -> str:
    """The ``traces`` view: one row per production trace, costs at the shipped prices (``prices.json``)."""
    return traces_sql(prices_sql(load_prices(), "usage"))


def trace_scores() -> str:
    """The ``trace_scores`` view: each production trace's newest score from each scorer (``trace_id`` is the
    scores table's ``trial_id``; see :mod:`agenteval.scorers._traces`)."""
    return f"""
SELECT trial_id AS trace_id, scorer, scorer_version, pass_id, value, passed, reason, error, continuous, scored_at
FROM ({current_scores(where=PRODUCTION)})
"""


def trace_views() -> dict[str, str]:
    """The views of production traces, created after the store's others (over ``spans`` and ``score_history``)."""
    return {"traces": traces(), "trace_scores": trace_scores()}
