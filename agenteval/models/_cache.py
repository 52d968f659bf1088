"""A response cache for development (``--cache``): a model's answer, kept on disk, given again for the same request.

The key holds the model, its base URL with its query (secret values masked: see ``_names.recordable_url``), the
parameters, the messages and tools, and the trial asking: its case, its attempt and the role (agent, judge,
simulated user). Attempts of a case are meant to differ: a cache keyed on the request alone would hand attempt 2
the answer of attempt 1, and every case would look perfectly consistent. So attempt 2 of a case meets attempt 2's
answer of an earlier run, never attempt 1's.

By default the cache lives in the store, in the hidden folder ``.model-cache/``: it answers for the experiments
recorded there and goes with them, while no table's files (``<table>/**/*.parquet``) reach it, so readers,
compaction and ``doctor`` never see it. It holds model answers, never an API key.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from agenteval_exporters.storefs import RemoteRoot, local_home

from ..run._collect import current_trial
from ._request import ModelRequest

DEFAULT_FOLDER = ".model-cache"
"""The cache's folder under the store, when ``--cache`` names none."""


class ResponseCache:
    """SDK responses as JSON files under ``folder``, one per key; written whole (temporary file, then rename)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self.hits = 0
        self.misses = 0

    def key(self, provider: str, base_url: str | None, request: ModelRequest) -> str:
        """The key of ``request`` asked of ``base_url`` (as ``_names.recordable_url`` gives it: never a secret) by the
        current trial."""
        current = current_trial.get()
        tag = current.tag if current is not None else None
        asking = None if tag is None else {"case": tag.case_id, "attempt": tag.attempt, "role": tag.role}
        fields = {"provider": provider, "base_url": base_url, "request": request.cache_fields(), "trial": asking}
        return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored JSON object, or None (also for a file that cannot be read: it is answered anew). Whether it
        holds a usable answer is the model's to say, which counts the hit or miss (:meth:`counted`)."""
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def counted(self, hit: bool) -> None:
        """Count a request the cache answered (``hit``) or did not."""
        if hit:
            self.hits += 1
        else:
            self.misses += 1

    def put(self, key: str, response: dict[str, Any]) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False, encoding="utf-8") as f:
                json.dump(response, f)
            os.replace(f.name, path)
        except OSError:
            pass  # a cache that cannot be written costs speed, never the call


def cache_folder(given: str | os.PathLike[str] | None, store_root: str | os.PathLike[str] | RemoteRoot) -> Path:
    """The folder ``--cache`` names, or the store's hidden ``.model-cache/`` (for a store on object storage, a
    folder of this machine's: the cache is for development, and a file per answer there would be slow)."""
    if given:
        return Path(given)
    if isinstance(store_root, RemoteRoot):
        return local_home(store_root, DEFAULT_FOLDER)
    return Path(store_root) / DEFAULT_FOLDER


def recorded_cache(folder: Path, store_root: str | os.PathLike[str] | RemoteRoot) -> str:
    """How a run records its cache ``folder``: relative to the store when it lies in the store (the default
    ``.model-cache``), so a store moved or checked out elsewhere keeps its cache; otherwise as an absolute path, so a
    relative ``--cache`` names the folder under the directory it was given in, not under a resume's."""
    resolved = folder.resolve()
    if not isinstance(store_root, RemoteRoot) and resolved.is_relative_to(root := Path(store_root).resolve()):
        return resolved.relative_to(root).as_posix()
    return str(resolved)


def cache_of_run(recorded: str, store_root: str | os.PathLike[str] | RemoteRoot) -> Path:
    """The cache folder a run recorded (:func:`recorded_cache`): one recorded relative lies in the store, wherever the
    store is now."""
    path = Path(recorded)
    if path.is_absolute() or isinstance(store_root, RemoteRoot):
        return path
    return Path(store_root) / path
