"""The OTLP/HTTP receiver: ``POST /v1/traces`` in protobuf or JSON, gzip, deflate or plain.

Answers as the OTLP specification says: 200 with an ``ExportTraceServiceResponse`` (its ``partial_success``
counting rejected spans and giving the first reason), 400 with a ``google.rpc.Status`` saying why a request
cannot be read, 401 without the bearer token when one is required, 413 past the body limit (compressed or
not, so a gzip bomb stops at the limit), 415 for another content type or encoding, and 503 with
``Retry-After`` when the write queue is full. Error bodies are encoded like the request (JSON or protobuf).

A threaded server from the standard library: a request costs ~0.1 ms of HTTP against ~3 ms to decode the
512 spans the SDK sends at a time, so a faster HTTP layer would not show, and its parser is well worn.
"""

from __future__ import annotations

import email.utils
import hmac
import logging
import re
import socket
import sys
import threading
import time
import zlib
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from agenteval_instrumentation.masking import masked_logger

from ._deadlines import BodyDeadlines
from ._decode import Decoded
from ._intake import BUSY, Answer, Intake
from ._json import decode_json
from ._protobuf import decode_protobuf
from ._settings import DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_CONNECTIONS, LISTEN_BACKLOG, RETRY_AFTER_SECONDS

logger = masked_logger(__name__)

TRACES_PATH = "/v1/traces"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_DECODERS: dict[str, Callable[[bytes], Decoded]] = {PROTOBUF: decode_protobuf, JSON: decode_json}
_STATUS_CODES = {
    HTTPStatus.BAD_REQUEST: code_pb2.INVALID_ARGUMENT,
    HTTPStatus.UNAUTHORIZED: code_pb2.UNAUTHENTICATED,
    HTTPStatus.NOT_FOUND: code_pb2.NOT_FOUND,
    HTTPStatus.METHOD_NOT_ALLOWED: code_pb2.UNIMPLEMENTED,
    HTTPStatus.LENGTH_REQUIRED: code_pb2.INVALID_ARGUMENT,
    HTTPStatus.REQUEST_TIMEOUT: code_pb2.DEADLINE_EXCEEDED,
    HTTPStatus.REQUEST_ENTITY_TOO_LARGE: code_pb2.RESOURCE_EXHAUSTED,
    HTTPStatus.UNSUPPORTED_MEDIA_TYPE: code_pb2.INVALID_ARGUMENT,
    HTTPStatus.SERVICE_UNAVAILABLE: code_pb2.UNAVAILABLE,
    HTTPStatus.INTERNAL_SERVER_ERROR: code_pb2.INTERNAL,
}


_DECIMAL = re.compile(r"[0-9]+")
_HEX_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")


class TooLarge(Exception):
    """The body (as sent, or once decompressed) passes the limit."""


