"""The mark a cluster run's driver leaves in its store, so that a worker can tell the store from another folder at
the same path.

A worker on another machine opens the store by the driver's path. On a node without the shared file system that
path is the node's own folder, and it may even hold the run's experiment (a store of the node's own from a run with
the same ``--experiment``, or a copy taken before a ``--resume``): a worker there would write the run's spans and
scores where the driver never reads them, while the driver commits their trial rows. So the driver leaves a file of
a new name under the store for each run, and a worker looks that name up before it runs anything: a name never
seen before is looked up afresh even on a shared file system that caches what a folder lists (NFS). A store on
object storage is the same bucket from every node: it needs no mark.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

from agenteval_exporters.storefs import StoreRoot

from ..store._lease import LOCKS


@contextlib.contextmanager
def marked(root: StoreRoot, experiment_id: str) -> Iterator[str | None]:
    """A new mark left in the store at ``root`` while the body runs (its name; None for object storage); removed
    after. A driver killed meanwhile leaves an empty file under the store's lock folder."""
    if not isinstance(root, Path):
        yield None
        return
    name = f"{LOCKS}/experiment-{experiment_id}.run-{uuid.uuid4().hex}.mark"
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(exist_ok=False)
    try:
        yield name
    finally:
        path.unlink(missing_ok=True)


def has_mark(root: StoreRoot, name: str | None) -> bool:
    """Whether the store at ``root`` holds the mark ``name`` (a store without one to look for does)."""
    return name is None or not isinstance(root, Path) or (root / name).is_file()
