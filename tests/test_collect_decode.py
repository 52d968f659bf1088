"""The collector's own reading of OTLP protobuf (agenteval/collect/_wire.py) against the generated classes of
opentelemetry-proto: the same values for every kind of attribute value and encoding, fields it does not keep
skipped, and any request the generated classes read is read."""

from __future__ import annotations

import base64
import json
import math

import pytest
from collect_clients import agent_spans
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from agenteval.collect import PayloadError, decode_protobuf
from agenteval.collect._wire import ExportTraceServiceRequest as WireRequest
from agenteval.collect._wire import any_value, attribute_dicts, attribute_values, key_value


def reference(value: AnyValue):
    """An AnyValue as a Python value, read through the generated class."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [reference(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: reference(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return getattr(value, kind)


def lists(attributes):
    """Arrays of scalars come back as tuples (so that the cached ones cannot be changed): as lists here."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in attributes.items()}


VALUES = [
    AnyValue(),
    AnyValue(string_value=""),
    *(AnyValue(string_value="x" * n) for n in (1, 127, 128, 129, 16383, 16384, 70000)),
    AnyValue(string_value="héllo ✓ 日本"),
    *(AnyValue(int_value=n) for n in (0, 1, 127, 128, 300, -1, -300, 2**63 - 1, -(2**63))),
    AnyValue(bool_value=True),
    AnyValue(bool_value=False),
    *(AnyValue(double_value=d) for d in (0.0, -1.5, 1e300, math.inf, -math.inf)),
    AnyValue(bytes_value=b"\x00\x01\xff"),
    AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="a"), AnyValue(int_value=2), AnyValue()])),
    AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="k", value=AnyValue(array_value=ArrayValue(values=[])))])),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: str(v.WhichOneof("value")))
def test_every_kind_of_value_reads_as_the_generated_class_reads_it(value):
    assert any_value(value.SerializeToString()) == reference(value)
    assert any_value(value.SerializeToString()) == reference(value)  # again, from the cache


def test_non_canonical_encodings_read_as_protobuf_says():
    # A oneof set twice: the last wins. A string then an int, and the same field repeated.
    for raw in (b"\x0a\x01a\x0a\x01b", b"\x0a\x01a\x18\x05", b"\x18\x05\x0a\x01a", b"\x10\x01\x10\x00"):
        assert any_value(raw) == reference(AnyValue.FromString(raw)), raw
    assert math.isnan(any_value(AnyValue(double_value=math.nan).SerializeToString()))
    with pytest.raises(ValueError, match="not an OTLP AnyValue"):
        any_value(b"\x0a\x05ab")  # a string shorter than its length


def test_attributes_and_requests_read_like_the_generated_classes():
    request = encode_spans(agent_spans(3))
    span = request.resource_spans[0].scope_spans[0].spans[1]
    span.attributes.add(key="odd", value=AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="a")])))
    span.trace_state = "vendor=1"  # fields the store does not keep are skipped
    span.links.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    span.flags = 0x301
    span.dropped_attributes_count = 4
    data = request.SerializeToString()
    wire = WireRequest.FromString(data)
    for wire_rs, rs in zip(wire.resource_spans, request.resource_spans, strict=True):
        assert lists(attribute_values(wire_rs.resource.attributes)) == {
            kv.key: reference(kv.value) for kv in rs.resource.attributes
        }
        for wire_ss, ss in zip(wire_rs.scope_spans, rs.scope_spans, strict=True):
            assert wire_ss.scope.name == ss.scope.name
            for wire_span, real in zip(wire_ss.spans, ss.spans, strict=True):
                expected = {kv.key: reference(kv.value) for kv in real.attributes}
                assert lists(attribute_values(wire_span.attributes)) == expected
                assert lists(attribute_dicts([wire_span.attributes])[0]) == expected
                assert (wire_span.trace_id, wire_span.span_id, wire_span.parent_span_id, wire_span.name) == (
                    real.trace_id,
                    real.span_id,
                    real.parent_span_id,
                    real.name,
                )
                assert [(e.name, e.time_unix_nano) for e in wire_span.events] == [
                    (e.name, e.time_unix_nano) for e in real.events
                ]
    decoded = decode_protobuf(data)
    assert decoded.accepted == 12 and decoded.rejected == 0


def test_a_span_with_a_corrupt_attribute_value_is_rejected_alone():
    request = encode_spans(agent_spans(1))
    spans = request.resource_spans[0].scope_spans[0].spans
    data = request.SerializeToString()
    # The first span's first attribute value, re-encoded with a string length past its end: the outer lengths
    # still hold (the map's value is opaque bytes to the outer message), only that value is corrupt.
    key = spans[0].attributes[0].key.encode()
    good = spans[0].attributes[0].value.SerializeToString()
    corrupt = b"\x0a" + bytes([len(good) + 5]) + good[2:]
    assert len(corrupt) == len(good) and data.count(good) >= 1
    decoded = decode_protobuf(
        data.replace(key + b"\x12" + bytes([len(good)]) + good, key + b"\x12" + bytes([len(good)]) + corrupt, 1)
    )
    assert (decoded.accepted, decoded.rejected) == (3, 1)
    assert "not an OTLP AnyValue" in decoded.reason


