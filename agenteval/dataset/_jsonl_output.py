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


def _staged(target: Path) -> Path:
    return target.with_name(f".{target.name}.partial")


def check_writable(option: str, path: str | os.PathLike[str]) -> None:
    """:class:`OutputNotWritable` unless a file can be made where ``path`` will be written (its staged name, made
    and removed): said before paid work (model calls) rather than after it."""
    staged = _staged(Path(path))
    try:
        with open(staged, "x", encoding="utf-8"):
            pass
        staged.unlink()
    except FileExistsError:  # left by a run stopped by kill -9: written over when the time comes
        pass
    except OSError as exc:
        raise OutputNotWritable.at(option, path, exc) from exc


def write_jsonl(option: str, path: str | os.PathLike[str], records: Iterable[dict[str, Any]]) -> None:
    """``records`` as JSON lines at ``path``, whole or not at all; a failure is :class:`OutputNotWritable` naming
    ``option``."""
    target = Path(path)
    staged = _staged(target)
    try:
        with open(staged, "w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        os.replace(staged, target)
    except OSError as exc:
        staged.unlink(missing_ok=True)  # a disk that filled up leaves no half-written file behind
        raise OutputNotWritable.at(option, target, exc) from exc