class _Refusal(Exception):
    def __init__(self, status: HTTPStatus, message: str, *, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.close = status, close


class HttpReceiver(ThreadingHTTPServer):
    """A thread per connection; keep-alive; stops without waiting for idle connections."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        intake: Intake,
        token: str | None,
        max_body_bytes: int,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        *,
        body_timeout: float = DEFAULT_BODY_TIMEOUT,
        listen: bool = True,
        on_closed: Callable[[], None] | None = None,
    ) -> None:
        """With ``listen=False`` nothing is bound: connections come through :meth:`hand_over` (a worker
        process of :mod:`._workers`, whose parent accepts them), and ``on_closed`` is told of each one's end."""
        self.on_closed = on_closed
        self.intake, self.token, self.max_body_bytes = intake, token, max_body_bytes
        self.max_connections = max_connections
        self.deadlines = BodyDeadlines(body_timeout)
        """Each body's whole-body deadline (see :mod:`._deadlines`)."""
        self.connections: set[socket.socket] = set()
        self.waiting: dict[socket.socket, None] = {}
        """The connections waiting for their next request (whose request line or headers have not all arrived),
        the longest-waiting first."""
        self.connections_lock = threading.Condition()
        self.busy = 0  # requests being answered: close() lets them send their answer
        self.listening = listen
        super().__init__(address, _Handler, bind_and_activate=listen)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def verify_request(self, request: Any, client_address: Any) -> bool:
        """A thread per connection, up to ``max_connections``, so that a client that opens connections without end
        cannot exhaust the process. Past that, the connection that has waited longest for its next request is
        closed to make room (clients reconnect); only when every one is in the middle of a request is the new one
        closed at once. Before, a new one always was: 256 idle connections, or 256 senders of a header byte a
        second, shut every other sender out."""
        with self.connections_lock:
            if len(self.connections) < self.max_connections:
                return True
            if not self.waiting:
                return False
            longest = next(iter(self.waiting))
            del self.waiting[longest]
        try:
            longest.shutdown(socket.SHUT_RDWR)  # its thread's read ends, and the thread with it
        except OSError:
            pass
        return True

    def waits_for_request(self, connection: socket.socket, waits: bool) -> None:
        """Mark ``connection`` as waiting for its next request (it may be closed to make room), or not."""
        with self.connections_lock:
            self.waiting.pop(connection, None)
            if waits:
                self.waiting[connection] = None

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def hand_over(self, connection: socket.socket, client_address: Any) -> None:
        """Serve a connection accepted elsewhere, as if this server had accepted it."""
        if self.verify_request(connection, client_address):
            self.process_request(connection, client_address)
        else:
            self.shutdown_request(connection)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
            self.waiting.pop(request, None)
        super().shutdown_request(request)
        if self.on_closed is not None:
            self.on_closed()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-request (a reset, a broken pipe: a client's timeout, a load balancer) is
        ordinary, and logged at debug level; anything else through logging, with its traceback. socketserver's
        own printed a traceback to stderr for either, so a production collector's output filled with them."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            logger.debug("agenteval collect: a client went away mid-request: %s", error)
            return
        logger.error("agenteval collect: a request could not be answered", exc_info=error)

    def close(self, grace: float = 10.0) -> None:
        """Stop accepting, let requests in progress send their answer (up to ``grace`` seconds), then end the
        connections still open (idle ones would wait for a next request)."""
        if self.listening:
            self.shutdown()
        self.server_close()
        with self.connections_lock:
            self.connections_lock.wait_for(lambda: self.busy == 0, grace)
            for connection in list(self.connections):
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self.deadlines.close()


class _Handler(BaseHTTPRequestHandler):
    server: HttpReceiver
    protocol_version = "HTTP/1.1"
    server_version = "agenteval-collect"
    timeout = 120  # an idle keep-alive connection is closed after this many seconds
    # The answer goes out as headers then body: with Nagle's algorithm the body waits for the client's delayed
    # ACK of the headers (40 ms a request on Linux), which made keep-alive clients ~3x slower.
    disable_nagle_algorithm = True

    def handle_one_request(self) -> None:
        self.server.waits_for_request(self.connection, True)
        super().handle_one_request()

    def parse_request(self) -> bool:
        parsed = super().parse_request()  # reads the headers
        self.server.waits_for_request(self.connection, False)
        return parsed

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("agenteval collect: %s " + format, self.address_string(), *args)

    def do_POST(self) -> None:
        with self.server.connections_lock:
            self.server.busy += 1
        self._held, self._over_budget, self._body_started = 0, False, False
        try:
            self._post()
        finally:
            self._release_body()
            with self.server.connections_lock:
                self.server.busy -= 1
                self.server.connections_lock.notify_all()

    def _post(self) -> None:
        content_type = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        self._json = content_type == JSON
        try:
            if self.path.split("?")[0] != TRACES_PATH:
                raise _Refusal(HTTPStatus.NOT_FOUND, f"agenteval collect receives traces at {TRACES_PATH} only")
            self._authorize()
            decode = _DECODERS.get(content_type)
            if decode is None:
                raise _Refusal(
                    HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                    f"Content-Type {content_type or '(none)'} is not {PROTOBUF} or {JSON}",
                    close=True,
                )
            body = self._body()
            answer = self.server.intake.receive(body, decode)
        except _Refusal as refusal:
            drained = self._body_started or self._drain()  # first: the sender reads the answer once it has sent
            if refusal.close or not drained:
                self.close_connection = True
            self._status(refusal.status, str(refusal))
            return
        except ConnectionError:  # the client went away while sending: no one to answer (handle_error logs it)
            raise
        except TimeoutError:  # a sender that stopped in the middle of its body (a Content-Length past what it sent)
            logger.debug("agenteval collect: %s stopped sending its body", self.address_string())
            self.close_connection = True  # its reads are over: the next one would raise again
            self._status(HTTPStatus.REQUEST_TIMEOUT, f"the body did not arrive within {self.timeout} s")
            return
        except Exception:  # a bug: the client hears 500, the collector carries on
            logger.exception("agenteval collect: failed on a request")
            self._status(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error in agenteval collect")
            return
        self._answer(answer)

    def do_GET(self) -> None:
        self._status(HTTPStatus.METHOD_NOT_ALLOWED, f"POST OTLP traces to {TRACES_PATH}")

    do_PUT = do_DELETE = do_PATCH = do_GET

    def _authorize(self) -> None:
        token = self.server.token
        if token is None:
            return
        scheme, _, given = self.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            message = "a bearer token is required (Authorization: Bearer ...)"
            raise _Refusal(HTTPStatus.UNAUTHORIZED, message, close=True)

    def _body(self) -> bytes:
        limit = self.server.max_body_bytes
        encoding = self.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("identity", "none", "", "gzip", "deflate"):
            raise _Refusal(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE, f"Content-Encoding {encoding} is not gzip or deflate", close=True
            )
        try:
            raw = self._read_in_time(limit)
        except TooLarge:
            raise _Refusal(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the body is larger than {limit} bytes", close=True
            ) from None
        if self._over_budget:
            raise _Refusal(HTTPStatus.SERVICE_UNAVAILABLE, BUSY.message)
        if encoding in ("gzip", "deflate"):
            try:
                return _decompress(raw, encoding, limit, self._hold)
            except TooLarge:
                raise _Refusal(
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the body decompresses to more than {limit} bytes"
                ) from None
            except zlib.error as exc:
                raise _Refusal(HTTPStatus.BAD_REQUEST, f"the body is not valid {encoding} ({exc})") from None
        return raw

    def _read_in_time(self, limit: int) -> bytes:
        """The body, read before its deadline (see :mod:`._deadlines`); 408, closing the connection, past it."""
        deadlines, connection = self.server.deadlines, self.connection
        deadlines.start(connection)
        try:
            raw = self._read(limit)
        except (_Refusal, TimeoutError):  # a read cut short by the deadline finds the body shorter than announced
            if deadlines.stop(connection):
                logger.debug("agenteval collect: %s did not send its body in time", self.address_string())
                raise _Refusal(
                    HTTPStatus.REQUEST_TIMEOUT,
                    f"the body did not arrive whole within {deadlines.seconds:g} s (--body-timeout)",
                    close=True,
                ) from None
            raise
        except BaseException:
            deadlines.stop(connection)
            raise
        if deadlines.stop(connection):  # cut off just after its last byte: the connection reads nothing more
            self.close_connection = True
        return raw

    def _read(self, limit: int) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked(limit)
        length = self.headers.get("Content-Length")
        if length is None:
            raise _Refusal(HTTPStatus.LENGTH_REQUIRED, "Content-Length is required", close=True)
        if not _DECIMAL.fullmatch(length.strip()):  # str.isdigit() also takes "²", which int() refuses
            raise _Refusal(HTTPStatus.BAD_REQUEST, "Content-Length is not a number of bytes", close=True)
        size = int(length)
        if size > limit:
            raise TooLarge
        self._body_started = True
        return b"".join(self._read_exactly(size, "the body is shorter than its Content-Length"))

    def _read_chunked(self, limit: int) -> bytes:
        self._body_started = True
        chunks: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024).split(b";")[0].strip()
            # Hex digits only: int(line, 16) also reads "-1", and a negative size read the connection to its end.
            if not _HEX_SIZE.fullmatch(line):
                raise _Refusal(HTTPStatus.BAD_REQUEST, "malformed chunked body", close=True)
            size = int(line, 16)
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):  # trailers
                    pass
                return b"".join(chunks)
            total += size
            if total > limit:
                raise TooLarge
            chunks += self._read_exactly(size, "malformed chunked body")
            if self.rfile.readline(3) not in (b"\r\n", b"\n"):
                raise _Refusal(HTTPStatus.BAD_REQUEST, "malformed chunked body", close=True)

    def _drain(self) -> bool:
        """Read and drop the body of a request refused before its body was read (a wrong path, token or type, a
        Content-Length past the limit), up to ``DRAIN_BODIES`` times the limit; whether it was all read. The
        sender is still sending it and reads the answer only after: closing on it gave the sender a broken pipe
        instead of its 413 (a connection error, which OTLP exporters retry), and leaving it unread made it the
        next request on the connection (answered 400, which a keep-alive client read as its next answer)."""
        length = self.headers.get("Content-Length", "").strip()
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower() or not _DECIMAL.fullmatch(length):
            return False
        size = int(length)
        if size > DRAIN_BODIES * self.server.max_body_bytes:
            return False
        deadlines = self.server.deadlines  # a body trickled to a refused request holds its thread as long otherwise
        deadlines.start(self.connection)
        try:
            while size:
                piece = self.rfile.read1(min(size, READ_PIECE_BYTES))
                if not piece:
                    return False
                size -= len(piece)
        finally:
            if deadlines.stop(self.connection):
                size = -1  # its reading side is shut: the connection ends after the answer
        return size == 0

    def _read_exactly(self, size: int, short: str) -> list[bytes]:
        """``size`` bytes, in pieces as they arrive, each held in the body budget: a sender that stalls holds what
        it sent, not what it announced (a Content-Length alone holds nothing). Past the budget, the rest is read
        and dropped, so that the sender, still sending, then reads its 503 (answered before the end of its body,
        it got a broken pipe instead, and no Retry-After)."""
        pieces = []
        while size:
            piece = self.rfile.read1(min(size, READ_PIECE_BYTES))
            if not piece:
                raise _Refusal(HTTPStatus.BAD_REQUEST, short, close=True)
            size -= len(piece)
            if not self._over_budget:
                if self.server.intake.take_body(len(piece)):
                    self._held += len(piece)
                    pieces.append(piece)
                else:
                    self._over_budget = True
                    pieces.clear()
        return pieces

    def _hold(self, size: int) -> None:
        """Take ``size`` bytes of a decompressed body from the process's body budget (given back once the request
        is answered); busy when they do not fit."""
        if not self.server.intake.take_body(size):
            raise _Refusal(HTTPStatus.SERVICE_UNAVAILABLE, BUSY.message)
        self._held += size

    def _answer(self, answer: Answer) -> None:
        if answer.outcome == "invalid":
            self._status(HTTPStatus.BAD_REQUEST, answer.message)
        elif answer.outcome == "busy":
            self._status(HTTPStatus.SERVICE_UNAVAILABLE, answer.message)
        else:
            response = ExportTraceServiceResponse()
            if answer.rejected:
                response.partial_success.CopyFrom(
                    ExportTracePartialSuccess(rejected_spans=answer.rejected, error_message=answer.message)
                )
            if self._json:
                partial = (
                    {"partialSuccess": {"rejectedSpans": str(answer.rejected), "errorMessage": answer.message}}
                    if answer.rejected
                    else {}
                )
                self._send(HTTPStatus.OK, orjson.dumps(partial))
            else:
                self._send(HTTPStatus.OK, response.SerializeToString())

    def _status(self, status: HTTPStatus, message: str) -> None:
        code = _STATUS_CODES.get(status, code_pb2.UNKNOWN)
        if self._json:
            body = orjson.dumps({"code": code, "message": message})
        else:
            body = status_pb2.Status(code=code, message=message).SerializeToString()
        busy = status == HTTPStatus.SERVICE_UNAVAILABLE  # every 503 tells the client when to retry
        self._send(status, body, {"Retry-After": str(RETRY_AFTER_SECONDS)} if busy else None)

    def _release_body(self) -> None:
        """Give back the body budget this request holds: before its answer is sent, so that a sender told its
        request is done is not refused for the memory of that same request."""
        self.server.intake.bodies.give_back(self._held)
        self._held = 0

    def _send(self, status: HTTPStatus, body: bytes, headers: dict[str, str] | None = None) -> None:
        self._release_body()
        # The status line, headers and body in one write, built here rather than by send_response and
        # send_header, whose logging, per-header writes and date formatting cost ~0.5 µs a span at 512 spans a
        # request. One write also leaves Nagle's algorithm nothing to hold back.
        lines = [
            f"{self.protocol_version} {status.value} {status.phrase}",
            f"Server: {self.server_version}",
            f"Date: {_http_date()}",
            f"Content-Type: {JSON if self._json else PROTOBUF}",
            f"Content-Length: {len(body)}",
        ]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if self.close_connection:
            lines.append("Connection: close")
        lines += ["", ""]
        self.wfile.write("\r\n".join(lines).encode("latin-1") + body)
        if logger.isEnabledFor(logging.DEBUG):
            self.log_request(status.value, len(body))

    _json = False
    _held = 0  # bytes of the body budget this request holds
    _over_budget = False  # its body did not fit: read to its end and dropped, then answered 503
    _body_started = False  # some of its body has been read: a refusal now cannot drain it


DRAIN_BODIES = 4
"""A refused request's unread body is read and dropped (so that its sender reads the answer) up to this many times
``--max-body``; past that, the connection is closed."""


READ_PIECE_BYTES = 64 * 1024
"""A body is read (and decompressed) in pieces of up to this size, each held in the body budget as it arrives: what
a process holds past its budget is at most a piece per connection."""


_DATE: list[tuple[int, str]] = [(0, "")]


def _http_date() -> str:
    """The Date header's text, formatted once a second (a race between threads only formats it twice)."""
    now = int(time.time())
    second, text = _DATE[0]
    if second != now:
        text = email.utils.formatdate(now, usegmt=True)
        _DATE[0] = (now, text)
    return text


def _decompress(raw: bytes, encoding: str, limit: int, hold: Callable[[int], None]) -> bytes:
    """At most ``limit`` bytes out, however small the input (a gzip bomb stops here).

    A gzip body may be several members one after another (RFC 1952; a compressor that flushes per chunk sends
    that): all of them are the body, as ``gzip -d`` reads it. A decompressor stops at the end of the first, so
    reading one only acknowledged the request and dropped the spans of the others. Bytes after the end that are
    not another member (zero padding aside, which gzip allows) make the body invalid rather than ignored.
    ``hold`` is given the size of each piece decompressed (see ``READ_PIECE_BYTES``) before the next is made."""
    parts: list[bytes] = []
    size = 0
    while True:
        decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
        pending = raw
        while True:
            piece = min(READ_PIECE_BYTES, limit - size + 1)
            out = decompressor.decompress(pending, piece)
            size += len(out)
            if size > limit:
                raise TooLarge
            parts.append(out)
            hold(len(out))
            pending = decompressor.unconsumed_tail
            if decompressor.eof or (not pending and len(out) < piece):  # the end, or all input read
                break
        if not decompressor.eof:
            raise zlib.error("truncated")
        raw = decompressor.unused_data.lstrip(b"\0") if encoding == "gzip" else decompressor.unused_data
        if not raw:
            return parts[0] if len(parts) == 1 else b"".join(parts)
        if encoding != "gzip":
            raise zlib.error(f"{len(raw)} bytes after the end of the stream")
