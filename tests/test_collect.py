"""``agenteval collect``: the real OTLP exporters (HTTP protobuf, gRPC) and OTLP/JSON into a real collector on
loopback, read back with DuckDB through the store's views; answers as the OTLP specification says to malformed,
truncated, oversized, wrongly typed and unauthenticated requests, and the collector carries on after each."""

from __future__ import annotations

import gzip
import http.client
import json
import logging
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import zlib

import grpc
import pytest
from collect_clients import agent_spans, collect_command, json_request, post
from google.rpc import code_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from waiting import wait_until

from agenteval.analysis._traces import build_traces_report
from agenteval.collect import Collector
from agenteval.errors import UsageError
from agenteval.scorers._traces import score_traces
from agenteval.store import Store
from agenteval.store._views import COUNTED_MODEL_CALL
from agenteval_exporters import ParquetSpanExporter

TRACE_ID = "5b8efff798038103d269b633813fc60c"
SPAN_ID = "eee19b7ec3c1b174"


@pytest.fixture
def collector(tmp_path):
    with Collector(tmp_path / "collected", port=0, grpc_port=0) as running:
        yield running


def stored(store_dir) -> list[dict]:
    return Store(store_dir).rows("SELECT * FROM spans ORDER BY trace_id, start_time, span_id")


def comparable(row: dict) -> dict:
    """A span row with its JSON columns parsed (attribute order is not part of the data)."""
    return {k: json.loads(v) if k in ("attributes", "events", "resource") and v else v for k, v in row.items()}


# Real clients -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_the_real_exporters_spans_are_stored_as_the_in_process_exporter_stores_them(tmp_path, collector, protocol):
    """The same SDK spans, once through ParquetSpanExporter and once over OTLP into collect: identical rows."""
    spans = agent_spans(25)
    local = ParquetSpanExporter(tmp_path / "local")
    assert local.export(spans) == SpanExportResult.SUCCESS
    local.shutdown()
    if protocol == "grpc":
        exporter = GrpcExporter(endpoint=f"127.0.0.1:{collector.grpc_port}", insecure=True)
    else:
        exporter = HttpExporter(endpoint=collector.http_endpoint)
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    exporter.shutdown()
    collector.stop()

    received = stored(collector.store)
    assert len(received) == len(spans) == 100
    assert list(map(comparable, received)) == list(map(comparable, stored(tmp_path / "local")))
    assert collector.stats().spans_written == 100 and collector.stats().spans_rejected == 0
    # Filed like the exporter's spans without an experiment: under their UTC start day.
    files = list((collector.store / "spans").rglob("*.parquet"))
    day = f"date={received[0]['start_time'].date().isoformat()}"
    assert files and all(day in file.relative_to(collector.store).parts for file in files)


def test_collected_traces_read_through_the_views_with_parents_attributes_and_events(collector):
    spans = agent_spans(3)
    exporter = HttpExporter(endpoint=collector.http_endpoint)
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    collector.stop()
    store = Store(collector.store)
    (summary,) = store.rows(
        "SELECT count(*) AS spans, count(DISTINCT trace_id) AS traces, "
        "count(*) FILTER (parent_span_id IS NULL) AS roots, "
        "sum(input_tokens) AS input_tokens, count(*) FILTER (status_code = 'ERROR') AS errors, "
        "min(service_name) AS service FROM spans"
    )
    assert summary == {"spans": 12, "traces": 3, "roots": 3, "input_tokens": 303, "errors": 3, "service": "support-bot"}
    # Every child's parent is its trace's root, found by a join on the ids as stored.
    orphans = store.rows(
        "SELECT c.name FROM spans c LEFT JOIN spans p ON c.parent_span_id = p.span_id AND c.trace_id = p.trace_id "
        "WHERE c.parent_span_id IS NOT NULL AND p.span_id IS NULL"
    )
    assert orphans == []
    (chat,) = store.rows(
        "SELECT kind, operation, provider, request_model, output_tokens, finish_reason, "
        "attributes->>'temperature' AS t, "
        "attributes->>'streamed' AS streamed FROM spans WHERE name = 'chat gpt-4o-mini' AND input_tokens = 100"
    )
    assert chat == {
        "kind": "CLIENT",
        "operation": "chat",
        "provider": "openai",
        "request_model": "gpt-4o-mini",
        "output_tokens": 7,
        "finish_reason": "tool_calls",
        "t": "0.25",
        "streamed": "false",
    }
    events = store.rows("SELECT events FROM spans WHERE tool_name = 'lookup' ORDER BY start_time")
    assert json.loads(events[0]["events"])[0]["attributes"] == {"key": "k0", "tries": 2}
    (failed,) = store.rows(
        "SELECT status_code, status_message, error_type FROM spans WHERE tool_name = 'refund' LIMIT 1"
    )
    assert failed == {"status_code": "ERROR", "status_message": "not allowed", "error_type": "PermissionError"}
    (model_calls,) = store.rows(f"SELECT count(*) AS n FROM spans WHERE {COUNTED_MODEL_CALL}")
    assert model_calls["n"] == 3


