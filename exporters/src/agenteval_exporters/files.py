"""Publishing Parquet files atomically into a Hive-partitioned folder, and swapping partitions.

A file is written under ``<root>/.staging/`` (outside every table's glob) with a name ending in
:data:`STAGED_SUFFIX`, flushed, fsynced and closed, then moved into place with ``os.replace`` and its
folder fsynced. A reader therefore never sees a partial file, and ``kill -9`` at any moment leaves at
most an orphan in staging. Only published files end in ``.parquet``: a glob over the whole store
(``<root>/**/*.parquet``) never reaches a file being written.

A store on object storage (:class:`~.storefs.RemoteRoot`) stages on local disk the same way and publishes with
one object write instead of the move (see :mod:`.storefs`).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from agenteval_instrumentation.masking import masked_logger

from .schema import is_document_field, is_unique_field
from .storefs import RemoteRoot, StoreRoot, local_home

if TYPE_CHECKING:
    import pyarrow as pa

logger = masked_logger(__name__)

STAGING = ".staging"
STAGED_SUFFIX = ".partial"
"""How a file being written ends its name: never ``.parquet``, which only published files use."""
STALE_STAGING_SECONDS = 3600
PUBLISH_ATTEMPTS = 20
"""How often a file is moved into a partition folder that a concurrent prune keeps renaming away."""


MAX_SEGMENT_BYTES = 200
"""The longest ``key=value`` folder name: file systems allow 255 bytes a name, and a file's own name is separate."""


def partition_path(key: str, value: str) -> str:
    """``key=value`` with the value escaped so that any id is one safe path segment.

    Escaping multiplies non-ASCII text by up to 9 (a service name of 28 Chinese characters passed 255 bytes),
    and a folder name the file system refuses meant spans that were acknowledged and never written. A longer
    value is cut, and a hash of the whole keeps distinct values in distinct folders; nothing reads the value
    back from the path (the rows hold it)."""
    escaped = quote(value, safe="")
    if len(key) + 1 + len(escaped) <= MAX_SEGMENT_BYTES:
        return f"{key}={escaped}"
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    cut = escaped[: MAX_SEGMENT_BYTES - len(key) - 2 - len(digest)]
    if "%" in cut[-2:]:  # not half an escape
        cut = cut[: cut.rindex("%")]
    return f"{key}={cut}~{digest}"


def new_file_name() -> str:
    """Sortable by time, unique across processes."""
    return f"part-{time.time_ns()}-{uuid.uuid4().hex[:12]}.parquet"


def staging_dir(root: StoreRoot) -> Path:
    """Where files are written before they are published: in the store, or for a store on object storage, a
    folder of this machine's."""
    path = local_home(root, "staging") if isinstance(root, RemoteRoot) else root / STAGING
    path.mkdir(parents=True, exist_ok=True)
    return path


def _parquet_writer(sink: Any, schema: pa.Schema) -> Any:
    """zstd; no dictionary for unique columns, no statistics for documents (see the schema's field helpers)."""
    # Imported here: pyarrow.parquet brings pyarrow's file systems (S3 and TLS included), which a process that
    # only reads a store through DuckDB never needs.
    import pyarrow.parquet as pq

    return pq.ParquetWriter(
        sink,
        schema,
        compression="zstd",
        use_dictionary=[field.name for field in schema if not is_unique_field(field)],
        write_statistics=[field.name for field in schema if not is_document_field(field)],
    )


def write_parquet(path: Path, table: pa.Table | Iterable[pa.Table], schema: pa.Schema | None = None) -> int:
    """Write ``table`` (or a stream of tables, one row group each) with zstd, and fsync; returns the rows.

    A stream keeps memory bounded by one row group however large the file; it needs ``schema``.
    """
    import pyarrow as pa  # here: a reader of the store, through DuckDB, needs the file rules only

    tables = [table] if isinstance(table, pa.Table) else table
    schema = table.schema if isinstance(table, pa.Table) else schema
    if schema is None:
        raise ValueError("write_parquet needs the schema of a stream of tables")
    rows = 0
    with open(path, "wb") as sink:
        with _parquet_writer(sink, schema) as writer:
            for part in tables:
                writer.write_table(part, row_group_size=max(1, part.num_rows))
                rows += part.num_rows
        sink.flush()
        os.fsync(sink.fileno())
    return rows


