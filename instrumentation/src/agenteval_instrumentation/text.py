"""Text that UTF-8 can hold: the one rule every stored string goes through.

Python strings may carry lone surrogates (``"\\ud800"``, from a bad decode or a JSON ``\\ud800``
escape); UTF-8, and so Arrow and Parquet, cannot encode them. One such character in an agent's reply
must not cost a batch of trials, so text is repaired where it enters the store.
"""

from __future__ import annotations

REPLACEMENT = "\ufffd"

ERROR_CHARS = 2000
"""Longest error message recorded (an exception's ``Type: message``, a scorer's error): the rest is left out."""


def storable_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (a well-formed pair is joined)."""
    if text.isascii():  # most text, known without a scan (CPython keeps the flag): no surrogate in it
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def storable(value: object) -> object:
    """``value`` with :func:`storable_text` applied to it if it is a string, else as it is."""
    return storable_text(value) if isinstance(value, str) else value


def exception_message(exc: BaseException) -> str:
    """``str(exc)``, safe from an exception whose ``str`` raises (the agent's failure must be recorded,
    not replaced by a new one)."""
    try:
        return str(exc)
    except Exception:
        return "<the exception's message could not be read>"


def exception_text(exc: BaseException, limit: int = ERROR_CHARS) -> str:
    """``Type: message`` for a record of ``exc``: storable, cut at ``limit``, as raised (no masking:
    use ``capture.error_text`` for text that may hold the agent's content)."""
    return storable_text(f"{type(exc).__name__}: {exception_message(exc)}"[:limit])
