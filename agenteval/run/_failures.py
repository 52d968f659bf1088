"""Failure types: why a trial produced no answer, from the step that raised, and whether the cause
was infrastructure (the API that day) or the agent itself.

One classifier reads the exception, the span it was raised from, and what the runner saw (a
timeout, rate-limit retries). Provider errors are recognised through a registry of matchers that
look at the exception's HTTP status, error code and class name, so any SDK's errors map without
importing it. Plugins add matchers through the ``agenteval.failures`` entry-point group.
"""

from __future__ import annotations

import dataclasses
import datetime
import email.utils
import math
import re
import reprlib
import warnings
from collections.abc import Callable

from agenteval_instrumentation.capture import error_text
from agenteval_instrumentation.provider_errors import error_fields as _error_fields
from agenteval_instrumentation.provider_errors import read as _read
from agenteval_instrumentation.provider_errors import status_code
from agenteval_instrumentation.provider_errors import text as _text
from agenteval_instrumentation.text import exception_message

from .._plugins import FAILURES, Plugin, plugins
from ..store._views import SCORER_ERROR  # typed by the store's definition of outcomes, from the current scores

TOOL_ERROR = "tool_error"
LLM_ERROR = "llm_error"
TIMEOUT = "timeout"
TIMEOUT_AFTER_RATE_LIMIT = "timeout_after_rate_limit"
QUOTA_EXHAUSTED = "quota_exhausted"
MAX_STEPS_EXCEEDED = "max_steps_exceeded"
OUTPUT_TRUNCATED = "output_truncated"
EMPTY_OUTPUT = "empty_output"
INVALID_MODEL_OUTPUT = "invalid_model_output"
AGENT_ERROR = "agent_error"
"""An exception from the agent's own code, outside any model or tool step."""
SIMULATOR_ERROR = "simulator_error"
"""The simulated user (its model's API, or a simulator callable of the user's own) raised: the conversation could
not go on, through no fault of the agent's. Infrastructure."""

FAILURE_TYPES = (
    TOOL_ERROR,
    LLM_ERROR,
    TIMEOUT,
    TIMEOUT_AFTER_RATE_LIMIT,
    QUOTA_EXHAUSTED,
    MAX_STEPS_EXCEEDED,
    OUTPUT_TRUNCATED,
    EMPTY_OUTPUT,
    INVALID_MODEL_OUTPUT,
    AGENT_ERROR,
    SIMULATOR_ERROR,
    SCORER_ERROR,
)

RATE_LIMITED = "rate_limited"
"""Not a final type: the runner waits and retries; if the trial's time runs out it becomes
``timeout_after_rate_limit``."""


class MaxStepsExceeded(Exception):
    """Raise from an agent that gave up after its step budget."""


class InvalidModelOutput(Exception):
    """Raise from an agent when the model's output could not be used (bad JSON, unknown tool, ...)."""


class StreamEndedEarly(ConnectionError):
    """A streamed reply ended before the provider said it was finished (the connection went half-way)."""


class RequestTimedOut(ConnectionError):
    """A model request got no whole answer within its timeout (an answer sent a few bytes at a time), or a stream
    no event for that long (one kept open with keep-alives alone)."""


class UnreadableResponse(ConnectionError):
    """The provider (or a proxy before it) answered with a body that is not JSON (an error page, a cut body), with
    JSON whose parts are not of the API's shape, or (not streamed) with no finished reply: no choices, no reason."""


RETRIED = "agenteval_retried"
"""Set (True) on an exception raised after agenteval's model layer already retried it as far as it may:
the trial is then not retried again for the same rate limit, so the two layers never multiply retries."""


def retried(exc: BaseException) -> bool:
    """Whether agenteval's model layer gave up on ``exc`` after its own retries."""
    return getattr(exc, RETRIED, False) is True


RAISED_BY_SIMULATOR = "agenteval_raised_by_simulator"
"""Set (True) by the runner on an exception the simulated user raised. Its model's errors look like the agent's
(the same SDK, the same HTTP statuses), so only where it was raised tells them apart."""


def mark_raised_by_simulator(exc: BaseException) -> None:
    """Record that the simulated user, not the agent, raised ``exc``."""
    setattr(exc, RAISED_BY_SIMULATOR, True)


def raised_by_simulator(exc: BaseException) -> bool:
    """Whether the simulated user raised ``exc`` (see :func:`mark_raised_by_simulator`)."""
    return getattr(exc, RAISED_BY_SIMULATOR, False) is True