def write_to_memory(table: pa.Table) -> pa.Buffer:
    """``table`` as the Parquet bytes a file of it would hold (same writer settings), in memory."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with _parquet_writer(sink, table.schema) as writer:
        writer.write_table(table, row_group_size=max(1, table.num_rows))
    return sink.getvalue()


def fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every platform lets a folder be fsynced
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class StagedFile:
    """A Parquet file written under ``<root>/.staging/`` a row group at a time, then published
    into ``<root>/<table_name>/<partition>/`` in one atomic move (or abandoned)."""

    def __init__(self, root: StoreRoot, table_name: str, schema: pa.Schema) -> None:
        self.root = root
        self.table_name = table_name
        self.path = staging_dir(root) / f"{table_name}-{uuid.uuid4().hex}{STAGED_SUFFIX}"
        self.rows = 0
        self._sink = open(self.path, "wb")  # closed by publish or abandon
        try:
            self._writer = _parquet_writer(self._sink, schema)
        except BaseException:
            self.abandon()
            raise

    def write(self, table: pa.Table) -> None:
        """Append ``table`` as one row group."""
        self._writer.write_table(table, row_group_size=max(1, table.num_rows))
        self.rows += table.num_rows

    def publish(self, partition: str) -> StoreRoot:
        """Finish the file, fsync it, and move it into place; on failure the staged file is removed."""
        try:
            self._writer.close()
            self._sink.flush()
            os.fsync(self._sink.fileno())
            self._sink.close()
            if isinstance(self.root, RemoteRoot):
                return self._upload(self.root, partition)
            folder = self.root / self.table_name / partition
            final = self._move_into(folder)
        except BaseException:
            self.abandon()
            raise
        fsync_dir(folder)
        return final

    def _move_into(self, folder: Path) -> Path:
        """Move the finished file into ``folder``, made if missing. A prune may rename the folder away between
        its creation and the move (a late span of a day being pruned): the move then finds no folder (or the
        creation finds one that is gone when checked), and the file goes into a new one instead of being lost."""
        for _ in range(PUBLISH_ATTEMPTS - 1):
            with contextlib.suppress(FileNotFoundError, FileExistsError):
                return self._move_once(folder)
            if not self.path.exists():
                break
        return self._move_once(folder)

    def _move_once(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / new_file_name()
        os.replace(self.path, final)
        return final

    def _upload(self, root: RemoteRoot, partition: str) -> RemoteRoot:
        """One object write, atomic on the store; the local copy goes whether it succeeded or not."""
        relative = f"{self.table_name}/{partition}/{new_file_name()}"
        try:
            root.put(self.path, relative)
        finally:
            with contextlib.suppress(OSError):
                self.path.unlink()
        return root / relative

    def detach(self) -> None:
        """In a forked child: point this file's descriptor at ``/dev/null``, so that nothing the child
        does with its copy (closing it included) reaches the file the parent is still writing."""
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._sink.fileno())
        finally:
            os.close(devnull)

    def abandon(self) -> None:
        """Close and delete the staged file, ignoring errors (it is never visible to readers)."""
        for close in (getattr(self, "_writer", None), self._sink):
            with contextlib.suppress(Exception):
                if close is not None:
                    close.close()
        with contextlib.suppress(OSError):
            self.path.unlink()


def publish(root: StoreRoot, table_name: str, partition: str, table: pa.Table) -> StoreRoot:
    """Write ``table`` to ``<root>/<table_name>/<partition>/part-*.parquet`` atomically."""
    staged = StagedFile(root, table_name, table.schema)
    try:
        staged.write(table)
    except BaseException:
        staged.abandon()
        raise
    return staged.publish(partition)


def remove_stale_staging(root: StoreRoot, older_than: float = STALE_STAGING_SECONDS) -> int:
    """Delete staging leftovers of crashed writers; recent ones may belong to a live writer."""
    folder = staging_dir(root) if isinstance(root, RemoteRoot) else root / STAGING
    if not folder.is_dir():
        return 0
    removed = 0
    cutoff = time.time() - older_than
    for path in folder.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file() and path.stat().st_mtime < cutoff:
                path.unlink()
                removed += 1
    return removed


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange(a: Path, b: Path) -> bool:
    """Swap two folders atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    result = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if result != 0:
        logger.debug("renameat2 exchange unsupported here (errno %s)", ctypes.get_errno())
        return False
    return True
