"""What a figure is read from, as a hash: the path, size and modification time of the files under a table's
folder that can hold one experiment's rows. Published files are never changed in place, so any write, compaction
or removal changes the hash (see :mod:`._snapshots`). Reads the folders only: no DuckDB, no Parquet."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from agenteval_exporters.files import partition_path
from agenteval_exporters.schema import PARTITION_COLUMN

SNAPSHOTS = ".snapshots"
"""The store's folder of saved figures (snapshots, saved reports); hidden, so no glob over the tables reads it."""

UNPARTITIONED_SPANS = "date="
"""Spans outside any experiment are partitioned by day; none of them belongs to an experiment."""


def files_fingerprint(
    root: Path, header: str, tables: Sequence[str], experiment_id: str | None, whole_tables: Sequence[str] = ()
) -> str:
    """A hash of ``header``, of every file of ``whole_tables``, and of the files of ``tables`` that can hold
    ``experiment_id``'s rows (with None, of every file of those tables too)."""
    own = None if experiment_id is None else partition_path(PARTITION_COLUMN, experiment_id)
    listings = [(table, source_files(root / table, None)) for table in whole_tables]
    listings += [(table, source_files(root / table, own)) for table in tables]
    return fingerprint_of(header, listings)


def fingerprint_of(header: str, listings: Iterable[tuple[str, Iterable[tuple[str, int, int]]]]) -> str:
    """The hash of ``header`` and of each table's files, given as (table, [(path, size, mtime), ...])."""
    digest = hashlib.sha256(f"{header}\n".encode())
    for table, files in listings:
        for path, size, modified in sorted(files):
            digest.update(f"{table}/{path}\0{size}\0{modified}\n".encode())
    return digest.hexdigest()[:24]


def source_files(folder: Path, own_partition: str | None) -> Iterator[tuple[str, int, int]]:
    """Every Parquet file under ``folder`` that can hold the rows of the experiment whose partition is
    ``own_partition`` (None: of any experiment): (relative path, size, mtime)."""
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        if entry.is_dir():
            elsewhere = (
                own_partition is not None
                and entry.name.startswith(f"{PARTITION_COLUMN}=")
                and entry.name != own_partition
            )
            if elsewhere or entry.name.startswith(UNPARTITIONED_SPANS):
                continue
            for path, size, modified in source_files(Path(entry.path), own_partition):
                yield f"{entry.name}/{path}", size, modified
        elif entry.name.endswith(".parquet"):
            with contextlib.suppress(FileNotFoundError):  # compacted away while listed: the listing changed anyway
                stat = entry.stat()
                yield entry.name, stat.st_size, stat.st_mtime_ns
