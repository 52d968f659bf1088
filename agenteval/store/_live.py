"""Which files of a store on object storage are live: one consistent set for every reader, without renames.

On local disk a compaction swaps folders (see :mod:`._compact`). Object storage has no rename, so a partition
there says what it holds with a manifest, an object written last and never changed:

``<table>/<partition>/_manifest-<generation>.json`` = ``{"files": {name: size}, "merged": [names]}``

- Writers publish ``part-*.parquet`` files, as on disk, and never read a manifest.
- A compaction publishes its merged file as ``compacted-*.parquet``, then writes the next generation's manifest,
  whose ``files`` name it and whose ``merged`` name every file it replaced; then it deletes those files and the
  older manifests. Each step is one object write or delete.
- A reader lists the partition once and takes: the newest manifest's ``files``, and every ``part-*`` file not in
  its ``merged``. A ``compacted-*`` file no manifest names (a compaction killed before its manifest) is not read.

So a reader sees the old files up to the instant the manifest is written and the merged file from that instant
on, never both and never neither; a file it chose that a later compaction deleted is retried like a file a
swap moved on disk. A compaction killed at any step leaves the set readers see intact; the next one (under the
store's compaction lease) deletes what it left.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from typing import Any

from agenteval_exporters.storefs import RemoteFile, RemoteRoot

MANIFEST_PREFIX = "_manifest-"
COMPACTED_PREFIX = "compacted-"
PUBLISHED_PREFIX = "part-"


@dataclasses.dataclass
class Partition:
    """A partition of a remote table as listed now: the files a reader takes, and those left to delete."""

    folder: str
    """``<table>/<partition>`` relative to the store's root; ``<table>`` for files directly in the table."""
    generation: int = 0
    live: list[RemoteFile] = dataclasses.field(default_factory=list)
    dead: list[RemoteFile] = dataclasses.field(default_factory=list)


def _name(file: RemoteFile) -> str:
    return file.relative.rpartition("/")[2]


LISTING_TRIES = 5


def table_partitions(root: RemoteRoot, table: str) -> list[Partition]:
    """``table``'s partitions, each with its live files (in publication order) and its superseded ones."""
    for attempt in range(LISTING_TRIES):
        grouped: dict[str, list[RemoteFile]] = defaultdict(list)
        for file in root.list_files(table):
            grouped[file.relative.rpartition("/")[0]].append(file)
        try:
            return [_resolve(root, folder, files) for folder, files in sorted(grouped.items())]
        except FileNotFoundError:  # a manifest listed, then replaced by a newer one: list again
            if attempt == LISTING_TRIES - 1:
                raise
    raise AssertionError("unreachable")


def partition_files(root: RemoteRoot, folder: str) -> Partition:
    """One partition (``<table>/<partition>``) as listed now."""
    return _resolve(root, folder, root.list_files(folder))


def _resolve(root: RemoteRoot, folder: str, files: list[RemoteFile]) -> Partition:
    manifests = sorted((f for f in files if _name(f).startswith(MANIFEST_PREFIX)), key=_name)
    partition = Partition(folder, dead=manifests[:-1])
    named: dict[str, int] = {}
    merged: set[str] = set()
    if manifests:
        newest = manifests[-1]
        record = _manifest(root, newest.relative)
        named, merged = dict(record.get("files", {})), set(record.get("merged", []))
        partition.generation = int(_name(newest)[len(MANIFEST_PREFIX) :].partition(".")[0])
    listed = {_name(f): f for f in files if _name(f).endswith(".parquet")}
    for name, file in listed.items():
        if name.startswith(COMPACTED_PREFIX):
            (partition.live if name in named else partition.dead).append(file)
        elif name in merged:
            partition.dead.append(file)
        else:
            partition.live.append(file)
    # A file the manifest names is live even if this listing (paged, or taken a moment early) missed it.
    for name, size in named.items():
        if name not in listed:
            stamp = manifests[-1].modified_ns
            partition.live.append(RemoteFile(f"{folder}/{name}", size, stamp))
    partition.live.sort(key=lambda f: (not _name(f).startswith(COMPACTED_PREFIX), _name(f)))
    return partition


_MANIFESTS: dict[str, dict[str, Any]] = {}
"""Manifests read by this process, by URL: one is never changed once written (the next generation is a new
object), so a report over many partitions reads each manifest once, not on every connection."""


def _manifest(root: RemoteRoot, relative: str) -> dict[str, Any]:
    url = str(root / relative)
    known = _MANIFESTS.get(url)
    if known is None:
        raw = root.read_bytes(relative)
        if raw is None:  # replaced by a newer generation since it was listed
            raise FileNotFoundError(url)
        known = _MANIFESTS[url] = json.loads(raw)
    return known


def live_files(root: RemoteRoot, table: str) -> list[RemoteFile]:
    """Every file of ``table`` a reader takes now (see the module's documentation)."""
    return [file for partition in table_partitions(root, table) for file in partition.live]


def write_manifest(root: RemoteRoot, partition: Partition, files: list[RemoteFile], merged: list[str]) -> None:
    """Write ``partition``'s next manifest: from this write on, readers take ``files`` in place of ``merged``.
    A conditional write: if another compaction wrote this generation first, this one fails (``FileExistsError``)."""
    generation = partition.generation + 1
    record = {"files": {_name(f): f.size for f in files}, "merged": sorted(merged)}
    key = f"{partition.folder}/{MANIFEST_PREFIX}{generation:012d}.json"
    if not root.create(key, json.dumps(record).encode()):
        raise FileExistsError(f"{root / key} was written by another compaction")
    partition.generation = generation
