"""Reads of a store on object storage (DuckDB's, and compaction's), with as few requests as its listings allow.

DuckDB reads a registered fsspec file system by asking, for each file a view names, for a glob of its path, its
size, its modification time and an open file; each question is a request to the object store (a LIST, or a
HEAD), and a connection binds each table's files again for every view built over it. Over a store of 66 objects a
``SELECT count(*) FROM trials`` took 15 s against a loopback S3 server: 428 opens, 856 HEADs and 388 LISTs.

A store's objects are written once and never changed: a new file, manifest or lease is a new name (see
:mod:`._live`). So what the listing behind a connection's views said of a file stays true while the file exists,
and this file system answers those questions from it; a small object is fetched whole, once per process, and of a
larger one the end, where a Parquet file's footer is.
A file deleted since it was listed (a compaction's) still fails when it is read, as before, and the store's readers
retry with a new listing. Paths no listing named go to the store's own file system unchanged.
"""

from __future__ import annotations

import collections
import datetime
import functools
import io
import threading
from collections.abc import Callable, Iterable
from typing import Any

import fsspec

from agenteval_exporters.storefs import READ_BLOCK_BYTES, RemoteFile, RemoteRoot, StoreRoot

KEPT_BYTES = 32 << 20
"""Bytes of objects kept in a process, small ones whole and the ends of larger ones (least recently read first
out)."""

TAIL_BYTES = 64 << 10
"""Bytes kept of the end of a larger object, where a Parquet file's footer is: every open of the file reads it."""

MAX_KNOWN = 1_000_000
"""Listed objects remembered in a process; past it, they are forgotten and the next listings start again."""


