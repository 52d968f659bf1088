"""Recording a decorated function's call on its span: start, success, error, streams.

Imported on the first call of any decorated function (see ``_wrap``), with the OpenTelemetry API.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from . import attributes as A
from . import capture
from ._steps import Step, error_type
from .masking import masked_logger
from .messages import StreamedMessage
from .provider_errors import error_attributes
from .responses import ResponseInfo, chunk_text, read_chunk_into
from .version import __version__

logger = masked_logger(__name__)

tracer = trace.get_tracer("agenteval_instrumentation", __version__)


def start(step: Step, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Span, bool]:
    """Start the step's span (not yet current); returns it and whether content is captured."""
    capturing = step.capturing()
    bound = step.binder.bind(args, kwargs) if step.needs_arguments(capturing) else None
    span = tracer.start_span(step.name_for(bound), kind=step.kind)
    if not span.is_recording():
        return span, False
    try:
        span.set_attributes(step.start_attributes(bound, capturing))
    except Exception:  # the span still says what it is (its operation, tool or model), without the call's details
        span.set_attributes(step.static_attributes)
        logger.debug("agenteval: could not record the arguments of %s", step.span_name, exc_info=True)
    return span, capturing


def traced(span: Span) -> bool:
    """False when there is no SDK (or no valid span): then the call runs untouched."""
    return span.is_recording() or span.get_span_context().is_valid


def succeed(span: Span, step: Step, result: Any, capturing: bool) -> None:
    if not span.is_recording():
        return
    try:
        span.set_attributes(step.end_attributes(span, result, capturing))
    except Exception:
        logger.debug("agenteval: could not record the result of %s", step.span_name, exc_info=True)


STATUS_MESSAGE_LIMIT = 1000


def record_error(span: Span, exc: BaseException) -> None:
    """Exception event, status ERROR and ``error.type``; the caller re-raises.

    The message and stack trace are content: recorded as :mod:`.capture` allows (redacted, secrets
    masked; with capture off, the type and frames only).
    """
    if not span.is_recording():
        return
    kind = error_type(exc)
    span.set_attribute(A.ERROR_TYPE, kind)
    for name, value in error_attributes(exc).items():  # what the classifier reads when it types the failure from it
        span.set_attribute(name, value)  # one by one: the oldest API's set_attributes takes an invariant dict
    message = capture.error_message(exc, capture.config.max_string)
    span.add_event(
        "exception",
        {
            "exception.type": kind,
            capture.EXCEPTION_MESSAGE: message,
            capture.EXCEPTION_STACKTRACE: capture.error_stacktrace(exc, message),
            "exception.escaped": "False",
        },
    )
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {message}"[:STATUS_MESSAGE_LIMIT]))


class Stream:
    """What a stream has produced so far: chunk count, first-chunk time, text, usage."""

    __slots__ = (
        "all_text",
        "capturing",
        "chunks",
        "closed_early",
        "count",
        "first_ms",
        "info",
        "message",
        "started",
        "text_size",
        "texts",
    )

    def __init__(self, capturing: bool) -> None:
        self.capturing = capturing
        self.started = time.monotonic_ns()
        self.count = 0
        self.first_ms: float | None = None
        self.chunks: list[Any] = []
        self.texts: list[str] = []
        self.text_size = 0
        self.all_text = True
        self.closed_early = False
        self.info = ResponseInfo()
        self.message = StreamedMessage()

    def add(self, chunk: Any) -> None:
        if self.count == 0:
            self.first_ms = (time.monotonic_ns() - self.started) / 1e6
        self.count += 1
        try:
            read_chunk_into(self.info, chunk)
            if not self.capturing:
                return
            if len(self.chunks) < capture.config.max_items:
                self.chunks.append(chunk)
            self.message.add(chunk, self.text_size <= capture.config.max_length)
            text = chunk_text(chunk)
            if text is None:
                self.all_text = self.all_text and _is_metadata(chunk)
            elif self.text_size <= capture.config.max_length:  # keep what will be recorded, no more
                self.texts.append(text)
                self.text_size += len(text)
        except Exception:
            logger.debug("agenteval: could not read a stream chunk", exc_info=True)

    def text(self) -> str | None:
        return "".join(self.texts) if self.all_text and (self.texts or not self.chunks) else None

    def finish(self, span: Span, step: Step) -> None:
        if not span.is_recording():
            return
        try:
            attributes: dict[str, Any] = {A.STREAM_CHUNKS: self.count}
            if self.first_ms is not None:
                attributes[A.STREAM_FIRST_CHUNK_MS] = self.first_ms
            if self.closed_early:
                attributes[A.STREAM_CLOSED_EARLY] = True
            attributes.update(step.stream_end_attributes(span, self, self.capturing))
            span.set_attributes(attributes)
        except Exception:
            logger.debug("agenteval: could not record the stream of %s", step.span_name, exc_info=True)


_METADATA_KEYS = frozenset(("usage", "type", "choices", "message", "delta"))


def _is_metadata(chunk: Any) -> bool:
    """A chunk with no text that still belongs to a text stream (usage or stop events)."""
    if chunk is None:
        return True
    if isinstance(chunk, dict):
        return not _METADATA_KEYS.isdisjoint(chunk)
    return not isinstance(chunk, (int, float, bytes, list, tuple))


def run_in(ctx: context_api.Context, span: Span, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """Call ``fn`` with the span current; an exception is recorded on the span and re-raised."""
    token = context_api.attach(ctx)
    try:
        return fn(*args, **kwargs)
    except BaseException as exc:
        record_error(span, exc)
        raise
    finally:
        context_api.detach(token)


async def aclose_in(ctx: context_api.Context, span: Span, generator: AsyncGenerator[Any, Any]) -> None:
    """``generator.aclose()`` with the span current; what closing raises (its cleanup failed, or it went on
    yielding) is recorded on the span and re-raised, as it is without the decorator."""
    token = context_api.attach(ctx)
    try:
        await generator.aclose()
    except BaseException as exc:
        record_error(span, exc)
        raise
    finally:
        context_api.detach(token)
