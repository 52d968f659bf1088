"""Files a command was told to write (``-o``), written whole: staged beside the target, then renamed over it, so a
full disk, an error half way or a Ctrl-C leaves no half file and the old one as it was.

JSONL files (``generate``, ``cases-from-traces``) are never written over one that exists unless ``--force``; files
that belong together (``generate``'s cases and the corpus their ``relevant_docs`` name) are all staged first, then
put in place, and a failure puts back the ones already in place. A report (:func:`write_text`) is derived, so it
replaces the file there, keeping its permissions, and goes to a pipe or a device as a stream. Every output given
as a link is written to the file the link names, and the link stays a link (:func:`written_through`)."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import secrets
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .dataset._file_kinds import not_regular
from .errors import OutputNotWritable, UsageError

Records = Iterable[dict[str, Any]]
TOGETHER = "the files are written together or not at all"


def refuse_existing(option: str, path: str | os.PathLike[str], *, force: bool, holds: str) -> None:
    """A :class:`UsageError` when ``path`` exists and ``force`` is false; ``holds`` says what it may hold that
    would be lost (cases people filled in or curated). Even with ``force``, one that is not a regular file: the
    rename would replace a pipe someone reads, or (as root) ``/dev/null`` for everyone."""
    try:
        kind = not_regular(os.stat(path).st_mode)
    except OSError:  # nothing there, or a link to nothing: a file can be written
        kind = None
    if kind is not None:
        raise UsageError(f"{option} {path}: {kind}, not a regular file; give the name of a file to write")
    if not force and os.path.lexists(path):
        raise UsageError(f"{option} {path}: the file exists ({holds}); choose another or give --force")


def written_through(path: str | os.PathLike[str]) -> Path:
    """The file writing to ``path`` changes: through a link, the file it names, so a rename replaces that file and
    the link stays a link (as ``cp`` and editors that save atomically do); the staged file goes beside it, on the
    filesystem the rename stays on. Each writer here resolves its path with this, once."""
    return Path(os.path.realpath(path))


def _hidden_beside(target: Path, kind: str) -> Path:
    """A new name in ``target``'s folder: unique, so two runs writing one file never share a staged file, and a
    leftover (or a link planted) at a fixed name is never written through."""
    return target.with_name(f".{target.name}.{secrets.token_hex(4)}.{kind}")


def check_writable(option: str, path: str | os.PathLike[str]) -> None:
    """:class:`OutputNotWritable` unless a file can be made where ``path`` will be written (a staged name, made
    and removed): said before paid work (model calls) rather than after it."""
    staged = _hidden_beside(written_through(path), "partial")
    try:
        with open(staged, "x", encoding="utf-8"):
            pass
        staged.unlink()
    except OSError as exc:
        raise OutputNotWritable.at(option, path, exc) from exc


@dataclasses.dataclass
class _Output:
    option: str
    given: str | os.PathLike[str]
    """The path as the user gave it, which messages name."""
    target: Path
    """The file written (:func:`written_through`)."""
    staged: Path | None = None
    replaced: Path | None = None
    """The file ``target`` held, under a second name until every output is in place (to put it back)."""
    placed: bool = False


def _write_staged(staged: Path, chunks: Iterable[str]) -> None:
    with open(staged, "x", encoding="utf-8") as handle:  # "x": never through a file or link there
        for chunk in chunks:
            handle.write(chunk)
        handle.flush()
        os.fsync(handle.fileno())  # on disk before the rename makes it the file, not after a crash


def _stage(output: _Output, records: Records) -> None:
    output.staged = _hidden_beside(output.target, "partial")
    _write_staged(output.staged, (json.dumps(record, ensure_ascii=False) + "\n" for record in records))


def _set_aside(output: _Output) -> None:
    """Give the file ``output`` replaces a second name, so it can be put back if a later output fails."""
    try:
        mode = os.lstat(output.target).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):  # a rename would move the folder aside, then fail to remove it
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(output.target))
    if stat.S_ISREG(mode) and output.staged is not None:  # a private (0600) or group-shared file stays so
        os.chmod(output.staged, stat.S_IMODE(mode))
    replaced = _hidden_beside(output.target, "replaced")
    try:
        os.link(output.target, replaced, follow_symlinks=False)  # the file keeps its name meanwhile
    except OSError as exc:
        if isinstance(exc, FileExistsError):
            raise
        os.rename(output.target, replaced)  # a filesystem without hard links (FAT, some network shares)
    output.replaced = replaced


def _place_new(staged: Path, target: Path) -> None:
    """Rename ``staged`` to ``target`` unless a file appeared there since it was checked (another run, an
    editor): a link fails where a rename would replace that file without a word."""
    appeared = FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target))
    try:
        os.link(staged, target)
    except FileExistsError:
        raise appeared from None
    except OSError:
        if os.path.lexists(target):  # no hard links here: checked, then renamed
            raise appeared from None
        os.replace(staged, target)


def _place(output: _Output, *, force: bool) -> None:
    assert output.staged is not None
    if force:
        _set_aside(output)
        os.replace(output.staged, output.target)
    else:
        _place_new(output.staged, output.target)
    output.placed = True


def _put_back(output: _Output) -> str | None:
    """Undo what was done at ``output``'s path; None when done, else where its files are."""
    replaced = output.replaced
    try:
        if replaced is None:
            if output.placed:
                output.target.unlink()
        elif output.placed or not os.path.lexists(output.target):
            os.replace(replaced, output.target)  # replaced, or moved aside before its own rename failed: back
        else:
            replaced.unlink()  # a second link to the file, which never left its name
        output.replaced = None
        return None
    except OSError as exc:
        kept = f"; the file it held is {output.replaced}" if output.replaced is not None else ""
        output.replaced = None  # the user's to keep: never removed
        return f"{output.option} {output.given} could not be put back ({exc.strerror or exc}){kept}"


