"""What the ``agenteval`` command shows on stderr, masked whoever writes it: every log record of the process and the
tracebacks Python prints (:mod:`agenteval_instrumentation.masking` finds the secrets). The command owns its stderr;
agenteval used as a library leaves its host's logging and hooks alone."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import traceback
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from agenteval_instrumentation.masking import LOG_MASKING, mask_text


@contextlib.contextmanager
def every_log_record_masked() -> Iterator[None]:
    """While it lasts, every log record the process makes is masked as it is made (``SecretMaskingFilter``),
    whoever logs it and whichever handler shows it: another library's logger, a child logger that no filter of its
    parent sees, a handler an agent installs itself. For a program that owns its stderr (the ``agenteval``
    command); a library leaves its host's logging alone and masks only its own loggers (``masked_logger``).

    A record's exception is left as its masked text alone: a handler that renders the exception object itself
    (rich's ``RichHandler(rich_tracebacks=True)``, with its locals) would show it unmasked; every formatter shows the
    text in its place."""
    make = logging.getLogRecordFactory()

    def masked(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        LOG_MASKING.filter(record)
        if record.exc_text:
            record.exc_info = None
        return record

    logging.setLogRecordFactory(masked)
    try:
        yield
    finally:
        if logging.getLogRecordFactory() is masked:  # else someone set theirs since: theirs stays
            logging.setLogRecordFactory(make)


def mask_uncaught_tracebacks() -> None:
    """The tracebacks Python prints for an exception nobody caught, in the main thread or another, masked: for a
    program that owns its stderr (the ``agenteval`` command, whose tracebacks mean a bug or ``--debug``). A hook the
    program already replaced is left as it is."""
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = _print_masked
    if threading.excepthook is threading.__excepthook__:
        threading.excepthook = _print_thread_masked


def _print_masked(kind: type[BaseException], value: BaseException | None, tb: TracebackType | None) -> None:
    sys.stderr.write(mask_text("".join(traceback.format_exception(kind, value, tb))))


def _print_thread_masked(hooked: threading.ExceptHookArgs) -> None:
    if hooked.exc_type is SystemExit or sys.stderr is None:  # as Python's own hook does
        return
    name = hooked.thread.name if hooked.thread is not None else threading.get_ident()
    sys.stderr.write(f"Exception in thread {name}:\n")
    _print_masked(hooked.exc_type, hooked.exc_value, hooked.exc_traceback)
