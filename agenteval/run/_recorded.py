"""A failure known only from its record on a span (a production trace), typed by the classifier trials use.

agenteval's own failed spans record the response's HTTP status and the provider error's code and type
(:mod:`agenteval_instrumentation.provider_errors`). Other instrumentations' spans, and agenteval's stored before it
recorded them, say the same otherwise, each in its own way (the table in docs/models.md):

- the SDK's exception class, as ``error.type`` or the exception event's ``exception.type``: ``openai.RateLimitError``
  (OpenInference, OpenLLMetry's event), ``RateLimitError`` (OpenLLMetry's ``error.type``), ``<class
  'openai.RateLimitError'>`` (the official OpenAI instrumentation);
- the provider's error type as ``error.type`` beside ``http.response.status_code`` (the anthropic SDK's own tracing:
  ``rate_limit_error``, with the stream's 200 when it was sent inside a stream);
- the SDK's message: ``Error code: 429 - ...`` (openai; older SDKs of both follow it with the repr of the error body),
  ``429 <message> (request_id: ..., path: ..., type: rate_limit_error)`` (anthropic's).

From them a stand-in exception is built holding the status and the error object as the SDK's exception held them, so
the same matchers (``failure_status``, ``STREAMED_ERROR_STATUS``, the quota codes) type it as they typed the live one.
"""

from __future__ import annotations

import ast
import builtins
import re

from ._failures import (
    STREAMED_ERROR_STATUS,
    TRUNCATED,
    Failure,
    InvalidModelOutput,
    MaxStepsExceeded,
    RequestTimedOut,
    StreamEndedEarly,
    UnreadableResponse,
    classify,
    register_plugins,
)

SDK_MODULES = frozenset(("openai", "anthropic"))
"""Modules whose exception classes :data:`SDK_ERROR_STATUS` names; a recorded name without a module (OpenLLMetry's
``error.type``) is read as theirs too."""

SDK_ERROR_STATUS = {
    "BadRequestError": 400,
    "AuthenticationError": 401,
    "PaymentRequiredError": 402,
    "PermissionDeniedError": 403,
    "NotFoundError": 404,
    "RequestTimeoutError": 408,
    "ConflictError": 409,
    "ContentTooLargeError": 413,
    "UnprocessableEntityError": 422,
    "RateLimitError": 429,
    "InternalServerError": 500,
    "ServiceUnavailableError": 503,
    "GatewayTimeoutError": 504,
    "OverloadedError": 529,
}
"""The status each openai and anthropic status-error class is raised for (their clients' tables of status to class):
a span that recorded only the class (no status, a message without it) is typed by it."""

CONNECTION_FAILURES = frozenset(("APITimeoutError", "connection_error"))
"""Recorded names of a request that got no answer, beyond those the classifier knows by class name
(``APIConnectionError``): the SDKs' timeout (a subclass of it live, a bare name recorded), and the anthropic SDK's
own tracing's ``error.type`` for both."""

_CLASS_REPR = re.compile(r"<class '([\w.]+)'>")
"""How the official OpenAI instrumentation records ``error.type``: the class's repr."""

_OPENAI_FORM = re.compile(r"Error code: ([1-5]\d\d)(?: - (.*))?\Z", re.DOTALL)
_ANTHROPIC_SUFFIX = re.compile(r"\(([a-z_]+: [^()\n]*)\)\Z")
_ANTHROPIC_LABELS = frozenset(("request_id", "path", "type", "error_code"))
_LEADING_STATUS = re.compile(r"([1-5]\d\d) ")
BODY_LIMIT = 4096
"""The longest error body read back from a message (the repr of a dict, as older SDKs wrote it): longer is no body
of a provider's error, and is not parsed."""


