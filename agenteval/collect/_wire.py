"""OTLP trace requests parsed for speed: the same wire format, read through messages shaped for Python.

The generated classes of ``opentelemetry-proto`` hand out one Python object per attribute, and per value (a
``KeyValue`` and its ``AnyValue``): reading a span's attributes that way costs ~5 µs, half the budget of a
span at 100,000 spans/s. These messages declare the same field numbers as ``opentelemetry.proto.trace.v1`` but
attributes as ``repeated bytes``: the protobuf runtime hands over each ``KeyValue`` still encoded, in a list
made in C. Most pairs repeat from span to span (an operation name, a model, a tool), so a bounded cache keyed
by a pair's bytes gives its ``(key, value)``, and a request's dicts are built from the cached pairs by C loops
(:func:`attribute_dicts`), with Python only for pairs not seen before: :func:`key_value` reads the usual
encoding (key, then value) from its bytes, and :func:`any_value` the common values (a string, an int, a bool, a
double). Anything else (arrays, key-value lists, bytes, an unusual encoding) goes through the real ``KeyValue``
and ``AnyValue`` classes. Fields the store does not keep (links, trace state, dropped counts, scope attributes) are
not declared, so the parser skips them.

tests/test_collect_decode.py checks these messages against the generated classes, value by value.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from itertools import chain, compress, islice, repeat
from operator import is_
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

_PACKAGE = "agenteval.otlp_wire"
_F = descriptor_pb2.FieldDescriptorProto
_MESSAGES: dict[str, list[tuple[str, int, int, str | None]]] = {
    # name: [(field, number, type, message type)]; attributes are repeated bytes: each KeyValue still encoded
    "Status": [("message", 2, _F.TYPE_STRING, None), ("code", 3, _F.TYPE_INT32, None)],
    "Event": [
        ("time_unix_nano", 1, _F.TYPE_FIXED64, None),
        ("name", 2, _F.TYPE_STRING, None),
        ("attributes", 3, _F.TYPE_BYTES, None),
    ],
    "Span": [
        ("trace_id", 1, _F.TYPE_BYTES, None),
        ("span_id", 2, _F.TYPE_BYTES, None),
        ("parent_span_id", 4, _F.TYPE_BYTES, None),
        ("name", 5, _F.TYPE_STRING, None),
        ("kind", 6, _F.TYPE_INT32, None),
        ("start_time_unix_nano", 7, _F.TYPE_FIXED64, None),
        ("end_time_unix_nano", 8, _F.TYPE_FIXED64, None),
        ("attributes", 9, _F.TYPE_BYTES, None),
        ("events", 11, _F.TYPE_MESSAGE, "Event"),
        ("status", 15, _F.TYPE_BYTES, None),  # still encoded: see status_fields
        ("flags", 16, _F.TYPE_FIXED32, None),  # read for whether the parent is remote (see _decode.REMOTE_PARENT)
    ],
    "Scope": [("name", 1, _F.TYPE_STRING, None), ("version", 2, _F.TYPE_STRING, None)],
    "ScopeSpans": [("scope", 1, _F.TYPE_MESSAGE, "Scope"), ("spans", 2, _F.TYPE_MESSAGE, "Span")],
    "Resource": [("attributes", 1, _F.TYPE_BYTES, None)],
    "ResourceSpans": [("resource", 1, _F.TYPE_MESSAGE, "Resource"), ("scope_spans", 2, _F.TYPE_MESSAGE, "ScopeSpans")],
    "ExportTraceServiceRequest": [("resource_spans", 1, _F.TYPE_MESSAGE, "ResourceSpans")],
}
_REPEATED = {("Span", "events"), ("ScopeSpans", "spans"), ("ResourceSpans", "scope_spans")}
_REPEATED |= {("ExportTraceServiceRequest", "resource_spans")}
_REPEATED |= {(name, "attributes") for name in ("Event", "Span", "Resource")}


def _file() -> descriptor_pb2.FileDescriptorProto:
    # proto2, where the runtime does not refuse a string field that is not UTF-8 (it hands over its bytes, which
    # text() reads): protobufjs writes a lone surrogate so, and under proto3 one such span name cost the request.
    # The wire format of these fields is the same under either syntax.
    proto = descriptor_pb2.FileDescriptorProto(name="agenteval_otlp_wire.proto", package=_PACKAGE, syntax="proto2")
    for name, fields in _MESSAGES.items():
        message = proto.message_type.add(name=name)
        for field, number, type_, message_type in fields:
            label = _F.LABEL_REPEATED if (name, field) in _REPEATED else _F.LABEL_OPTIONAL
            added = message.field.add(name=field, number=number, type=type_, label=label)
            if message_type:
                added.type_name = f".{_PACKAGE}.{message_type}"
    return proto


def _message_class(pool: descriptor_pool.DescriptorPool, name: str) -> Any:
    descriptor = pool.FindMessageTypeByName(f"{_PACKAGE}.{name}")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)  # protobuf < 4.22


_POOL = descriptor_pool.DescriptorPool()
_POOL.AddSerializedFile(_file().SerializeToString())  # in every protobuf runtime (pool.Add is not)
ExportTraceServiceRequest: Any = _message_class(_POOL, "ExportTraceServiceRequest")
"""``opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest``, read as described above."""
_Status: Any = _message_class(_POOL, "Status")

_STATUSES: dict[bytes, tuple[int, str]] = {b"": (0, "")}


def status_fields(raw: bytes) -> tuple[int, str]:
    """A span's encoded ``Status`` as ``(code, message)``. Most spans share a few (unset; an error with the
    same message), so they are kept in a bounded cache: a look-up instead of a message object per span.
    Raises ``ValueError`` when it is not a Status."""
    fields = _STATUSES.get(raw)
    if fields is None:
        try:
            status = _Status.FromString(raw)
        except DecodeError as exc:
            raise ValueError(f"status is not an OTLP Status ({exc})") from None
        fields = (status.code, text(status.message))
        if len(raw) <= _CACHED_BYTES:
            if len(_STATUSES) >= _CACHE_ENTRIES:
                _STATUSES.clear()
            _STATUSES[raw] = fields
    return fields


def text(value: str | bytes) -> str:
    """A string field of these messages: ``str``, or its bytes when they are not UTF-8 (read as attribute
    values are, with U+FFFD for what is not)."""
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


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


_PAIRS: dict[bytes, tuple[str, Any]] = {}
_CACHED_BYTES = 128
_CACHE_ENTRIES = 1 << 16
_SCALARS = (str, int, float, bool, type(None))


def key_value(raw: bytes) -> tuple[str, Any]:
    """An encoded ``KeyValue`` as ``(key, value)``. Raises ``ValueError`` when it is not one.

    Short pairs repeat from span to span (operation names, models, tools, services), so their decoded form is
    kept in a bounded cache, keyed by the pair's bytes: arrays of scalars as tuples, so that a cached value is
    never changed by whoever receives it.
    """
    pair = _PAIRS.get(raw)
    if pair is not None:
        return pair
    key, value = _read_key_value(raw)
    if isinstance(value, list) and all(isinstance(item, _SCALARS) for item in value):
        value = tuple(value)  # finish reasons and the like: as the SDK itself holds arrays
    pair = (key, value)
    if len(raw) <= _CACHED_BYTES and not isinstance(value, list | dict):
        if len(_PAIRS) >= _CACHE_ENTRIES:
            _PAIRS.clear()
        _PAIRS[raw] = pair
    return pair


def _read_key_value(raw: bytes) -> tuple[str, Any]:
    """The usual encoding (the key, then the value, each once) read from its bytes; anything else through the
    generated ``KeyValue`` class."""
    size = len(raw)
    if size > 1 and raw[0] == _KEY_TAG:
        key_size, start = _varint(raw, 1)
        end = start + key_size
        if end == size:
            return raw[start:end].decode("utf-8", "replace"), None
        if end < size and raw[end] == _VALUE_TAG:
            value_size, value_start = _varint(raw, end + 1)
            if value_start + value_size == size:
                return raw[start:end].decode("utf-8", "replace"), any_value(raw[value_start:])
    try:
        pair = KeyValue.FromString(raw)
    except DecodeError as exc:
        raise ValueError(f"an attribute is not an OTLP KeyValue ({exc})") from None
    return pair.key, _message_value(pair.value)


_KEY_TAG, _VALUE_TAG = 0x0A, 0x12


def _varint(raw: bytes, index: int) -> tuple[int, int]:
    """A length at ``index``: its value and the index after it (past the end when it is cut short, which the
    callers' size checks then refuse)."""
    value = shift = 0
    for index in range(index, min(len(raw), index + 10)):  # noqa: B020 (the index after the loop is the answer)
        byte = raw[index]
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, index + 1
    return value, len(raw) + 1


def attribute_values(attributes: Sequence[bytes]) -> dict[str, Any]:
    """Encoded ``KeyValue`` messages as a dict of Python values (a repeated key: the last wins, as in a map)."""
    return dict(map(key_value, attributes))


def attribute_dicts(attribute_lists: Sequence[Sequence[bytes]]) -> list[dict[str, Any]]:
    """:func:`attribute_values` for many spans at once, in C loops where the pairs are cached: one look-up per
    pair for the whole request, and the dicts built from the pairs without Python code per span."""
    raws = list(chain.from_iterable(attribute_lists))
    pairs: list[Any] = list(map(_PAIRS.get, raws))
    if None in pairs:
        missing = {raw: key_value(raw) for raw in set(compress(raws, map(is_, pairs, repeat(None))))}
        pairs = list(map(missing.get, raws, pairs))
    flat = iter(pairs)
    return list(map(dict, map(islice, repeat(flat), map(len, attribute_lists))))
