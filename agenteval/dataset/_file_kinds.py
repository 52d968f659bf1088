"""What a path that is not a regular file is, in words: a document read or an output written must be a file,
and "no such file" or a silent rename over a pipe or a device misled."""

from __future__ import annotations

import stat

_KINDS = (
    (stat.S_ISFIFO, "a pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def not_regular(mode: int) -> str | None:
    """What a file of ``mode`` (``os.stat``'s) is when it is not a regular file (``a pipe``), else None."""
    return next((kind for test, kind in _KINDS if test(mode)), None)