class _Listed:
    """What this process's listings said of objects (by fsspec path, ``bucket/key``), and the bytes of the small
    ones it has read."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.files: dict[str, tuple[int, int]] = {}
        self.bytes: collections.OrderedDict[tuple[str, int, int, int], bytes] = collections.OrderedDict()
        self.kept = 0

    def remember(self, paths_and_files: Iterable[tuple[str, RemoteFile]]) -> None:
        with self.lock:
            if len(self.files) > MAX_KNOWN:
                self.files.clear()
            self.files.update((path, (file.size, file.modified_ns)) for path, file in paths_and_files)

    def small_object(self, fs: Any, path: str, size: int, modified_ns: int) -> bytes:
        return self.part(fs, path, 0, size, modified_ns)

    def part(self, fs: Any, path: str, start: int, size: int, modified_ns: int) -> bytes:
        """Bytes ``start`` to the end of an object of ``size`` bytes, fetched once a process while kept."""
        key = (path, start, size, modified_ns)
        with self.lock:
            data = self.bytes.get(key)
            if data is not None:
                self.bytes.move_to_end(key)
                return data
        data = fs.cat_file(path, start=start, end=size)  # one GET; FileNotFoundError once deleted: readers retry
        self._keep(key, data)
        return data

    def prefetch(self, fs: Any, paths_and_files: list[tuple[str, RemoteFile]]) -> None:
        """Fetch the small objects among these not kept yet, all at once (the file system sends the GETs
        concurrently), as many as half of :data:`KEPT_BYTES` holds."""
        wanted: dict[str, tuple[str, int, int, int]] = {}
        budget = KEPT_BYTES // 2
        with self.lock:
            for path, file in paths_and_files:
                key = (path, 0, file.size, file.modified_ns)
                if 0 < file.size <= min(READ_BLOCK_BYTES, budget) and key not in self.bytes:
                    wanted[path] = key
                    budget -= file.size
        if not wanted:
            return
        paths = list(wanted)
        # Ranges: asked for a whole object, the file system asks for its size first (a HEAD per object).
        ends = [wanted[path][2] for path in paths]
        fetched = fs.cat_ranges(paths, [0] * len(paths), ends, on_error="return")
        for path, data in zip(paths, fetched, strict=True):
            key = wanted[path]
            if isinstance(data, bytes) and len(data) == key[2]:  # an exception: deleted since listed, read as usual
                self._keep(key, data)

    def _keep(self, key: tuple[str, int, int, int], data: bytes) -> None:
        with self.lock:
            if key not in self.bytes:
                self.bytes[key] = data
                self.kept += len(data)
            while self.kept > KEPT_BYTES:
                _, dropped = self.bytes.popitem(last=False)
                self.kept -= len(dropped)


_LISTED = _Listed()


def remember(root: RemoteRoot, files: Iterable[RemoteFile]) -> None:
    """Note what a listing of ``root`` said of ``files``, the files a connection's views are about to name, and
    fetch the small ones now, together: binding the views opens every one of them."""
    listed = [(f"{root.path}/{file.relative}", file) for file in files]
    _LISTED.remember(listed)
    _LISTED.prefetch(root.fs, listed)


class ListedObjects(fsspec.AbstractFileSystem):
    """A read-only view of a store's file system for DuckDB (see the module's documentation)."""

    cachable = False  # one per connection; fsspec would otherwise keep one instance for all

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self.inner = inner
        self.protocol = inner.protocol  # the scheme DuckDB sends here

    def _path(self, path: str) -> str:
        return str(self.inner._strip_protocol(path))

    def _listed(self, path: str) -> tuple[str, tuple[int, int] | None]:
        stripped = self._path(path)
        return stripped, _LISTED.files.get(stripped)

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        stripped, known = self._listed(path)
        if known is None:
            return dict(self.inner.info(path, **kwargs))
        size, modified_ns = known
        return {"name": stripped, "size": size, "type": "file", "LastModified": _as_datetime(modified_ns)}

    def size(self, path: str) -> int:
        return int(self.info(path)["size"])

    def modified(self, path: str) -> datetime.datetime:
        stripped, known = self._listed(path)
        return self.inner.modified(path) if known is None else _as_datetime(known[1])

    def exists(self, path: str, **kwargs: Any) -> bool:
        return self._listed(path)[1] is not None or bool(self.inner.exists(path, **kwargs))

    def glob(self, path: str, maxdepth: int | None = None, **kwargs: Any) -> Any:
        stripped, known = self._listed(path)
        return [stripped] if known is not None else self.inner.glob(path, maxdepth=maxdepth, **kwargs)

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        return self.inner.ls(path, detail=detail, **kwargs)

    def open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        stripped, known = self._listed(path)
        if known is None or mode != "rb":
            return self.inner.open(path, mode, **kwargs)
        size, modified_ns = known
        if 0 < size <= READ_BLOCK_BYTES:  # the first read of it would have fetched as much
            return io.BytesIO(_LISTED.small_object(self.inner, stripped, size, modified_ns))
        details = self.info(path)

        def open_whole() -> Any:
            opened = self.inner.open(path, mode, size=size, **kwargs)
            # What the listing said stands for the object's details, which the file system would otherwise ask
            # for (a HEAD) before its first ranged read.
            opened.details = details
            return opened

        tail = functools.partial(_LISTED.part, self.inner, stripped, size - TAIL_BYTES, size, modified_ns)
        return _KeptTail(size, tail, open_whole)


class _KeptTail(io.RawIOBase):
    """A larger object read from its end (a Parquet footer) out of this process's kept bytes, and elsewhere
    through a file of the store's file system, opened at the first such read."""

    def __init__(self, size: int, tail: Callable[[], bytes], open_whole: Callable[[], Any]) -> None:
        super().__init__()
        self.size, self._tail, self._open_whole = size, tail, open_whole
        self._whole: Any = None
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self.size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer: Any) -> int:
        start = self._position
        end = min(self.size, start + len(buffer))
        if start >= end:
            return 0
        if start >= self.size - TAIL_BYTES:
            tail = self._tail()
            data = tail[start - (self.size - len(tail)) : end - (self.size - len(tail))]
        else:
            if self._whole is None:
                self._whole = self._open_whole()
            self._whole.seek(start)
            data = self._whole.read(end - start)
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)

    def close(self) -> None:
        if self._whole is not None:
            self._whole.close()
        super().close()


def _as_datetime(modified_ns: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(modified_ns / 1e9, tz=datetime.UTC)


def register(con: Any, root: StoreRoot) -> None:
    """Let the DuckDB connection ``con`` read ``root``'s objects (a store on object storage) through its file
    system, answering from this process's listings where it can."""
    if isinstance(root, RemoteRoot):
        fs = ListedObjects(root.fs)
        name = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        if name not in con.list_filesystems():
            con.register_filesystem(fs)
