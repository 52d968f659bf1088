"""Per-trial features from a batch of trials and their spans: one DuckDB query, the same at run time
(over Arrow batches in memory) and when rescoring (over the store's Parquet files).

Only the agent's own spans of the try that counts are used: the trial row's ``trace_id`` names that
try (earlier tries were rate limited), and spans with a ``role`` (simulated user, judge) are left out.
"""

from __future__ import annotations

import dataclasses
from typing import Any

FEATURES_SQL = """
WITH t AS (SELECT experiment_id, trial_id, case_id, trace_id, failure_type, reply FROM {trials}),
s AS (
    SELECT s.* FROM {spans} s JOIN t ON s.trial_id = t.trial_id AND s.trace_id = t.trace_id
    WHERE s.role IS NULL
),
roots AS (
    SELECT trial_id,
           list_transform(
               from_json(json_extract_string(attributes, '$."gen_ai.output.messages"'),
                         '[{{"parts": [{{"content": "VARCHAR"}}]}}]'),
               lambda m: m.parts[1].content) AS replies
    FROM s WHERE scope_name = 'agenteval.runner'
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
    FROM s WHERE operation = 'chat' GROUP BY trial_id
),
retrievals AS (
    SELECT trial_id,
           flatten(list(from_json(json_extract(attributes, '$."agenteval.retrieval.document_ids"'), '["VARCHAR"]')
                        ORDER BY start_time, span_id)) AS retrieved_ids,
           count(*) AS retrievals
    FROM s WHERE operation = 'retrieval' GROUP BY trial_id
)
SELECT t.experiment_id, t.trial_id, t.case_id, t.failure_type,
       coalesce(roots.replies, CASE WHEN t.reply IS NULL THEN [] ELSE [t.reply] END) AS replies,
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
"""``{trials}`` and ``{spans}`` are relations: registered Arrow tables at run time, store views when rescoring."""


def features_sql(trials: str, spans: str) -> str:
    """The feature query over the relations named (or subqueries given) for trials and spans."""
    return FEATURES_SQL.format(trials=trials, spans=spans)


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """One tool call of a trial, in order."""

    name: str
    arguments: str | None
    result: str | None
    error: bool


@dataclasses.dataclass(frozen=True)
class TrialFeatures:
    """What scorers know about one trial."""

    experiment_id: str
    trial_id: str
    case_id: str
    failure_type: str | None
    replies: tuple[str, ...]
    tool_calls: tuple[ToolCall, ...]
    model_calls: int
    input_tokens: int
    output_tokens: int
    retrieved_ids: tuple[str, ...]
    retrievals: int

    @property
    def reply(self) -> str:
        """The final reply ("" when there was none)."""
        return self.replies[-1] if self.replies else ""

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(call.name for call in self.tool_calls)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> TrialFeatures:
        return cls(
            experiment_id=row["experiment_id"],
            trial_id=row["trial_id"],
            case_id=row["case_id"],
            failure_type=row["failure_type"],
            replies=tuple(r or "" for r in row["replies"] or ()),
            tool_calls=tuple(ToolCall(**call) for call in row["tool_calls"] or ()),
            model_calls=row["model_calls"],
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            retrieved_ids=tuple(row["retrieved_ids"] or ()),
            retrievals=row["retrievals"],
        )