@dataclasses.dataclass(frozen=True)
class Failure:
    """A trial's failure: its type, whether infrastructure caused it, and the message."""

    type: str
    infrastructure: bool
    message: str


@dataclasses.dataclass(frozen=True)
class ProviderError:
    """What a matcher concluded about an exception: a failure type (or ``rate_limited``), and
    whether it is infrastructure; ``retry_after`` in seconds when the provider said."""

    type: str
    infrastructure: bool
    retry_after: float | None = None


Matcher = Callable[[BaseException], ProviderError | None]
_matchers: list[Matcher] = []
_plugin_names: dict[int, str] = {}
"""What each registered plugin's matcher is called in messages (by ``id``: the list above keeps it alive)."""


def register(matcher: Matcher) -> Matcher:
    """Add a matcher (first registered, first asked). Usable as a decorator."""
    _matchers.append(matcher)
    return matcher


def plugin_matcher(plugin: Plugin) -> Matcher:
    """The matcher an ``agenteval.failures`` plugin names."""
    matcher = plugin.load()
    if not callable(matcher):
        raise plugin.error(f"{type(matcher).__name__} is not callable (a matcher: exception -> ProviderError or None)")
    return matcher


_plugins_registered = False


def register_plugins() -> None:
    """Register every ``agenteval.failures`` plugin's matcher, once per process, after the matchers
    already registered (first registered, first asked). A plugin that cannot be loaded is an error and
    registers none: a run must not type its failures without a matcher the user installed."""
    global _plugins_registered
    if not _plugins_registered:
        for plugin, matcher in [(plugin, plugin_matcher(plugin)) for plugin in plugins(FAILURES)]:
            _plugin_names[id(register(matcher))] = plugin.describe()
        _plugins_registered = True


def _error_code(exc: BaseException) -> str:
    code = _read(exc, "code")
    if code is None:
        error = _error_fields(exc)
        code = dict.get(error, "code") or dict.get(error, "type")
    return _text(code or "").lower()


def _error_message(exc: BaseException) -> str:
    message = dict.get(_error_fields(exc), "message")
    return (message if isinstance(message, str) else exception_message(exc)).lower()


def _header(exc: BaseException, name: str) -> str | None:
    for holder in (exc, _read(exc, "response")):
        get = _read(_read(holder, "headers"), "get")
        try:
            value = get(name) if callable(get) else None
        except Exception:  # headers of the agent's own making, whose lookup breaks: none said
            value = None
        if value is not None:
            return _text(value)
    return None