def test_otlp_json_with_every_value_type_and_a_partial_success(collector):
    good = {
        "traceId": TRACE_ID.upper(),  # hex, either case
        "spanId": SPAN_ID,
        "parentSpanId": "",
        "name": "chat claude",
        "kind": 3,
        "startTimeUnixNano": "1700000000000000000",  # 64-bit integers as strings, as the spec writes them
        "endTimeUnixNano": 1700000000250000000,
        "attributes": [
            {"key": "gen_ai.request.model", "value": {"stringValue": "claude"}},
            {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "12"}},
            {"key": "ratio", "value": {"doubleValue": 0.5}},
            {"key": "ok", "value": {"boolValue": True}},
            {"key": "tags", "value": {"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": 2}]}}},
            {"key": "nested", "value": {"kvlistValue": {"values": [{"key": "x", "value": {"stringValue": "y"}}]}}},
            {"key": "raw", "value": {"bytesValue": "AAE="}},
            {"key": "empty", "value": {}},
        ],
        "events": [{"timeUnixNano": "1700000000100000000", "name": "retry", "attributes": []}],
        "status": {"code": 2, "message": "overloaded"},
    }
    child = {**good, "spanId": "1111111111111111", "parentSpanId": SPAN_ID, "name": "child", "attributes": []}
    bad = {**good, "spanId": "abcd"}  # 2 bytes
    status, headers, body = post(collector.http_endpoint, json_request([good, child, bad]), "application/json")
    assert status == 200 and headers["content-type"] == "application/json"
    answer = json.loads(body)
    assert answer["partialSuccess"]["rejectedSpans"] == "1"
    assert (
        answer["partialSuccess"]["errorMessage"] == "resourceSpans[0].scopeSpans[0].spans[2]: span_id is 2 bytes, not 8"
    )
    collector.stop()
    rows = sorted(stored(collector.store), key=lambda r: r["parent_span_id"] is not None)
    assert [r["name"] for r in rows] == ["chat claude", "child"]
    row = rows[0]
    assert row["trace_id"] == TRACE_ID and row["parent_span_id"] is None and rows[1]["parent_span_id"] == SPAN_ID
    assert row["duration_ms"] == 250.0 and row["kind"] == "CLIENT" and row["service_name"] == "json-client"
    assert (row["status_code"], row["status_message"], row["request_model"], row["input_tokens"]) == (
        "ERROR",
        "overloaded",
        "claude",
        12,
    )
    assert json.loads(row["attributes"]) == {
        "gen_ai.request.model": "claude",
        "gen_ai.usage.input_tokens": 12,
        "ratio": 0.5,
        "ok": True,
        "tags": ["a", 2],
        "nested": {"x": "y"},
        "raw": "AAE=",
        "empty": None,
    }
    assert json.loads(row["events"]) == [{"name": "retry", "timestamp": 1700000000100000000, "attributes": {}}]
    assert row["scope_name"] == "hand-built"


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("traceId", 12345, "traceId is not a hex string"),
        ("spanId", "zz" * 8, "spanId is not a hex string"),
        ("startTimeUnixNano", "soon", "startTimeUnixNano is not an integer"),
        ("endTimeUnixNano", 1, "end_time_unix_nano is before start_time_unix_nano"),
        ("name", ["a"], "name is not a string"),
        ("kind", 42, "kind is not a SpanKind"),
        ("status", {"code": "broken"}, "status.code is not an integer"),
        ("attributes", {"a": 1}, "attributes is not a list"),
        ("attributes", [{"key": "n", "value": {"intValue": "many"}}], "intValue is not an integer"),
        ("attributes", [{"key": "s", "value": {"stringValue": 3}}], "stringValue has the wrong type"),
        ("attributes", [{"key": "s", "value": {"mystery": 3}}], "mystery is not an AnyValue field"),
        ("events", [{"name": 3}], "events[0].name is not a string"),
        # int() refuses text past 4,300 digits with a ValueError: these were a 500 for the whole request.
        ("startTimeUnixNano", "1" * 5000, "startTimeUnixNano is not an integer"),
        ("kind", "9" * 5000, "kind is not an integer"),
        ("events", [{"timeUnixNano": "9" * 5000}], "events[0].timeUnixNano is not an integer"),
        # intValue is 64-bit: these were stored as they came, numbers no reader of int64 takes.
        ("attributes", [{"key": "n", "value": {"intValue": str(2**63)}}], "intValue is out of the range"),
        ("attributes", [{"key": "n", "value": {"intValue": str(-(2**63) - 1)}}], "intValue is out of the range"),
    ],
)
def test_a_wrongly_typed_json_field_rejects_that_span_alone_with_the_reason(collector, field, value, reason):
    good = {"traceId": TRACE_ID, "spanId": SPAN_ID, "name": "ok", "startTimeUnixNano": 5, "endTimeUnixNano": 9}
    status, _, body = post(collector.http_endpoint, json_request([{**good, field: value}, good]), "application/json")
    assert status == 200
    partial = json.loads(body)["partialSuccess"]
    assert partial["rejectedSpans"] == "1" and reason in partial["errorMessage"], partial
    collector.stop()
    assert [r["name"] for r in stored(collector.store)] == ["ok"]


def test_otlp_json_with_lone_surrogate_escapes_is_stored_with_replacement_characters(collector):
    """JavaScript strings can hold half an emoji (the SDK's attribute length limit cuts UTF-16 code units), and
    JSON.stringify writes it as a lone ``\\ud83d`` escape. orjson refuses those, which cost the whole request a
    400 (dropped, not retried); they are read as Python's json reads them, and stored as U+FFFD, as the
    in-process exporter stores a lone surrogate."""
    half = "\ud83d"  # the first UTF-16 unit of U+1F600, without the second
    span = {
        "traceId": TRACE_ID,
        "spanId": SPAN_ID,
        "name": f"reply {half}",
        "startTimeUnixNano": 5,
        "endTimeUnixNano": 9,
        "attributes": [{"key": "gen_ai.output", "value": {"stringValue": f"smile {half}"}}],
        "events": [{"name": "event \udc00", "timeUnixNano": 6}],
        "status": {"code": 2, "message": f"failed {half}"},
    }
    other = {**span, "spanId": "1111111111111111", "name": "plain", "attributes": [], "events": [], "status": {}}
    body = json_request([span, other], service="svc \udc00")
    assert b"\\ud83d" in body  # escaped as JSON.stringify escapes it
    status, _, answer = post(collector.http_endpoint, body, "application/json")
    assert (status, json.loads(answer)) == (200, {})
    collector.stop()
    rows = {r["name"]: r for r in stored(collector.store)}
    assert set(rows) == {"reply \ufffd", "plain"}
    row = rows["reply \ufffd"]
    assert json.loads(row["attributes"]) == {"gen_ai.output": "smile \ufffd"}
    assert json.loads(row["events"])[0]["name"] == "event \ufffd"
    assert (row["status_message"], row["service_name"]) == ("failed \ufffd", "svc \ufffd")


