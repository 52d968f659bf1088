"""Arrow schemas of the store's tables, defined once. The span schema lives with its exporter."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agenteval_exporters import schema as span_schema
from agenteval_exporters.schema import SCHEMA_VERSION as SPAN_SCHEMA_VERSION
from agenteval_exporters.schema import SCHEMA_VERSION_KEY, TABLE_KEY, unique_field
from agenteval_instrumentation._lazy import built_on_first_use

if TYPE_CHECKING:
    import pyarrow as pa

    EXPERIMENTS: pa.Schema
    CASES: pa.Schema
    TRIALS: pa.Schema
    SCORES: pa.Schema
    REVIEWS: pa.Schema
    TABLES: dict[str, pa.Schema]

TABLES_VERSION = 4
"""The version of the store's own tables (experiments, cases, trials, scores), bumped when a column is
added; files of older versions still read (readers union by name). 3: the trials' usage of every try
(``*_all_tries``) apart from the try that counts. 4: the experiments' ``error`` (why a run failed).
The span table has its own version, with its exporter (``agenteval_exporters.SCHEMA_VERSION``)."""


def _schema(table: str, fields: list[pa.Field]) -> pa.Schema:
    import pyarrow as pa

    return pa.schema(fields, metadata={SCHEMA_VERSION_KEY: str(TABLES_VERSION).encode(), TABLE_KEY: table.encode()})


def _arrow_schemas() -> dict[str, pa.Schema]:
    import pyarrow as pa

    timestamp = span_schema.TIMESTAMP
    experiments = _schema(
        "experiments",
        [
            pa.field("experiment_id", pa.string(), nullable=False),
            pa.field("name", pa.string()),
            pa.field("dataset_name", pa.string()),
            pa.field("dataset_hash", pa.string()),
            pa.field("agent", pa.string()),
            pa.field("version", pa.string()),
            pa.field("options", pa.string()),  # JSON
            pa.field("status", pa.string(), nullable=False),
            pa.field("started_at", timestamp),
            pa.field("ended_at", timestamp),
            pa.field("updated_at", timestamp, nullable=False),  # a status change appends a row; newest wins
            pa.field("environment", pa.string()),  # JSON
            pa.field("prices", pa.string()),  # JSON
            pa.field("error", pa.string()),  # why the run failed (status failed); null otherwise
        ],
    )

    cases = _schema(
        "cases",
        [
            pa.field("experiment_id", pa.string(), nullable=False),
            pa.field("case_id", pa.string(), nullable=False),
            pa.field("line", pa.int64()),
            unique_field("input", pa.string()),
            pa.field("expected_output", pa.string()),
            pa.field("category", pa.string()),
            pa.field("difficulty", pa.string()),
            pa.field("tags", pa.list_(pa.string())),
            unique_field("case", pa.string()),  # the whole case as JSON
        ],
    )

    trials = _schema(
        "trials",
        [
            pa.field("experiment_id", pa.string(), nullable=False),
            unique_field("trial_id", pa.string(), nullable=False),
            pa.field("case_id", pa.string(), nullable=False),
            pa.field("attempt", pa.int32(), nullable=False),
            pa.field("trace_id", pa.string()),
            # As judged when the trial ran; the ``trials`` view judges by the current scores instead.
            pa.field("outcome", pa.string(), nullable=False),  # passed | wrong | failed
            pa.field("passed", pa.bool_(), nullable=False),
            pa.field("failure_type", pa.string()),
            pa.field("infrastructure", pa.bool_()),
            pa.field("error_message", pa.string()),
            unique_field("reply", pa.string()),
            unique_field("started_at", timestamp, nullable=False),
            unique_field("ended_at", timestamp, nullable=False),
            unique_field("duration_ms", pa.float64()),
            # Usage of the try that counts (whose answer was judged), and of every try, rate-limited ones included.
            # Files before schema version 3 have only the first three, holding every try (see store.views).
            pa.field("input_tokens", pa.int64()),
            pa.field("output_tokens", pa.int64()),
            pa.field("cost_usd", pa.float64()),
            pa.field("supersedes", pa.string()),  # a retried trial names the trial it replaces
            pa.field("input_tokens_all_tries", pa.int64()),
            pa.field("output_tokens_all_tries", pa.int64()),
            pa.field("cost_usd_all_tries", pa.float64()),
        ],
    )

    scores = _schema(
        "scores",
        [
            # Null for a score of a production trace, whose trial_id is then the trace's id (agenteval.scorers._traces).
            pa.field("experiment_id", pa.string()),
            pa.field("trial_id", pa.string(), nullable=False),
            pa.field("case_id", pa.string()),
            pa.field("scorer", pa.string(), nullable=False),
            pa.field("scorer_version", pa.string(), nullable=False),
            pa.field("pass_id", pa.string(), nullable=False),
            pa.field("value", pa.float64()),
            pa.field("passed", pa.bool_()),
            unique_field("reason", pa.string()),
            pa.field("error", pa.string()),
            pa.field("continuous", pa.bool_()),  # reported beside the pass rate, not part of passing
            pa.field("scored_at", timestamp, nullable=False),
        ],
    )

    reviews = _schema(
        "reviews",
        [
            pa.field("experiment_id", pa.string(), nullable=False),
            pa.field("trial_id", pa.string(), nullable=False),
            pa.field("case_id", pa.string(), nullable=False),
            pa.field("verdict", pa.string(), nullable=False),  # pass | fail: a person's judgement of the trial
            pa.field("note", pa.string()),
            pa.field("reviewer", pa.string()),  # who, as they named themselves; not authenticated
            pa.field("reviewed_at", timestamp, nullable=False),  # a new verdict appends a row; newest wins
        ],
    )
    # People's verdicts on trials (the dashboard's review page): shown beside the scorers' scores, exported as the
    # labels file ``agenteval judge-check`` reads.
    return {
        "experiments": experiments,
        "cases": cases,
        "trials": trials,
        "spans": span_schema.SPAN_SCHEMA,
        "scores": scores,
        "reviews": reviews,
    }


TABLE_NAMES = ("experiments", "cases", "trials", "spans", "scores", "reviews")
"""Every table of the store, in the order data flows into it (the keys of ``TABLES``, their Arrow schemas)."""


def _arrow_names() -> dict[str, Any]:
    tables = _arrow_schemas()
    if tuple(tables) != TABLE_NAMES:
        raise AssertionError(f"TABLE_NAMES {TABLE_NAMES} and the Arrow schemas {tuple(tables)} disagree")
    return {"TABLES": tables} | {table.upper(): tables[table] for table in TABLE_NAMES if table != "spans"}


# PEP 562: reading a store through DuckDB needs the tables' names and versions, not pyarrow, which costs a small
# report 0.1 to 0.3 s to import.
__getattr__ = built_on_first_use(
    __name__, _arrow_names, ("TABLES", "EXPERIMENTS", "CASES", "TRIALS", "SCORES", "REVIEWS")
)


TABLE_VERSIONS: dict[str, int] = {table: TABLES_VERSION for table in TABLE_NAMES} | {"spans": SPAN_SCHEMA_VERSION}
"""Each table's schema version: the one its files' metadata and its ``_schema-v<N>.parquet`` carry."""


SCHEMA_FILE_PREFIX = "_schema-v"


def schema_file(table: str) -> str:
    """The name of the empty file with ``table``'s current columns, in the table's folder: views have every
    column even on an empty store, and any engine reading the glob sees the newest columns beside older files."""
    return f"{SCHEMA_FILE_PREFIX}{TABLE_VERSIONS[table]}.parquet"
