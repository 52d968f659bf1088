"""Merging a partition's small files into one, atomically, while readers keep reading.

One compactor at a time per store: :func:`compact` holds the store's compaction lock, an OS lock
that dies with its process (:func:`~agenteval.store._store.compaction_lock`).

The merged file is built in a workspace beside the store (``<store>.compacting/``), out of reach of
any glob over the store, in a folder that stands in for the partition; then the two folders are
swapped in one step (``renameat2(RENAME_EXCHANGE)`` on Linux), so a reader sees either all the old
files or the merged one, never both (no double counting) and never neither. Files a live writer
published into the partition after the merge began are moved back at once. Where the folders
cannot be swapped (no ``renameat2``, or no folder beside the store on its file system), the merged
file is published and the old ones removed right after; the workspace is then ``<store>/.compacting/``
and holds nothing that ends in ``.parquet``.

Before the swap, the workspace records what it merged (:data:`MANIFEST`). A compaction killed at
any step is finished or rolled back by the next compaction or opening of the store (:func:`recover`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agenteval_exporters.files import STAGED_SUFFIX, exchange, fsync_dir, new_file_name, write_parquet
from agenteval_exporters.storefs import RemoteRoot, StoreRoot, duckdb_literal
from agenteval_instrumentation.masking import masked_logger

from . import _schemas
from ._duplicates import SPANS, SpanCopies, duplicated_partitions
from ._schemas import SCHEMA_FILE_PREFIX, TABLE_NAMES
from ._snapshots import refresh_figures
from ._store import Store, StoreBusy, compaction_lock

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

# pyarrow is imported where files are merged: opening the store imports this module to recover (see recover).
logger = masked_logger(__name__)

COMPACT_WAIT_SECONDS = 300.0
"""How long an explicit compaction waits for another one of the same store before giving up."""

WORKSPACES = ".compacting"
"""Beside the store (``<store>.compacting``) or, failing that, inside it (``<store>/.compacting``)."""

REPLACEMENT = "partition"
"""The workspace's folder that stands in for the partition, and holds the old files after the swap."""

MANIFEST = "compaction.json"
"""A workspace's record of the compaction: written before the swap, read by :func:`recover`."""


@dataclasses.dataclass
class CompactionResult:
    """What one compaction did; ``skipped`` when another compaction of the store was running."""

    partitions: int = 0
    files_before: int = 0
    files_after: int = 0
    rows: int = 0
    skipped: bool = False
    partitions_skipped: int = 0
    """Left as they were because a file could not be read (see ``agenteval doctor``)."""
    partitions_taken: int = 0
    """Compacted meanwhile by another compaction (on object storage, one that took the store's lease while this
    one could not renew it): nothing lost, nothing left to do."""
    partitions_unwritten: int = 0
    """Left as they were because their merged copy could not be written (a full disk, a file size limit)."""
    write_error: OSError | None = None
    """The last error writing a merged copy, when one could not be written."""
    figures_refreshed: list[str] = dataclasses.field(default_factory=list)
    """Experiments whose saved figures the compaction put out of date, saved again (see :mod:`._snapshots`)."""
    copies_dropped: int = 0
    """Span rows left out because the partition held another row of the same ``(trace_id, span_id)``: the same span
    stored twice (see :mod:`._duplicates`). ``rows`` is what was written, so rows read = ``rows`` + this."""

    def merged(self, files: int, rows: int, copies_dropped: int = 0) -> None:
        """Count a partition whose ``files`` were merged into one (none: it had one file or none), writing ``rows``
        and leaving out ``copies_dropped``."""
        if files:
            self.partitions += 1
            self.files_before += files
            self.files_after += 1
            self.rows += rows
            self.copies_dropped += copies_dropped

    def left_unreadable(self, where: object, error: Exception, store: object) -> None:
        """Count a partition left as it was because a file could not be read, and say what to do."""
        # An unreadable file must not cost the rest of the store its compaction (nor a run its end).
        logger.warning(
            "agenteval: left %s as it is: %s. Run `agenteval doctor --store %s` to set unreadable files aside",
            where,
            error,
            store,
        )
        self.partitions_skipped += 1

    def left_unwritten(self, where: object, error: OSError) -> None:
        """Count a partition left as it was because its merged copy could not be written: no file of it is at fault,
        so the doctor has nothing to do; space has to be freed."""
        logger.warning("agenteval: left %s as it is: its merged copy could not be written: %s", where, error)
        self.partitions_unwritten += 1
        self.write_error = error

    def taken_over(self, where: object) -> None:
        """Count a partition another compaction merged while this one was merging it (its merge is dropped)."""
        logger.info("agenteval: %s was compacted meanwhile by another compaction; nothing to do here", where)
        self.partitions_taken += 1


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns: missing ones (older files) filled with nulls."""
    import pyarrow as pa

    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:  # a column older files lack cannot stay declared non-nullable
        schema = pa.schema([f.with_nullable(True) for f in schema], metadata=schema.metadata)
    columns = [
        _column_as(table, f) if f.name in table.column_names else pa.nulls(table.num_rows, f.type) for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def _column_as(table: pa.Table, field: pa.Field) -> pa.ChunkedArray:
    """``table``'s column of ``field``'s name, of its type and without nulls if it takes none. Cast only when the
    type differs (an older file): a cast loads pyarrow.compute, 8 MB that a run's compaction need not hold."""
    column = table.column(field.name)
    if not field.nullable and column.null_count:
        raise ValueError(f"column {field.name} is declared non-nullable but contains nulls")
    return column if column.type == field.type else column.cast(field.type)


