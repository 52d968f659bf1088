"""Spans an OTLP backend answered it did not take: the ``partial_success`` of its export response.

OTLP lets a backend accept a request and still reject some of its spans (too old, over a quota, invalid): it
answers success with ``partial_success.rejected_spans`` and a message. The SDK's exporters read no response
body, over HTTP or gRPC, and return ``SUCCESS``: a run counted such spans as sent, and nothing told the user.
:func:`counting_rejections` hooks the exporter's own client so the answers are read and the rejected spans
counted (and logged), and :class:`RejectionCountingExporter` hands the count to whoever asks after an export.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from agenteval_instrumentation.masking import masked_logger

logger = masked_logger(__name__)

CREDENTIAL_PROVIDER_VARIABLES = (
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
)
"""With one of these set, the HTTP exporter builds its own session (from a credential provider's entry point);
agenteval then leaves the session alone and reads no partial success."""


PAYLOAD_TOO_LARGE = 413


class Rejections:
    """A running count of the spans a backend rejected, taken by the exporter's one caller after each export."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending = 0
        self._warned = False
        self._too_large = False

    def add(self, rejected: int, message: str) -> None:
        if rejected <= 0 and not message:
            return
        with self._lock:
            self._pending += max(rejected, 0)
            first, self._warned = not self._warned, True
        # The first at WARNING (a run's summary counts them all); the rest at DEBUG, not one line per batch.
        (logger.warning if first else logger.debug)(
            "agenteval: the OTLP backend rejected %d span(s) of an export it accepted: %s",
            rejected,
            message or "(no reason given)",
        )

    def add_not_taken(self, spans: int) -> None:
        """Spans of a successful export that were not taken, for a reason already logged (a part refused)."""
        with self._lock:
            self._pending += spans

    def take(self) -> int:
        with self._lock:
            taken, self._pending = self._pending, 0
        return taken

    def too_large(self) -> None:
        """The backend refused an export for its size (HTTP 413): the spans may go in smaller exports."""
        with self._lock:
            self._too_large = True

    def take_too_large(self) -> bool:
        with self._lock:
            said, self._too_large = self._too_large, False
        return said

    def read(self, body: bytes) -> None:
        """An export response's body: a protobuf ``ExportTraceServiceResponse``, or empty."""
        if not body:
            return
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        try:
            answer = ExportTraceServiceResponse.FromString(body)
        except Exception:  # a backend's own page, say: it answered success, so the spans count as taken
            logger.debug("agenteval: an OTLP export response was not an ExportTraceServiceResponse")
            return
        if answer.HasField("partial_success"):
            self.add(answer.partial_success.rejected_spans, answer.partial_success.error_message)


class RejectionCountingExporter(SpanExporter):
    """``exporter``, plus :meth:`take_rejected`: the spans its backend did not take since the last call, of exports
    that succeeded. An export the backend refuses for its size goes again in halves until each part fits (a
    backend's request limit is no reason to lose 512 spans with long prompts): it succeeds if any part was taken,
    and the parts that were not count as rejected; a single span over the limit fails."""

    def __init__(self, exporter: SpanExporter, rejections: Rejections) -> None:
        self.exporter = exporter
        self.rejections = rejections

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        not_taken = self._export_in_parts(spans)
        if spans and not_taken == len(spans):
            return SpanExportResult.FAILURE
        self.rejections.add_not_taken(not_taken)
        return SpanExportResult.SUCCESS

    def _export_in_parts(self, spans: Sequence[ReadableSpan]) -> int:
        """Export ``spans``, in halves while the backend says the request is too large; the spans not taken."""
        try:
            result = self.exporter.export(spans)
        except Exception:
            # An exporter must not raise, but OpenTelemetry 1.27's HTTP one raises a dropped connection: raised out
            # of a split batch, its parts already taken were counted failed, and their partial successes' rejected
            # spans were taken off the next batch. This part alone is not taken.
            logger.exception("agenteval: the OTLP exporter raised")
            result = SpanExportResult.FAILURE
        too_large = self.rejections.take_too_large()  # taken every time: it says something of this export only
        if result is SpanExportResult.SUCCESS:
            return 0
        if not too_large or len(spans) < 2:
            return len(spans)
        half = len(spans) // 2
        return self._export_in_parts(spans[:half]) + self._export_in_parts(spans[half:])

    def take_rejected(self) -> int:
        return self.rejections.take()

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.exporter.force_flush(timeout_millis)


def http_exporter(rejections: Rejections) -> SpanExporter:
    """The SDK's OTLP/HTTP exporter, configured by the environment, with a session that reads each answer."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if any(os.environ.get(v) for v in CREDENTIAL_PROVIDER_VARIABLES):
        return OTLPSpanExporter()
    import requests

    def on_response(response: Any, *args: Any, **kwargs: Any) -> Any:
        if 200 <= response.status_code < 300:
            rejections.read(response.content)
        elif response.status_code == PAYLOAD_TOO_LARGE:
            rejections.too_large()
        return response

    session = requests.Session()
    session.hooks["response"].append(on_response)
    return OTLPSpanExporter(session=session, **_no_request_limit(OTLPSpanExporter))


def _no_request_limit(exporter_class: Callable[..., SpanExporter]) -> dict[str, Any]:
    """The argument that lifts the SDK's own request limit, where it has one (1.4x: 64 MiB by default): it drops a
    request over it unsent, with no 413 to split on, so a batch of 512 spans with long prompts captured was lost
    whole. The backend's own limit (its 413) is the one that counts, and a batch goes in parts until each fits."""
    if "max_request_size" in inspect.signature(exporter_class).parameters:
        return {"max_request_size": 0}  # 0: no limit
    return {}


def grpc_exporter(rejections: Rejections) -> SpanExporter:
    """The SDK's OTLP/gRPC exporter, configured by the environment, whose stub reads each answer.

    The exporter keeps its stub, and the stub class it makes a new one from when it reconnects; both are
    wrapped. An SDK that keeps it elsewhere gets the exporter as it is, with no partial success read."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter()
    stub, client = getattr(exporter, "_stub", None), getattr(exporter, "_client", None)
    if stub is None or client is None:
        logger.debug("agenteval: this OTLP/gRPC exporter keeps no stub; partial success is not read")
        return exporter

    def reading_stub(channel: Any) -> _ReadingStub:
        return _ReadingStub(stub(channel), rejections)

    # Through the instance's dict: the SDK's versions type these attributes differently (a class attribute in some).
    exporter.__dict__.update(_stub=reading_stub, _client=_ReadingStub(client, rejections))
    return exporter


def _too_large(error: Any) -> bool:
    """Whether a gRPC error is a server's refusal of a request past its size limit (a Collector's 4 MiB)."""
    import grpc

    code, details = getattr(error, "code", None), getattr(error, "details", None)
    if not callable(code) or not callable(details):
        return False
    return code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in str(details() or "").lower()


@functools.cache
def _refused_for_size() -> type[Exception]:
    """The error class (made once, on first use: grpc is imported only by an OTLP/gRPC exporter)."""
    import grpc

    class RefusedForSize(grpc.RpcError):
        """A request the backend refused for its size, as an error the SDK's exporter does not retry."""

        def __init__(self, error: Any) -> None:
            super().__init__(str(error))
            self._error = error

        def code(self) -> Any:
            return grpc.StatusCode.INVALID_ARGUMENT

        def details(self) -> str:
            return f"refused for its size ({self._error.details()}); agenteval sends it again in smaller parts"

        def trailing_metadata(self) -> Any:
            return ()

    return RefusedForSize


class _ReadingStub:
    """A trace service stub whose ``Export`` answers are read for rejected spans."""

    def __init__(self, stub: Any, rejections: Rejections) -> None:
        self._inner = stub
        self._rejections = rejections

    def Export(self, *args: Any, **kwargs: Any) -> Any:
        import grpc

        try:
            answer = self._inner.Export(*args, **kwargs)
        except grpc.RpcError as error:
            if not _too_large(error):
                raise
            # The SDK retries RESOURCE_EXHAUSTED until its timeout, and a request too large never fits: said as an
            # error it does not retry, the batch fails at once and goes again in halves (see run._export).
            self._rejections.too_large()
            raise _refused_for_size()(error) from error
        if answer is not None and answer.HasField("partial_success"):
            success = answer.partial_success
            self._rejections.add(success.rejected_spans, success.error_message)
        return answer
