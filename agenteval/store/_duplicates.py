"""Spans stored twice: rows of one span, the same ``(trace_id, span_id)``, in the store more than once.

An application whose ``setup_tracing()`` writes the store and whose OTLP endpoint is an ``agenteval collect`` writing
the same store sends each span both ways, and each way stores it (see docs/export.md). A span id is unique within its
trace in OpenTelemetry, so two rows with the same pair are one span recorded twice, and every count over traces
doubles. Both ways put a span in the same partition (its experiment, or its day and service), so a partition's own
files hold all its copies: ``agenteval doctor`` counts them with :func:`duplicated_partitions`, and compaction keeps
the first of each (:class:`SpanCopies`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb
    import numpy
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


def copy_rows_sql(read_parquet: str) -> str:
    """The query giving every row of the files ``read_parquet`` reads (a ``read_parquet(..., filename = true,
    file_row_number = true)`` call) that repeats an earlier row's span, as ``file`` (its file's place in the list
    ``$files``, from 0) and ``row`` (its place in that file, from 0). Earlier: in the order of ``$files``, then of the
    rows in a file, the order compaction writes them in; so the first row of each span is kept."""
    key = ", ".join(SPAN_KEY)
    place = "list_position($files, filename)"
    return f"""
SELECT {place} - 1 AS file, file_row_number AS row
FROM {read_parquet}
QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY {place}, file_row_number) > 1
"""


@dataclasses.dataclass
class SpanCopies:
    """The rows to leave out of a partition's files: every row after the first of its ``(trace_id, span_id)``
    (:func:`copy_rows_sql`), by file; ``dropped`` counts those left out so far. The spans are grouped by DuckDB,
    within a memory limit, spilling to disk past it (``COPIES_MEMORY_LIMIT``): held in Python, a partition's keys took
    about 290 bytes a span (2,000,000 spans: 590 MB). Here a copy costs 8 bytes, and a span without one nothing."""

    rows: dict[int, numpy.ndarray]
    dropped: int = 0

    @classmethod
    def of(cls, con: duckdb.DuckDBPyConnection, read_parquet: str, files: list[str]) -> SpanCopies:
        """The copies among ``files`` (as ``read_parquet``, over those files in that order, names them)."""
        import numpy

        found = con.execute(copy_rows_sql(read_parquet), {"files": files}).fetchnumpy()
        by_file, rows = found["file"], found["row"]
        if len(by_file) and numpy.ma.is_masked(by_file):  # a file DuckDB names otherwise: a bug, not a copy
            raise ValueError(f"the lookup of spans stored twice named a file other than {files}")
        return cls({int(f): rows[by_file == f] for f in numpy.unique(by_file)})

    def leave_out(self, file: int, rows: pa.Table) -> pa.Table:
        """``rows``, all of the ``file``-th file's, without its copies."""
        copies = self.rows.get(file)
        if copies is None:
            return rows
        import numpy
        import pyarrow as pa

        keep = numpy.ones(rows.num_rows, dtype=bool)
        keep[copies] = False
        self.dropped += len(copies)
        return rows.filter(pa.array(keep, pa.bool_()))
