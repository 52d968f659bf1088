"""Shared fixtures: one real SDK TracerProvider for the session, spans read back in memory."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler

import pytest
from loopback_server import LoopbackServer
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_exporter = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(_exporter))
trace.set_tracer_provider(_provider)


@pytest.fixture
def spans():
    """The finished spans of this test, read through the SDK's in-memory exporter."""
    _exporter.clear()
    yield _exporter
    _exporter.clear()


@pytest.fixture
def provider() -> TracerProvider:
    return _provider


@pytest.fixture(autouse=True)
def _isolated_store(tmp_path, monkeypatch):
    """Every test gets its own store folder, never the working directory's."""
    monkeypatch.setenv("AGENTEVAL_STORE", str(tmp_path / "store"))


NOWHERE = "http://127.0.0.1:9"
"""A loopback port nothing listens on (discard): a client that is not pointed at a test server goes here."""


@pytest.fixture(autouse=True)
def _no_model_api_reached(monkeypatch):
    """No test reaches a model API: the SDKs' variables point at loopback, and the keys are dummies, whatever
    the machine's environment says."""
    monkeypatch.setenv("OPENAI_BASE_URL", f"{NOWHERE}/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", NOWHERE)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-dummy")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-dummy")
    for name in ("OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "ANTHROPIC_AUTH_TOKEN", "OPENAI_ADMIN_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def model_server():
    """A loopback server speaking the OpenAI (chat, Responses) and Anthropic APIs (tests/model_servers.py)."""
    from model_servers import ModelServer

    with ModelServer() as server:
        yield server


class OTLPReceiver(LoopbackServer):
    """Decodes OTLP/HTTP protobuf trace exports, as a Collector would."""

    def __init__(self) -> None:
        self.spans: list[dict] = []
        self.headers_seen: list[dict] = []
        self.bodies: list[bytes] = []
        """Each request's body as it arrived: what a test asserts never reached the backend is looked for here."""
        self.reject_per_request = 0
        """How many spans of each request to reject with an OTLP partial success (not kept in ``spans``)."""
        self.rejected: list[str] = []
        self.max_body: int | None = None
        """Bodies longer than this are refused whole with 413 Payload Too Large, as a Collector's size limit does."""
        self.too_large = 0
        """How many requests were refused for their size."""
        self.requests = 0
        self.drop_requests: set[int] = set()
        """The requests (counted from 1) whose connection is closed with no answer, as a backend that goes away."""
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/traces"


def _value(value):
    """An OTLP AnyValue as Python."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return getattr(value, kind) if kind else None


def _attributes(key_values) -> dict:
    return {a.key: _value(a.value) for a in key_values}


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.requests += 1
        if self.server.requests in self.server.drop_requests:
            self.close_connection = True
            return
        if self.server.max_body is not None and len(body) > self.server.max_body:
            self.server.too_large += 1
            self.send_response(413)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        request = ExportTraceServiceRequest.FromString(body)
        self.server.bodies.append(body)
        self.server.headers_seen.append(dict(self.headers))
        answer = ExportTraceServiceResponse()
        to_reject = self.server.reject_per_request
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    if to_reject:
                        to_reject -= 1
                        self.server.rejected.append(span.span_id.hex())
                        answer.partial_success.rejected_spans += 1
                        answer.partial_success.error_message = "span too old"
                        continue
                    self.server.spans.append(
                        {
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_span_id": span.parent_span_id.hex() or None,
                            "name": span.name,
                            "attributes": _attributes(span.attributes),
                            "events": [(e.name, _attributes(e.attributes)) for e in span.events],
                            "links": [_attributes(link.attributes) for link in span.links],
                            "status_message": span.status.message,
                            "scope": scope_spans.scope.name,
                            "resource": resource,
                        }
                    )
        payload = answer.SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def receiver():
    server = OTLPReceiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
