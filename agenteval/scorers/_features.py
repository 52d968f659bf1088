"""Per-trial features from a batch of trials and their spans: one DuckDB query, the same at run time
(over Arrow batches in memory) and when rescoring (over the store's Parquet files).

Only the agent's own spans of the try that counts are used: the trial row's ``trace_id`` names that
try (earlier tries were rate limited), and spans with a ``role`` (simulated user, judge) are left out.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agenteval_instrumentation import attributes as A

from ..store._views import COUNTED_MODEL_CALL

FEATURES_SQL = """
WITH t AS (SELECT experiment_id, trial_id, case_id, attempt, trace_id, failure_type, reply, replies FROM {trials}),
s AS (
    SELECT s.trial_id, s.span_id, s.start_time, s.scope_name, s.operation, s.tool_name, s.status_code,
           s.input_tokens, s.output_tokens, s.wraps_model_call, s.attributes
    FROM {spans} s JOIN t ON s.trial_id = t.trial_id AND s.trace_id = t.trace_id
    WHERE s.role IS NULL
),
roots AS (
    SELECT trial_id, span_id AS root_span_id,
           list_transform(
               try(from_json(json_extract_string(attributes, '$."gen_ai.output.messages"'),
                             '[{{"parts": [{{"content": "VARCHAR"}}]}}]')),
               lambda m: m.parts[1].content) AS replies,
           list_transform(
               list_filter(
                   try(from_json(json_extract_string(attributes, '$."gen_ai.input.messages"'),
                                 '[{{"role": "VARCHAR", "parts": [{{"content": "VARCHAR"}}]}}]')),
                   lambda m: m.role = 'user'),
               lambda m: m.parts[1].content) AS user_turns
    FROM s WHERE {root}
),
tools AS (
    SELECT trial_id,
           list(struct_pack(
               name := tool_name,
               arguments := json_extract_string(attributes, '$."gen_ai.tool.call.arguments"'),
               result := json_extract_string(attributes, '$."gen_ai.tool.call.result"'),
               error := status_code = 'ERROR'
           ) ORDER BY start_time, span_id) AS tool_calls
    FROM s WHERE operation = 'execute_tool' GROUP BY trial_id
),
models AS (
    SELECT trial_id, count(*) AS model_calls,
           sum(input_tokens)::BIGINT AS input_tokens, sum(output_tokens)::BIGINT AS output_tokens
    FROM s WHERE {counted_model_call} GROUP BY trial_id
),
retrievals AS (
    SELECT trial_id,
           flatten(list(from_json(json_extract(attributes, '$."agenteval.retrieval.document_ids"'), '["VARCHAR"]')
                        ORDER BY start_time, span_id)) AS retrieved_ids,
           count(*) AS retrievals
    FROM s WHERE operation = 'retrieval' GROUP BY trial_id
)
SELECT t.experiment_id, t.trial_id, t.case_id, t.attempt, t.trace_id, roots.root_span_id, t.failure_type,
       coalesce(roots.replies, t.replies, CASE WHEN t.reply IS NULL THEN [] ELSE [t.reply] END) AS replies,
       coalesce(roots.user_turns, []) AS user_turns,
       roots.replies IS NOT NULL OR t.replies IS NOT NULL OR t.reply IS NOT NULL AS has_content,
       length(coalesce(t.reply, t.replies[-1], roots.replies[-1])) AS reply_length,
       coalesce(tools.tool_calls, []) AS tool_calls,
       coalesce(models.model_calls, 0) AS model_calls,
       coalesce(models.input_tokens, 0) AS input_tokens,
       coalesce(models.output_tokens, 0) AS output_tokens,
       coalesce(retrievals.retrieved_ids, []) AS retrieved_ids,
       coalesce(retrievals.retrievals, 0) AS retrievals
FROM t
LEFT JOIN roots USING (trial_id)
LEFT JOIN tools USING (trial_id)
LEFT JOIN models USING (trial_id)
LEFT JOIN retrievals USING (trial_id)
ORDER BY t.trial_id
"""
"""``{trials}`` and ``{spans}`` are relations: registered Arrow tables at run time, store views when rescoring.
The trials' ``replies`` are the runner's own copy (run time), used when the spans hold no content
(capture switched off); rescoring has none (NULL), and ``has_content`` says whether any reply was known.
``reply_length`` counts the final reply as the trial row keeps it (``reply``: redacted and masked as the spans'
copy, but whole): the copy in the spans is cut at content capture's size limit. The root's messages are read with
try(): JSON cut short by an SDK's attribute length limit (production spans come from any instrumentation) is no
reply, not a failed batch."""

NO_REPLIES = "NULL::VARCHAR[] AS replies"
"""The trials' ``replies`` column when rescoring: the store keeps no copy beside the spans."""


