"""OTLP trace requests parsed for speed: the same wire format, read through messages shaped for Python.

The generated classes of ``opentelemetry-proto`` hand out one Python object per attribute, and per value (a
``KeyValue`` and its ``AnyValue``): reading a span's attributes that way costs ~5 µs, half the budget of a
span at 100,000 spans/s. A protobuf map is, on the wire, exactly a repeated message whose key is field 1 and
value field 2, which is what ``KeyValue`` is. So these messages declare the same field numbers as
``opentelemetry.proto.trace.v1`` but attributes as ``map<string, bytes>``: the protobuf runtime builds the
whole map in C, each value arriving as its ``AnyValue`` still encoded, and :func:`any_value` reads the common
ones (a string, an int, a bool, a double) straight from those few bytes. Anything else (arrays, key-value lists,
bytes, an unusual encoding) goes through the real ``AnyValue`` class. Fields the store does not keep (links,
trace state, flags, dropped counts) are not declared, so the parser skips them.

tests/test_collect_decode.py checks these messages against the generated classes, value by value.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

_PACKAGE = "agenteval.otlp_wire"
_F = descriptor_pb2.FieldDescriptorProto
_MESSAGES: dict[str, tuple[list[tuple[str, int, int, str | None]], list[tuple[str, int]]]] = {
    # name: ([(field, number, type, message type)], [(map<string, bytes> field, number)])
    "Status": ([("message", 2, _F.TYPE_STRING, None), ("code", 3, _F.TYPE_INT32, None)], []),
    "Event": ([("time_unix_nano", 1, _F.TYPE_FIXED64, None), ("name", 2, _F.TYPE_STRING, None)], [("attributes", 3)]),
    "Span": (
        [
            ("trace_id", 1, _F.TYPE_BYTES, None),
            ("span_id", 2, _F.TYPE_BYTES, None),
            ("parent_span_id", 4, _F.TYPE_BYTES, None),
            ("name", 5, _F.TYPE_STRING, None),
            ("kind", 6, _F.TYPE_INT32, None),
            ("start_time_unix_nano", 7, _F.TYPE_FIXED64, None),
            ("end_time_unix_nano", 8, _F.TYPE_FIXED64, None),
            ("events", 11, _F.TYPE_MESSAGE, "Event"),
            ("status", 15, _F.TYPE_MESSAGE, "Status"),
        ],
        [("attributes", 9)],
    ),
    "Scope": ([("name", 1, _F.TYPE_STRING, None), ("version", 2, _F.TYPE_STRING, None)], [("attributes", 3)]),
    "ScopeSpans": ([("scope", 1, _F.TYPE_MESSAGE, "Scope"), ("spans", 2, _F.TYPE_MESSAGE, "Span")], []),
    "Resource": ([], [("attributes", 1)]),
    "ResourceSpans": (
        [("resource", 1, _F.TYPE_MESSAGE, "Resource"), ("scope_spans", 2, _F.TYPE_MESSAGE, "ScopeSpans")],
        [],
    ),
    "ExportTraceServiceRequest": ([("resource_spans", 1, _F.TYPE_MESSAGE, "ResourceSpans")], []),
}
_REPEATED = {("Span", "events"), ("ScopeSpans", "spans"), ("ResourceSpans", "scope_spans")}
_REPEATED |= {("ExportTraceServiceRequest", "resource_spans")}


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name="agenteval_otlp_wire.proto", package=_PACKAGE, syntax="proto3")
    for name, (fields, maps) in _MESSAGES.items():
        message = proto.message_type.add(name=name)
        for field, number, type_, message_type in fields:
            label = _F.LABEL_REPEATED if (name, field) in _REPEATED else _F.LABEL_OPTIONAL
            added = message.field.add(name=field, number=number, type=type_, label=label)
            if message_type:
                added.type_name = f".{_PACKAGE}.{message_type}"
        for field, number in maps:
            entry = message.nested_type.add(name="AttributesEntry")
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
            entry.field.add(name="value", number=2, type=_F.TYPE_BYTES, label=_F.LABEL_OPTIONAL)
            message.field.add(
                name=field,
                number=number,
                type=_F.TYPE_MESSAGE,
                label=_F.LABEL_REPEATED,
                type_name=f".{_PACKAGE}.{name}.AttributesEntry",
            )
    return proto


def _request_class() -> Any:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(_file().SerializeToString())  # in every protobuf runtime (pool.Add is not)
    descriptor = pool.FindMessageTypeByName(f"{_PACKAGE}.ExportTraceServiceRequest")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)  # protobuf < 4.22


ExportTraceServiceRequest: Any = _request_class()
"""``opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest``, read as described above."""

_DOUBLE = struct.Struct("<d")
_STRING, _BOOL, _INT, _DOUBLE_TAG = 0x0A, 0x10, 0x18, 0x21


def any_value(raw: bytes) -> Any:
    """An encoded ``AnyValue`` as a Python value (None when empty). Raises ``ValueError`` when it is not one."""
    size = len(raw)
    if not size:
        return None
    tag = raw[0]
    if tag == _STRING and size > 1:
        length = raw[1]
        if length < 0x80 and size == 2 + length:
            return raw[2:].decode("utf-8", "replace")
        if length >= 0x80 and size > 2 and raw[2] < 0x80 and size == 3 + ((length & 0x7F) | raw[2] << 7):
            return raw[3:].decode("utf-8", "replace")
    elif tag == _INT:
        value, shift, index = 0, 0, 1
        while index < size and index <= 10:
            byte = raw[index]
            value |= (byte & 0x7F) << shift
            index += 1
            shift += 7
            if byte < 0x80:
                if index == size:
                    return value - (1 << 64) if value >= 1 << 63 else value
                break
    elif tag == _BOOL and size == 2 and raw[1] < 0x80:
        return raw[1] != 0
    elif tag == _DOUBLE_TAG and size == 9:
        return _DOUBLE.unpack_from(raw, 1)[0]
    try:
        return _message_value(AnyValue.FromString(raw))
    except DecodeError as exc:  # not a ValueError: callers catch ValueError for any value that is not one
        raise ValueError(f"an attribute value is not an OTLP AnyValue ({exc})") from None


def _message_value(value: AnyValue) -> Any:
    """The general case, through the generated class."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_message_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _message_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")  # as OTLP/JSON writes bytes
    return getattr(value, kind)


_CACHE: dict[bytes, Any] = {}
_CACHED_BYTES = 64
_CACHE_ENTRIES = 1 << 16
_MISSING = object()


def attribute_values(attributes: Any) -> dict[str, Any]:
    """A ``map<string, bytes>`` of encoded values as a dict of Python values.

    Short values repeat from span to span (operation names, models, tools, services), so their decoded
    form is kept in a bounded cache: one dictionary look-up instead of a decode.
    """
    get = _CACHE.get
    out = {}
    for key in attributes:  # not .items() or dict(): those go through Python's Mapping mixins, ~3x slower
        raw = attributes[key]
        value = get(raw, _MISSING)
        if value is _MISSING:
            value = any_value(raw)
            if len(raw) <= _CACHED_BYTES and not isinstance(value, list | dict):
                if len(_CACHE) >= _CACHE_ENTRIES:
                    _CACHE.clear()
                _CACHE[raw] = value
        out[key] = value
    return out