ROW_GROUP_BYTES = 8 * 1024 * 1024
"""Rows gathered per row group, by their size in memory (about 15,000 of the mock agent's spans).
Writing a row group holds about five times this in memory (with 24 MB, compaction set the peak of
a 100,000-trial run); queries over 8 MB row groups took the same time as over 24 MB ones."""


def _row_groups(
    files: list[Path] | list[str], schema: pa.Schema, filesystem: Any = None, copies: SpanCopies | None = None
) -> Iterator[pa.Table]:
    """The files' rows, conformed to ``schema``, gathered into row groups of about ROW_GROUP_BYTES (``filesystem``:
    an fsspec file system the files are on, for a store on object storage), without the rows ``copies`` leaves out."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    gathered: list[pa.Table] = []
    size = 0
    for index, path in enumerate(files):
        # One thread, no read-ahead: a small file gains nothing from either, and both raise the peak.
        # ParquetFile rather than read_table, which imports pyarrow.dataset (6 MB) for a single file.
        with pq.ParquetFile(path, pre_buffer=False, filesystem=filesystem) as parquet:
            part = conform(parquet.read(use_threads=False), schema)
        if copies is not None:
            part = copies.leave_out(index, part)
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
    return sorted(p for p in folder.glob("*.parquet") if not p.name.startswith(SCHEMA_FILE_PREFIX))


# Workspaces.


def workspace_homes(root: Path, name: str = WORKSPACES) -> tuple[Path, Path]:
    """(beside the store, inside it): where compactions (``name``: :data:`WORKSPACES`) and prunes of ``root`` keep
    their workspaces."""
    resolved = root.resolve()
    return resolved.parent / f"{resolved.name}{name}", root / name


@dataclasses.dataclass
class _Manifest:
    table: str
    partition: str  # the partition folder, relative to the table's (``date=.../service=...`` when nested)
    merged: list[str]  # the files merged, by name
    result: str  # the merged file's name in the partition

    def save(self, workspace: Path) -> None:
        staged = workspace / f"{MANIFEST}{STAGED_SUFFIX}"
        staged.write_text(json.dumps(dataclasses.asdict(self)))
        with open(staged, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(staged, workspace / MANIFEST)
        fsync_dir(workspace)

    @classmethod
    def load(cls, workspace: Path) -> _Manifest | None:
        try:
            return cls(**json.loads((workspace / MANIFEST).read_text()))
        except (OSError, ValueError, TypeError):
            return None


def workspace_home(root: Path, name: str = WORKSPACES) -> tuple[Path, bool]:
    """Where a workspace named ``name`` goes, and whether that is beside the store (out of every glob over it,
    on its file system, so a store's folder can be renamed there); else inside the store (not made here)."""
    beside, inside = workspace_homes(root, name)
    with contextlib.suppress(OSError):
        beside.mkdir(exist_ok=True)
        if beside.stat().st_dev == root.stat().st_dev:
            return beside, True
        beside.rmdir()  # another file system: renames from there would fail
    return inside, False


def _new_workspace(root: Path) -> tuple[Path, bool]:
    """A fresh workspace, and whether it is beside the store, where the partition's folder can be swapped with it."""
    home, beside = workspace_home(root)
    return _fresh(home), beside


def _fresh(home: Path) -> Path:
    workspace = home / uuid.uuid4().hex
    (workspace / REPLACEMENT).mkdir(parents=True)
    return workspace


def _remove_workspace(workspace: Path) -> None:
    shutil.rmtree(workspace, ignore_errors=True)
    with contextlib.suppress(OSError):  # the home too, once no compaction uses it
        workspace.parent.rmdir()


# Compaction.


def partition_folders(table_root: Path) -> list[Path]:
    """The folders of a table that hold a partition's files: ``experiment_id=<id>/``, or nested as production
    spans and their scores are (``date=<day>/service=<name>/``). A folder holding files beside sub-folders (a
    day of spans written before services had folders of their own, with newer ones beside) is left as it is:
    swapping it would hide its sub-folders for a moment."""
    found = []
    for path, folders, files in os.walk(table_root):
        folders.sort()
        here = Path(path)
        if here != table_root and not folders and any(f.endswith(".parquet") for f in files):
            found.append(here)
    return sorted(found)


class RowsMiscounted(RuntimeError):
    """A merged file whose rows, with the copies left out, are not the rows of the files merged: a bug. The
    partition is left as it was."""


def merged_schema(table: str, footers: list[pq.FileMetaData]) -> pa.Schema:
    """The schema of ``table``'s merged file: the table's, with every column nullable if a file merged (``footers``)
    lacks one (an older version's file)."""
    import pyarrow as pa

    schema = _schemas.TABLES[table]
    if any(set(schema.names) - set(footer.schema.to_arrow_schema().names) for footer in footers):
        schema = pa.schema([f.with_nullable(True) for f in schema], metadata=schema.metadata)
    return schema


def write_merged(
    staged: Path,
    files: list[Path] | list[str],
    schema: pa.Schema,
    footers: list[pq.FileMetaData],
    *,
    copies: SpanCopies | None,
    where: object,
    filesystem: Any = None,
) -> tuple[int, int]:
    """Write the rows of ``files`` (whose ``footers`` these are) into ``staged``, without the rows ``copies`` leaves
    out (:func:`span_copies`). Returns (rows written, copies left out), and raises :class:`RowsMiscounted` unless
    those add up to the rows the footers count; the caller publishes nothing then."""
    rows = write_parquet(staged, _row_groups(files, schema, filesystem, copies), schema)
    dropped = copies.dropped if copies else 0
    read = sum(footer.num_rows for footer in footers)
    if rows + dropped != read:
        raise RowsMiscounted(
            f"compacting {where}: read {read} rows, wrote {rows} and left out {dropped} copies; the partition was "
            "left as it was"
        )
    return rows, dropped


def compact_partition(store: Store, table: str, folder: Path, *, has_copies: bool = False) -> tuple[int, int, int]:
    """Merge ``folder``'s files into one; returns (files merged, rows written, copies dropped). With ``has_copies``
    (spans stored twice, see :mod:`._duplicates`) only the first row of each span is kept, also from a partition of
    one file. The caller holds the store's compaction lock."""
    files = _data_files(folder)
    if len(files) < (1 if has_copies else 2):
        return 0, 0, 0
    import pyarrow.parquet as pq

    footers = [pq.read_metadata(f) for f in files]
    schema = merged_schema(table, footers)
    assert isinstance(store.root, Path)  # a store on object storage is compacted by ._compact_remote
    workspace, beside = _new_workspace(store.root)
    replacement = workspace / REPLACEMENT
    name = new_file_name()
    # File names start with their publication time, so rows stay in time order without a global sort,
    # and memory is bounded by a row group, not by the partition.
    staged = replacement / f"{name}{STAGED_SUFFIX}"
    try:
        copies = span_copies(store.root, [str(f.absolute()) for f in files], workspace) if has_copies else None
        rows, dropped = write_merged(staged, files, schema, footers, copies=copies, where=folder)
    except RowsMiscounted:  # before the swap: nothing changed yet
        _remove_workspace(workspace)
        raise
    manifest = _Manifest(table, folder.relative_to(store.root / table).as_posix(), [f.name for f in files], name)
    manifest.save(workspace)
    if beside:  # out of every glob over the store: the merged file may take its final name here
        os.replace(staged, replacement / name)
    if beside and exchange(replacement, folder):
        # `replacement` now holds the old files, plus any a writer published meanwhile.
        _move_back_late_files(replacement, folder, manifest)
    else:
        # No atomic folder swap: publish, then remove the merged files.
        os.replace(replacement / name if beside else staged, folder / name)
        fsync_dir(folder)
        _remove_merged(folder, manifest)
    fsync_dir(folder)
    _remove_workspace(workspace)
    return len(files), rows, dropped


def _move_back_late_files(replacement: Path, folder: Path, manifest: _Manifest) -> None:
    """After the swap: files not merged go back to the partition, merged ones are deleted, and the emptied
    folder is removed. A writer that looked the partition's folder up just before the swap publishes into
    ``replacement`` whenever its move lands, also after the folder was listed: then the folder is not empty
    and is emptied again. Once it is removed, such a move finds no folder, and the writer publishes into the
    partition instead (``StagedFile._move_into``)."""
    merged = set(manifest.merged)
    while True:
        for path in replacement.iterdir():
            if path.name in merged:
                path.unlink()
            else:
                os.replace(path, folder / path.name)
        try:
            replacement.rmdir()
            return
        except OSError as exc:  # not empty: a file came in after the listing, which is listed again
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise


def _remove_merged(folder: Path, manifest: _Manifest) -> None:
    for name in manifest.merged:
        (folder / name).unlink(missing_ok=True)


def compact(
    store: Store,
    tables: list[str] | None = None,
    *,
    wait: float = COMPACT_WAIT_SECONDS,
    skip_if_busy: bool = False,
    save_missing_figures: bool = False,
    drop_span_copies: bool = False,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
) -> CompactionResult:
    """Compact every partition of ``tables`` (all tables by default) holding more than one file, then save
    again the figures of experiments that had them saved, so reports keep reading those; with
    ``save_missing_figures`` (``agenteval compact``) also of experiments that have none.

    ``drop_span_copies`` (``agenteval compact``) looks for spans stored twice (see :mod:`._duplicates`) in every
    spans partition, one file or more, and writes one row of each. Other compactions (a run's, collect's) leave them
    to it: the lookup groups every span of the partitions, which a compaction otherwise never holds at once.

    One compaction at a time per store: when another holds the store's lock, this one waits up to
    ``wait`` seconds and then raises :class:`StoreBusy`, or, with ``skip_if_busy`` (a run's own
    compaction at its end), returns at once with ``skipped`` set. A store folder that is not there raises
    :class:`NoStore`: compaction never creates one. ``on_progress(done, total)`` is told of the partitions gone
    through, on disk.
    """
    store.require()
    try:
        with compaction_lock(store.root, wait=0 if skip_if_busy else wait):
            _recover_locked(store.root)
            result = _compact_locked(store, tables, drop_span_copies, on_progress)
            if result.partitions or save_missing_figures:
                result.figures_refreshed = refresh_figures(store, missing=save_missing_figures)
            return result
    except StoreBusy:
        if not skip_if_busy:
            raise
        logger.info("agenteval: %s is being compacted by another process; skipping this compaction", store.root)
        return CompactionResult(skipped=True)


WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS})
"""Errors of writing a merged copy that no file of the partition is at fault for: they were told as an unreadable
file, with `agenteval doctor` to run, which found nothing."""


