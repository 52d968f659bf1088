"""The OTLP/gRPC receiver: ``opentelemetry.proto.collector.trace.v1.TraceService/Export``.

The request arrives as raw bytes (no deserializer), so a malformed one is answered INVALID_ARGUMENT with the
reason rather than failing inside gRPC; it is then decoded exactly as over HTTP. When the write queue is full
the answer is UNAVAILABLE with a RetryInfo (in ``grpc-status-details-bin``, as the gRPC status details, and in
``google.rpc.retryinfo-bin``, where the Python SDK's exporter reads it), which OTLP clients retry. gRPC itself
enforces the message size limit (RESOURCE_EXHAUSTED) and decompresses gzip.
"""

from __future__ import annotations

import hmac
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from google.protobuf.any_pb2 import Any as AnyMessage
from google.protobuf.duration_pb2 import Duration
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from agenteval_instrumentation.masking import masked_logger

from ..errors import AgentevalError
from ._budget import BODIES_AT_ONCE
from ._intake import BUSY, Intake
from ._protobuf import decode_protobuf
from ._settings import RETRY_AFTER_SECONDS

logger = masked_logger(__name__)

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
WORKERS = BODIES_AT_ONCE
"""Threads that receive and decode requests: as many as the body budget lets decode at once. A thread receives its
request whole before the budget is asked, so with more threads than that the others received a request only to
refuse it (16 senders of 18 MB requests were refused 1,091 times in 10 minutes), and each thread that had decoded
kept its own malloc arena's high-water mark: with 4, eight such senders took the collector to 2.6 GB, 1.8 GB with
glibc's arenas limited to one. Calls past them wait, unread, in gRPC's queue."""


class GrpcReceiver:
    """A gRPC server with the trace service only."""

    def __init__(self, address: tuple[str, int], intake: Intake, token: str | None, max_body_bytes: int) -> None:
        self.intake, self.token = intake, token
        handler = grpc.unary_unary_rpc_method_handler(
            self._export, request_deserializer=None, response_serializer=ExportTraceServiceResponse.SerializeToString
        )
        self.server = grpc.server(
            ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="agenteval-collect-grpc"),
            handlers=[grpc.method_handlers_generic_handler(SERVICE, {"Export": handler})],
            options=[
                ("grpc.max_receive_message_length", max_body_bytes),
                ("grpc.so_reuseport", 0),  # a second collector on the same port fails instead of sharing it
            ],
        )
        host, port = address
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            self.port = self.server.add_insecure_port(target)
        except RuntimeError as exc:
            raise AgentevalError(f"agenteval collect: cannot listen for gRPC on {target} ({exc})") from None
        if not self.port:
            raise AgentevalError(f"agenteval collect: cannot listen for gRPC on {target} (is the port in use?)")

    def start(self) -> None:
        self.server.start()

    def close(self, grace: float = 10.0) -> None:
        """Refuse new calls and let those in progress finish (up to ``grace`` seconds)."""
        self.server.stop(grace).wait()

    def _export(self, request: bytes, context: Any) -> ExportTraceServiceResponse:
        if self.token is not None:
            metadata = dict(context.invocation_metadata())
            scheme, _, given = str(metadata.get("authorization", "")).partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "a bearer token is required (authorization metadata)")
        # gRPC has read the whole message by now; its size still counts while it is decoded (see _budget).
        if not self.intake.take_body(len(request)):
            self._abort_busy(context, BUSY.message)
        try:
            answer = self.intake.receive(request, decode_protobuf)
        except Exception:  # a bug: the client hears INTERNAL, the collector carries on
            logger.exception("agenteval collect: failed on a gRPC request")
            context.abort(grpc.StatusCode.INTERNAL, "internal error in agenteval collect")
        finally:
            self.intake.bodies.give_back(len(request))
        if answer.outcome == "invalid":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, answer.message)
        if answer.outcome == "busy":
            self._abort_busy(context, answer.message)
        response = ExportTraceServiceResponse()
        if answer.rejected:
            response.partial_success.CopyFrom(
                ExportTracePartialSuccess(rejected_spans=answer.rejected, error_message=answer.message)
            )
        return response

    @staticmethod
    def _abort_busy(context: Any, message: str) -> None:
        """UNAVAILABLE with a RetryInfo, which OTLP clients retry after its delay."""
        retry = error_details_pb2.RetryInfo(retry_delay=Duration(seconds=RETRY_AFTER_SECONDS))
        detail = AnyMessage()
        detail.Pack(retry)
        status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message=message, details=[detail])
        context.set_trailing_metadata(
            (
                ("grpc-status-details-bin", status.SerializeToString()),
                ("google.rpc.retryinfo-bin", retry.SerializeToString()),
            )
        )
        context.abort(grpc.StatusCode.UNAVAILABLE, message)