def test_a_request_the_generated_classes_refuse_is_a_payload_error():
    bad = ExportTraceServiceRequest().SerializeToString() + b"\x0a\x05ab"  # a field longer than the message
    with pytest.raises(Exception):  # noqa: B017 (the generated class's own error type varies by runtime)
        ExportTraceServiceRequest.FromString(bad)
    with pytest.raises(PayloadError, match="not an OTLP ExportTraceServiceRequest"):
        decode_protobuf(bad)
    assert Span.SpanKind.Name(3) == "SPAN_KIND_CLIENT"


def test_key_values_read_as_the_generated_class_reads_them():
    pairs = [
        KeyValue(key="k", value=AnyValue(string_value="v")),
        KeyValue(key="k" * 200, value=AnyValue(string_value="v" * 20000)),  # lengths of two and three bytes
        KeyValue(key="k"),  # no value
        KeyValue(value=AnyValue(int_value=3)),  # no key
        KeyValue(key="reasons", value=AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="stop")]))),
    ]
    for pair in pairs:
        raw = pair.SerializeToString()
        for _ in range(2):  # again, from the cache
            key, value = key_value(raw)
            assert (key, list(value) if isinstance(value, tuple) else value) == (pair.key, reference(pair.value))
    # The value before the key, a value set twice (the last wins), and a field the parser skips.
    for raw in (b"\x12\x02\x18\x05\x0a\x01k", b"\x0a\x01k\x12\x02\x18\x05\x12\x02\x18\x06", b"\x0a\x01k\x18\x01"):
        expected = KeyValue.FromString(raw)
        assert key_value(raw) == (expected.key, reference(expected.value)), raw
    for raw in (b"\x0a\x05ab", b"\x0a\x01k\x12\x05\x18"):  # cut short
        with pytest.raises(ValueError, match="not an OTLP"):
            key_value(raw)


def test_attributes_keep_their_order_and_the_last_of_a_repeated_key():
    request = encode_spans(agent_spans(1))
    span = request.resource_spans[0].scope_spans[0].spans[0]
    span.attributes.add(key="dup", value=AnyValue(int_value=1))
    span.attributes.add(key="dup", value=AnyValue(int_value=2))
    wire_span = WireRequest.FromString(request.SerializeToString()).resource_spans[0].scope_spans[0].spans[0]
    values = attribute_values(wire_span.attributes)
    assert list(values) == list(dict.fromkeys(kv.key for kv in span.attributes)) and values["dup"] == 2


def test_an_attribute_key_that_is_not_utf8_is_read_like_a_value_that_is_not():
    request = encode_spans(agent_spans(1))
    span = request.resource_spans[0].scope_spans[0].spans[0]
    span.attributes.add(key="zzzz", value=AnyValue(string_value="yyyy"))
    decoded = decode_protobuf(request.SerializeToString().replace(b"zzzz", b"z\xffzz").replace(b"yyyy", b"y\xffyy"))
    assert (decoded.accepted, decoded.rejected) == (4, 0)
    assert '"z\ufffdzz":"y\ufffdyy"' in decoded.batch.column("attributes")[0].as_py()


def test_statuses_read_as_the_generated_class_reads_them_and_a_corrupt_one_is_rejected_alone():
    request = encode_spans(agent_spans(1))
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[1].status.code, spans[1].status.message = 2, "tool failed"
    for _ in range(2):  # again, from the cache
        decoded = decode_protobuf(request.SerializeToString())
        rows = decoded.batch.select(["status_code", "status_message"]).to_pylist()
        expected = [(("UNSET", "OK", "ERROR")[s.status.code], s.status.message or None) for s in spans]
        assert [(r["status_code"], r["status_message"]) for r in rows] == expected
    status = spans[1].status.SerializeToString()
    data = request.SerializeToString()
    # The message's length made longer than the status: the span's own length still holds.
    field = b"\x7a" + bytes([len(status)])
    corrupt = data.replace(field + status, field + b"\x12\x7f" + status[2:], 1)
    assert corrupt != data
    decoded = decode_protobuf(corrupt)
    assert (decoded.accepted, decoded.rejected) == (3, 1) and "not an OTLP Status" in decoded.reason


