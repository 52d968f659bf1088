"""Spans stored twice: rows of one span, the same ``(trace_id, span_id)``, in the store more than once.

An application whose ``setup_tracing()`` writes the store and whose OTLP endpoint is an ``agenteval collect`` writing
the same store sends each span both ways, and each way stores it (see docs/export.md). A span id is unique within its
trace in OpenTelemetry, so two rows with the same pair are one span recorded twice, and every count over traces
doubles. Both ways put a span in the same partition (its experiment, or its day and service), so a partition's own
files hold all its copies: ``agenteval doctor`` counts them with :func:`duplicated_partitions`, and compaction keeps
the first of each (:class:`FirstOfEachSpan`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

SPANS = "spans"
"""The only table with a key of its own to repeat; other tables' repeated rows mean other things (a rescore)."""

SPAN_KEY = ("trace_id", "span_id")


def duplicates_sql(read_parquet: str) -> str:
    """The query giving, for each partition folder holding copies, how many rows are copies (rows beyond one per
    span): ``read_parquet`` is a ``read_parquet(..., filename = true)`` call over spans files. It reads only the key
    columns and the file names, once."""
    # Grouping by the key and keeping the groups of more than one took half the time of count(DISTINCT (key)).
    key = ", ".join(SPAN_KEY)
    return f"""
SELECT folder, sum(rows - 1)::BIGINT AS copies
FROM (
    SELECT parse_dirpath(filename) AS folder, {key}, count(*) AS rows
    FROM {read_parquet} GROUP BY ALL HAVING rows > 1
) GROUP BY folder ORDER BY folder
"""


def duplicated_partitions(con: duckdb.DuckDBPyConnection, read_parquet: str) -> dict[str, int]:
    """{partition folder: rows that are copies of another row of it} over the files ``read_parquet`` reads."""
    return {folder: copies for folder, copies in con.execute(duplicates_sql(read_parquet)).fetchall()}


@dataclasses.dataclass
class FirstOfEachSpan:
    """A stream of row groups of one partition's spans with every row after the first of its ``(trace_id,
    span_id)`` left out, counting them in ``dropped``. Holds the keys seen, so it is used only for partitions that
    :func:`duplicated_partitions` found copies in."""

    dropped: int = 0
    _seen: set[tuple[str, str]] = dataclasses.field(default_factory=set)

    def filter(self, row_groups: Iterable[pa.Table]) -> Iterator[pa.Table]:
        import pyarrow as pa

        for rows in row_groups:
            keep = [self._first(key) for key in zip(*(rows.column(c).to_pylist() for c in SPAN_KEY), strict=True)]
            kept = keep.count(True)
            self.dropped += len(keep) - kept
            yield rows if kept == len(keep) else rows.filter(pa.array(keep, pa.bool_()))

    def _first(self, key: tuple[str, str]) -> bool:
        if key in self._seen:
            return False
        self._seen.add(key)
        return True
