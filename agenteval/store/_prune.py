"""Retention of production traces: whole day partitions removed at once, experiments never touched.

A day's folder (``spans/date=<day>/``, or one service's ``date=<day>/service=<name>/``) is first moved out of every
table's glob in one rename, into ``<store>/.pruning/``, and deleted from there: a reader sees the whole partition or
none of it, never part. Its scores (``scores/date=<day>/...``) go with it. The store's compaction lock is held
throughout, so no compaction swaps a folder being removed; a prune killed after its rename is finished by the next.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import shutil
import uuid
from pathlib import Path
from urllib.parse import unquote

from agenteval_exporters.files import fsync_dir, partition_path
from agenteval_exporters.partitions import DATE_KEY, SERVICE_KEY

from ..errors import UsageError
from ._compact import COMPACT_WAIT_SECONDS
from ._store import Store, compaction_lock

PRUNING = ".pruning"
"""Where removed partitions wait for deletion: inside the store, outside every table's glob."""

PRODUCTION_TABLES = ("spans", "scores")
"""The tables with production partitions: traces' spans and their scores."""


@dataclasses.dataclass
class PrunedPartition:
    """One partition removed (or, in a dry run, that would be)."""

    table: str
    partition: str
    """Relative to the table's folder: ``date=<day>`` or ``date=<day>/service=<name>``."""
    files: int
    rows: int
    bytes: int


@dataclasses.dataclass
class PruneResult:
    """What a prune removed, or would remove (``dry_run``)."""

    cutoff: datetime.datetime
    """Days that ended by this instant were removed."""
    service: str | None
    dry_run: bool
    partitions: list[PrunedPartition] = dataclasses.field(default_factory=list)
    kept_unsorted: int = 0
    """With a service: files of days written before spans had a folder per service, which name no service
    and so were kept (a prune without ``--service`` removes them)."""

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.partitions)

    @property
    def files(self) -> int:
        return sum(p.files for p in self.partitions)


def day_of(folder: Path) -> datetime.date | None:
    """The day a ``date=YYYY-MM-DD`` folder holds, or None for any other folder."""
    key, sep, value = folder.name.partition("=")
    if key != DATE_KEY or not sep:
        return None
    try:
        return datetime.date.fromisoformat(unquote(value))
    except ValueError:
        return None


def _files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.parquet"))


def _measure(table: str, root: Path, folder: Path) -> PrunedPartition:
    import pyarrow.parquet as pq

    files = _files(folder)
    rows = 0
    for path in files:
        with contextlib.suppress(Exception):  # an unreadable file still goes; its rows are not known
            rows += pq.read_metadata(path).num_rows
    size = sum(p.stat().st_size for p in files)
    return PrunedPartition(table, folder.relative_to(root).as_posix(), len(files), rows, size)


def _remove(store_root: Path, table: str, folder: Path) -> PrunedPartition:
    """Move ``folder`` out of every glob in one rename, measure what it held then (a writer may have published
    into it until the rename), and delete it."""
    trash = store_root / PRUNING
    trash.mkdir(exist_ok=True)
    away = trash / uuid.uuid4().hex
    os.replace(folder, away)
    fsync_dir(folder.parent)
    removed = _measure(table, away, away)
    removed.partition = folder.relative_to(store_root / table).as_posix()
    shutil.rmtree(away, ignore_errors=True)
    return removed


def finish_earlier_prunes(store_root: Path) -> int:
    """Delete what a prune killed after its rename left in ``.pruning/``; returns how many folders."""
    trash = store_root / PRUNING
    if not trash.is_dir():
        return 0
    left = list(trash.iterdir())
    for path in left:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return len(left)


def prune(
    store: Store,
    older_than: datetime.timedelta,
    *,
    service: str | None = None,
    dry_run: bool = False,
    now: datetime.datetime | None = None,
    wait: float = COMPACT_WAIT_SECONDS,
) -> PruneResult:
    """Remove the production traces (and their scores) of every UTC day that ended more than ``older_than`` ago,
    of one ``service`` or all; experiments are never touched. ``dry_run`` only says what would go."""
    cutoff = (now or datetime.datetime.now(datetime.UTC)) - older_than
    result = PruneResult(cutoff, service, dry_run)
    store.require()
    store_root = store.root
    if not isinstance(store_root, Path):
        raise UsageError(
            f"agenteval prune works on a store on disk, not on {store_root}: on object storage, expire the "
            "spans/date=DAY/ and scores/date=DAY/ prefixes with the bucket's own lifecycle rules"
        )
    with compaction_lock(store_root, wait=wait, only_reading=dry_run):
        if not dry_run:
            finish_earlier_prunes(store_root)
        for table in PRODUCTION_TABLES:
            root = store_root / table
            if not root.is_dir():
                continue
            for day_folder in sorted(root.iterdir()):
                day = day_of(day_folder)
                if day is None or not day_folder.is_dir():
                    continue
                ends = datetime.datetime.combine(day + datetime.timedelta(days=1), datetime.time(), datetime.UTC)
                if ends > cutoff:
                    continue
                target = day_folder if service is None else day_folder / partition_path(SERVICE_KEY, service)
                if service is not None:
                    result.kept_unsorted += sum(1 for p in day_folder.glob("*.parquet"))
                if not target.is_dir():
                    continue
                if dry_run:
                    result.partitions.append(_measure(table, root, target))
                    continue
                result.partitions.append(_remove(store_root, table, target))
                if service is not None:
                    with contextlib.suppress(OSError):  # the day's last service gone: its folder too
                        day_folder.rmdir()
    return result
