"""The embedded store: a folder of Hive-partitioned Parquet files, and DuckDB views over it."""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from agenteval_exporters.exporter import partition_by_experiment, store_path
from agenteval_exporters.files import STAGED_SUFFIX, publish, staging_dir, write_parquet
from agenteval_exporters.schema import SCHEMA_VERSION
from agenteval_exporters.writer import PartitionedWriter

from .lease import store_lease
from .schemas import TABLES
from .views import CURRENT_VIEWS, raw_table, sql_string, stored_trials

SCHEMA_FILE = f"_schema-v{SCHEMA_VERSION}.parquet"
"""An empty file with each table's current schema: views have every column even on an empty store,
and any engine reading the glob sees the newest columns beside older files."""

QUERY_RETRIES = 8
T = TypeVar("T")
logger = logging.getLogger(__name__)

COMPACTION_LEASE = "compaction"


class StoreBusy(TimeoutError):
    """Another process held the store's compaction lock for longer than the caller would wait."""


@contextlib.contextmanager
def compaction_lock(root: Path, wait: float) -> Iterator[None]:
    """Hold ``root``'s compaction lease (an OS lock that dies with its process); waits up to ``wait``
    seconds for another holder, then raises :class:`StoreBusy`."""
    lease = store_lease(root, COMPACTION_LEASE)
    if not lease.acquire(wait):
        raise StoreBusy(
            f"{root} is being compacted by {lease.holder()}; waited {wait:g} s. "
            "Run `agenteval compact` again once it has finished, or give it longer with --wait."
        )
    with lease:
        yield


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _vanished_file(exc: Exception) -> bool:
    """A file listed by the glob was gone when opened: a compaction swapped it; the retry sees the new one."""
    return any(text in str(exc) for text in ("No such file", "No files found", "Cannot open file"))


def _retry_vanished(run: Callable[[], T]) -> T:
    for attempt in range(QUERY_RETRIES):
        try:
            return run()
        except duckdb.IOException as exc:
            if attempt == QUERY_RETRIES - 1 or not _vanished_file(exc):
                raise
            time.sleep(0.005 * (attempt + 1))
    raise AssertionError("unreachable")


class Store:
    """A store folder (``--store``, else ``AGENTEVAL_STORE``, else ``./.agenteval``)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.root = store_path(path)

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    def ensure(self) -> None:
        """Create the table folders and their schema files if missing, and finish or roll back a
        compaction that was killed half way (see :func:`agenteval.store.compact.recover`)."""
        for table, schema in TABLES.items():
            folder = self.root / table
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / SCHEMA_FILE
            if not target.exists():
                staged = staging_dir(self.root) / f"{table}-{uuid.uuid4().hex}{STAGED_SUFFIX}"
                write_parquet(staged, schema.empty_table())
                os.replace(staged, target)
        from .compact import recover  # compact imports this module

        recover(self, wait=0)

    def glob(self, table: str) -> str:
        """The pattern that reads every file of ``table``."""
        return str(self.root / table / "**" / "*.parquet")

    def read_parquet_sql(self, table: str) -> str:
        # experiment_id is stored in every file, so Hive partitioning is not needed, and it would
        # fail here: DuckDB refuses one glob over experiment_id=... and date=... folders.
        return f"read_parquet({sql_string(self.glob(table))}, union_by_name = true, hive_partitioning = false)"

    def connect(self, database: str = ":memory:") -> duckdb.DuckDBPyConnection:
        """A DuckDB connection with views ``experiments``, ``cases``, ``trials``, ``spans``, ``scores`` (current:
        what reports give) and ``experiment_history``, ``trial_history``, ``score_history`` (every row as written)."""
        self.ensure()
        con = duckdb.connect(database)
        # Our commands show their own progress, or none. Only switched off when on: in a Jupyter kernel
        # without ipywidgets it is off already, and DuckDB refuses any change to it there.
        if con.execute("SELECT current_setting('enable_progress_bar')").fetchone()[0]:
            con.execute("SET enable_progress_bar = false")
        views = {raw_table(table): self._stored_sql(table) for table in TABLES} | CURRENT_VIEWS
        for name, sql in views.items():
            # Creating the view binds it, which opens the files to union their columns.
            _retry_vanished(
                lambda name=name, sql=sql: con.execute(f"CREATE OR REPLACE VIEW {quote_identifier(name)} AS {sql}")
            )
        return con

    def _stored_sql(self, table: str) -> str:
        read = self.read_parquet_sql(table)
        return stored_trials(read) if table == "trials" else f"SELECT * FROM {read}"

    def query(self, sql: str, parameters: Sequence[Any] | None = None) -> pa.Table:
        """Run ``sql`` over the views; retried when a compaction swapped files under it."""
        con = self.connect()
        try:
            return _retry_vanished(lambda: con.sql(sql, params=parameters or None).to_arrow_table())
        finally:
            con.close()

    def rows(self, sql: str, parameters: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        """:meth:`query` as a list of dicts (nanosecond timestamps as microsecond datetimes)."""
        from agenteval.tables import to_rows

        return to_rows(self.query(sql, parameters))

    def writer(self, table: str, *, max_rows: int = 100_000, flush_interval: float = 1.0) -> PartitionedWriter:
        """A buffered writer for one table, publishing by rows or by time."""
        return PartitionedWriter(
            self.root, table, TABLES[table], partition_by_experiment, max_rows=max_rows, flush_interval=flush_interval
        )

    def write(self, table: str, rows: pa.Table | list[dict[str, Any]]) -> list[Path]:
        """Publish ``rows`` at once, one file per experiment."""
        schema = TABLES[table]
        data = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=schema)
        data = data.cast(schema) if data.schema != schema else data
        written = []
        for batch in data.to_batches():
            for partition, part in partition_by_experiment(batch):
                written.append(publish(self.root, table, partition, pa.Table.from_batches([part], schema)))
        return written