def features_sql(trials: str, spans: str, root: str | None = None) -> str:
    """The feature query over the relations named (or subqueries given) for trials and spans. A trial's root span,
    whose output messages are its replies, is the runner's; ``root`` is another condition on the spans for it (a
    production trace's root, see :mod:`agenteval.scorers._traces`)."""
    return FEATURES_SQL.format(
        trials=trials,
        spans=spans,
        root=root or f"scope_name = '{A.RUNNER_SCOPE}'",
        counted_model_call=COUNTED_MODEL_CALL,
    )


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """One tool call of a trial, in order."""

    name: str
    arguments: str | None
    result: str | None
    error: bool


class FeatureColumns:
    """A batch of features, each column turned into Python only when a scorer first reads it."""

    def __init__(self, table: Any) -> None:
        self._table = table
        self._columns: dict[str, list[Any]] = {}

    def __len__(self) -> int:
        return self._table.num_rows

    @property
    def table(self) -> Any:
        """The feature query's result these columns read from."""
        return self._table

    def column(self, name: str) -> list[Any]:
        values = self._columns.get(name)
        if values is None:
            values = self._columns[name] = self._table.column(name).to_pylist()
        return values


class TrialFeatures:
    """What scorers know about one trial (read from its batch on first use)."""

    __slots__ = ("_columns", "_index")

    def __init__(self, columns: FeatureColumns, index: int) -> None:
        self._columns = columns
        self._index = index

    def _get(self, name: str) -> Any:
        return self._columns.column(name)[self._index]

    @property
    def experiment_id(self) -> str:
        return self._get("experiment_id")

    @property
    def trial_id(self) -> str:
        return self._get("trial_id")

    @property
    def case_id(self) -> str:
        return self._get("case_id")

    @property
    def attempt(self) -> int:
        return self._get("attempt")

    @property
    def trace_id(self) -> str | None:
        return self._get("trace_id")

    @property
    def root_span_id(self) -> str | None:
        """The trial's root span, which a judge's spans are parented to."""
        return self._get("root_span_id")

    @property
    def failure_type(self) -> str | None:
        return self._get("failure_type")

    @property
    def replies(self) -> tuple[str, ...]:
        """Every reply of the conversation, in order."""
        return tuple(r or "" for r in self._get("replies") or ())

    @property
    def user_turns(self) -> tuple[str, ...]:
        """Every user message of the conversation, in order, simulated ones included, as the trial's root span
        recorded them; empty when its content was not captured."""
        return tuple(u or "" for u in self._get("user_turns") or ())

    @property
    def reply(self) -> str:
        """The final reply ("" when there was none)."""
        replies = self._get("replies")
        return (replies[-1] or "") if replies else ""

    @property
    def reply_length(self) -> int:
        """Characters (code points) of the final reply as the agent gave it, before content capture's size
        limit cut the copy in the spans that :attr:`reply` reads; 0 when unknown."""
        return self._get("reply_length") or 0

    @property
    def has_content(self) -> bool:
        """Whether the replies are known (False when content capture was off and the trial is rescored)."""
        return bool(self._get("has_content"))

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(ToolCall(**call) for call in self._get("tool_calls") or ())

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(call["name"] for call in self._get("tool_calls") or ())

    @property
    def model_calls(self) -> int:
        return self._get("model_calls")

    @property
    def input_tokens(self) -> int:
        return self._get("input_tokens")

    @property
    def output_tokens(self) -> int:
        return self._get("output_tokens")

    @property
    def retrieved_ids(self) -> tuple[str, ...]:
        return tuple(self._get("retrieved_ids") or ())

    @property
    def retrievals(self) -> int:
        return self._get("retrievals")

    def __repr__(self) -> str:
        return f"TrialFeatures(trial_id={self.trial_id!r}, reply={self.reply!r}, tools={self.tool_names!r})"
