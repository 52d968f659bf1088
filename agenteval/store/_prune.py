"""Retention of production traces: whole day partitions removed, experiments never touched.

A day's folder (``spans/date=<day>/``, or one service's ``date=<day>/service=<name>/``) is removed file by file, in
place: each file is deleted whole, and no file of the day is ever moved anywhere, so no glob (over a table, the
store, or the folder the store is in) reaches a file the store's views no longer count. A reader during the prune
sees each of the day's files or not, so part of a day being pruned, never a row twice. Its scores
(``scores/date=<day>/...``) go with it. The store's compaction lock is held throughout, so no compaction swaps a
folder being removed.

Moving the day's folder out of the store in one rename (what prune did) showed a reader the day whole or not at
all, but only as far as the tables' globs go: the folder went beside the store, where a glob over the store's parent
(``read_parquet('parent/**/*.parquet')``) still counted the day, until it was deleted or, after a killed prune, until
the next write. No rename can take a folder out of reach of every such glob, so prune deletes files instead.

Before deleting, a prune records the files it is deleting in a journal (``<store>/.pruning/<id>.json``, named so
that no Parquet glob matches it). A prune killed half way is finished by the next prune, compaction, doctor or
opening of the store for writing (:func:`finish_earlier_prunes`, from :func:`._compact.recover`): it deletes the
files the journal names, and no file published after them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import shutil
import uuid
from pathlib import Path
from urllib.parse import unquote

from agenteval_exporters.files import STAGED_SUFFIX, fsync_dir, partition_path
from agenteval_exporters.partitions import DATE_KEY, SERVICE_KEY, UNKNOWN_SERVICE
from agenteval_exporters.storefs import RemoteRoot, StoreRoot

from ..errors import UsageError
from ._compact import COMPACT_WAIT_SECONDS, workspace_homes
from ._store import Store, compaction_lock
from ._windows import ago

PRUNING = ".pruning"
"""Where prunes keep their journals: ``<store>/.pruning/`` (outside every table's glob; no ``.parquet`` in it)."""

JOURNAL_SUFFIX = ".json"

PRODUCTION_TABLES = ("spans", "scores")
"""The tables with production partitions: traces' spans and their scores."""

SERVICES_NAMED = 20
"""How many of the store's services a refused ``--service`` lists (a store may hold thousands)."""


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


def _measure(table: str, root: Path, folder: Path, files: list[Path]) -> PrunedPartition:
    import pyarrow.parquet as pq

    rows = 0
    for path in files:
        with contextlib.suppress(Exception):  # an unreadable file still goes; its rows are not known
            rows += pq.read_metadata(path).num_rows
    size = sum(p.stat().st_size for p in files)
    return PrunedPartition(table, folder.relative_to(root).as_posix(), len(files), rows, size)


def _remove(store_root: Path, table: str, folder: Path) -> PrunedPartition:
    """Delete ``folder``'s files one by one, after recording them in a journal, and the folders left empty; a file
    a writer publishes meanwhile stays in the store (counted by the next prune)."""
    files = _files(folder)
    journal = _Journal(store_root, [f.relative_to(store_root).as_posix() for f in files])
    journal.save()
    removed = _measure(table, store_root / table, folder, files)
    for path in files:
        _delete(path)
    _remove_empty_folders(store_root, [folder, *(f.parent for f in files)])
    journal.done()
    return removed


def _delete(path: Path) -> None:
    path.unlink(missing_ok=True)


def _remove_empty_folders(store_root: Path, folders: list[Path]) -> None:
    """``folders`` and their parents up to the table's own, where now empty (a day's last service gone takes its
    day's folder too); one a writer published into meanwhile is kept, and so are its parents."""
    for folder in sorted(set(folders), key=lambda f: len(f.parts), reverse=True):
        while folder.parent != store_root:  # the table's own folder stays
            try:
                folder.rmdir()
            except OSError:  # not empty, or gone already
                break
            folder = folder.parent


@dataclasses.dataclass
class _Journal:
    """The files one prune is deleting (relative to the store), saved before it deletes any."""

    store_root: Path
    files: list[str]
    path: Path = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.path = self.store_root / PRUNING / f"{uuid.uuid4().hex}{JOURNAL_SUFFIX}"

    def save(self) -> None:
        self.path.parent.mkdir(exist_ok=True)
        staged = self.path.with_name(self.path.name + STAGED_SUFFIX)
        with open(staged, "w") as handle:
            json.dump({"files": self.files}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(staged, self.path)
        fsync_dir(self.path.parent)

    def done(self) -> None:
        self.path.unlink(missing_ok=True)
        _remove_empty_homes(self.store_root)

    @staticmethod
    def finish(store_root: Path, path: Path) -> None:
        """Finish the prune that saved the journal at ``path`` and was killed."""
        try:
            named = json.loads(path.read_text())["files"]
        except (OSError, ValueError, KeyError, TypeError):  # killed while saving it: nothing was deleted yet
            named = []
        files = [store_root / f for f in named if _prunable(f)]
        for file in files:
            _delete(file)
        _remove_empty_folders(store_root, [f.parent for f in files])


def _prunable(relative: object) -> bool:
    """Whether a journal's entry names what a prune deletes: a Parquet file of a production table, inside the store.
    A journal is a file in the store like any other; whatever it says, finishing it deletes nothing else."""
    if not isinstance(relative, str) or not relative.endswith(".parquet"):
        return False
    parts = Path(relative).parts
    return not Path(relative).is_absolute() and ".." not in parts and len(parts) > 1 and parts[0] in PRODUCTION_TABLES


def _homes(store_root: Path) -> tuple[Path, Path]:
    """(beside the store, inside it): where prunes kept what they removed before they deleted in place (a killed
    one's leftovers may still be there) and, inside it, their journals."""
    return workspace_homes(store_root, PRUNING)


def _remove_empty_homes(store_root: Path) -> None:
    for home in _homes(store_root):
        with contextlib.suppress(OSError):  # not empty (another store's prune cannot share it), or absent
            home.rmdir()


def prunes_left(store_root: StoreRoot) -> list[Path]:
    """What prunes killed half way left: journals, and folders of prunes from before they deleted in place (a live
    prune's journal too, unless the caller holds the lock); none on object storage, which has no prune."""
    if isinstance(store_root, RemoteRoot):
        return []
    left: list[Path] = []
    for home in _homes(store_root):
        with contextlib.suppress(OSError):  # no home: the usual case
            left += sorted(home.iterdir())
    return left


def finish_earlier_prunes(store_root: StoreRoot) -> int:
    """Finish what prunes killed half way left; returns how many. The caller holds the store's compaction lock,
    which a live prune holds until it is done."""
    left = prunes_left(store_root)
    for path in left:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.name.endswith(JOURNAL_SUFFIX):
            assert isinstance(store_root, Path)
            _Journal.finish(store_root, path)
            path.unlink(missing_ok=True)
        else:
            path.unlink(missing_ok=True)
    if left and isinstance(store_root, Path):
        _remove_empty_homes(store_root)
    return len(left)


def _has_service_folder(store_root: Path, service: str) -> bool:
    """Whether any day of the production tables has a folder for ``service`` (of any age: the check is whether the
    name is right, not whether anything is old enough to go)."""
    folder = partition_path(SERVICE_KEY, service)
    return any(
        day_of(day_folder) is not None and (day_folder / folder).is_dir()
        for table in PRODUCTION_TABLES
        if (store_root / table).is_dir()
        for day_folder in (store_root / table).iterdir()
    )


def _production_services(store: Store) -> list[str]:
    """The services the store's production spans name, read from the rows (a folder's name may be cut and
    hashed, and files of days written before services had folders name none). Read-only: the caller holds the
    compaction lock, which a default connection's recovery would wait for."""
    sql = "SELECT DISTINCT coalesce(service_name, ?) AS service FROM spans WHERE experiment_id IS NULL ORDER BY 1"
    return store.query(sql, [UNKNOWN_SERVICE], read_only=True).column("service").to_pylist()


def _require_service(store: Store, service: str) -> None:
    """Refuse a ``--service`` that no production span has: a mistyped name removed nothing and said it ran. The
    folder check answers the usual case; the rows are read only when it finds none."""
    assert isinstance(store.root, Path)
    if _has_service_folder(store.root, service):
        return
    services = _production_services(store)
    if service in services:  # only in files written before services had folders
        return
    named = ", ".join(repr(s) for s in services[:SERVICES_NAMED])
    more = f" and {len(services) - SERVICES_NAMED} more" if len(services) > SERVICES_NAMED else ""
    held = f"it holds {named}{more}" if services else "it holds no production traces"
    raise UsageError(f"--service {service!r}: no production trace in the store has this service; {held}")


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
    cutoff = ago(older_than, now)
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
        if service is not None:
            _require_service(store, service)
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
                    result.partitions.append(_measure(table, root, target, _files(target)))
                    continue
                result.partitions.append(_remove(store_root, table, target))
    return result