def _compact_locked(
    store: Store,
    tables: list[str] | None,
    drop_span_copies: bool = False,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
) -> CompactionResult:
    if isinstance(store.root, RemoteRoot):
        from ._compact_remote import compact_remote

        return compact_remote(store.root, tables or list(TABLE_NAMES), drop_span_copies)
    import pyarrow as pa

    result = CompactionResult()
    assert isinstance(store.root, Path)
    listed = [
        (table, partition_folders(store.root / table))
        for table in tables or list(TABLE_NAMES)
        if (store.root / table).is_dir()
    ]
    total, done = sum(len(folders) for _, folders in listed), 0
    on_progress(done, total)
    for table, folders in listed:
        with_copies = _folders_with_copies(store.root, folders) if table == SPANS and drop_span_copies else set()
        for folder in folders:
            try:
                merged = compact_partition(store, table, folder, has_copies=folder in with_copies)
            except (pa.ArrowException, OSError) as exc:
                if isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS:
                    result.left_unwritten(folder, exc)
                else:
                    result.left_unreadable(folder, exc, store.root)
                _recover_locked(store.root)  # drops this partition's workspace: it was never swapped
            else:
                result.merged(*merged)
            done += 1
            on_progress(done, total)
    return result


def _folders_with_copies(root: Path, folders: list[Path]) -> set[Path]:
    """The spans partitions among ``folders`` (of the store at ``root``) holding a span stored twice."""
    files = [str(f.absolute()) for folder in folders for f in _data_files(folder)]
    workspace, _ = _new_workspace(root)  # holds what DuckDB spills; recovery removes it if this is killed
    try:
        found = folders_with_copies(root, files, workspace)
    finally:
        _remove_workspace(workspace)
    return {folder for folder in folders if str(folder.absolute()) in found}


