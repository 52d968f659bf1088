"""Merging a partition's small files into one, atomically, while readers keep reading.

The merged file is built in a staging folder that mirrors the partition; then the two folders
are swapped in one step (``renameat2(RENAME_EXCHANGE)`` on Linux), so a reader sees either all
the old files or the merged one, never both (no double counting) and never neither. Files
a live writer published into the partition after the merge began are moved back at once.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from agenteval_exporters.files import exchange, fsync_dir, new_file_name, staging_dir, write_parquet

from .schemas import TABLES
from .store import SCHEMA_FILE, Store

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class CompactionResult:
    """What one compaction did."""

    partitions: int = 0
    files_before: int = 0
    files_after: int = 0
    rows: int = 0


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns: missing ones (older files) filled with nulls."""
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:  # a column older files lack cannot stay declared non-nullable
        schema = pa.schema([f.with_nullable(True) for f in schema], metadata=schema.metadata)
    columns = [
        table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


ROW_GROUP_BYTES = 8 * 1024 * 1024
"""Rows gathered per row group, by their size in memory (about 15,000 of the mock agent's spans).
Writing a row group holds about five times this in memory (with 24 MB, compaction set the peak of
a 100,000-trial run); queries over 8 MB row groups took the same time as over 24 MB ones."""


def _row_groups(files: list[Path], schema: pa.Schema) -> Iterator[pa.Table]:
    """The files' rows, conformed to ``schema``, gathered into row groups of about ROW_GROUP_BYTES."""
    gathered: list[pa.Table] = []
    size = 0
    for path in files:
        # One thread, no read-ahead: a small file gains nothing from either, and both raise the peak.
        part = conform(pq.read_table(path, use_threads=False, pre_buffer=False), schema).cast(schema)
        gathered.append(part)
        size += part.nbytes
        if size >= ROW_GROUP_BYTES:
            yield pa.concat_tables(gathered)
            gathered, size = [], 0
            pa.default_memory_pool().release_unused()  # hand freed pages back rather than let the peak grow
    if gathered:
        yield pa.concat_tables(gathered)
    pa.default_memory_pool().release_unused()


def _data_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.parquet") if p.name != SCHEMA_FILE)


def compact_partition(store: Store, table: str, folder: Path) -> tuple[int, int]:
    """Merge ``folder``'s files into one; returns (files merged, rows)."""
    files = _data_files(folder)
    if len(files) < 2:
        return 0, 0
    schema = TABLES[table]
    if any(set(schema.names) - set(pq.read_schema(f).names) for f in files):
        schema = pa.schema([f.with_nullable(True) for f in schema], metadata=schema.metadata)
    workspace = staging_dir(store.root) / f"compact-{uuid.uuid4().hex}"
    replacement = workspace / folder.name
    replacement.mkdir(parents=True)
    # File names start with their publication time, so rows stay in time order without a global sort,
    # and memory is bounded by a row group, not by the partition.
    rows = write_parquet(replacement / new_file_name(), _row_groups(files, schema), schema)
    merged_names = {f.name for f in files}
    if exchange(replacement, folder):
        # `replacement` now holds the old files, plus any a writer published meanwhile.
        for late in _data_files(replacement):
            if late.name not in merged_names:
                os.replace(late, folder / late.name)
    else:
        # No atomic folder swap on this platform: publish, then remove the merged files.
        (new_file,) = _data_files(replacement)
        os.replace(new_file, folder / new_file.name)
        for f in files:
            f.unlink(missing_ok=True)
    fsync_dir(folder)
    shutil.rmtree(workspace, ignore_errors=True)
    return len(files), rows


def compact(store: Store, tables: list[str] | None = None) -> CompactionResult:
    """Compact every partition of ``tables`` (all tables by default) holding more than one file."""
    result = CompactionResult()
    for table in tables or list(TABLES):
        root = store.root / table
        if not root.is_dir():
            continue
        for folder in sorted(p for p in root.iterdir() if p.is_dir()):
            merged, rows = compact_partition(store, table, folder)
            if merged:
                result.partitions += 1
                result.files_before += merged
                result.files_after += 1
                result.rows += rows
    return result
