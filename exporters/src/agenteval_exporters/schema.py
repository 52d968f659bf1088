"""The span row: one flat Parquet row per span. Every reader in the project uses this schema.

Typed columns hold what queries filter and group by all the time; the full attribute set,
events and resource are kept as JSON text so nothing is lost. ``experiment_id`` is stored in
the file as well as in the partition path, so files read correctly with or without Hive
partitioning and by engines that ignore paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agenteval_instrumentation import attributes as A
from agenteval_instrumentation._lazy import built_on_first_use

if TYPE_CHECKING:
    import pyarrow as pa

    TIMESTAMP: pa.DataType
    SPAN_SCHEMA: pa.Schema

SCHEMA_VERSION = 5
"""The span table's version, bumped when a column is added; files of older versions still read
(readers union by name). 2: ``role``. 3 and 4 changed only the store's other tables, whose version
was shared then; those tables are versioned by the ``agenteval`` distribution now. 5: ``wraps_model_call``."""

SCHEMA_VERSION_KEY = b"agenteval.schema_version"
TABLE_KEY = b"agenteval.table"

UNIQUE_KEY = b"agenteval.unique_per_row"


def unique_field(name: str, type_: pa.DataType, nullable: bool = True) -> pa.Field:
    """A column whose values rarely repeat (ids, times, free text): Parquet writers skip dictionary
    encoding for it, which would cost time and bytes for nothing."""
    import pyarrow as pa

    return pa.field(name, type_, nullable=nullable, metadata={UNIQUE_KEY: b"true"})


def is_unique_field(field: pa.Field) -> bool:
    return bool(field.metadata and field.metadata.get(UNIQUE_KEY) in (b"true", DOCUMENT))


DOCUMENT = b"document"


def document_field(name: str, type_: pa.DataType | None = None) -> pa.Field:
    """A column of documents (JSON, replies, text by default): no dictionary encoding, and no min/max
    statistics, which would never let a reader skip a row group but cost time and bytes to write."""
    import pyarrow as pa

    return pa.field(name, type_ or pa.string(), metadata={UNIQUE_KEY: DOCUMENT})


def is_document_field(field: pa.Field) -> bool:
    return bool(field.metadata and field.metadata.get(UNIQUE_KEY) == DOCUMENT)


def _arrow_names() -> dict[str, Any]:
    import pyarrow as pa

    timestamp = pa.timestamp("ns", tz="UTC")
    span_schema = pa.schema(
        [
            unique_field("trace_id", pa.string(), nullable=False),
            unique_field("span_id", pa.string(), nullable=False),
            unique_field("parent_span_id", pa.string()),
            pa.field("name", pa.string(), nullable=False),
            pa.field("kind", pa.string(), nullable=False),
            unique_field("start_time", timestamp, nullable=False),
            unique_field("end_time", timestamp, nullable=False),
            unique_field("duration_ms", pa.float64(), nullable=False),
            pa.field("status_code", pa.string(), nullable=False),
            pa.field("status_message", pa.string()),
            pa.field("service_name", pa.string()),
            pa.field("scope_name", pa.string()),
            pa.field("operation", pa.string()),
            pa.field("provider", pa.string()),
            pa.field("request_model", pa.string()),
            pa.field("response_model", pa.string()),
            pa.field("input_tokens", pa.int64()),
            pa.field("output_tokens", pa.int64()),
            pa.field("finish_reason", pa.string()),
            pa.field("tool_name", pa.string()),
            pa.field("tool_call_id", pa.string()),
            pa.field("error_type", pa.string()),
            pa.field("experiment_id", pa.string()),
            pa.field("case_id", pa.string()),
            unique_field("trial_id", pa.string()),
            pa.field("attempt", pa.int32()),
            pa.field("role", pa.string()),
            pa.field("wraps_model_call", pa.bool_()),
            document_field("attributes"),
            document_field("events"),
            pa.field("resource", pa.string()),
        ],
        metadata={SCHEMA_VERSION_KEY: str(SCHEMA_VERSION).encode(), TABLE_KEY: b"spans"},
    )
    return {"TIMESTAMP": timestamp, "SPAN_SCHEMA": span_schema}


# PEP 562: a reader of the store that needs the versions and the partition rules, not the Arrow schema (a report
# reads through DuckDB), does not import pyarrow for them.
__getattr__ = built_on_first_use(__name__, _arrow_names, ("TIMESTAMP", "SPAN_SCHEMA"))


TYPED_ATTRIBUTES: dict[str, str] = {
    "operation": A.GEN_AI_OPERATION_NAME,
    "provider": A.GEN_AI_PROVIDER_NAME,
    "request_model": A.GEN_AI_REQUEST_MODEL,
    "response_model": A.GEN_AI_RESPONSE_MODEL,
    "input_tokens": A.GEN_AI_USAGE_INPUT_TOKENS,
    "output_tokens": A.GEN_AI_USAGE_OUTPUT_TOKENS,
    "finish_reason": A.GEN_AI_RESPONSE_FINISH_REASONS,
    "tool_name": A.GEN_AI_TOOL_NAME,
    "tool_call_id": A.GEN_AI_TOOL_CALL_ID,
    "error_type": A.ERROR_TYPE,
    "experiment_id": A.EXPERIMENT_ID,
    "case_id": A.CASE_ID,
    "trial_id": A.TRIAL_ID,
    "attempt": A.TRIAL_ATTEMPT,
    "role": A.ROLE,
    "wraps_model_call": A.WRAPS_MODEL_CALL,
}
"""Span column -> the attribute it is read from. ``finish_reason`` holds the first reason. For spans of other
instrumentations the attribute may have been derived from another name (see :mod:`.conventions`)."""

PARTITION_COLUMN = "experiment_id"
"""Spans with an experiment id go under ``experiment_id=<id>/``, others under ``date=YYYY-MM-DD/service=NAME/``."""