def test_a_json_value_nested_past_the_stack_rejects_that_span_alone(collector):
    """orjson reads up to 1,024 levels, deeper than Python's stack lets the values be walked: 330 arrays in
    arrays cost the whole request a 500 and a traceback (RecursionError); now that span is rejected alone."""
    good = {"traceId": TRACE_ID, "spanId": SPAN_ID, "name": "ok", "startTimeUnixNano": 5, "endTimeUnixNano": 9}
    nested = {**good, "name": "deep", "attributes": [{"key": "k", "value": "DEEP"}]}
    deep = (
        '{"arrayValue": {"values": [' * 330 + '{"stringValue": "x"}' + "]}}" * 330
    )  # as text: json.dumps would recurse
    body = json_request([nested, good]).replace(b'"DEEP"', deep.encode())
    status, _, answer = post(collector.http_endpoint, body, "application/json")
    assert status == 200, answer
    partial = json.loads(answer)["partialSuccess"]
    assert partial["rejectedSpans"] == "1" and "nested too deeply" in partial["errorMessage"], partial
    collector.stop()
    assert [r["name"] for r in stored(collector.store)] == ["ok"]


def test_message_json_cut_by_a_length_limit_costs_that_trace_its_reply_not_every_traces_report(collector):
    """SDKs cut long attribute values at a length limit (OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT), so a root span's
    gen_ai.output.messages can arrive as JSON cut short. The traces view parsed it with from_json, which raised:
    one such span made `SELECT ... FROM traces`, `report --traces` and scoring fail for every trace."""
    messages = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Your refund is on its way."}]}])
    user = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Where is my refund?"}]}])

    def root(span_id: str, reply: str) -> dict:
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.input.messages": user}
        attributes["gen_ai.output.messages"] = reply
        return {
            "traceId": span_id * 2,
            "spanId": span_id,
            "name": "invoke_agent shop",
            "kind": 2,
            "startTimeUnixNano": 1700000000000000000,
            "endTimeUnixNano": 1700000001000000000,
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()],
        }

    spans = [root("1" * 16, messages), root("2" * 16, messages[:40])]
    assert post(collector.http_endpoint, json_request(spans), "application/json")[0] == 200
    collector.stop()
    store = Store(collector.store)
    rows = store.rows("SELECT trace_id, input, output FROM traces ORDER BY trace_id")
    assert [(r["input"], r["output"]) for r in rows] == [
        ("Where is my refund?", "Your refund is on its way."),
        ("Where is my refund?", None),  # the reply cannot be read; the trace is still counted
    ]
    assert build_traces_report(store).calls == 2
    scored = score_traces(store, scorers=["tool_errors"])
    assert (scored.scores, scored.not_scored) == (1, {"tool_errors": 1})  # no reply to judge, as with capture off


def test_a_service_name_too_long_for_a_folder_name_is_stored_in_full(collector):
    """Production spans are filed under spans/date=DAY/service=NAME/, the name escaped; a file system allows
    255 bytes a name, so a service name of 28 Chinese characters (9 bytes each, escaped) could not be written:
    the collector acknowledged the spans, logged 'File name too long' at every flush, and never stored them."""
    services = ["客服机器人" * 8, "a" * 300, "a" * 299 + "b"]
    good = {"traceId": TRACE_ID, "name": "ok", "startTimeUnixNano": 5, "endTimeUnixNano": 9}
    for n, service in enumerate(services):
        span = {**good, "spanId": f"{n + 1:016x}"}
        assert post(collector.http_endpoint, json_request([span], service=service), "application/json")[0] == 200
    collector.stop()
    assert collector.stats().spans_written == 3
    assert sorted(r["service_name"] for r in stored(collector.store)) == sorted(services)
    folders = {p.parent for p in (collector.store / "spans").rglob("*.parquet")}
    assert len(folders) == 3 and all(len(f.name.encode()) <= 255 for f in folders)


def test_a_span_or_event_past_the_attribute_cap_keeps_the_first_ones_and_says_how_many_were_dropped(collector):
    """A span of 1.5 million attributes in a 17 MB request took 45 s of CPU to decode and store (each one read, its
    name checked for a secret, encoded to JSON), and made a row no query could read; an event's attributes likewise.
    Now a span, and each event, keeps the first MAX_SPAN_ATTRIBUTES sent, as OpenTelemetry's SDKs keep their first
    128, and says how many it dropped; in protobuf and in JSON alike."""
    from agenteval.collect._settings import MAX_SPAN_ATTRIBUTES
    from agenteval_instrumentation.attributes import DROPPED_ATTRIBUTES_COUNT

    sent = {"gen_ai.request.model": "gpt-4o-mini"} | {f"attribute.{n}": n for n in range(MAX_SPAN_ATTRIBUTES + 9)}
    memory = InMemorySpanExporter()
    limits = SpanLimits(max_span_attributes=len(sent), max_event_attributes=len(sent))
    provider = TracerProvider(span_limits=limits)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    span = provider.get_tracer("wide").start_span("wide protobuf", attributes=sent)
    span.add_event("wide event", sent)
    span.end()
    assert (
        HttpExporter(endpoint=collector.http_endpoint).export(memory.get_finished_spans()) == SpanExportResult.SUCCESS
    )
    pairs = [
        {"key": k, "value": {"stringValue": v} if isinstance(v, str) else {"intValue": str(v)}} for k, v in sent.items()
    ]
    event = {"name": "wide event", "timeUnixNano": "1", "attributes": pairs}
    json_span = {"traceId": TRACE_ID, "spanId": SPAN_ID, "name": "wide json", "attributes": pairs, "events": [event]}
    assert post(collector.http_endpoint, json_request([json_span]), "application/json")[0] == 200
    collector.stop()
    kept = {**dict(list(sent.items())[:MAX_SPAN_ATTRIBUTES]), DROPPED_ATTRIBUTES_COUNT: 10}
    rows = stored(collector.store)
    assert sorted(row["name"] for row in rows) == ["wide json", "wide protobuf"]
    for row in rows:
        assert json.loads(row["attributes"]) == kept, row["name"]
        assert row["request_model"] == "gpt-4o-mini"  # a wide span's typed columns, read from their names alone
        assert [e["attributes"] for e in json.loads(row["events"])] == [kept], row["name"]


