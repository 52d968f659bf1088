"""OTLP/JSON trace requests to span columns: lowerCamelCase names (proto names accepted too), ids in hex, enums
as integers (or their names), 64-bit integers as numbers or strings, values as ``{"stringValue": ...}``."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from agenteval_exporters.encode import resource_json, service_name
from agenteval_instrumentation.attributes import DROPPED_EVENTS_COUNT

from ._decode import (
    KIND_NAMES,
    KINDS,
    STATUS_CODES,
    STATUS_NAMES,
    Decoded,
    PayloadError,
    RejectedSpan,
    SpanColumns,
    capped,
    check_ids,
    check_times,
    remote_parent,
    with_dropped,
)
from ._settings import MAX_SPAN_EVENTS


def decode_json(body: bytes) -> Decoded:
    """An ``ExportTraceServiceRequest`` in OTLP/JSON encoding."""
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        request = _lenient_json(body, exc)
    columns = SpanColumns()
    for r, resource_spans in enumerate(_objects(request, "request", "resourceSpans")):
        where = f"resourceSpans[{r}]"
        resource_object = _object(_field(resource_spans, "resource"), f"{where}.resource")
        try:
            resource = _capped_attributes(_field(resource_object, "attributes"))
        except RejectedSpan as exc:
            raise PayloadError(f"{where}.resource.attributes: {exc}") from None
        except RecursionError:
            raise PayloadError(f"{where}.resource.attributes: {NESTED_TOO_DEEPLY}") from None
        resource_text, service = resource_json(resource), service_name(resource)
        for s, scope_spans in enumerate(_objects(resource_spans, where, "scopeSpans")):
            scope_where = f"{where}.scopeSpans[{s}]"
            scope_name = _field(_object(_field(scope_spans, "scope"), f"{scope_where}.scope"), "name")
            if scope_name is not None and not isinstance(scope_name, str):
                raise PayloadError(f"{scope_where}.scope.name is not a string")
            for i, span in enumerate(_list(_field(scope_spans, "spans"), f"{scope_where}.spans")):
                try:
                    _add_json_span(columns, span, scope_name or None, resource_text, service)
                except RejectedSpan as exc:
                    columns.reject(f"{scope_where}.spans[{i}]", exc)
                except RecursionError:  # orjson reads 1,024 levels, deeper than the stack lets values be walked
                    columns.reject(f"{scope_where}.spans[{i}]", RejectedSpan(NESTED_TOO_DEEPLY))
                columns.flush_if_full()
    return columns.decoded()


NESTED_TOO_DEEPLY = "attribute values are nested too deeply"


def _lenient_json(body: bytes, error: orjson.JSONDecodeError) -> Any:
    """What orjson refused, read again by the standard library, which takes lone surrogate escapes: JavaScript
    strings hold half an emoji when a length limit cuts between its UTF-16 units, and JSON.stringify writes it
    as ``"\\ud83d"``. One such value must not cost the request (a 400 is dropped, not retried); the store
    replaces it with U+FFFD. NaN and Infinity stay refused, as orjson refuses them."""
    try:
        return json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than orjson's limit
        raise PayloadError(f"not JSON ({error})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _field(value: Mapping[str, Any], camel: str) -> Any:
    """A field by its lowerCamelCase name, or its proto name (receivers accept both)."""
    found = value.get(camel)
    if found is None:
        found = value.get(_snake(camel))
    return found


def _snake(camel: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel)


def _object(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PayloadError(f"{where} is not an object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PayloadError(f"{where} is not a list")
    return value


def _objects(parent: Any, where: str, name: str) -> Iterable[dict[str, Any]]:
    parent = _object(parent, where)
    for index, item in enumerate(_list(_field(parent, name), f"{where}.{name}")):
        yield _object(item, f"{where}.{name}[{index}]")


def _add_json_span(columns: SpanColumns, span: Any, scope: str | None, resource: str, service: str | None) -> None:
    if not isinstance(span, dict):
        raise RejectedSpan("not an object")
    trace_id = _hex_id(_field(span, "traceId"), "traceId")
    span_id = _hex_id(_field(span, "spanId"), "spanId")
    parent = _hex_id(_field(span, "parentSpanId"), "parentSpanId")
    check_ids(trace_id, span_id, parent)
    start = _integer(_field(span, "startTimeUnixNano"), "startTimeUnixNano")
    end = _integer(_field(span, "endTimeUnixNano"), "endTimeUnixNano")
    check_times(start, end)
    name = _field(span, "name") or ""
    if not isinstance(name, str):
        raise RejectedSpan("name is not a string")
    kind = KINDS.get(_enum(_field(span, "kind"), "kind", KIND_NAMES))
    if kind is None:
        raise RejectedSpan("kind is not a SpanKind")
    status = _field(span, "status") or {}
    if not isinstance(status, dict):
        raise RejectedSpan("status is not an object")
    code = STATUS_CODES.get(_enum(_field(status, "code"), "status.code", STATUS_NAMES))
    if code is None:
        raise RejectedSpan("status.code is not a StatusCode")
    message = _field(status, "message")
    if message is not None and not isinstance(message, str):
        raise RejectedSpan("status.message is not a string")
    attributes = _capped_attributes(_field(span, "attributes"))
    events, dropped_events = _json_events(_field(span, "events"))
    with_dropped(attributes, dropped_events, DROPPED_EVENTS_COUNT)
    flags = _field(span, "flags")  # a number; anything else is read as no flags, as before flags were read
    flags = flags if isinstance(flags, int) and not isinstance(flags, bool) else 0
    columns.add(
        (trace_id, span_id, parent),
        name,
        kind,
        (start, end),
        (code, message),
        attributes,
        events,
        (scope, resource, service),
    )
    if remote_parent(flags, parent):
        columns.remote_children.append(trace_id)


_HEX = re.compile(r"[0-9a-fA-F]*")


def _hex_id(value: Any, name: str) -> bytes:
    if value is None:
        return b""
    if not isinstance(value, str) or not _HEX.fullmatch(value) or len(value) % 2:
        raise RejectedSpan(f"{name} is not a hex string (OTLP/JSON writes ids in hex)")
    return bytes.fromhex(value)


# Up to 20 digits, which hold any 64-bit integer: int() refuses text past 4,300 digits with a ValueError, which
# cost the whole request a 500 rather than its span a rejection.
_INTEGER = re.compile(r"-?[0-9]{1,20}")
_INT64 = range(-(2**63), 2**63)
_WIRE_INTEGERS = range(-(2**63), 2**64)
"""What OTLP's 64-bit fields hold, signed (``intValue``) and unsigned (the timestamps), together."""