def retry_after(exc: BaseException) -> float | None:
    """Seconds to wait that the provider asked for: ``retry-after-ms`` (OpenAI), else ``Retry-After`` in seconds
    or as an HTTP date (any of its three forms, read as GMT); None when it said nothing usable."""
    millis = _header(exc, "retry-after-ms")
    if millis is not None:
        try:
            found = _delay(float(millis) / 1000)
        except ValueError:
            found = None
        if found is not None:
            return found
    value = _header(exc, "retry-after") or _header(exc, "Retry-After")
    if value is None:
        return None
    try:
        return _delay(float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # asctime dates, and RFC 2822's "-0000": an HTTP date is always GMT
        when = when.replace(tzinfo=datetime.UTC)
    return _finite_wait((when - datetime.datetime.now(datetime.UTC)).total_seconds())


def _finite_wait(seconds: float) -> float | None:
    """A date's wait: one gone by is none (send again at once)."""
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def _delay(seconds: float) -> float | None:
    """A delay's wait: one below zero is no delay the provider meant (RFC 9110's are digits), so none was said, and
    the backoff applies rather than retries sent with no wait at all."""
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


STREAMED_ERROR_STATUS = {
    # Anthropic's error types, each with the status it comes with unstreamed (docs.anthropic.com/en/api/errors)
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
    # OpenAI's error codes, then its types (a code not named here is read by its type)
    "invalid_api_key": 401,
    "model_not_found": 404,
    "context_length_exceeded": 400,
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "server_error": 500,
}
"""The HTTP status each error type or code stands for, as an error event sent inside a stream carries it: the
stream began with a 200, so the SDKs raise it with that status (Anthropic) or none (OpenAI), and it is typed as
the status the same failure has unstreamed. OpenAI-compatible servers (vLLM, LiteLLM) put the status itself in the
error's ``code``."""
QUOTA_CODES = (
    "insufficient_quota",
    "quota_exceeded",
    "billing_hard_limit_reached",
    "resource_exhausted_quota",
    "billing_error",
)
QUOTA_MESSAGES = ("exceeded your current quota", "credit balance is too low", "billing_hard_limit")
"""How providers word an exhausted quota or credit: OpenAI's 429 ``insufficient_quota``, Anthropic's 400
"Your credit balance is too low to access the Anthropic API" and 402 ``billing_error``."""
PAYMENT_REQUIRED = 402
"""An account that cannot pay (Anthropic's ``billing_error``, a gateway's credits run out): the day's quota, never
the agent's doing."""


def _quota(exc: BaseException, code: str, status: int | None) -> bool:
    if status == PAYMENT_REQUIRED:
        return True
    message = _error_message(exc)
    return any(q in code for q in QUOTA_CODES) or any(q in message for q in QUOTA_MESSAGES)


def failure_status(exc: BaseException) -> int | None:
    """The HTTP status of the provider's failure: the response's error status, or for an error sent inside a stream
    (whose response was a 200, or is not on the exception) the status the same error has unstreamed."""
    status = status_code(exc)
    if status is not None and status >= 400:
        return status
    error = _error_fields(exc)
    for value in (_read(exc, "code"), dict.get(error, "code"), dict.get(error, "type")):
        text = _text(value if value is not None else "").lower()
        if text.isascii() and text.isdigit() and 400 <= int(text) < 600:  # a compatible server's status as the code
            return int(text)
        if text in STREAMED_ERROR_STATUS:
            return STREAMED_ERROR_STATUS[text]
    return None


@register
def _http_status(exc: BaseException) -> ProviderError | None:
    code = _error_code(exc)
    if status_code(exc) is None and not code:
        return None
    status = failure_status(exc)
    if _quota(exc, code, status):
        return ProviderError(QUOTA_EXHAUSTED, infrastructure=True)
    if status == 429 or "rate_limit" in code:
        return ProviderError(RATE_LIMITED, infrastructure=True, retry_after=retry_after(exc))
    if status is not None and (status >= 500 or status in (408, 409)):  # 529: Anthropic overloaded
        return ProviderError(LLM_ERROR, infrastructure=True, retry_after=retry_after(exc))
    if status is not None and 400 <= status < 500:
        return ProviderError(LLM_ERROR, infrastructure=False)  # a bad request is the agent's doing
    return None


_CONNECTION_NAMES = frozenset(
    {
        "APIConnectionError",  # openai's and anthropic's, APITimeoutError included (a subclass)
        "TransportError",  # httpx's and httpx2's: connect and read errors, a stream dropped half-way
        "ServiceUnavailableError",
        "InternalServerError",
        "OverloadedError",
    }
)
"""Class names (anywhere in an exception's class hierarchy) that mean the API could not be reached or answer."""


@register
def _connection(exc: BaseException) -> ProviderError | None:
    if isinstance(exc, ConnectionError) or any(cls.__name__ in _CONNECTION_NAMES for cls in type(exc).__mro__):
        return ProviderError(LLM_ERROR, infrastructure=True)
    return None


def provider_error(exc: BaseException) -> ProviderError | None:
    """What the registry makes of ``exc``, or None when no matcher recognises it."""
    return _matched(exc)[0]


def _matched(exc: BaseException) -> tuple[ProviderError | None, list[str]]:
    """What the first matcher that recognises ``exc`` makes of it, and what went wrong with the matchers asked
    before it. A matcher is the user's or a plugin's code: one that raises or answers something unusable is
    passed over for this exception (and warned of once), so it costs the typing of one failure, never the run."""
    faults = []
    for matcher in list(_matchers):
        try:
            found = matcher(exc)
        except (Exception, SystemExit) as error:  # not a KeyboardInterrupt: that may be the user's Ctrl-C
            faults.append(_fault(matcher, f"raised {error_text(error)}"))
            continue
        problem = _unusable(found)
        if problem is not None:
            faults.append(_fault(matcher, problem))
        elif found is not None:
            return found, faults
    return None, faults


_MATCHABLE = frozenset(FAILURE_TYPES) - {SCORER_ERROR} | {RATE_LIMITED}
"""The types a matcher may give: a trial's failure types and ``rate_limited`` (a scorer_error is never a trial's)."""


def _unusable(found: object) -> str | None:
    """What is wrong with a matcher's answer, or None when it is one (a usable ProviderError, or None)."""
    if found is None:
        return None
    if not isinstance(found, ProviderError):
        return f"returned a {type(found).__name__}, not an agenteval.run.ProviderError or None"
    if found.type not in _MATCHABLE:
        return f"returned the type {reprlib.repr(found.type)}, not one of {', '.join(sorted(_MATCHABLE))}"
    if not isinstance(found.infrastructure, bool):
        return f"returned infrastructure={reprlib.repr(found.infrastructure)}, not True or False"
    wait = found.retry_after
    if wait is not None and (isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait < math.inf):
        return f"returned retry_after={reprlib.repr(wait)}, not None or a number of seconds (0 or more)"
    return None


_warned: set[str] = set()


def _fault(matcher: Matcher, problem: str) -> str:
    """A matcher's fault as the failure's message tells it; warned of once per matcher and process."""
    name = _plugin_names.get(id(matcher)) or f"{getattr(matcher, '__module__', '?')}.{_named(matcher)}"
    problem = " ".join(problem.split())  # one line, whatever the matcher's message holds
    if name not in _warned:
        _warned.add(name)
        warnings.warn(
            f"the failure matcher {name} {problem}; the failures it is asked about are typed without it", stacklevel=2
        )
    return f"the failure matcher {name}, which {problem}"


def _named(matcher: Matcher) -> str:
    return str(getattr(matcher, "__qualname__", None) or type(matcher).__qualname__)


_BLANK = re.compile(r"[\s\u200b\u200c\u200d\u2060\ufeff]*")
"""A reply with nothing to read: whitespace, and the zero-width characters ``str.strip`` leaves (a reply of
zero-width spaces scored as a wrong answer)."""

TRUNCATED = ("length", "max_tokens")
"""Finish reasons that say the model stopped at its token limit."""


def classify(
    exc: BaseException | None,
    *,
    raised_in: str | None = None,
    timed_out: bool = False,
    timed_out_in_simulator: bool = False,
    rate_limit_retries: int = 0,
    last_finish_reason: str | None = None,
    reply: str | None = None,
) -> Failure | None:
    """The failure of a trial, or None when it produced an answer.

    ``raised_in`` is the GenAI operation of the span the exception was raised from (``chat``,
    ``execute_tool``), when it came from a decorated step. ``timed_out_in_simulator``: the time ran out while the
    simulated user was writing, which is its failure, not the agent's.
    """
    if timed_out and timed_out_in_simulator:
        return Failure(SIMULATOR_ERROR, True, "the simulated user had not answered when the trial reached its timeout")
    if timed_out:
        if rate_limit_retries:
            message = f"timed out after {rate_limit_retries} rate-limited attempt(s)"
            return Failure(TIMEOUT_AFTER_RATE_LIMIT, True, message)
        return Failure(TIMEOUT, False, "the trial ran past its timeout")
    if exc is not None:
        message = error_text(exc)  # content: redacted and masked, or only the type with capture off
        if raised_by_simulator(exc):
            return Failure(SIMULATOR_ERROR, True, f"the simulated user failed: {message}")
        if isinstance(exc, MaxStepsExceeded):
            return Failure(MAX_STEPS_EXCEEDED, False, message)
        if isinstance(exc, InvalidModelOutput):
            return Failure(INVALID_MODEL_OUTPUT, False, message)
        if raised_in == "execute_tool":
            return Failure(TOOL_ERROR, False, message)
        found, faults = _matched(exc)
        if faults:  # the message says the type may not be what the matcher would have said
            message = f"{message} (typed without {'; '.join(faults)})"
        if found is not None:
            kind = TIMEOUT_AFTER_RATE_LIMIT if found.type == RATE_LIMITED else found.type
            return Failure(kind, found.infrastructure, message)
        if raised_in == "chat":
            return Failure(LLM_ERROR, False, message)
        return Failure(AGENT_ERROR, False, message)
    if last_finish_reason in TRUNCATED:
        return Failure(OUTPUT_TRUNCATED, False, "the model's last output stopped at its token limit")
    if not reply or _BLANK.fullmatch(reply):
        return Failure(EMPTY_OUTPUT, False, "the agent returned an empty reply")
    return None
