"""Spans to an Arrow record batch: the exporter's hot path.

Columns are built directly as Python lists and handed to Arrow once per column; ids are
formatted once and reused (a trace's spans share a trace id, and a parent id is another
span's id); attribute, event and resource JSON goes through orjson, and a resource shared by
every span of a provider is serialised once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from agenteval_instrumentation import attributes as A

from .schema import SPAN_SCHEMA, TYPED_ATTRIBUTES

_KIND = {kind: kind.name for kind in SpanKind}
_STATUS = {code: code.name for code in StatusCode}
_STRING_COLUMNS = [c for c in TYPED_ATTRIBUTES if SPAN_SCHEMA.field(c).type == pa.string()]
_INT_COLUMNS = [c for c in TYPED_ATTRIBUTES if pa.types.is_integer(SPAN_SCHEMA.field(c).type)]


def _json_default(value: Any) -> Any:
    return str(value)


def _dumps(value: Any) -> str:
    return orjson.dumps(value, default=_json_default).decode()


def spans_to_batch(spans: Sequence[ReadableSpan]) -> pa.RecordBatch:
    """One row per span, in :data:`SPAN_SCHEMA`."""
    hexes: dict[int, str] = {}
    resources: dict[int, tuple[str, str | None]] = {}

    def hex_id(value: int, width: str) -> str:
        text = hexes.get(value)
        if text is None:
            text = hexes[value] = format(value, width)
        return text

    columns: dict[str, list[Any]] = {name: [] for name in SPAN_SCHEMA.names if name != "duration_ms"}
    typed = [(columns[name], key) for name, key in TYPED_ATTRIBUTES.items() if name != "finish_reason"]
    finish_reasons = columns["finish_reason"]
    for span in spans:
        context = span.context
        columns["trace_id"].append(hex_id(context.trace_id, "032x"))
        columns["span_id"].append(hex_id(context.span_id, "016x"))
        parent = span.parent
        columns["parent_span_id"].append(hex_id(parent.span_id, "016x") if parent is not None else None)
        columns["name"].append(span.name)
        columns["kind"].append(_KIND[span.kind])
        columns["start_time"].append(span.start_time)
        columns["end_time"].append(span.end_time if span.end_time is not None else span.start_time)
        status = span.status
        columns["status_code"].append(_STATUS[status.status_code])
        columns["status_message"].append(status.description)
        scope = span.instrumentation_scope
        columns["scope_name"].append(scope.name if scope is not None else None)

        attributes = span.attributes or {}
        for column, key in typed:
            column.append(attributes.get(key))
        reasons = attributes.get(A.GEN_AI_RESPONSE_FINISH_REASONS)
        finish_reasons.append(reasons[0] if reasons else None)
        columns["attributes"].append(_dumps(dict(attributes)) if attributes else "{}")
        columns["events"].append(_events_json(span) if span.events else None)

        resource = span.resource
        cached = resources.get(id(resource))
        if cached is None:
            cached = resources[id(resource)] = (
                _dumps(dict(resource.attributes)),
                resource.attributes.get("service.name"),
            )
        columns["resource"].append(cached[0])
        columns["service_name"].append(cached[1])
    return _to_batch(columns)


def _events_json(span: ReadableSpan) -> str:
    return _dumps(
        [{"name": e.name, "timestamp": e.timestamp, "attributes": dict(e.attributes or {})} for e in span.events]
    )


def _to_batch(columns: dict[str, list[Any]]) -> pa.RecordBatch:
    arrays: dict[str, pa.Array] = {}
    for name in columns:
        field = SPAN_SCHEMA.field(name)
        values = columns[name]
        if name in _STRING_COLUMNS or name in _INT_COLUMNS:
            arrays[name] = _typed_attribute_array(values, field.type)
        else:
            arrays[name] = pa.array(values, type=field.type)
    start, end = arrays["start_time"], arrays["end_time"]
    duration = pc.divide(pc.subtract(end.cast(pa.int64()), start.cast(pa.int64())).cast(pa.float64()), 1e6)
    arrays["duration_ms"] = duration
    return pa.RecordBatch.from_arrays([arrays[n] for n in SPAN_SCHEMA.names], schema=SPAN_SCHEMA)


def _typed_attribute_array(values: list[Any], arrow_type: pa.DataType) -> pa.Array:
    """Attribute values are user-set: a wrong type becomes null in the typed column (the JSON keeps it)."""
    try:
        return pa.array(values, type=arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        if arrow_type == pa.string():
            return pa.array([v if isinstance(v, str) else None if v is None else str(v) for v in values])
        limit = 2 ** (arrow_type.bit_width - 1)
        return pa.array(
            [v if isinstance(v, int) and not isinstance(v, bool) and -limit <= v < limit else None for v in values],
            type=arrow_type,
        )
