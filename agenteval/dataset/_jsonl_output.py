"""A JSONL file a command was told to write (``-o``): never written over one that exists unless ``--force``, and
written whole (staged beside it, then renamed over it), so a full disk or a Ctrl-C leaves no half file and the
old one as it was."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import OutputNotWritable, UsageError


def refuse_existing(option: str, path: str | os.PathLike[str], *, force: bool, holds: str) -> None:
    """A :class:`UsageError` when ``path`` exists and ``force`` is false; ``holds`` says what it may hold that
    would be lost (cases people filled in or curated)."""
    if not force and os.path.lexists(path):
        raise UsageError(f"{option} {path}: the file exists ({holds}); choose another or give --force")


def write_jsonl(option: str, path: str | os.PathLike[str], records: Iterable[dict[str, Any]]) -> None:
    """``records`` as JSON lines at ``path``, whole or not at all; a failure is :class:`OutputNotWritable` naming
    ``option``."""
    target = Path(path)
    staged = target.with_name(f".{target.name}.partial")
    try:
        with open(staged, "w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        os.replace(staged, target)
    except OSError as exc:
        staged.unlink(missing_ok=True)  # a disk that filled up leaves no half-written file behind
        raise OutputNotWritable.at(option, target, exc) from exc
