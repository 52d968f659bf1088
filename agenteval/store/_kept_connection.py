"""A locked read-only connection of a store kept from one statement to the next, for a process that runs many
(the dashboard's SQL workers).

Opening a connection and making its views costs about 0.1 s on a small local store (DuckDB's database, then a bind
of each table's files), twenty times what a short statement takes. A view names what it reads, not what it read. On
disk that is a table's glob, which each statement expands again; a laid-out store's tables each hold a schema file,
so the glob always finds a file and the views never need making again. On object storage a view names the files
listed when it was made. So the connection is kept while the store's tables would give the same views, and made
again when they would not; a file compacted away under a statement is retried as :meth:`Store.retry_on` does. A
locked connection keeps nothing of one statement for the next: no setting can change, no table or macro be made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import duckdb

from ._limits import DEFAULT_MEMORY_LIMIT
from ._schemas import TABLE_NAMES
from ._store import Store

T = TypeVar("T")


class KeptConnection:
    """``Store.connect(read_only=True, memory_limit=...)``, opened at the first statement and kept while the store's
    tables would give the same views. One statement at a time; close it when done."""

    def __init__(self, store: Store, memory_limit: int = DEFAULT_MEMORY_LIMIT) -> None:
        self.store = store
        self.memory_limit = memory_limit
        self._con: duckdb.DuckDBPyConnection | None = None
        self._made_from: tuple[str | None, ...] | None = None

    def run(self, read: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """``read`` on the connection, again when a compaction replaced a file under it."""
        con = self.connection()
        return self.store.retry_on(con, lambda: read(con))

    def connection(self) -> duckdb.DuckDBPyConnection:
        """The kept connection, made again first when a table gained its first file or lost its last one (on
        object storage: when any listed file changed). Raises :class:`agenteval.store.NoStore` as ``connect``
        does."""
        sources = self._sources()
        if self._con is None or sources != self._made_from:
            self.close()
            self._con = self.store.connect(read_only=True, memory_limit=self.memory_limit)
            self._made_from = sources
        return self._con

    def _sources(self) -> tuple[str | None, ...]:
        return tuple(self.store._sources(table) for table in TABLE_NAMES)

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
            self._made_from = None

    def __enter__(self) -> KeptConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
