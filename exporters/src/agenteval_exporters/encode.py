"""Spans to an Arrow record batch: the exporter's hot path.

Columns are built directly as Python lists and handed to Arrow once per column; ids are hexed
a whole column at a time; attribute, event and resource JSON goes through orjson, and a resource shared by
every span of a provider is serialised once.
"""

from __future__ import annotations

import array
import json
from collections.abc import Sequence
from typing import Any

import orjson
import pyarrow as pa
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from .schema import SPAN_SCHEMA, TYPED_ATTRIBUTES

_KIND = {kind: kind.name for kind in SpanKind}
_STATUS = {code: code.name for code in StatusCode}
_TYPED_COLUMNS = frozenset(TYPED_ATTRIBUTES)


def _json_default(value: Any) -> Any:
    return str(value)


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(value, default=_json_default).decode()
    except TypeError:  # orjson refuses integers beyond 64 bits; the standard library does not
        return json.dumps(value, default=_json_default)


def _hex_column(ids: list[int | None], width: int) -> pa.Array:
    """Ids as lower-case hex strings, built with no per-id Python beyond ``to_bytes``: all ids are
    joined and hexed at once, and Arrow is handed the text with fixed offsets (None -> null)."""
    count = len(ids)
    nulls = ids.count(None)
    raw = (
        b"".join([(i or 0).to_bytes(width, "big") for i in ids])
        if nulls
        else b"".join([i.to_bytes(width, "big") for i in ids])
    )
    step = 2 * width
    offsets = array.array("i", range(0, step * (count + 1), step))
    validity = pa.array([i is not None for i in ids], pa.bool_()).buffers()[1] if nulls else None
    return pa.StringArray.from_buffers(
        count, pa.py_buffer(offsets), pa.py_buffer(raw.hex().encode("ascii")), validity, nulls
    )


def _plain_attributes(span: ReadableSpan) -> dict[str, Any]:
    """The span's attributes as a plain dict, without a copy where the SDK allows.

    ``ReadableSpan.attributes`` is a read-only view over ``BoundedAttributes``, whose lookups run
    in Python (~0.8 µs each, a dozen per span); its underlying dict answers in C.
    """
    bounded = getattr(span, "_attributes", None)
    inner = getattr(bounded, "_dict", None)
    if isinstance(inner, dict):
        return inner
    return dict(span.attributes or {})


def spans_to_batch(spans: Sequence[ReadableSpan]) -> pa.RecordBatch:
    """One row per span, in :data:`SPAN_SCHEMA`."""
    contexts = [s.context for s in spans]
    parents = [s.parent for s in spans]
    statuses = [s.status for s in spans]
    attributes = [_plain_attributes(s) for s in spans]
    columns: dict[str, list[Any]] = {
        "trace_id": _hex_column([c.trace_id for c in contexts], 16),
        "span_id": _hex_column([c.span_id for c in contexts], 8),
        "parent_span_id": _hex_column([p.span_id if p is not None else None for p in parents], 8),
        "name": [s.name for s in spans],
        "kind": [_KIND[s.kind] for s in spans],
        "start_time": [s.start_time for s in spans],
        "end_time": [s.end_time if s.end_time is not None else s.start_time for s in spans],
        "status_code": [_STATUS[st.status_code] for st in statuses],
        "status_message": [st.description for st in statuses],
        "scope_name": [sc.name if (sc := s.instrumentation_scope) is not None else None for s in spans],
    }
    for name, key in TYPED_ATTRIBUTES.items():
        columns[name] = [a.get(key) for a in attributes]
    columns["finish_reason"] = [r[0] if r else None for r in columns["finish_reason"]]
    columns["attributes"] = [_dumps(a) if a else "{}" for a in attributes]
    columns["events"] = [_events_json(s) if _has_events(s) else None for s in spans]
    columns["resource"], columns["service_name"] = _resource_columns(spans)
    columns["duration_ms"] = [
        (end - start) / 1e6 for start, end in zip(columns["start_time"], columns["end_time"], strict=True)
    ]
    return _to_batch(columns)


def _has_events(span: ReadableSpan) -> bool:
    # ``ReadableSpan.events`` copies the bounded list into a tuple (~2 µs); most spans have none.
    queue = getattr(getattr(span, "_events", None), "_dq", None)
    return bool(queue) if queue is not None else bool(span.events)


def _resource_columns(spans: Sequence[ReadableSpan]) -> tuple[list[str], list[str | None]]:
    """Resource JSON and service name per span; a provider's spans share one resource, encoded once."""
    cache: dict[int, tuple[str, str | None]] = {}
    resources, services = [], []
    for span in spans:
        resource = span.resource
        cached = cache.get(id(resource))
        if cached is None:
            cached = cache[id(resource)] = (
                _dumps(dict(resource.attributes)),
                resource.attributes.get("service.name"),
            )
        resources.append(cached[0])
        services.append(cached[1])
    return resources, services


def _events_json(span: ReadableSpan) -> str:
    return _dumps(
        [{"name": e.name, "timestamp": e.timestamp, "attributes": dict(e.attributes or {})} for e in span.events]
    )


def _to_batch(columns: dict[str, list[Any]]) -> pa.RecordBatch:
    arrays = []
    for field in SPAN_SCHEMA:
        values = columns[field.name]
        if isinstance(values, pa.Array):
            arrays.append(values)
        elif field.type == pa.string() and _uniform(values):
            # One resource, scope, experiment or status across the batch is common: no per-value work.
            arrays.append(pa.repeat(pa.scalar(values[0], pa.string()), len(values)))
        elif field.name in _TYPED_COLUMNS:
            arrays.append(_typed_attribute_array(values, field.type))
        else:
            arrays.append(pa.array(values, type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=SPAN_SCHEMA)


def _uniform(values: list[Any]) -> bool:
    first = values[0] if values else 0
    return (first is None or type(first) is str) and values.count(first) == len(values)


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