def recorded_exception(
    error_type: str | None,
    message: str | None,
    http_status: int | None = None,
    error_code: str | None = None,
    error_kind: str | None = None,
) -> Exception:
    """A stand-in for an exception known only from its record on a span (``error.type``, the status message, an
    ``http.response.status_code``, the provider error's code and type): a class of the recorded name, under the
    built-in or agenteval exception of that name when there is one, holding the status and the error object as the
    SDK's exception held them (from the attributes, else from the recorded name and message), so the matchers read
    it as they would have read the original."""
    module, name = _class_name(error_type)
    if not module and name in STREAMED_ERROR_STATUS:  # the anthropic SDK's tracing records the provider's type
        error_kind = error_kind or name
    text = message or ""
    if text.startswith(f"{name}: "):  # the status message starts with the type, as record_error writes it
        text = text[len(name) + 2 :]
    said_status, body = _from_message(text)
    stand_in = _stand_in_class(module, name)(text)
    status = http_status if http_status is not None else said_status
    if status is None and (not module or module in SDK_MODULES):
        status = SDK_ERROR_STATUS.get(name)
    if status is not None:
        stand_in.status_code = status  # type: ignore[attr-defined]
    if error_code is not None or error_kind is not None:  # a streamed error's only say of what it was
        body = {"error": {"code": error_code, "type": error_kind}}
    if body is not None:
        stand_in.body = body  # type: ignore[attr-defined]
    return stand_in


def _class_name(error_type: str | None) -> tuple[str, str]:
    """The recorded class's module (or "") and name; ``Exception`` for a name that is none."""
    recorded = (error_type or "Exception").strip()
    found = _CLASS_REPR.fullmatch(recorded)
    module, _, name = (found.group(1) if found else recorded).rpartition(".")
    return module, name if name.isidentifier() else "Exception"


def _stand_in_class(module: str, name: str) -> type[Exception]:
    errors = (MaxStepsExceeded, InvalidModelOutput, StreamEndedEarly, UnreadableResponse, RequestTimedOut)
    own = {cls.__name__: cls for cls in errors}
    builtin = getattr(builtins, name, None)
    base = own.get(name) or (builtin if isinstance(builtin, type) and issubclass(builtin, Exception) else Exception)
    if name in CONNECTION_FAILURES:
        base = ConnectionError
    body = {"__module__": module or "builtins", "__init__": Exception.__init__, "__str__": Exception.__str__}
    return type(name, (base,), body)


def _from_message(text: str) -> tuple[int | None, object]:
    """The status and the error body an SDK's message gives: ``Error code: 429 - {...}`` (the body's repr, read as a
    Python literal, never evaluated), or anthropic's ``429 <message> (path: ..., type: rate_limit_error)``."""
    found = _OPENAI_FORM.match(text)
    if found:
        return int(found.group(1)), _literal(found.group(2) or "")
    first = text.partition("\n")[0]  # anthropic's details follow the line, as JSON
    suffix = _ANTHROPIC_SUFFIX.search(first)
    items = dict(part.partition(": ")[::2] for part in suffix.group(1).split(", ")) if suffix else {}
    if not items or not items.keys() <= _ANTHROPIC_LABELS or not ("type" in items or "path" in items):
        return None, None
    leading = _LEADING_STATUS.match(first)
    kind = items.get("type")
    return (int(leading.group(1)) if leading else None), ({"error": {"type": kind}} if kind else None)


def _literal(text: str) -> object:
    """The error body an older SDK wrote as its repr, or None when it is none (cut short, too long, not a dict)."""
    if not text.startswith("{") or len(text) > BODY_LIMIT:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def classify_recorded(
    status: str | None,
    error_type: str | None,
    message: str | None,
    *,
    raised_in: str | None = None,
    http_status: int | None = None,
    error_code: str | None = None,
    error_kind: str | None = None,
    finish_reason: str | None = None,
    reply: str | None = None,
) -> Failure | None:
    """The failure of a run of an agent known from its spans (a production trace), by :func:`classify`: its root's
    status, error type and message, the operation of the span that raised, the HTTP status and the provider error's
    code and type it recorded (``agenteval.provider_error.*``), and its last finish reason and reply. A trace with
    no recorded reply (content capture off, or no conversation) is judged by its status alone."""
    register_plugins()  # the same matchers as a run's: a trace's error is typed as a trial's would be
    # The stand-in exception (a class made for it) only where the trace ended in error: most traces did not.
    exc = recorded_exception(error_type, message, http_status, error_code, error_kind) if status == "ERROR" else None
    if exc is None and reply is None and finish_reason not in TRUNCATED:
        return None
    return classify(exc, raised_in=raised_in, last_finish_reason=finish_reason, reply=reply)
