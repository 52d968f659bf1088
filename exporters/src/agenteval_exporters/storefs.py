"""Where a store lives: a folder on local disk (the default, unchanged), or a prefix on object storage.

``--store s3://bucket/prefix`` (also ``gs://``, ``az://``) makes the store's root a :class:`RemoteRoot`. Every
place that writes, reads, lists or removes a store file outside local disk goes through it, over an fsspec
file system (s3fs, gcsfs or adlfs): the same file system DuckDB reads the store through
(``DuckDBPyConnection.register_filesystem``), with ranged reads, behind ``agenteval.store._listed_objects``, which
answers DuckDB's questions about listed files from their listing.

What object storage changes, and how the store keeps its promises there:

- **Publishing.** A file is written whole on local disk first (under :func:`staging_dir`), then published with
  one object write (a single PUT, or a multipart upload, which is invisible until completed): an object store
  makes either atomic, so nothing half-written is ever visible, and a writer killed at any moment leaves at most
  a local leftover.
- **No rename.** Compaction cannot swap folders; it writes a manifest instead (``agenteval.store._live``).
- **No OS locks.** Leases are objects created with a conditional write (``If-None-Match: *``, :meth:`create`),
  which exactly one of several writers wins (``agenteval.store._lease``).

Credentials and endpoint come from the file system library's usual sources (for S3, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ``AWS_PROFILE``, ...); agenteval never reads or records them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any

PROTOCOLS = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs"}
"""The URL schemes a store can be given, and the fsspec implementation each needs."""

ALIASES = {"s3a": "s3", "gcs": "gs"}
"""Other names of a scheme, written as its main one (the name DuckDB knows the registered file system by)."""

EXTRA = {"s3fs": "agenteval[s3]", "gcsfs": "gcsfs", "adlfs": "adlfs"}
"""What to install for each implementation."""


READ_BLOCK_BYTES = 1 << 20
"""How much a read fetches at least. s3fs's default, 50 MB, made DuckDB fetch 489 MB of a 137 MB file to sum one
of its eight columns (4 row groups); with 1 MiB blocks it fetched 30 MB, the column and its footer
(``benchmarks/bench_store_s3.py --ranges``)."""

WRITE_BLOCK_BYTES = 5 << 20

OPTIONS: dict[str, dict[str, Any]] = {"s3fs": {"default_block_size": READ_BLOCK_BYTES}}
"""Settings of each implementation's file system, besides those it reads from its environment."""


class StoreLocationError(ValueError):
    """A store URL that cannot be used: an unknown scheme, no bucket, or its file system library missing."""


def is_remote(store: object) -> bool:
    """Whether ``store`` (a path, a URL or a root) names a store on object storage."""
    if isinstance(store, RemoteRoot):
        return True
    if not isinstance(store, str):
        return False
    scheme, sep, _ = store.partition("://")
    return bool(sep) and scheme.lower() in PROTOCOLS


@dataclasses.dataclass(frozen=True)
class RemoteFile:
    """One object under a store: its path relative to the root, its size and its modification time."""

    relative: str
    size: int
    modified_ns: int


