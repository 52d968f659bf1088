"""The OTLP backend the standard variables name receives spans masked as the store has them: the spans of other
instrumentations in their attributes, events, links and status, and every span's resource; agenteval's own spans
keep their content (masked where it was captured). A real OTLP/HTTP receiver on loopback (tests/conftest.py) and
the real OTLP exporter."""

from __future__ import annotations

import json

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link
from test_collect_masking import SECRETS, other_instrumentations_spans

from agenteval.run import evaluate
from agenteval.store import Store
from agenteval.tracing import otlp_exporter_from_env, setup_tracing
from agenteval_exporters import ParquetSpanExporter
from agenteval_instrumentation import capture

LINK_SECRET = "lnk-PLANTED-5A6B7C8D"
OWN_RESOURCE_SECRET = "own-PLANTED-1E2F3A4B"


def own_and_linked_spans() -> list:
    """An agenteval span (content kept as captured) and another instrumentation's span with a link, under a
    resource holding a secret."""
    memory = InMemorySpanExporter()
    resource = Resource({"service.name": "shop", "deployment.token": OWN_RESOURCE_SECRET})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("agenteval_instrumentation").start_as_current_span("execute_tool call") as span:
        span.set_attribute("gen_ai.tool.call.arguments", '{"api_key": "shown-on-purpose"}')  # mask_secrets=False
        linked = span.get_span_context()
    link = Link(linked, {"batch.url": f"https://queue.example/b?sig={LINK_SECRET}"})
    provider.get_tracer("opentelemetry.instrumentation.celery").start_span("run task", links=[link]).end()
    return list(memory.get_finished_spans())


def test_the_otlp_backend_receives_spans_masked_as_the_store_has_them(receiver, tmp_path, monkeypatch):
    """The copy for the backend went out raw: an HTTP client's URL with ``?api-key=``, its Authorization header,
    an exception's message, a status message and the resource's command line reached the backend as made, while
    the store masked them."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.endpoint)
    spans = other_instrumentations_spans(20) + own_and_linked_spans()
    exporter = otlp_exporter_from_env()
    assert exporter is not None
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    exporter.shutdown()
    parquet = ParquetSpanExporter(tmp_path / "store")
    parquet.export(spans)
    parquet.shutdown()

    sent = b"".join(receiver.bodies)
    for what, secret in {**SECRETS, "link": LINK_SECRET, "own resource": OWN_RESOURCE_SECRET}.items():
        assert secret.encode() not in sent, what
    assert len(receiver.spans) == len(spans) == 42
    stored = {row["span_id"]: row for row in Store(tmp_path / "store").rows("SELECT * FROM spans")}
    assert len(stored) == 42
    for span in receiver.spans:  # what the backend has is what the store has (which adds its derived names)
        row = stored[span["span_id"]]
        attributes = json.loads(row["attributes"])
        assert span["attributes"] == {name: attributes[name] for name in span["attributes"]}, span["name"]
        assert span["resource"] == json.loads(row["resource"])
        assert span["status_message"] == (row["status_message"] or "")
        assert [e[1] for e in span["events"]] == [e["attributes"] for e in json.loads(row["events"] or "[]")]
    post = next(s for s in receiver.spans if s["name"] == "POST")
    assert post["attributes"]["http.url"].startswith("https://api.example.com/v1/search?api-key=***&page=")
    assert post["attributes"]["http.request.header.authorization"] == "***"
    assert post["attributes"]["http.response.status_code"] == 500
    assert post["status_message"] == "refused token=***"
    assert post["resource"]["process.command_line"] == "python app.py --password=***"
    chat = next(s for s in receiver.spans if s["name"] == "ChatCompletion")
    assert chat["attributes"]["llm.model_name"] == "gpt-4o-mini" and chat["attributes"]["session.id"] == "session-4242"
    assert "password='***' refused" in chat["events"][0][1]["exception.message"]
    own = next(s for s in receiver.spans if s["name"] == "execute_tool call")
    assert own["attributes"]["gen_ai.tool.call.arguments"] == '{"api_key": "shown-on-purpose"}'
    assert own["resource"] == {"service.name": "shop", "deployment.token": "***"}
    task = next(s for s in receiver.spans if s["name"] == "run task")
    assert task["links"] == [{"batch.url": "https://queue.example/b?sig=***"}]


def test_an_application_that_turns_masking_off_sends_spans_as_made(receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.endpoint)
    monkeypatch.setattr(capture.config, "mask_secrets", False)
    exporter = otlp_exporter_from_env()
    assert exporter is not None
    assert exporter.export(other_instrumentations_spans(1)) == SpanExportResult.SUCCESS
    exporter.shutdown()
    post = next(s for s in receiver.spans if s["name"] == "POST")
    assert SECRETS["url key"] in post["attributes"]["http.url"]


def test_setup_tracing_sends_other_instrumentations_spans_masked(receiver, tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.endpoint)
    key = "qk-PLANTED-2B3C4D5E"
    tracing = setup_tracing(tmp_path / "store")
    try:
        with trace.get_tracer("opentelemetry.instrumentation.httpx").start_as_current_span("GET") as span:
            span.set_attribute("url.full", f"https://gw.example/v1?api-key={key}&page=2")
        assert tracing.flush()
    finally:
        tracing.shutdown()
    assert key.encode() not in b"".join(receiver.bodies)
    (get,) = receiver.spans
    assert get["attributes"] == {"url.full": "https://gw.example/v1?api-key=***&page=2"}


def test_a_runs_spans_reach_the_backend_masked(receiver, tmp_path, monkeypatch):
    """A run sends its spans itself (after scoring): an agent's HTTP client span went to the backend raw."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.endpoint)
    key = "qk-PLANTED-6F7A8B9C"

    def agent(question: str) -> str:
        with trace.get_tracer("opentelemetry.instrumentation.requests").start_as_current_span("GET") as span:
            span.set_attribute("http.url", f"https://gw.example/v1?key={key}")
            span.set_attribute("http.request.header.x-api-key", key)
        return "4"

    experiment = evaluate(agent, "arithmetic", cases=3, attempts=1, store=tmp_path / "s", progress="none")
    (stored,) = Store(tmp_path / "s").rows("SELECT count(*) AS n FROM spans WHERE experiment_id = ?", [experiment.id])
    assert len(receiver.spans) == stored["n"] == experiment.summary.otlp.spans_sent
    assert key.encode() not in b"".join(receiver.bodies)
    gets = [s for s in receiver.spans if s["name"] == "GET"]
    assert len(gets) == 3
    for get in gets:
        assert get["attributes"]["http.url"] == "https://gw.example/v1?key=***"
        assert get["attributes"]["http.request.header.x-api-key"] == "***"
