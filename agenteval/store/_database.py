"""The DuckDB databases agenteval opens, and the settings each one gets."""

from __future__ import annotations

from typing import Any

import duckdb

MEMORY_SETTINGS = {"allocator_bulk_deallocation_flush_threshold": "1MB"}
"""DuckDB's allocator keeps the pages a query frees for the next query, up to 512 MiB freed at once by default.
A run queries small batches as it goes and a report many small relations, so little of that is ever taken back:
handing back what any query freed past 1 MB lowered a 2,000-case run's peak by about 8 MB."""


def statement_settings(memory_limit: int) -> dict[str, str]:
    """The settings of a database that runs statements of people's own (a read-only connection): DuckDB's memory
    for a statement stops at ``memory_limit`` bytes, and none of it goes to temporary files instead (by default an
    in-memory database spills to ``.tmp`` in the working folder, up to 90% of the free disk): a statement past the
    limit fails rather than filling the disk, and a read writes nothing anywhere."""
    return {"memory_limit": f"{memory_limit}B", "temp_directory": "", "max_temp_directory_size": "0B"}


def open_database(database: str = ":memory:", config: dict[str, Any] | None = None) -> duckdb.DuckDBPyConnection:
    """A new DuckDB database (in memory unless ``database`` names a file) with agenteval's settings."""
    return duckdb.connect(database, config={**MEMORY_SETTINGS, **(config or {})})
