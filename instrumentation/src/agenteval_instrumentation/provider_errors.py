"""What a provider's error says of itself, read from the SDK's exception without importing the SDK: its HTTP status
and the error object's code and type. The failure classifier types a live exception by them, and a failed span
records them, so a failure read back from its span (a production trace) is typed by the same facts.

Imports nothing but the standard library: agenteval's classifier takes these from here.
"""

from __future__ import annotations

import re

from . import attributes as A


def read(holder: object, name: str) -> object:
    """``holder.name``, or None when it has none or reading it raises: an exception is the agent's object, and an
    SDK's property (a ``response`` built lazily) that breaks is no status to read, never a failure of the run's."""
    try:
        return getattr(holder, name, None)
    except Exception:
        return None


def text(value: object) -> str:
    """``str(value)``, or "" when its ``__str__`` raises."""
    try:
        return str(value)
    except Exception:
        return ""


def status_code(exc: BaseException) -> int | None:
    """The HTTP status an SDK exception carries (``status_code``, ``status``, ``response.status_code``)."""
    for holder in (exc, read(exc, "response")):
        for name in ("status_code", "status", "http_status"):
            value = read(holder, name)
            if isinstance(value, int) and not isinstance(value, bool) and 100 <= value < 600:
                return value
    return None


def error_fields(exc: BaseException) -> dict[str, object]:
    """The provider's error object: OpenAI's body is it; Anthropic's wraps it as ``{"type": "error", "error": ...}``."""
    body = read(exc, "body")
    if not isinstance(body, dict):
        return {}
    error = dict.get(body, "error", body)  # dict's own get: a subclass's is the agent's code
    return error if isinstance(error, dict) else {}


_IDENTIFIER = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
"""What an error code or type looks like (``overloaded_error``, ``context_length_exceeded``, ``400``). Anything
else is not recorded: a code is a name, never content, so it is recorded whatever capture allows."""


def _identifier(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    found = text(value)
    return found if _IDENTIFIER.fullmatch(found) else None


def error_code(exc: BaseException) -> str | None:
    """The provider's error code: the exception's ``code`` (OpenAI's), else its error object's."""
    code = read(exc, "code")
    return _identifier(code if code is not None else dict.get(error_fields(exc), "code"))


def error_kind(exc: BaseException) -> str | None:
    """The provider's error type: its error object's ``type`` (``overloaded_error``, ``insufficient_quota``)."""
    return _identifier(dict.get(error_fields(exc), "type"))


def error_attributes(exc: BaseException) -> dict[str, str | int]:
    """What a failed span records of the provider's error, for the classifier to read back: the response's HTTP
    status, and the error object's code and type (an error sent inside a stream comes with the stream's 200 or no
    status, and only these say what it was). Nothing for an exception with neither a status nor an error object:
    the agent's own (``SystemExit.code`` is an exit status, no provider's code)."""
    status = status_code(exc)
    if status is None and not error_fields(exc):
        return {}
    found: dict[str, str | int | None] = {
        A.HTTP_RESPONSE_STATUS_CODE: status,
        A.PROVIDER_ERROR_CODE: error_code(exc),
        A.PROVIDER_ERROR_TYPE: error_kind(exc),
    }
    return {name: value for name, value in found.items() if value is not None}
