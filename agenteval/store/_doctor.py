"""``agenteval doctor``: find the store's unreadable Parquet files and set them aside, and spans stored twice.

One corrupt, truncated or empty file (a disk that filled up, a copy cut short, a file written by hand)
makes every query over its table fail, since the views read the whole table. The doctor reads every
file whole, moves those that fail into ``.quarantine/`` under the store (renamed so that no glob over
``*.parquet`` reaches them) and says what was lost, so the rest of the store reads again.

It also counts span rows that repeat another's ``(trace_id, span_id)`` (a span sent to the store both ways, see
:mod:`._duplicates`), which double every count over traces; ``agenteval compact`` keeps one row of each.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from agenteval_exporters.storefs import RemoteFile, RemoteRoot, StoreRoot

from ._compact import COMPACT_WAIT_SECONDS, conform
from ._duplicates import SPANS, duplicated_partitions
from ._prune import finish_earlier_prunes
from ._schemas import TABLES
from ._snapshots import SNAPSHOT_SUFFIX, snapshot_folders
from ._store import Store, compaction_lock

QUARANTINE = ".quarantine"
"""Where unreadable files go, under the store, each named ``<file>.unreadable``."""

_UNREADABLE = re.compile(
    r"File '(?P<path>[^']+\.parquet)' too small|No magic bytes found at end of file '(?P<path2>[^']+)'"
    r"|(?:Invalid|Corrupt|Couldn't deserialize)[^']*'(?P<path3>[^']+\.parquet)'",
    re.IGNORECASE,
)


@dataclasses.dataclass(frozen=True)
class UnreadableFile:
    """A file the doctor could not read, and what it held as far as can be told."""

    table: str
    path: StoreRoot
    bytes: int
    rows: int | None
    """From the file's footer when that could be read; None when nothing could be."""
    error: str
    moved_to: StoreRoot | None = None


@dataclasses.dataclass(frozen=True)
class DoctorReport:
    """What a check of the store found (and set aside, unless it was a dry run)."""

    files_checked: int
    unreadable: list[UnreadableFile]
    snapshots_removed: list[Path] = dataclasses.field(default_factory=list)
    """Saved report figures that could not be read, removed (not with a dry run): they are derived from the
    tables, so nothing is lost, and the next run, rescore or compaction saves them again."""
    span_copies: dict[str, int] | None = dataclasses.field(default_factory=dict)
    """{partition folder: span rows there that repeat another's ``(trace_id, span_id)``}; None when they could not
    be counted (a dry run that left unreadable files in place)."""

    @property
    def copies(self) -> int:
        return sum((self.span_copies or {}).values())

    @property
    def healthy(self) -> bool:
        return not self.unreadable


def unreadable_file_in(error: BaseException) -> str | None:
    """The path of the store file a DuckDB error says it could not read, if it says so."""
    found = _UNREADABLE.search(str(error))
    if found is None:
        return None
    return found.group("path") or found.group("path2") or found.group("path3")


def damaged_store_message(error: BaseException | None) -> str | None:
    """One line for an error caused by an unreadable store file (or wrapping one), naming the file and
    what to do; None for any other error."""
    while error is not None:
        found = unreadable_file_in(error)
        if found is not None:
            return (
                f"the store holds a file that cannot be read: {found}. Run `agenteval doctor` (with the same "
                "--store) to move unreadable files aside and see what they held."
            )
        error = error.__cause__
    return None


def doctor(
    store: Store,
    *,
    dry_run: bool = False,
    wait: float = COMPACT_WAIT_SECONDS,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
) -> DoctorReport:
    """Read every data file of the store; move unreadable ones to the quarantine (not with ``dry_run``).
    Holds the compaction lock meanwhile, so no compaction merges a file while it is examined. A store folder that is
    not there raises :class:`NoStore`. ``on_progress(done, total)`` is told of the files read, on disk."""
    store.require()
    with compaction_lock(store.root, wait=wait, only_reading=dry_run):
        if not dry_run:
            finish_earlier_prunes(store.root)  # a killed prune: the files its journal names still go
        checked, unreadable = 0, []
        if isinstance(store.root, RemoteRoot):
            for table in TABLES:
                found = _check_remote(store.root, table, dry_run)
                checked += found[0]
                unreadable += found[1]
        else:
            files = [(table, path) for table in TABLES for path in sorted((store.root / table).rglob("*.parquet"))]
            on_progress(0, len(files))
            for table, path in files:
                checked += 1
                problem = _check(table, path)
                if problem is not None:
                    unreadable.append(problem if dry_run else _quarantine(store.root, problem))
                on_progress(checked, len(files))
        damaged = [folder for folder in snapshot_folders(store) if not _readable(folder)]
        if not dry_run:
            for folder in damaged:
                shutil.rmtree(folder, ignore_errors=True)
        copies = None if dry_run and unreadable else _span_copies(store)
    return DoctorReport(checked, unreadable, damaged, copies)