COPIES_MEMORY_LIMIT = "256MB"
"""DuckDB's memory for finding spans stored twice (:func:`folders_with_copies`, :func:`span_copies`), which groups
every span of the partitions; past it, DuckDB spills to disk. Without it, either query over a partition of 2,000,000
spans took 525 MB more than the process held before (about 270 bytes a span); with it, 310 MB more for 2,000,000
spans and for 4,000,000 alike. agenteval compact of such a partition peaked at 400 MB for both (it had held each span's
key in Python: 767 MB and 1,342 MB); the 2,000,000 took 22 s instead of 14, the 4,000,000 30 s instead of 35."""


@contextlib.contextmanager
def _copies_database(root: StoreRoot, scratch: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """A DuckDB database for looking for spans stored twice in ``root``'s files: within
    :data:`COPIES_MEMORY_LIMIT`, spilling into a folder made in ``scratch`` and removed with the database."""
    import tempfile

    from ._database import open_database

    with tempfile.TemporaryDirectory(prefix="copies-", dir=scratch) as spill:
        config = {"memory_limit": COPIES_MEMORY_LIMIT, "temp_directory": spill}
        with contextlib.closing(open_database(config=config)) as con:
            if isinstance(root, RemoteRoot):  # read through the store's file system (fsspec: imported only then)
                from ._listed_objects import register

                register(con, root)
            yield con


def _read_files(root: StoreRoot, files: list[str], *, row_numbers: bool = False) -> str:
    from ._views import sql_string

    # On disk, each name as a pattern matching only itself: DuckDB reads a name as a glob (see duckdb_literal).
    named = files if isinstance(root, RemoteRoot) else [duckdb_literal(f) for f in files]
    listed = "[" + ", ".join(sql_string(f) for f in named) + "]"
    return Store._read_parquet(listed, filename=True, row_numbers=row_numbers)


def folders_with_copies(root: StoreRoot, files: list[str], scratch: Path) -> set[str]:
    """The folders (as DuckDB names them: :func:`~agenteval_exporters.storefs.duckdb_path`) of spans ``files``
    (named so too) that hold a span stored twice, by one query over the files' key columns (spilling into
    ``scratch``). A file DuckDB cannot read leaves copies where they are: its partition is left as it was anyway,
    and ``agenteval doctor`` sets the file aside."""
    import duckdb

    if not files:
        return set()
    try:
        with _copies_database(root, scratch) as con:
            return set(duplicated_partitions(con, _read_files(root, files)))
    except duckdb.Error as exc:
        logger.warning("agenteval: could not look for spans stored twice: %s", exc)
        return set()


def span_copies(root: StoreRoot, files: list[str], scratch: Path) -> SpanCopies:
    """The rows of a spans partition's ``files`` (named as DuckDB names them, in the order they are merged) that
    repeat an earlier row's span (spilling into ``scratch``). Raises OSError when DuckDB cannot read them: the
    partition is left as it was, and ``agenteval doctor`` finds the file."""
    import duckdb

    try:
        with _copies_database(root, scratch) as con:
            return SpanCopies.of(con, _read_files(root, files, row_numbers=True), files)
    except duckdb.Error as exc:
        raise OSError(f"could not look for spans stored twice: {exc}") from exc


# Recovery.


def _pending(root: StoreRoot) -> list[Path]:
    """Workspaces left by compactions (a live one's too, unless the caller holds the lock); none on object
    storage, where a compaction killed half way leaves readers a consistent set (see :mod:`._live`)."""
    found: list[Path] = []
    if isinstance(root, RemoteRoot):
        return found
    for home in workspace_homes(root):
        with contextlib.suppress(OSError):  # no home, or a live compaction just removed it
            found += sorted(w for w in home.iterdir() if w.is_dir())
    return found


def recover(store: Store, wait: float = 0) -> int:
    """Finish or roll back compactions of ``store`` that were killed half way, and finish prunes killed after their
    rename (:func:`._prune.finish_earlier_prunes`); returns how many.

    Skipped (0) when another process holds the compaction lock for more than ``wait`` seconds:
    that compactor (or pruner) recovers before it starts.
    """
    from ._prune import prunes_left

    if not _pending(store.root) and not prunes_left(store.root):  # the usual case: no lock taken, nothing written
        return 0
    try:
        with compaction_lock(store.root, wait=wait):
            return _recover_locked(store.root)
    except StoreBusy:
        return 0
    except OSError:  # a store this user may read but not change: leave it to its owner
        logger.warning("agenteval: %s has an unfinished compaction (running, or killed half way)", store.root)
        return 0


def _recover_locked(root: StoreRoot) -> int:
    if isinstance(root, RemoteRoot):
        return 0
    from ._prune import finish_earlier_prunes

    pruned = finish_earlier_prunes(root)
    pending = _pending(root)
    for workspace in pending:
        manifest = _Manifest.load(workspace)
        if manifest is not None:
            _finish_or_roll_back(root, workspace, manifest)
        # No manifest: killed before the swap, so the partition was never touched.
        _remove_workspace(workspace)
    return len(pending) + pruned


def _finish_or_roll_back(root: Path, workspace: Path, manifest: _Manifest) -> None:
    folder = root / manifest.table / manifest.partition
    if not (folder / manifest.result).exists():
        logger.info("agenteval: rolling back a compaction of %s killed before its swap", folder)
        return  # the old files are all still in the partition; the merged copy goes with the workspace
    logger.info("agenteval: finishing a compaction of %s killed after its swap", folder)
    replacement = workspace / REPLACEMENT
    if replacement.is_dir():
        _move_back_late_files(replacement, folder, manifest)
    _remove_merged(folder, manifest)  # when the merged file was published without a swap
    fsync_dir(folder)