class RemoteRoot:
    """A store (or a place in it) on object storage, such as ``s3://bucket/prefix``.

    Path-like where the store's code only builds names (``root / "trials"``, ``.name``, ``str``); the operations
    that touch objects are methods. Deliberately not ``os.PathLike``: nothing may ``open()`` it by accident.
    """

    def __init__(self, url: str) -> None:
        scheme, sep, rest = url.partition("://")
        scheme = scheme.lower()
        if not sep or scheme not in PROTOCOLS:
            raise StoreLocationError(f"{url!r} is not a store URL (s3://, gs:// or az://BUCKET/PREFIX)")
        rest = rest.strip("/")
        if not rest:
            raise StoreLocationError(f"{url!r} names no bucket: give --store {scheme}://BUCKET[/PREFIX]")
        self.protocol = ALIASES.get(scheme, scheme)
        self.path = rest
        """``bucket/prefix``, as the file system names it."""

    @property
    def url(self) -> str:
        return f"{self.protocol}://{self.path}"

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"RemoteRoot({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemoteRoot) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    def __truediv__(self, part: str) -> RemoteRoot:
        return RemoteRoot(f"{self.url}/{str(part).strip('/')}")

    @property
    def name(self) -> str:
        return self.path.rpartition("/")[2]

    @property
    def fs(self) -> Any:
        """The fsspec file system (fsspec keeps one per process and settings, and makes a new one after a fork)."""
        module = PROTOCOLS[self.protocol]
        try:
            import fsspec

            # No listings cache: other processes publish into the store, and a cached listing would hide their
            # files (and make fsspec report a new object, such as a manifest, as missing).
            return fsspec.filesystem(self.protocol, use_listings_cache=False, **OPTIONS.get(module, {}))
        except ImportError as exc:
            raise StoreLocationError(f"a store at {self.url} needs {module}: pip install '{EXTRA[module]}'") from exc

    def _key(self, relative: str) -> str:
        return f"{self.path}/{relative.strip('/')}" if relative else self.path

    # Reading.

    def exists(self) -> bool:
        """Whether any object is under this prefix (object storage has no empty folders)."""
        return bool(self.fs.exists(self.path))

    is_dir = exists

    def list_files(self, relative: str = "") -> list[RemoteFile]:
        """Every object under ``relative`` (recursively), listed now: another process's writes included."""
        found = self.fs.find(self._key(relative), detail=True)
        files = []
        for key, info in sorted(found.items()):
            if info.get("type") == "directory":
                continue
            modified = info.get("LastModified") or info.get("mtime") or info.get("last_modified")
            stamp = int(modified.timestamp() * 1e9) if hasattr(modified, "timestamp") else 0
            files.append(RemoteFile(key[len(self.path) + 1 :], int(info.get("size") or 0), stamp))
        return files

    def has(self, relative: str) -> bool:
        """Whether the object ``relative`` exists (one request, whatever the store holds)."""
        return bool(self.fs.exists(self._key(relative)))

    def read_bytes(self, relative: str) -> bytes | None:
        """The object's bytes, or None when there is no such object."""
        try:
            data: bytes = self.fs.cat_file(self._key(relative))
            return data
        except FileNotFoundError:
            return None

    def open_input(self, relative: str) -> Any:
        """A seekable file for reading (pyarrow reads Parquet footers and row groups from it by range)."""
        return self.fs.open(self._key(relative), "rb")

    # Writing: each call is one object write, atomic on the store.

    def put(self, local: Path, relative: str) -> None:
        """Publish a finished local file as the object ``relative``."""
        self.fs.put_file(str(local), self._key(relative))

    def write_bytes(self, relative: str, data: bytes) -> None:
        self.fs.pipe_file(self._key(relative), data)

    def create(self, relative: str, data: bytes) -> bool:
        """Write the object only if none exists by that name (a conditional write, ``If-None-Match: *``);
        False when it existed. Exactly one of several writers racing for a name wins."""
        try:
            # A written file's block is its upload part, which S3 wants of 5 MB at least; the object is one PUT.
            with self.fs.open(self._key(relative), "xb", block_size=WRITE_BLOCK_BYTES) as handle:
                handle.write(data)
        except FileExistsError:
            return False
        return True

    def delete(self, relatives: list[str]) -> None:
        """Remove objects; ones already gone are no error."""
        if relatives:
            keys = [self._key(r) for r in relatives]
            try:
                self.fs.rm(keys)
            except FileNotFoundError:
                pass


StoreRoot = Path | RemoteRoot
"""A store's root: a folder, or a prefix on object storage."""


def as_root(store: str | os.PathLike[str] | RemoteRoot) -> StoreRoot:
    """``store`` as a root: a :class:`RemoteRoot` for an object-storage URL, else a :class:`~pathlib.Path`."""
    if isinstance(store, RemoteRoot):
        return store
    if isinstance(store, str) and is_remote(store):
        return RemoteRoot(store)
    return Path(store)


def local_home(root: RemoteRoot, what: str, *, create: bool = True) -> Path:
    """A folder on this machine for a remote store's local work (``what``: staging, figures, model cache),
    one per store URL and user, under the system's temporary folder; created unless ``create`` is false."""
    digest = hashlib.sha256(root.url.encode()).hexdigest()[:16]
    user = os.getuid() if hasattr(os, "getuid") else 0
    folder = Path(tempfile.gettempdir()) / f"agenteval-{user}" / digest / what
    if create:
        folder.mkdir(parents=True, exist_ok=True)
    return folder


def duckdb_path(root: StoreRoot, relative: str) -> str:
    """How DuckDB names the file ``relative`` under ``root`` (absolute on disk: DuckDB's ``allowed_directories``
    compares absolute paths)."""
    if isinstance(root, RemoteRoot):
        return (root / relative).url
    return str(root.absolute() / relative)


_GLOB_CHARACTERS = re.compile(r"([\[*?])")


def duckdb_literal(path: Path | str) -> str:
    """A path on disk as a DuckDB pattern that matches that path alone. DuckDB reads every name given to
    ``read_parquet`` as a glob, so a store in ``runs [2024]`` read no file (``[2024]`` is one character of 2, 0 or
    4) and one in ``a?b`` read the files of ``a*b`` too; ``[``, ``*`` and ``?`` each go in brackets."""
    return _GLOB_CHARACTERS.sub(r"[\1]", str(path))


def duckdb_glob(root: StoreRoot, pattern: str) -> str:
    """The DuckDB pattern for ``pattern`` (a glob relative to ``root``): the root's own name matches only itself."""
    if isinstance(root, RemoteRoot):
        return (root / pattern).url
    return f"{duckdb_literal(root.absolute())}{os.sep}{pattern}"