def test_a_span_past_the_event_cap_or_a_resource_past_the_attribute_cap_keeps_the_first_ones_and_says_so(collector):
    """A 7 MB request of one span with 300,000 events and a resource of 200,000 attributes took 4.9 s of CPU and
    250 MB to decode, within the body limit; the span attribute cap left events and resources out. Now a span keeps
    its first MAX_SPAN_EVENTS events and a resource its first MAX_SPAN_ATTRIBUTES attributes, each saying how many
    it dropped; in protobuf and in JSON alike."""
    from opentelemetry.sdk.resources import Resource

    from agenteval.collect._settings import MAX_SPAN_ATTRIBUTES, MAX_SPAN_EVENTS
    from agenteval_instrumentation.attributes import DROPPED_ATTRIBUTES_COUNT, DROPPED_EVENTS_COUNT

    resource = {"service.name": "wide"} | {f"host.{n}": n for n in range(MAX_SPAN_ATTRIBUTES + 2)}
    events = [f"event {n}" for n in range(MAX_SPAN_EVENTS + 7)]
    memory = InMemorySpanExporter()
    limits = SpanLimits(max_events=len(events), max_attributes=len(resource))
    provider = TracerProvider(resource=Resource(resource), span_limits=limits)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    span = provider.get_tracer("many events").start_span("protobuf", attributes={"kept": 1})
    for name in events:
        span.add_event(name, timestamp=1)
    span.end()
    assert (
        HttpExporter(endpoint=collector.http_endpoint).export(memory.get_finished_spans()) == SpanExportResult.SUCCESS
    )
    resource_pairs = [
        {"key": k, "value": {"stringValue": v} if isinstance(v, str) else {"intValue": str(v)}}
        for k, v in resource.items()
    ]
    json_span = {
        "traceId": TRACE_ID,
        "spanId": SPAN_ID,
        "name": "json",
        "attributes": [{"key": "kept", "value": {"intValue": "1"}}],
        "events": [{"name": name, "timeUnixNano": "1"} for name in events],
    }
    request = {"resourceSpans": [{"resource": {"attributes": resource_pairs}, "scopeSpans": [{"spans": [json_span]}]}]}
    assert post(collector.http_endpoint, json.dumps(request).encode(), "application/json")[0] == 200
    collector.stop()
    rows = stored(collector.store)
    assert sorted(row["name"] for row in rows) == ["json", "protobuf"]
    kept_resource = {**dict(list(resource.items())[:MAX_SPAN_ATTRIBUTES]), DROPPED_ATTRIBUTES_COUNT: 3}
    for row in rows:
        assert json.loads(row["attributes"]) == {"kept": 1, DROPPED_EVENTS_COUNT: 7}, row["name"]
        assert [e["name"] for e in json.loads(row["events"])] == events[:MAX_SPAN_EVENTS], row["name"]
        assert json.loads(row["resource"]) == kept_resource, row["name"]
        assert row["service_name"] == "wide"


def test_a_parent_span_id_of_zeros_is_no_parent(collector):
    """An all-zero id is OpenTelemetry's invalid id, which some senders write for a root's parent instead of
    leaving it empty. It was stored as parent "0000000000000000": the root was then no root to online scoring
    (which takes the spans without a parent), so its trace was never scored."""
    request = encode_spans(agent_spans(1))
    (root,) = (s for s in request.resource_spans[0].scope_spans[0].spans if not s.parent_span_id)
    root.parent_span_id = bytes(8)
    zero_parent = {"traceId": TRACE_ID, "spanId": SPAN_ID, "parentSpanId": "0" * 16, "name": "json root"}
    assert post(collector.http_endpoint, request.SerializeToString())[0] == 200
    assert post(collector.http_endpoint, json_request([zero_parent]), "application/json")[0] == 200
    collector.stop()
    roots = sorted(r["name"] for r in stored(collector.store) if r["parent_span_id"] is None)
    assert roots == sorted([root.name, "json root"])


def test_a_protobuf_span_with_bad_ids_or_times_is_rejected_alone(collector):
    spans = agent_spans(2)
    request = encode_spans(spans)
    scope_spans = request.resource_spans[0].scope_spans[0]
    scope_spans.spans[0].trace_id = b"\x01" * 5
    scope_spans.spans[1].span_id = bytes(8)
    scope_spans.spans[2].end_time_unix_nano = scope_spans.spans[2].start_time_unix_nano - 1
    status, _, body = post(collector.http_endpoint, request.SerializeToString())
    assert status == 200
    answer = ExportTraceServiceResponse.FromString(body)
    assert answer.partial_success.rejected_spans == 3
    assert (
        answer.partial_success.error_message == "resource_spans[0].scope_spans[0].spans[0]: trace_id is 5 bytes, not 16"
    )
    collector.stop()
    assert len(stored(collector.store)) == len(spans) - 3


# Bad requests: the right answer, and the collector carries on -------------------------------------------------


def error_status(body: bytes) -> status_pb2.Status:
    return status_pb2.Status.FromString(body)


