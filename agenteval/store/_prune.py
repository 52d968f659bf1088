"""Retention of production traces: whole day partitions removed at once, experiments never touched.

A day's folder (``spans/date=<day>/``, or one service's ``date=<day>/service=<name>/``) is first moved out of every
table's glob in one rename and deleted from there: a reader sees the whole partition or none of it, never part. Its
scores (``scores/date=<day>/...``) go with it. The store's compaction lock is held throughout, so no compaction swaps a
folder being removed.

The folder goes beside the store (``<store>.pruning/``), where compactions keep their workspaces: out of reach of any
glob over the store, ``<store>/**/*.parquet`` included, so a prune killed after its rename leaves nothing such a
query counts twice. Where nothing can be made beside the store on its file system, it goes to
``<store>/.pruning/``: out of every table's glob (the store's views), but a glob over the whole store reaches it
until it is deleted. Either way, what a killed prune left is deleted by the next prune, compaction, doctor or
opening of the store for writing (:func:`finish_earlier_prunes`, from :func:`._compact.recover`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import os
import shutil
import uuid
from pathlib import Path
from urllib.parse import unquote

from agenteval_exporters.files import fsync_dir, partition_path
from agenteval_exporters.partitions import DATE_KEY, SERVICE_KEY
from agenteval_exporters.storefs import RemoteRoot, StoreRoot

from ..errors import UsageError
from ._compact import COMPACT_WAIT_SECONDS, workspace_home, workspace_homes
from ._store import Store, compaction_lock

PRUNING = ".pruning"
"""Where removed partitions wait for deletion: beside the store (``<store>.pruning/``) or, failing that, inside it
(``<store>/.pruning/``, outside every table's glob)."""

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
    away = _rename_away(store_root, folder)
    fsync_dir(folder.parent)
    removed = _measure(table, away, away)
    removed.partition = folder.relative_to(store_root / table).as_posix()
    shutil.rmtree(away, ignore_errors=True)
    _remove_empty_homes(store_root)
    return removed


def _rename_away(store_root: Path, folder: Path) -> Path:
    """Rename ``folder`` into the prune's home, beside the store if it can be; returns where it went."""
    home, beside = workspace_home(store_root, PRUNING)
    if beside:
        try:
            return _rename_into(home, folder)
        except OSError as exc:
            # The same device number, yet another mount (a bind mount): the rename must stay inside the store.
            if exc.errno != errno.EXDEV:
                raise
        home = _homes(store_root)[1]
    return _rename_into(home, folder)


def _rename_into(home: Path, folder: Path) -> Path:
    home.mkdir(exist_ok=True)
    away = home / uuid.uuid4().hex
    os.replace(folder, away)
    return away


def _homes(store_root: Path) -> tuple[Path, Path]:
    """(beside the store, inside it): where prunes put what they remove."""
    return workspace_homes(store_root, PRUNING)


def _remove_empty_homes(store_root: Path) -> None:
    for home in _homes(store_root):
        with contextlib.suppress(OSError):  # not empty (another store's prune cannot share it), or absent
            home.rmdir()


def prunes_left(store_root: StoreRoot) -> list[Path]:
    """What prunes killed after their rename left (a live prune's too, unless the caller holds the lock); none on
    object storage, which has no prune."""
    if isinstance(store_root, RemoteRoot):
        return []
    left: list[Path] = []
    for home in _homes(store_root):
        with contextlib.suppress(OSError):  # no home: the usual case
            left += sorted(home.iterdir())
    return left


def finish_earlier_prunes(store_root: StoreRoot) -> int:
    """Delete what prunes killed after their rename left; returns how many folders. The caller holds the store's
    compaction lock, which a live prune holds until it has deleted what it moved."""
    left = prunes_left(store_root)
    for path in left:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if left and isinstance(store_root, Path):
        _remove_empty_homes(store_root)
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
