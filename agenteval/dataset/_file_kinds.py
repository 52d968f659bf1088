"""What a path that is not a regular file is, in words: a document read or an output written must be a file,
and "no such file" or a silent rename over a pipe or a device misled."""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

_KINDS = (
    (stat.S_ISFIFO, "a pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


class NotRegularFile(OSError):
    """A file to read is a pipe, a device or a socket; its ``strerror`` says which (``a pipe, not a regular
    file``)."""


def not_regular(mode: int) -> str | None:
    """What a file of ``mode`` (``os.stat``'s) is when it is not a regular file (``a pipe``), else None."""
    return next((kind for test, kind in _KINDS if test(mode)), None)


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened to read bytes, or an ``OSError`` before anything is read: :class:`NotRegularFile` for a pipe,
    a device or a socket (``/dev/zero``, or a link to it, is one line that never ends: read whole or by lines it
    grew until the process was killed; a pipe is waited on), ``IsADirectoryError`` for a folder."""
    mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    kind = not_regular(mode)
    if kind is not None:
        raise NotRegularFile(errno.EINVAL, f"{kind}, not a regular file", str(path))
    return open(path, "rb")