def test_malformed_truncated_oversized_and_unknown_requests_get_their_answers(tmp_path):
    valid = encode_spans(agent_spans(2)).SerializeToString()
    with Collector(tmp_path / "s", port=0, grpc_port=None, max_body_bytes=64 * 1024) as collector:
        url = collector.http_endpoint
        status, _, body = post(url, b"\xff\xff\xff garbage")
        assert status == 400 and error_status(body).code == code_pb2.INVALID_ARGUMENT
        assert "not an OTLP ExportTraceServiceRequest" in error_status(body).message
        status, _, body = post(url, valid[: len(valid) // 2])
        assert status == 400 and "protobuf" in error_status(body).message
        status, _, body = post(url, b"{not json", "application/json")
        assert status == 400 and json.loads(body)["message"].startswith("not JSON")
        status, _, body = post(url, b'{"resourceSpans": {"a": 1}}', "application/json")
        assert status == 400 and json.loads(body)["message"] == "request.resourceSpans is not a list"
        status, _, body = post(url, valid, "text/plain")
        assert status == 415 and "Content-Type text/plain" in error_status(body).message
        status, _, _ = post(url, valid, **{"Content-Encoding": "br"})
        assert status == 415
        status, _, body = post(url, b"x" * (64 * 1024 + 1))
        assert status == 413 and error_status(body).code == code_pb2.RESOURCE_EXHAUSTED
        bomb = gzip.compress(bytes(50 * 1024 * 1024))  # 50 MB of zeros in ~50 KB
        assert len(bomb) < 64 * 1024
        status, _, body = post(url, bomb, **{"Content-Encoding": "gzip"})
        assert status == 413 and "decompresses to more than" in error_status(body).message
        status, _, _ = post(url, b"\x1f\x8b not gzip", **{"Content-Encoding": "gzip"})
        assert status == 400
        status, _, _ = post(url.replace("/v1/traces", "/v1/metrics"), valid)
        assert status == 404
        # Still serving: compressed either way, a valid request is stored.
        assert post(url, gzip.compress(valid), **{"Content-Encoding": "gzip"})[0] == 200
        deflated = encode_spans(agent_spans(2, prefix="deflated-")).SerializeToString()
        assert post(url, zlib.compress(deflated), **{"Content-Encoding": "deflate"})[0] == 200
        assert post(url, b"", "application/x-protobuf")[0] == 200  # an empty request is a valid, empty export
    assert len(stored(tmp_path / "s")) == 16


def test_a_request_refused_before_its_body_is_read_gets_its_answer_and_keep_alive_carries_on(tmp_path):
    """The body of a request refused on its head was left unread. Past the limit, the connection was closed on a
    sender still sending: it got a broken pipe, not its 413 (a connection error, which OTLP exporters retry rather
    than drop). On a wrong path, the body was read as the connection's next request, and the 400 for it was what a
    keep-alive client read as the answer to its next request."""
    valid = encode_spans(agent_spans(1)).SerializeToString()
    with Collector(tmp_path / "s", port=0, grpc_port=None, max_body_bytes=1 << 20) as collector:
        for size in ((1 << 20) + 1, 3 << 20):
            status, _, body = post(collector.http_endpoint, bytes(size))
            assert status == 413 and error_status(body).code == code_pb2.RESOURCE_EXHAUSTED
        connection = http.client.HTTPConnection("127.0.0.1", collector.http_port, timeout=30)
        protobuf = {"Content-Type": "application/x-protobuf"}
        connection.request("POST", "/v1/metrics", bytes(300_000), protobuf)
        assert connection.getresponse().read() and connection.sock is not None  # 404, and the connection kept
        connection.request("POST", "/v1/traces", valid, protobuf)
        response = connection.getresponse()
        assert (response.status, response.read()) == (200, b"")
        connection.close()
    assert len(stored(tmp_path / "s")) == 4


def test_a_body_shorter_than_its_content_length_is_a_timeout_not_an_internal_error(tmp_path, monkeypatch, caplog):
    """A sender that announces more body than it sends was answered 500 (a bug, for the OTLP client, which drops the
    spans), once its read timed out, with two tracebacks on the command's output: the request's, then the next read's
    on the timed-out connection. Now it is 408, logged at debug level, and the connection is closed."""
    from agenteval.collect import _http

    monkeypatch.setattr(_http._Handler, "timeout", 1)  # the real read timeout, shortened: 120 s by default
    with Collector(tmp_path / "s", port=0, grpc_port=None) as collector:
        head = b"POST /v1/traces HTTP/1.1\r\nContent-Type: application/x-protobuf\r\nContent-Length: 1000\r\n\r\n"
        with socket.create_connection(("127.0.0.1", collector.http_port), timeout=60) as sender:
            sender.sendall(head + bytes(10))
            answer = sender.makefile("rb")
            assert answer.readline().startswith(b"HTTP/1.1 408")
            while answer.readline() not in (b"\r\n", b""):
                pass
            answer.read()  # the connection is closed after the answer
        assert post(collector.http_endpoint, encode_spans(agent_spans(1)).SerializeToString())[0] == 200
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert len(stored(tmp_path / "s")) == 4


def test_a_body_trickled_past_its_deadline_is_cut_off_and_its_budget_given_back(tmp_path):
    """A sender that trickles its body, a byte at a time well inside the read timeout (a slowloris on the body), held
    its connection, a thread and the body budget its bytes took for as long as it kept trickling: its request was
    answered 200 once its last byte came, however late. Now a body must arrive whole within --body-timeout seconds:
    past that the sender gets 408 and the connection is closed, what it held is given back, and others are heard
    throughout."""
    body = encode_spans(agent_spans(1)).SerializeToString()
    with Collector(tmp_path / "s", port=0, grpc_port=None, body_timeout=1) as collector:
        head = (
            f"POST /v1/traces HTTP/1.1\r\nContent-Type: application/x-protobuf\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        with socket.create_connection(("127.0.0.1", collector.http_port), timeout=60) as sender:
            sender.sendall(head.encode() + body[:10])
            wait_until(lambda: collector._intake.bodies.held == 10, "the first bytes held in the body budget")
            assert (
                post(collector.http_endpoint, encode_spans(agent_spans(1, prefix="other-")).SerializeToString())[0]
                == 200
            )
            for byte in body[10:]:  # a byte every 50 ms, until the collector answers (or the body is all sent)
                if select.select([sender], [], [], 0.05)[0]:
                    break
                sender.sendall(bytes([byte]))
            answer = sender.makefile("rb")
            assert answer.readline().startswith(b"HTTP/1.1 408")
            while answer.readline() not in (b"\r\n", b""):
                pass
            assert "--body-timeout" in error_status(answer.read()).message  # and the connection is closed
        assert collector._intake.bodies.held == 0
        assert post(collector.http_endpoint, encode_spans(agent_spans(1)).SerializeToString())[0] == 200
    names = sorted(r["name"] for r in stored(tmp_path / "s"))
    assert names == sorted(s.name for s in agent_spans(1) + agent_spans(1, prefix="other-"))


def test_a_gzip_body_of_several_members_is_read_whole_and_bytes_after_it_are_refused(collector):
    """A gzip body may be several members one after another (RFC 1952; what a compressor that flushes per chunk
    sends): every member is the body, as ``gzip -d`` reads it. Reading the first alone answered 200 and dropped
    the spans of the others; bytes after the last member are not gzip and get a 400, not silence."""
    first, second = (encode_spans(agent_spans(1, prefix=p)).SerializeToString() for p in ("first-", "second-"))
    # Two requests' bytes are one request holding both (repeated fields concatenate): 8 spans.
    status, _, body = post(collector.http_endpoint, gzip.compress(first) + gzip.compress(second), **GZIP)
    assert (status, ExportTraceServiceResponse.FromString(body).partial_success.rejected_spans) == (200, 0)
    half = len(first) // 2  # one request cut anywhere into members
    assert post(collector.http_endpoint, gzip.compress(first[:half]) + gzip.compress(first[half:]), **GZIP)[0] == 200
    status, _, body = post(collector.http_endpoint, gzip.compress(second) + b"trailing bytes", **GZIP)
    assert status == 400 and "not valid gzip" in error_status(body).message
    collector.stop()
    names = sorted(r["name"] for r in stored(collector.store))
    assert names == sorted(
        [s.name for s in agent_spans(1, prefix="first-")] * 2 + [s.name for s in agent_spans(1, prefix="second-")]
    )


GZIP = {"Content-Encoding": "gzip"}


def raw_answer(port: int, head: bytes) -> bytes:
    """Send ``head`` on a connection left open (no end of input for the server to wait for); the status line."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
        client.sendall(head)
        return client.makefile("rb").readline()


def test_chunk_sizes_and_content_lengths_that_are_not_plain_numbers_are_bad_requests(collector):
    """A chunk size of "-1" was read by int(..., 16) as -1, and a read of -1 bytes reads the connection to its end:
    a sender streamed 200 MB into one request past the 20 MiB limit (the collector's RSS grew by 400 MB) and was
    never answered. A Content-Length of "\xb2" ("²", which str.isdigit() takes and int() does not) was a 500 with
    a traceback."""
    start = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
    chunked = start + b"Transfer-Encoding: chunked\r\n\r\n"
    for size in (b"-1", b"-0x10", b"+1", b" ", b"1" * 17):
        assert raw_answer(collector.http_port, chunked + size + b"\r\n" + bytes(64)).startswith(b"HTTP/1.1 400"), size
    for length in (b"\xb2", b"-1", b"1_0"):
        head = start + b"Content-Length: " + length + b"\r\n\r\n"
        assert raw_answer(collector.http_port, head).startswith(b"HTTP/1.1 400"), length
    body = encode_spans(agent_spans(1)).SerializeToString()
    whole = chunked + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
    assert raw_answer(collector.http_port, whole).startswith(b"HTTP/1.1 200")
    collector.stop()
    assert len(stored(collector.store)) == 4


def test_past_the_connection_limit_the_longest_idle_connection_makes_room(tmp_path):
    """A thread per connection, up to a limit; past it a new connection was closed at once, so 256 idle
    connections (or senders of a header byte a second) shut every other sender out. Now the connection that has
    waited longest for its next request is closed to make room; one in the middle of a request is not."""
    from agenteval.collect._http import HttpReceiver
    from agenteval.collect._intake import Intake

    intake = Intake(ParquetSpanExporter(tmp_path / "s"))
    receiver = HttpReceiver(("127.0.0.1", 0), intake, None, 1 << 20, max_connections=2)
    serving = threading.Thread(target=receiver.serve_forever, daemon=True)
    serving.start()
    url = f"http://127.0.0.1:{receiver.port}/v1/traces"
    bodies = [encode_spans(agent_spans(1, prefix=f"{n}-")).SerializeToString() for n in range(4)]

    def mid_request(body: bytes) -> socket.socket:
        sender = socket.create_connection(("127.0.0.1", receiver.port), timeout=30)
        head = (
            f"POST /v1/traces HTTP/1.1\r\nContent-Type: application/x-protobuf\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        sender.sendall(head.encode() + body[:-1])
        return sender

    # Each step waits for the server's threads to reach the state it relies on: under load, a handler thread
    # may start late, so the order of connecting is not the order of waiting.
    idle = socket.create_connection(("127.0.0.1", receiver.port), timeout=30)
    wait_until(lambda: len(receiver.waiting) == 1, "the idle connection waiting for a request")
    slow_head = socket.create_connection(("127.0.0.1", receiver.port), timeout=30)
    slow_head.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")  # its headers never end
    wait_until(lambda: len(receiver.waiting) == 2, "two connections waiting for a request")
    assert post(url, bodies[0])[0] == 200  # room made: the idle connection, the longest waiting, is closed
    assert idle.recv(1) == b""
    wait_until(lambda: len(receiver.connections) == 1, "the posting connection closed")
    busy = mid_request(bodies[1])
    wait_until(lambda: receiver.busy == 1 and len(receiver.waiting) == 1, "one connection mid-request")
    assert post(url, bodies[2])[0] == 200  # the one whose headers never end made room
    assert slow_head.recv(1) == b""
    wait_until(lambda: len(receiver.connections) == 1, "the posting connection closed")
    also_busy = mid_request(bodies[3])
    wait_until(lambda: receiver.busy == 2 and not receiver.waiting, "two connections mid-request")
    extra = socket.create_connection(("127.0.0.1", receiver.port), timeout=30)
    assert extra.recv(1) == b""  # every connection is mid-request: the new one is closed at once
    for sender, body in ((busy, bodies[1]), (also_busy, bodies[3])):
        sender.sendall(body[-1:])
        assert sender.makefile("rb").readline().startswith(b"HTTP/1.1 200")
        sender.close()
    for connection in (idle, slow_head, extra):
        connection.close()
    receiver.close()
    intake.close()
    assert len(stored(tmp_path / "s")) == 4 * 4


def reset_mid_request(port: int, sent: bytes) -> None:
    """Send part of a request, then close with a reset (SO_LINGER 0), as a client that timed out does."""
    client = socket.create_connection(("127.0.0.1", port), timeout=10)
    client.sendall(sent)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_clients_that_reset_mid_request_leave_no_traceback_and_the_command_carries_on(tmp_path, workers):
    """The command's output stays what it says (its socketserver printed a traceback for every reset)."""
    store = tmp_path / "s"
    command = [sys.executable, "-m", "agenteval.cli", "collect", "--port", "0", "--no-grpc", "--store", str(store)]
    collect = subprocess.Popen(
        [*command, "--workers", str(workers)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        endpoint = collect.stdout.readline().split(" on ")[1].split(";")[0]
        port = int(endpoint.split(":")[2].split("/")[0])
        body = encode_spans(agent_spans(2)).SerializeToString()
        head = f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n".encode()
        for sent in (b"POST /v1/tr", head, head + b"Content-Type: application/x-protobuf\r\n\r\n" + body[:10]):
            for _ in range(3):
                reset_mid_request(port, sent)
        assert post(endpoint, body)[0] == 200
    finally:
        collect.send_signal(signal.SIGTERM)
        _, errors = collect.communicate(timeout=60)
    assert collect.returncode == 0, errors
    assert "Traceback" not in errors and "Exception occurred" not in errors, errors
    assert len(stored(store)) == 8


def test_a_malformed_grpc_request_is_invalid_argument_and_the_server_carries_on(collector):
    with grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}") as channel:
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        with pytest.raises(grpc.RpcError) as raised:
            export(b"\xff\xff\xff garbage", timeout=10)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "not an OTLP ExportTraceServiceRequest" in raised.value.details()
        answer = ExportTraceServiceResponse.FromString(
            export(encode_spans(agent_spans(1)).SerializeToString(), timeout=10)
        )
        assert not answer.HasField("partial_success")
    collector.stop()
    assert len(stored(collector.store)) == 4


# Tokens -------------------------------------------------------------------------------------------------------


def test_binding_beyond_loopback_needs_a_token(tmp_path, monkeypatch):
    monkeypatch.delenv("AGENTEVAL_COLLECT_TOKEN", raising=False)
    with pytest.raises(UsageError, match="needs a token: --token or \\$AGENTEVAL_COLLECT_TOKEN"):
        Collector(tmp_path, host="0.0.0.0")
    monkeypatch.setenv("AGENTEVAL_COLLECT_TOKEN", "s3cret")
    assert Collector(tmp_path, host="0.0.0.0").token == "s3cret"  # constructed, never started: tests bind loopback


def test_with_a_token_only_clients_that_send_it_are_heard(tmp_path):
    spans = agent_spans(1)
    body = encode_spans(spans).SerializeToString()
    with Collector(tmp_path / "s", port=0, grpc_port=0, token="s3cret") as collector:
        assert post(collector.http_endpoint, body)[0] == 401
        assert post(collector.http_endpoint, body, Authorization="Bearer wrong")[0] == 401
        assert post(collector.http_endpoint, body, Authorization="Basic s3cret")[0] == 401
        refused = GrpcExporter(endpoint=f"127.0.0.1:{collector.grpc_port}", insecure=True, timeout=5)
        assert refused.export(spans) == SpanExportResult.FAILURE
        headers = {"authorization": "Bearer s3cret"}
        http = HttpExporter(endpoint=collector.http_endpoint, headers=headers)
        grpc_ = GrpcExporter(endpoint=f"127.0.0.1:{collector.grpc_port}", insecure=True, headers=headers)
        assert http.export(spans) == grpc_.export(agent_spans(1, prefix="grpc-")) == SpanExportResult.SUCCESS
    assert len(stored(tmp_path / "s")) == 8


# The command ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_the_command_receives_until_a_signal_then_writes_everything(tmp_path, stop_signal):
    store = tmp_path / "cli-store"
    command = [
        sys.executable,
        "-m",
        "agenteval.cli",
        "collect",
        "--port",
        "0",
        "--grpc-port",
        "0",
        "--store",
        str(store),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("agenteval collect: OTLP/HTTP on http://127.0.0.1:"), line + process.stderr.read()
        endpoint = line.split(" on ")[1].split(",")[0]
        grpc_port = line.split("OTLP/gRPC on 127.0.0.1:")[1].split(";")[0]
        spans = agent_spans(10)
        assert HttpExporter(endpoint=endpoint).export(spans) == SpanExportResult.SUCCESS
        grpc_exporter = GrpcExporter(endpoint=f"127.0.0.1:{grpc_port}", insecure=True)
        assert grpc_exporter.export(agent_spans(10, prefix="grpc-")) == SpanExportResult.SUCCESS
        process.send_signal(stop_signal)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert "stopped; 80 spans written, 0 rejected" in out
    assert len(stored(store)) == 80


def test_spans_the_store_would_not_take_are_counted_as_lost_and_the_command_fails(tmp_path):
    """The store refuses every file (a full disk; here a file where the day's folder must go): the spans were
    acknowledged and are lost when the collector stops. It said "stopped; 40 spans written" and exited 0."""
    store = tmp_path / "cli-store"
    (store / "spans").mkdir(parents=True)
    (store / "spans" / "date=2023-11-14").write_text("not a folder")  # the day of the spans below
    with collect_command(store) as (process, endpoint):
        good = {"traceId": TRACE_ID, "name": "ok", "startTimeUnixNano": 1700000000000000000}
        spans = [{**good, "spanId": f"{n + 1:016x}", "endTimeUnixNano": 1700000000000000001} for n in range(40)]
        assert post(endpoint, json_request(spans), "application/json")[0] == 200
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 1, out + err
    assert "stopped; 0 spans written" in out and "40 acknowledged spans could not be written" in err, out + err


def test_a_port_in_use_is_a_one_line_error(tmp_path, collector):
    done = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", "collect", "--port", str(collector.http_port), "--no-grpc"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "AGENTEVAL_STORE": str(tmp_path / "other")},
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"Error: agenteval collect: cannot listen on 127.0.0.1:{collector.http_port}")


def test_answers_carry_their_headers_and_keep_the_connection_open_until_one_closes_it(collector):
    connection = http.client.HTTPConnection("127.0.0.1", collector.http_port, timeout=30)
    valid = encode_spans(agent_spans(1)).SerializeToString()
    for _ in range(2):  # the same connection twice
        connection.request("POST", "/v1/traces", valid, {"Content-Type": "application/x-protobuf"})
        response = connection.getresponse()
        body = response.read()
        assert (response.status, response.version, response.will_close) == (200, 11, False)
        assert response.getheader("Content-Type") == "application/x-protobuf"
        assert int(response.getheader("Content-Length")) == len(body) and response.getheader("Date")
    connection.request("POST", "/v1/traces", valid, {"Content-Type": "text/plain"})
    response = connection.getresponse()
    response.read()
    assert (response.status, response.getheader("Connection"), response.will_close) == (415, "close", True)
    connection.close()


def test_a_request_sent_again_is_answered_alike_and_stored_once(collector):
    """A client that did not get its answer sends the request again (the SDK's exporters retry the same bytes,
    gzip'ed anew, with another timestamp in the gzip header). Its spans were stored once per request: twice."""
    body = encode_spans(agent_spans(2, prefix="retried-")).SerializeToString()
    spans = len(agent_spans(2))
    first = post(collector.http_endpoint, gzip.compress(body, mtime=1), **GZIP)
    again = post(collector.http_endpoint, gzip.compress(body, mtime=2), **GZIP)
    assert again[0] == first[0] == 200 and again[2] == first[2]
    other = encode_spans(agent_spans(1, prefix="other-")).SerializeToString()
    assert post(collector.http_endpoint, other)[0] == 200  # another request is stored as ever
    channel = grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}")
    export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
    export(body, timeout=30)  # the same request over gRPC: the same spans
    channel.close()
    collector.stop()
    names = sorted(r["name"] for r in stored(collector.store))
    expected = [s.name for s in agent_spans(2, prefix="retried-")] + [s.name for s in agent_spans(1, prefix="other-")]
    assert names == sorted(expected)
    stats = collector.stats()
    assert (stats.spans_received, stats.spans_written) == (len(expected), len(expected))
    assert stats.spans_repeated == 2 * spans


def test_spans_sent_without_a_name_are_stored_and_every_span_is_stored_or_refused(tmp_path):
    """OTLP spans with fields left out, to the real command over OTLP/HTTP (JSON and protobuf). A request whose
    spans all lacked a name (protobuf's default, "") was a 500 'internal error' with a traceback, and OTLP clients
    do not retry a 500: every span of it lost. The decoders leave no required column null (an id left out is
    rejected, a name is "", a time 0, a kind INTERNAL, a status UNSET), so nothing reaches the writer that would
    fail a file: spans in == spans stored + spans refused."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    store = tmp_path / "cli-store"
    with collect_command(store) as (process, endpoint):
        times = {"startTimeUnixNano": 1700000000000000000, "endTimeUnixNano": 1700000000000000001}
        unnamed = [{"traceId": TRACE_ID, "spanId": f"{n + 1:016x}", **times} for n in range(3)]
        no_trace = {"spanId": "00000000000000ff", "name": "orphan", **times}
        sent, refused = 4, 0
        status, _, body = post(endpoint, json_request([*unnamed, no_trace]), "application/json")
        assert status == 200, body
        refused += int(json.loads(body)["partialSuccess"]["rejectedSpans"])
        bare = [Span(trace_id=bytes.fromhex(TRACE_ID), span_id=(n + 10).to_bytes(8, "big")) for n in range(4)]
        request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=bare)])])
        sent += 4
        status, _, body = post(endpoint, request.SerializeToString())
        assert status == 200, body
        named = [{**unnamed[0], "spanId": f"{n + 20:016x}", "name": "named"} for n in range(2)]
        sent += 2
        assert post(endpoint, json_request(named), "application/json")[0] == 200
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0 and "Traceback" not in err, err
    rows = stored(store)
    assert refused == 1 and len(rows) + refused == sent == 10
    assert sorted(r["name"] for r in rows) == [""] * 7 + ["named"] * 2
    assert {r["kind"] for r in rows} == {"INTERNAL"} and {r["status_code"] for r in rows} == {"UNSET"}
