"""OTLP trace requests (protobuf or JSON) to the store's span rows.

Both encodings fill the same columns, which go through the exporter's own mapping
(:func:`agenteval_exporters.encode.columns_to_batch`): a span received over OTLP gets the row the
in-process exporter would have written for it, with the same typed columns and attribute conventions.

A request that cannot be read as a whole (not protobuf, not JSON, the wrong shape above the spans) is a
:class:`PayloadError` (400). A span that cannot be stored (ids of the wrong length, an end before its start,
an unknown kind, a wrongly typed field in JSON) is rejected alone and counted: the client hears a partial
success with the count and the first reason.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from operator import attrgetter, lt
from typing import Any

import orjson
import pyarrow as pa
from google.protobuf.message import DecodeError

from agenteval_exporters.encode import columns_to_batch, hex_id_column, resource_json

from ._wire import ExportTraceServiceRequest, attribute_values

TRACE_ID_BYTES = 16
SPAN_ID_BYTES = 8
_MAX_NANOS = 2**63 - 1  # what a timestamp[ns] column holds

# The SDK's enum names, which the store's ``kind`` and ``status_code`` columns hold. OTLP's UNSPECIFIED kind
# may be taken as INTERNAL (trace.proto).
KINDS = {0: "INTERNAL", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
STATUS_CODES = {0: "UNSET", 1: "OK", 2: "ERROR"}
_KIND_NAMES = {f"SPAN_KIND_{name}": number for number, name in KINDS.items()} | {"SPAN_KIND_UNSPECIFIED": 0}
_STATUS_NAMES = {f"STATUS_CODE_{name}": number for number, name in STATUS_CODES.items()}


class PayloadError(ValueError):
    """The request as a whole cannot be read; the message says why (sent back to the client)."""


class RejectedSpan(ValueError):
    """One span cannot be stored; the message says which field and why."""


@dataclasses.dataclass(frozen=True)
class Decoded:
    """A request's spans as rows, and what was rejected."""

    batch: pa.RecordBatch | None
    rejected: int = 0
    reason: str | None = None

    @property
    def accepted(self) -> int:
        return 0 if self.batch is None else self.batch.num_rows


class _Columns:
    """Span fields as columns, appended span by span (every list grows together)."""

    def __init__(self) -> None:
        self.trace_ids: list[bytes] = []
        self.span_ids: list[bytes] = []
        self.parent_span_ids: list[bytes] = []
        self.names: list[str] = []
        self.kinds: list[str] = []
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.status_codes: list[str] = []
        self.status_messages: list[str | None] = []
        self.scope_names: list[str | None] = []
        self.attributes: list[dict[str, Any]] = []
        self.events: list[list[dict[str, Any]] | None] = []
        self.resources: list[str] = []
        self.service_names: list[str | None] = []
        self.rejected = 0
        self.reason: str | None = None

    def add(
        self,
        ids: tuple[bytes, bytes, bytes],
        name: str,
        kind: str,
        times: tuple[int, int],
        status: tuple[str, str | None],
        attributes: dict[str, Any],
        events: list[dict[str, Any]] | None,
        where: tuple[str | None, str, str | None],
    ) -> None:
        """One span, validated (``where``: its scope name, resource JSON and service name)."""
        self.trace_ids.append(ids[0])
        self.span_ids.append(ids[1])
        self.parent_span_ids.append(ids[2])
        self.names.append(name)
        self.kinds.append(kind)
        self.starts.append(times[0])
        self.ends.append(times[1])
        self.status_codes.append(status[0])
        self.status_messages.append(status[1] or None)
        self.scope_names.append(where[0])
        self.attributes.append(attributes)
        self.events.append(events)
        self.resources.append(where[1])
        self.service_names.append(where[2])

    def reject(self, where: str, exc: Exception) -> None:
        self.rejected += 1
        if self.reason is None:
            self.reason = f"{where}: {exc}"

    def decoded(self) -> Decoded:
        if not self.names:
            return Decoded(None, self.rejected, self.reason)
        batch = columns_to_batch(
            trace_ids=hex_id_column(self.trace_ids, TRACE_ID_BYTES),
            span_ids=hex_id_column(self.span_ids, SPAN_ID_BYTES),
            parent_span_ids=hex_id_column(self.parent_span_ids, SPAN_ID_BYTES),
            names=self.names,
            kinds=self.kinds,
            starts=self.starts,
            ends=self.ends,
            status_codes=self.status_codes,
            status_messages=self.status_messages,
            scope_names=self.scope_names,
            attributes=self.attributes,
            events=self.events,
            resources=self.resources,
            service_names=self.service_names,
        )
        return Decoded(batch, self.rejected, self.reason)