def _span_copies(store: Store) -> dict[str, int] | None:
    """The spans stored twice, by partition: one query over the key columns of every spans file (read-only: the
    doctor holds the compaction lock, which a default connection's recovery would wait for)."""
    sources = store._sources(SPANS)
    if sources is None:
        return {}
    try:
        with contextlib.closing(store.connect(read_only=True, traces=False)) as con:
            return duplicated_partitions(con, store._read_parquet(sources, filename=True))
    except duckdb.Error:  # a file that fails to read now: the doctor has said what it could
        return None


def _readable(snapshot: Path) -> bool:
    try:
        for path in snapshot.glob(f"*{SNAPSHOT_SUFFIX}"):
            pq.read_table(path, use_threads=False, pre_buffer=False)
        return True
    except Exception:  # any way a file can fail to read
        return False


def _check(table: str, path: Path) -> UnreadableFile | None:
    try:
        _fits(table, pq.read_table(path, use_threads=False, pre_buffer=False))
        return None
    except Exception as exc:  # any way a file can fail to read is what the doctor looks for
        return UnreadableFile(table, path, path.stat().st_size, _footer_rows(path), f"{type(exc).__name__}: {exc}")


def _fits(table: str, rows: pa.Table) -> None:
    """Raise unless ``rows`` take ``table``'s column types, as compaction casts them (missing columns are an older
    version's, and fine). A column of another type reads, but no compaction can merge its partition ever after,
    and it turns the view's column into text: set aside like a file that cannot be read at all."""
    schema = TABLES[table]
    try:
        conform(rows, pa.schema([f.with_nullable(True) for f in schema], metadata=schema.metadata))
    except pa.ArrowException as exc:
        raise ValueError(f"its columns do not fit the {table} table: {type(exc).__name__}: {exc}") from exc


def _footer_rows(path: Path | str, filesystem: Any = None) -> int | None:
    try:
        return pq.read_metadata(path, filesystem=filesystem).num_rows
    except Exception:
        return None


def _check_remote(root: RemoteRoot, table: str, dry_run: bool) -> tuple[int, list[UnreadableFile]]:
    """The doctor on object storage: every live file read whole; one that fails is copied to the quarantine and
    leaves the live set (deleted, or for a merged file, left out of a new manifest: see ``._live``)."""
    from ._live import COMPACTED_PREFIX, table_partitions, write_manifest

    checked, unreadable = 0, []
    for partition in table_partitions(root, table):
        bad: list[RemoteFile] = []
        for file in partition.live:
            checked += 1
            key = f"{root.path}/{file.relative}"
            try:
                _fits(table, pq.read_table(key, use_threads=False, pre_buffer=False, filesystem=root.fs))
                continue
            except Exception as exc:  # any way a file can fail to read is what the doctor looks for
                error = f"{type(exc).__name__}: {exc}"
            problem = UnreadableFile(table, root / file.relative, file.size, _footer_rows(key, root.fs), error)
            if not dry_run:
                target = f"{QUARANTINE}/{file.relative}.unreadable"
                root.write_bytes(target, root.read_bytes(file.relative) or b"")
                problem = dataclasses.replace(problem, moved_to=root / target)
                bad.append(file)
            unreadable.append(problem)
        if any(f.relative.rpartition("/")[2].startswith(COMPACTED_PREFIX) for f in bad):
            # A manifest names it: the next one leaves it out (and keeps out what the last one replaced).
            kept = [
                f for f in partition.live if f not in bad and f.relative.rpartition("/")[2].startswith(COMPACTED_PREFIX)
            ]
            replaced = [f.relative.rpartition("/")[2] for f in partition.dead if f.relative.endswith(".parquet")]
            write_manifest(root, partition, kept, replaced)
        root.delete([f.relative for f in bad])
    return checked, unreadable


def _quarantine(root: StoreRoot, problem: UnreadableFile) -> UnreadableFile:
    assert isinstance(root, Path) and isinstance(problem.path, Path)  # on object storage: _check_remote
    target = root / QUARANTINE / problem.path.relative_to(root)
    target = target.with_name(target.name + ".unreadable")
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(problem.path, target)
    return dataclasses.replace(problem, moved_to=target)
