"""Compaction of a store on object storage: merged files made live by a manifest, since there is no rename.

The steps, each one object write or delete, and what a reader sees after each (see :mod:`._live`): the merged
file is published as ``compacted-*.parquet`` (not read: no manifest names it); the partition's next manifest is
written (from now on readers take the merged file in place of the files it replaced); the replaced files and
older manifests are deleted (no reader takes them any more). The caller holds the store's compaction lease, so
leftovers of a compaction killed half way are deleted by the next one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from agenteval_exporters.files import STAGED_SUFFIX, new_file_name, staging_dir
from agenteval_exporters.storefs import RemoteFile, RemoteRoot, duckdb_path

from ._duplicates import SPANS
from ._live import (
    COMPACTED_PREFIX,
    MANIFEST_PREFIX,
    PUBLISHED_PREFIX,
    Partition,
    partition_files,
    table_partitions,
    write_manifest,
)
from ._schemas import SCHEMA_FILE_PREFIX

if TYPE_CHECKING:
    from ._compact import CompactionResult


def compact_remote(root: RemoteRoot, tables: list[str], drop_span_copies: bool = False) -> CompactionResult:
    """Compact every partition of ``tables`` holding more than one live file (the caller holds the lease); with
    ``drop_span_copies``, also spans partitions of one file holding a span stored twice, keeping one row of each
    (see :func:`._compact.compact`)."""
    from ._compact import CompactionResult

    result = CompactionResult()
    for table in tables:
        partitions = partition_folders(table_partitions(root, table))
        with_copies = _folders_with_copies(root, partitions) if table == SPANS and drop_span_copies else set()
        for partition in partitions:
            listed = partition.generation
            try:
                merged = compact_remote_partition(root, table, partition, has_copies=partition.folder in with_copies)
                result.merged(*merged)
            except (pa.ArrowException, OSError) as exc:  # the partition's live set is as it was (see ._live)
                if _compacted_since(root, partition.folder, listed):
                    result.taken_over(root / partition.folder)
                else:
                    result.left_unreadable(root / partition.folder, exc, root)
    return result


def partition_folders(partitions: list[Partition]) -> list[Partition]:
    """The partitions that hold a partition's files, as on disk (:func:`._compact.partition_folders`): below the
    table's own folder (its schema files), one folder (``experiment_id=<id>``) or nested (production spans' and
    their scores' ``date=<day>/service=<name>``), and with no partition below them (a day of spans written before
    services had folders of their own: a listing of it would take its services' files too)."""
    above = {p.folder.rsplit("/", depth)[0] for p in partitions for depth in range(1, p.folder.count("/") + 1)}
    return [p for p in partitions if "/" in p.folder and p.folder not in above]


def _folders_with_copies(root: RemoteRoot, partitions: list[Partition]) -> set[str]:
    """The folders of the spans ``partitions`` holding a span stored twice, by the lookup compaction on disk makes
    (over the live files, read through this listing)."""
    from ._compact import folders_with_copies
    from ._listed_objects import remember

    files = [f for partition in partitions for f in _data_files(partition)]
    remember(root, files)  # what DuckDB asks of these files is answered from the listing
    found = folders_with_copies(root, [duckdb_path(root, f.relative) for f in files], staging_dir(root))
    return {p.folder for p in partitions if duckdb_path(root, p.folder) in found}


def _data_files(partition: Partition) -> list[RemoteFile]:
    return [f for f in partition.live if not _name(f).startswith(SCHEMA_FILE_PREFIX)]


def _compacted_since(root: RemoteRoot, folder: str, generation: int) -> bool:
    """Whether another compaction wrote a newer manifest of the partition than the listed ``generation``: then a
    file this one was merging is gone because that one merged it, or its manifest took this one's place (the
    conditional write refused this one's). Only a compaction whose lease lapsed (stopped, or cut off from the
    store, past the lease's time) and another that took the lease over can race so."""
    try:
        return partition_files(root, folder).generation > generation
    except OSError:  # the store does not answer: say what happened as it was
        return False


def _name(file: RemoteFile) -> str:
    return file.relative.rpartition("/")[2]


def compact_remote_partition(
    root: RemoteRoot, table: str, partition: Partition, *, has_copies: bool = False
) -> tuple[int, int, int]:
    """Merge the partition's live files into one; returns (files merged, rows written, copies dropped). With
    ``has_copies`` only the first row of each span is kept, also from a partition of one file, which is replaced
    through a manifest as any merge is."""
    files = _data_files(partition)
    if len(files) < (1 if has_copies else 2):
        root.delete([f.relative for f in partition.dead])  # leftovers of a compaction killed half way
        return 0, 0, 0
    import pyarrow.parquet as pq

    # The same schema, reading, conforming, row groups and count check as on disk.
    from ._compact import merged_schema, span_copies, write_merged
    from ._listed_objects import ListedObjects, remember

    keys = [f"{root.path}/{f.relative}" for f in files]
    # Each file is read twice (its schema, then its rows): from the listing and the bytes kept, not a HEAD and a GET
    # each time (the small files are fetched together, once).
    remember(root, files)
    fs = ListedObjects(root.fs)
    footers = [pq.read_metadata(key, filesystem=fs) for key in keys]
    schema = merged_schema(table, footers)
    name = COMPACTED_PREFIX + new_file_name().removeprefix(PUBLISHED_PREFIX)
    staged = staging_dir(root) / f"{name}{STAGED_SUFFIX}"
    try:
        where = root / partition.folder
        named = [duckdb_path(root, f.relative) for f in files]
        copies = span_copies(root, named, staged.parent) if has_copies else None
        rows, dropped = write_merged(staged, keys, schema, footers, copies=copies, where=where, filesystem=fs)
        relative = f"{partition.folder}/{name}"
        root.put(staged, relative)
        merged_file = RemoteFile(relative, staged.stat().st_size, 0)
    finally:
        staged.unlink(missing_ok=True)
    previous = partition.generation
    older_manifest = f"{partition.folder}/{MANIFEST_PREFIX}{previous:012d}.json"
    # Replaced files a killed compaction left stay named as merged until they are gone.
    replaced = [f for f in files + partition.dead if f.relative.endswith(".parquet")]
    try:
        write_manifest(root, partition, [merged_file], [_name(f) for f in replaced])
    except FileExistsError:  # another compaction's manifest came first: this merged file is never read
        root.delete([relative])
        raise
    gone = [f.relative for f in files + partition.dead]
    root.delete(gone + ([older_manifest] if previous else []))
    return len(files), rows, dropped