def _check_ids(trace_id: bytes, span_id: bytes, parent: bytes) -> None:
    if len(trace_id) != TRACE_ID_BYTES or not any(trace_id):
        raise RejectedSpan(f"trace_id is {_id_problem(trace_id, TRACE_ID_BYTES)}")
    if len(span_id) != SPAN_ID_BYTES or not any(span_id):
        raise RejectedSpan(f"span_id is {_id_problem(span_id, SPAN_ID_BYTES)}")
    if parent and len(parent) != SPAN_ID_BYTES:
        raise RejectedSpan(f"parent_span_id is {_id_problem(parent, SPAN_ID_BYTES)}")


def _id_problem(value: bytes, width: int) -> str:
    return f"{len(value)} bytes, not {width}" if len(value) != width else "all zeros (invalid)"


def _check_times(start: int, end: int) -> None:
    if not 0 <= start <= _MAX_NANOS or not 0 <= end <= _MAX_NANOS:
        raise RejectedSpan("a timestamp is out of range (nanoseconds since 1970 up to 2**63-1)")
    if end < start:
        raise RejectedSpan("end_time_unix_nano is before start_time_unix_nano")


# Protobuf ---------------------------------------------------------------------------------------------------


def decode_protobuf(body: bytes) -> Decoded:
    """An ``ExportTraceServiceRequest`` in protobuf encoding."""
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except DecodeError as exc:
        raise PayloadError(f"not an OTLP ExportTraceServiceRequest in protobuf encoding ({exc})") from None
    columns = _Columns()
    for r, resource_spans in enumerate(request.resource_spans):
        try:
            resource = attribute_values(resource_spans.resource.attributes)
        except ValueError as exc:
            raise PayloadError(f"resource_spans[{r}].resource.attributes: {exc}") from None
        resource_text, service = resource_json(resource), _service(resource)
        for s, scope_spans in enumerate(resource_spans.scope_spans):
            scope = scope_spans.scope.name or None
            spans = scope_spans.spans
            if not _add_protobuf_spans(columns, spans, scope, resource_text, service):
                for i, span in enumerate(spans):  # something is wrong with a span: find which, keep the others
                    try:
                        _add_protobuf_span(columns, span, scope, resource_text, service)
                    except ValueError as exc:  # RejectedSpan, or an attribute value that is not an AnyValue
                        columns.reject(f"resource_spans[{r}].scope_spans[{s}].spans[{i}]", exc)
    return columns.decoded()


_SPAN_FIELDS = attrgetter(
    "trace_id",
    "span_id",
    "parent_span_id",
    "name",
    "kind",
    "start_time_unix_nano",
    "end_time_unix_nano",
    "status",
    "attributes",
    "events",
)
_STATUS_FIELDS = attrgetter("code", "message")
_ZERO_TRACE_ID, _ZERO_SPAN_ID = bytes(TRACE_ID_BYTES), bytes(SPAN_ID_BYTES)
_PARENT_SIZES = frozenset((0, SPAN_ID_BYTES))


def _add_protobuf_spans(columns: _Columns, spans: Any, scope: str | None, resource: str, service: str | None) -> bool:
    """One scope's spans, a column at a time (C loops where it can); False, adding nothing, when any span is
    invalid (:func:`_add_protobuf_span` then takes them one by one)."""
    if not spans:
        return True
    fields = list(map(_SPAN_FIELDS, spans))
    trace_ids, span_ids, parents, names, kinds, starts, ends, statuses, attributes, events = zip(*fields, strict=True)
    codes, messages = zip(*map(_STATUS_FIELDS, statuses), strict=True)
    valid = (
        set(map(len, trace_ids)) == {TRACE_ID_BYTES}
        and _ZERO_TRACE_ID not in trace_ids
        and set(map(len, span_ids)) == {SPAN_ID_BYTES}
        and _ZERO_SPAN_ID not in span_ids
        and _PARENT_SIZES.issuperset(map(len, parents))
        and KINDS.keys() >= set(kinds)
        and STATUS_CODES.keys() >= set(codes)
        and max(ends) <= _MAX_NANOS
        and not any(map(lt, ends, starts))
    )
    if not valid:
        return False
    try:
        values = list(map(attribute_values, attributes))
        event_dicts = [_event_dicts(e) if e else None for e in events]
    except ValueError:
        return False
    count = len(fields)
    columns.trace_ids += trace_ids
    columns.span_ids += span_ids
    columns.parent_span_ids += parents
    columns.names += names
    columns.kinds += map(KINDS.__getitem__, kinds)
    columns.starts += starts
    columns.ends += ends
    columns.status_codes += map(STATUS_CODES.__getitem__, codes)
    columns.status_messages += [m or None for m in messages]
    columns.scope_names += [scope] * count
    columns.attributes += values
    columns.events += event_dicts
    columns.resources += [resource] * count
    columns.service_names += [service] * count
    return True


def _event_dicts(events: Any) -> list[dict[str, Any]]:
    return [
        {"name": event.name, "timestamp": event.time_unix_nano, "attributes": attribute_values(event.attributes)}
        for event in events
    ]


