"""The DuckDB databases agenteval opens, and the settings some of them get."""

from __future__ import annotations

from typing import Any

import duckdb

SMALL_QUERIES = {"allocator_bulk_deallocation_flush_threshold": "1MB"}
"""Settings for a database that runs many small queries for a long time (a run's scoring of its micro-batches):
DuckDB's allocator hands back what a query freed past 1 MB, where by default it keeps up to 512 MiB for the next
query. A 2,000-case run peaked about 8 MB lower; over whole experiments it costs time (saving the figures of
1,000,000 trials took 3.6 s instead of 2.8 s), so other databases keep DuckDB's default."""


def statement_settings(memory_limit: int) -> dict[str, str]:
    """The settings of a database that runs statements of people's own (a read-only connection): DuckDB's memory
    for a statement stops at ``memory_limit`` bytes, and none of it goes to temporary files instead (by default an
    in-memory database spills to ``.tmp`` in the working folder, up to 90% of the free disk): a statement past the
    limit fails rather than filling the disk, and a read writes nothing anywhere."""
    return {"memory_limit": f"{memory_limit}B", "temp_directory": "", "max_temp_directory_size": "0B"}


def open_database(database: str = ":memory:", config: dict[str, Any] | None = None) -> duckdb.DuckDBPyConnection:
    """A new DuckDB database (in memory unless ``database`` names a file) with the settings of ``config`` (see
    :data:`SMALL_QUERIES` and :func:`statement_settings`)."""
    return duckdb.connect(database, config=config or {})