def _where_now(output: _Output) -> str:
    if os.path.lexists(output.target):
        return f"{output.option} {output.given} was left as it was"
    return f"{output.option} {output.given} was not written either"


def _failure(output: _Output, exc: OSError, *, force: bool) -> OutputNotWritable:
    if isinstance(exc, FileExistsError) and not force and exc.filename == str(output.target):
        return OutputNotWritable(
            f"{output.option} {output.given}: a file appeared there while this command ran and was not written "
            "over; choose another or give --force"
        )
    return OutputNotWritable.at(output.option, output.given, exc)


def write_jsonl_files(outputs: Sequence[tuple[str, str | os.PathLike[str], Records]], *, force: bool) -> None:
    """Each ``(option, path, records)`` as JSON lines at ``path``: all of them whole, or none (as far as the
    filesystem allows: each rename is atomic, a set of them is not). A failure is :class:`OutputNotWritable`
    naming the option that failed and where the others' files are; without ``force``, a file that appeared at a
    path since :func:`refuse_existing` looked is not written over."""
    written = [_Output(option, path, written_through(path)) for option, path, _ in outputs]
    current = written[0]
    try:
        for current, (_, _, records) in zip(written, outputs, strict=True):
            _stage(current, records)
        for current in written:
            _place(current, force=force)
    except BaseException as exc:  # a full disk, a folder gone, a Ctrl-C between two renames
        problems = [_put_back(output) for output in written]
        if not isinstance(exc, OSError):
            raise
        said = [p or _where_now(o) for o, p in zip(written, problems, strict=True) if p or o is not current]
        failed = _failure(current, exc, force=force)
        if said:
            failed = OutputNotWritable(f"{failed}; {'; '.join(said)} ({TOGETHER})")
        raise failed from exc
    else:
        for output in written:
            if output.replaced is not None:
                with contextlib.suppress(OSError):  # written as asked; a hidden second link left is no harm
                    output.replaced.unlink()
    finally:
        for output in written:
            if output.staged is not None:
                with contextlib.suppress(OSError):  # gone with its folder, or renamed into place
                    output.staged.unlink()


def write_jsonl(option: str, path: str | os.PathLike[str], records: Records, *, force: bool) -> None:
    """``records`` as JSON lines at ``path``, whole or not at all; a failure is :class:`OutputNotWritable` naming
    ``option``."""
    write_jsonl_files([(option, path, records)], force=force)


def write_text(option: str, path: str | os.PathLike[str], text: str) -> None:
    """``text`` at ``path``, replacing what it held: whole or not at all for a regular file (or none yet), which
    keeps its permissions; through a link, to the file it names, the link left a link; to a pipe or a device
    (``/dev/stdout``, ``/dev/null``) written as a stream, which no rename could replace. A failure is
    :class:`OutputNotWritable` naming ``option``."""
    target = written_through(path)
    try:
        try:
            mode: int | None = os.stat(target).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and not_regular(mode) is not None and not stat.S_ISDIR(mode):
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(text)
            return
        if mode is not None and not os.access(target, os.W_OK):  # a rename would replace a file kept read-only
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(target))
        replace_whole(target, text, None if mode is None else stat.S_IMODE(mode))
    except OSError as exc:
        raise OutputNotWritable.at(option, path, exc) from exc


def replace_whole(target: Path, text: str, mode: int | None = None) -> None:
    """``text`` as the regular file ``target`` (any file there replaced, a link too), whole or not at all: staged
    beside it, fsynced, renamed over it; ``mode`` gives the new file a file's permissions. The one atomic write of
    a text file, for the commands' outputs and for files agenteval keeps for itself (saved reports)."""
    staged = _hidden_beside(target, "partial")
    try:
        _write_staged(staged, [text])
        if mode is not None:  # a private (0600) or group-shared file stays so
            os.chmod(staged, mode)
        os.replace(staged, target)
    finally:
        with contextlib.suppress(OSError):  # renamed into place, or never made
            staged.unlink()