def _add_protobuf_span(columns: _Columns, span: Any, scope: str | None, resource: str, service: str | None) -> None:
    trace_id, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
    _check_ids(trace_id, span_id, parent)
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    _check_times(start, end)
    kind = KINDS.get(span.kind)
    if kind is None:
        raise RejectedSpan(f"kind {span.kind} is not a SpanKind")
    status = span.status
    code = STATUS_CODES.get(status.code)
    if code is None:
        raise RejectedSpan(f"status.code {status.code} is not a StatusCode")
    attributes = attribute_values(span.attributes)
    event_dicts = _event_dicts(span.events) if span.events else None
    # Added only once nothing can raise, so the columns stay aligned.
    columns.add(
        (trace_id, span_id, parent),
        span.name,
        kind,
        (start, end),
        (code, status.message),
        attributes,
        event_dicts,
        (scope, resource, service),
    )


def _service(resource: Mapping[str, Any]) -> str | None:
    service = resource.get("service.name")
    return service if isinstance(service, str) else None


# JSON (OTLP/JSON: lowerCamelCase names, ids in hex, enums as integers, 64-bit integers as numbers or strings) --


def decode_json(body: bytes) -> Decoded:
    """An ``ExportTraceServiceRequest`` in OTLP/JSON encoding."""
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise PayloadError(f"not JSON ({exc})") from None
    columns = _Columns()
    for r, resource_spans in enumerate(_objects(request, "request", "resourceSpans")):
        where = f"resourceSpans[{r}]"
        resource_object = _object(_field(resource_spans, "resource"), f"{where}.resource")
        try:
            resource = _json_attributes(_field(resource_object, "attributes"))
        except RejectedSpan as exc:
            raise PayloadError(f"{where}.resource.attributes: {exc}") from None
        resource_text, service = resource_json(resource), _service(resource)
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
    return columns.decoded()


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


def _add_json_span(columns: _Columns, span: Any, scope: str | None, resource: str, service: str | None) -> None:
    if not isinstance(span, dict):
        raise RejectedSpan("not an object")
    trace_id = _hex_id(_field(span, "traceId"), "traceId")
    span_id = _hex_id(_field(span, "spanId"), "spanId")
    parent = _hex_id(_field(span, "parentSpanId"), "parentSpanId")
    _check_ids(trace_id, span_id, parent)
    start = _integer(_field(span, "startTimeUnixNano"), "startTimeUnixNano")
    end = _integer(_field(span, "endTimeUnixNano"), "endTimeUnixNano")
    _check_times(start, end)
    name = _field(span, "name") or ""
    if not isinstance(name, str):
        raise RejectedSpan("name is not a string")
    kind = KINDS.get(_enum(_field(span, "kind"), "kind", _KIND_NAMES))
    if kind is None:
        raise RejectedSpan("kind is not a SpanKind")
    status = _field(span, "status") or {}
    if not isinstance(status, dict):
        raise RejectedSpan("status is not an object")
    code = STATUS_CODES.get(_enum(_field(status, "code"), "status.code", _STATUS_NAMES))
    if code is None:
        raise RejectedSpan("status.code is not a StatusCode")
    message = _field(status, "message")
    if message is not None and not isinstance(message, str):
        raise RejectedSpan("status.message is not a string")
    attributes = _json_attributes(_field(span, "attributes"))
    events = _json_events(_field(span, "events"))
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


_HEX = re.compile(r"[0-9a-fA-F]*")


def _hex_id(value: Any, name: str) -> bytes:
    if value is None:
        return b""
    if not isinstance(value, str) or not _HEX.fullmatch(value) or len(value) % 2:
        raise RejectedSpan(f"{name} is not a hex string (OTLP/JSON writes ids in hex)")
    return bytes.fromhex(value)


_INTEGER = re.compile(r"-?[0-9]+")


def _integer(value: Any, name: str) -> int:
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    raise RejectedSpan(f"{name} is not an integer")


def _enum(value: Any, name: str, names: Mapping[str, int]) -> int:
    if isinstance(value, str) and value in names:
        return names[value]
    return _integer(value, name)


def _json_events(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise RejectedSpan("events is not a list")
    events = []
    for index, event in enumerate(value):
        if not isinstance(event, dict):
            raise RejectedSpan(f"events[{index}] is not an object")
        name = _field(event, "name") or ""
        if not isinstance(name, str):
            raise RejectedSpan(f"events[{index}].name is not a string")
        timestamp = _integer(_field(event, "timeUnixNano"), f"events[{index}].timeUnixNano")
        attributes = _json_attributes(_field(event, "attributes"), f"events[{index}].attributes")
        events.append({"name": name, "timestamp": timestamp, "attributes": attributes})
    return events or None


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
    return _integer(content, f"{where}: intValue")


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