def test_span_event_scope_and_status_text_that_is_not_utf8_is_read_with_replacement_characters():
    """protobufjs's UTF-8 writer encodes a lone surrogate (half an emoji) as the bytes ED A0 BD, which are not
    UTF-8. In a span's name, an event's name or the scope's name the request's parse failed: a 400 for every
    span in it; in a status message that span was rejected. They are read as attribute keys and values are:
    the bytes that are not UTF-8 become U+FFFD."""
    request = encode_spans(agent_spans(1))
    scope_spans = request.resource_spans[0].scope_spans[0]
    scope_spans.scope.name = "scope ZZZ"
    spans = scope_spans.spans
    (event,) = (n for n, span in enumerate(spans) if span.events)
    (failed,) = (n for n, span in enumerate(spans) if span.status.message)
    spans[0].name = "reply ZZZ"
    spans[event].events[0].name = "event ZZZ"
    spans[failed].status.message = "failed ZZZ"
    decoded = decode_protobuf(request.SerializeToString().replace(b"ZZZ", b"\xed\xa0\xbd"))
    assert (decoded.accepted, decoded.rejected, decoded.reason) == (4, 0, None)
    rows = decoded.batch.to_pylist()
    half = "\ufffd" * 3  # each of the three bytes, as attribute values read them
    assert rows[0]["name"] == f"reply {half}" and {r["scope_name"] for r in rows} == {f"scope {half}"}
    assert json.loads(rows[event]["events"])[0]["name"] == f"event {half}"
    assert rows[failed]["status_message"] == f"failed {half}"


def test_a_request_of_more_spans_than_a_chunk_decodes_whole_and_names_a_bad_span_by_its_place():
    """A request is decoded into rows DECODE_CHUNK_SPANS spans at a time (decoded whole, 600,000 small spans took
    730 MB at once, 380 MB now): every span comes out once, in order, with its attributes, and a span rejected in a
    later chunk is named by its place in the request."""
    from agenteval.collect._decode import DECODE_CHUNK_SPANS

    count = 2 * DECODE_CHUNK_SPANS + 100
    request = ExportTraceServiceRequest()
    scope_spans = request.resource_spans.add().scope_spans.add()
    for n in range(count):
        span = scope_spans.spans.add(trace_id=(n + 1).to_bytes(16, "big"), span_id=(n + 1).to_bytes(8, "big"))
        span.attributes.add(key="n", value=AnyValue(int_value=n))
    bad = DECODE_CHUNK_SPANS + 7
    scope_spans.spans[bad].span_id = b"short"
    decoded = decode_protobuf(request.SerializeToString())
    assert (decoded.accepted, decoded.rejected) == (count - 1, 1)
    assert decoded.reason.startswith(f"resource_spans[0].scope_spans[0].spans[{bad}]: span_id is 5 bytes")
    kept = [n for n in range(count) if n != bad]
    assert decoded.batch.column("span_id").to_pylist() == [(n + 1).to_bytes(8, "big").hex() for n in kept]
    assert [json.loads(a)["n"] for a in decoded.batch.column("attributes").to_pylist()] == kept


def test_spans_whose_parent_is_remote_are_named_by_their_traces_in_both_encodings():
    """The SDK's exporter flags a span whose parent came from another process (a traceparent header): the tops of
    traces that came from elsewhere, which online scoring takes as it takes roots. A local parent, or a root, is
    not named; a span the request rejects is not either."""
    from collect_clients import json_request

    from agenteval.collect import decode_json

    request = encode_spans(agent_spans(3))
    spans = request.resource_spans[0].scope_spans[0].spans
    assert {span.flags for span in spans} == {0x100}  # "has is-remote", not remote: the SDK's local spans
    top = next(span for span in spans if not span.parent_span_id and span.trace_id == spans[0].trace_id)
    top.parent_span_id, top.flags = bytes.fromhex("00f067aa0ba902b7"), 0x300
    remote_trace = top.trace_id.hex()
    assert decode_protobuf(request.SerializeToString()).remote_children == (remote_trace,)
    span = {"traceId": remote_trace, "spanId": "b7ad6b7169203331", "name": "invoke_agent a", "kind": 2}
    span |= {"startTimeUnixNano": "1", "endTimeUnixNano": "2", "parentSpanId": "00f067aa0ba902b7"}
    local = span | {"traceId": "0af7651916cd43dd8448eb211c80319c", "flags": 0x100}
    root = span | {"traceId": "1af7651916cd43dd8448eb211c80319c", "flags": 0x300, "parentSpanId": ""}
    decoded = decode_json(json_request([span | {"flags": 0x300}, local, root, span | {"flags": "768"}]))
    assert decoded.accepted == 4 and decoded.remote_children == (remote_trace,)
    # One span of the request rejected (an end before its start): the others are read one by one, and still named.
    other = next(span for span in spans if span.trace_id != top.trace_id)
    other.end_time_unix_nano = other.start_time_unix_nano - 1
    decoded = decode_protobuf(request.SerializeToString())
    assert decoded.rejected == 1 and decoded.remote_children == (remote_trace,)
    top.end_time_unix_nano = top.start_time_unix_nano - 1
    assert decode_protobuf(request.SerializeToString()).remote_children == ()