def _integer(value: Any, name: str, within: range = _WIRE_INTEGERS) -> int:
    if value is None:
        return 0
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        if value not in within:
            raise RejectedSpan(f"{name} is out of the range of a 64-bit integer")
        return value
    raise RejectedSpan(f"{name} is not an integer")


def _enum(value: Any, name: str, names: Mapping[str, int]) -> int:
    if isinstance(value, str) and value in names:
        return names[value]
    return _integer(value, name)


def _json_events(value: Any) -> tuple[list[dict[str, Any]] | None, int]:
    """A span's events, up to :data:`MAX_SPAN_EVENTS`, and how many were dropped."""
    if value is None:
        return None, 0
    if not isinstance(value, list):
        raise RejectedSpan("events is not a list")
    events = []
    kept, dropped = capped(value, MAX_SPAN_EVENTS)
    for index, event in enumerate(kept):
        if not isinstance(event, dict):
            raise RejectedSpan(f"events[{index}] is not an object")
        name = _field(event, "name") or ""
        if not isinstance(name, str):
            raise RejectedSpan(f"events[{index}].name is not a string")
        timestamp = _integer(_field(event, "timeUnixNano"), f"events[{index}].timeUnixNano")
        attributes = _capped_attributes(_field(event, "attributes"), f"events[{index}].attributes")
        events.append({"name": name, "timestamp": timestamp, "attributes": attributes})
    return events or None, dropped


def _capped_attributes(value: Any, where: str = "attributes") -> dict[str, Any]:
    """A span's or an event's attributes, up to ``MAX_SPAN_ATTRIBUTES`` (see :func:`._decode.capped`)."""
    dropped = 0
    if isinstance(value, list):
        value, dropped = capped(value)
    return with_dropped(_json_attributes(value, where), dropped)


def _json_attributes(value: Any, where: str = "attributes") -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, list):
        raise RejectedSpan(f"{where} is not a list")
    out = {}
    for index, pair in enumerate(value):
        key = pair.get("key") if isinstance(pair, dict) else None
        if not isinstance(key, str):
            raise RejectedSpan(f"{where}[{index}] has no string key")
        out[key] = _json_value(pair.get("value"), f"{where}[{index}] ({key})")
    return out


def _json_value(value: Any, where: str) -> Any:
    if value is None or value == {}:
        return None
    if not isinstance(value, dict) or len(value) != 1:
        raise RejectedSpan(f"{where}: a value is an object with one field, such as stringValue")
    ((field, content),) = value.items()
    read = _JSON_VALUES.get(field) or _JSON_VALUES.get(_camel(field))
    if read is None:
        raise RejectedSpan(f"{where}: {field} is not an AnyValue field")
    return read(content, where)


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part.title() for part in rest)


def _typed(kind: type | tuple[type, ...], label: str) -> Callable[[Any, str], Any]:
    def read(content: Any, where: str) -> Any:
        if not isinstance(content, kind) or isinstance(content, bool) and kind is not bool:
            raise RejectedSpan(f"{where}: {label} has the wrong type")
        return content

    return read


def _int_value(content: Any, where: str) -> int:
    return _integer(content, f"{where}: intValue", _INT64)


def _double_value(content: Any, where: str) -> float:
    if isinstance(content, int | float) and not isinstance(content, bool):
        return float(content)
    if content in ("NaN", "Infinity", "-Infinity"):
        return float(content.replace("Infinity", "inf"))
    raise RejectedSpan(f"{where}: doubleValue is not a number")


def _bytes_value(content: Any, where: str) -> str:
    if not isinstance(content, str):
        raise RejectedSpan(f"{where}: bytesValue is not base64 text")
    try:
        base64.b64decode(content, validate=True)
    except ValueError:
        raise RejectedSpan(f"{where}: bytesValue is not base64") from None
    return content


def _array_value(content: Any, where: str) -> list[Any]:
    values = content.get("values") if isinstance(content, dict) else None
    if values is not None and not isinstance(values, list):
        raise RejectedSpan(f"{where}: arrayValue.values is not a list")
    return [_json_value(v, f"{where}[{i}]") for i, v in enumerate(values or [])]


def _kvlist_value(content: Any, where: str) -> dict[str, Any]:
    if not isinstance(content, dict):
        raise RejectedSpan(f"{where}: kvlistValue is not an object")
    return _json_attributes(content.get("values"), where)


_JSON_VALUES: dict[str, Callable[[Any, str], Any]] = {
    "stringValue": _typed(str, "stringValue"),
    "boolValue": _typed(bool, "boolValue"),
    "intValue": _int_value,
    "doubleValue": _double_value,
    "bytesValue": _bytes_value,
    "arrayValue": _array_value,
    "kvlistValue": _kvlist_value,
}
