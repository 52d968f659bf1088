"""``agenteval collect`` masks the secrets in the spans other instrumentations send (as the decorators mask what
they capture), in attributes, events, status and resource, and keeps every span; agenteval's own spans are stored
as they come (masked where they were captured, or deliberately not)."""

from __future__ import annotations

import json
import signal

import pytest
from collect_clients import collect_command, post
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from agenteval.collect import Collector
from agenteval.store import Store

SECRETS = {
    "url key": "qk-PLANTED-0A1B2C3D",
    "header": "hdr-PLANTED-4E5F6071",
    "prompt key": "sk-proj-PLANTEDprompt0123456789",
    "hf token": "hf_PLANTEDhuggingface0123456789abcdefgh",
    "exception": "pw-PLANTED-8293A4B5",
    "status": "tok-PLANTED-C6D7E8F9",
    "command line": "cl-PLANTED-0F1E2D3C",
}


def other_instrumentations_spans(count: int) -> list:
    memory = InMemorySpanExporter()
    resource = Resource(
        {"service.name": "shop", "process.command_line": f"python app.py --password={SECRETS['command line']}"}
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    http_tracer = provider.get_tracer("opentelemetry.instrumentation.requests")
    llm_tracer = provider.get_tracer("openinference.instrumentation.openai")
    for n in range(count):
        with http_tracer.start_as_current_span("POST") as span:
            span.set_attribute("http.url", f"https://api.example.com/v1/search?api-key={SECRETS['url key']}&page={n}")
            span.set_attribute("http.request.header.authorization", [f"Bearer {SECRETS['header']}"])
            span.set_attribute("http.response.status_code", 500)
            span.set_status(Status(StatusCode.ERROR, f"refused token={SECRETS['status']}"))
        with llm_tracer.start_as_current_span("ChatCompletion") as span:
            messages = [{"role": "user", "content": f"use {SECRETS['prompt key']} and {SECRETS['hf token']}"}]
            span.set_attribute("llm.input_messages", json.dumps(messages))
            span.set_attribute("llm.model_name", "gpt-4o-mini")
            span.set_attribute("llm.token_count.prompt", 12)
            span.set_attribute("session.id", "session-4242")
            span.record_exception(ConnectionError(f"login with password='{SECRETS['exception']}' refused"))
    return list(memory.get_finished_spans())


def test_secrets_in_other_instrumentations_spans_are_masked_and_every_span_is_kept(tmp_path):
    spans = other_instrumentations_spans(40)
    with Collector(tmp_path / "collected", port=0, grpc_port=None) as collector:
        exporter = HttpExporter(endpoint=collector.http_endpoint)
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        exporter.shutdown()
    assert collector.stats().spans_written == len(spans) == 80 and collector.stats().spans_rejected == 0
    rows = Store(collector.store).rows("SELECT * FROM spans")
    assert len(rows) == 80
    text = json.dumps(rows, default=str)
    for what, secret in SECRETS.items():
        assert secret not in text, what
    post = next(r for r in rows if r["name"] == "POST")
    chat = next(r for r in rows if r["name"] == "ChatCompletion")
    attributes = json.loads(post["attributes"])
    assert attributes["http.url"].startswith("https://api.example.com/v1/search?api-key=***&page=")
    assert attributes["http.request.header.authorization"] == "***"
    assert post["status_message"] == "refused token=***"
    assert "--password=***" in post["resource"]
    chat_attributes = json.loads(chat["attributes"])
    assert json.loads(chat_attributes["llm.input_messages"]) == [{"role": "user", "content": "use *** and ***"}]
    assert chat_attributes["llm.model_name"] == "gpt-4o-mini" and chat_attributes["session.id"] == "session-4242"
    assert "password='***' refused" in chat["events"]


def test_agentevals_own_spans_are_stored_as_they_come(tmp_path):
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("agenteval_instrumentation").start_as_current_span("execute_tool call") as span:
        span.set_attribute("gen_ai.tool.call.arguments", '{"api_key": "shown-on-purpose"}')  # mask_secrets=False
    with Collector(tmp_path / "collected", port=0, grpc_port=None) as collector:
        exporter = HttpExporter(endpoint=collector.http_endpoint)
        assert exporter.export(memory.get_finished_spans()) == SpanExportResult.SUCCESS
        exporter.shutdown()
    (row,) = Store(collector.store).rows("SELECT attributes FROM spans")
    assert "shown-on-purpose" in row["attributes"]


def otlp_json(spans: list[dict], resource: list[dict], scope: str = "openinference.instrumentation.openai") -> bytes:
    """An OTLP/JSON request of ``spans`` under one resource (its attributes given) and one scope."""
    scope_spans = [{"scope": {"name": scope}, "spans": spans}]
    return json.dumps({"resourceSpans": [{"resource": {"attributes": resource}, "scopeSpans": scope_spans}]}).encode()


def json_span(number: int, attributes: list[dict], events: list[dict] | None = None) -> dict:
    return {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": f"{number:016x}",
        "name": "ChatCompletion",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000000000000001",
        "attributes": attributes,
        "events": events or [],
    }


def kvlist(**values: dict) -> dict:
    return {"kvlistValue": {"values": [{"key": key, "value": value} for key, value in values.items()]}}


def array(*values: dict) -> dict:
    return {"arrayValue": {"values": list(values)}}


def text(value: str) -> dict:
    return {"stringValue": value}


def test_secrets_inside_maps_and_arrays_are_masked(tmp_path):
    """OTLP's kvlist and array values, at any depth, are masked as the decorators mask dicts and lists (a secret
    name's value is ***, secrets in strings are masked in place): they were stored as sent, a secret-named map key
    and a key quoted in a string alike."""
    nested = {
        "llm.request": kvlist(
            headers=kvlist(authorization=text("Basic PLANTED-header"), accept=text("json")),
            prompt=text(f"use {SECRETS['prompt key']}"),
            retries={"intValue": "3"},
        ),
        "llm.tools": array(
            kvlist(name=text("search"), apiKey=text("PLANTED-tool-key")), array(text("token=PLANTED-a"))
        ),
        "process.args": array(text("run"), text("first line\ntoken=PLANTED-line")),
    }
    event = {"name": "retry", "attributes": [{"key": "request", "value": kvlist(password=text("PLANTED-event"))}]}
    spans = [json_span(1, [{"key": k, "value": v} for k, v in nested.items()], [event])]
    resource = [{"key": "service.name", "value": text("shop")}]
    with Collector(tmp_path / "collected", port=0, grpc_port=None) as collector:
        assert post(collector.http_endpoint, otlp_json(spans, resource), "application/json")[0] == 200
    (row,) = Store(collector.store).rows("SELECT attributes, events FROM spans")
    assert "PLANTED" not in json.dumps(row) and SECRETS["prompt key"] not in json.dumps(row)
    attributes = json.loads(row["attributes"])
    assert attributes["llm.request"] == {
        "headers": {"authorization": "***", "accept": "json"},
        "prompt": "use ***",
        "retries": 3,
    }
    assert attributes["llm.tools"] == [{"name": "search", "apiKey": "***"}, ["token=***"]]
    assert attributes["process.args"] == ["run", "first line\ntoken=***"]
    assert json.loads(row["events"])[0]["attributes"] == {"request": {"password": "***"}}


def test_a_secret_on_its_own_line_of_an_array_item_is_masked(tmp_path):
    """The batch's one scan read an array by its repr, where a line break is "\\\\n": "\\ntoken=" read as the name
    "ntoken", so a batch whose only secret sat so was stored as sent."""
    args = {"key": "process.args", "value": array(text("run"), text("first line\ntoken=PLANTED-line"))}
    resource = [{"key": "service.name", "value": text("shop")}]
    with Collector(tmp_path / "collected", port=0, grpc_port=None) as collector:
        assert post(collector.http_endpoint, otlp_json([json_span(1, [args])], resource), "application/json")[0] == 200
    (row,) = Store(collector.store).rows("SELECT attributes FROM spans")
    assert json.loads(row["attributes"]) == {"process.args": ["run", "first line\ntoken=***"]}


def test_a_resource_with_secret_names_of_any_type_stays_json(tmp_path):
    """A resource attribute with a secret name and a number, a list or a map: masking the resource's JSON text
    made it text that is not JSON (``{"deploy.token": ***, ...}``), which DuckDB's JSON functions refuse."""
    resource = [
        {"key": "service.name", "value": text("shop")},
        {"key": "deploy.token", "value": {"intValue": "8675309"}},
        {"key": "signing.key", "value": kvlist(id=text("PLANTED-map"))},
        {"key": "credentials", "value": array(text("PLANTED-list"))},
        {"key": "process.command_line", "value": text("app --password=PLANTED-flag")},
    ]
    with Collector(tmp_path / "collected", port=0, grpc_port=None) as collector:
        assert post(collector.http_endpoint, otlp_json([json_span(1, [])], resource), "application/json")[0] == 200
    (row,) = Store(collector.store).rows("SELECT resource, resource->>'$.\"service.name\"' AS service FROM spans")
    assert json.loads(row["resource"]) == {
        "service.name": "shop",
        "deploy.token": "***",
        "signing.key": "***",
        "credentials": "***",
        "process.command_line": "app --password=***",
    }
    assert row["service"] == "shop"


PATHOLOGICAL = {
    # each about 2 MB; in the text as sent, one secret to mask
    "a run of backslashes after a secret's value": "token=a" + "\\" * 2_000_000 + "x",
    "token characters with eyJ every few": "-eyJ" * 500_000 + " token=PLANTED",
    "many values closed by brackets after long text": "x" * 1_000_000 + " token=a)" * 110_000,
}


@pytest.mark.parametrize("value", PATHOLOGICAL.values(), ids=list(PATHOLOGICAL))
def test_text_made_to_slow_masking_down_is_masked_and_answered(tmp_path, value):
    """Masking reads a text in time that grows with its length. Each of these took time growing with its square
    (12 s for 40,000 backslashes after "token=a", 0.5 s for 40,000 characters of "-eyJ", 7.7 s for 400,000 of
    bracketed values): at 2 MB the collector did not answer its client for hours, and no signal stopped it."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("opentelemetry.instrumentation.requests").start_as_current_span("POST") as span:
        span.set_attribute("http.request.body", value)
    body = encode_spans(memory.get_finished_spans()).SerializeToString()
    with collect_command(tmp_path / "collected") as (process, endpoint):
        assert post(endpoint, body)[0] == 200  # the client gives up after 30 s
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    assert "stopped; 1 spans written, 0 rejected" in out, out + err
    (row,) = Store(tmp_path / "collected").rows("SELECT attributes FROM spans")
    stored = json.loads(row["attributes"])["http.request.body"]
    assert "token=***" in stored and "PLANTED" not in stored
