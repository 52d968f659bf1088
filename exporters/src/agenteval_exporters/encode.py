"""Spans to an Arrow record batch: the exporter's hot path.

_gil_held: the encoder runs on the BatchSpanProcessor's thread while the application makes spans. Each
pyarrow call that releases the GIL (pa.repeat, pa.nulls, StructArray.flatten, compute functions) then
waits a whole switch interval (5 ms) to get it back from the busy application thread: seven such calls
made one export of 512 spans take 45 ms, long enough for a burst to overflow the SDK's queue. So the
encoder uses only calls that keep the GIL, which are as fast or faster here.

Per-span Python is what costs here, so every column is pulled out with C-level loops
(``map`` over ``attrgetter``/``itemgetter``/``dict.get``) instead of comprehensions that call the
SDK's Python properties. Ids are hexed a column at a time; attribute and event JSON is made by
orjson straight into an Arrow string buffer; a resource shared by a provider's spans is encoded once.

Three of these shortcuts have a plain path they fall back to (see :mod:`.ablation`): the private slots
(:data:`READ_PRIVATE_SLOTS`), the typed columns' one struct conversion (:data:`TYPED_STRUCT`) and orjson
(:data:`ORJSON`). Each flag is read once from ``AGENTEVAL_ABLATE``, for benchmarks only.
"""

from __future__ import annotations

import array
import json
import math
import sys
from collections.abc import Sequence
from functools import lru_cache, partial
from itertools import accumulate, chain, repeat
from operator import attrgetter, itemgetter
from typing import Any, Literal, cast

import orjson
import pyarrow as pa
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from agenteval_instrumentation import capture
from agenteval_instrumentation.masking import masked_logger
from agenteval_instrumentation.text import storable, storable_text

from .ablation import FALLBACKS, enabled
from .conventions import OWN_SCOPES, derived
from .schema import PARTITION_COLUMN, SPAN_SCHEMA, TYPED_ATTRIBUTES

logger = masked_logger(__name__)

# Benchmarks only (see .ablation): False forces the plain path of each shortcut.
READ_PRIVATE_SLOTS = enabled("slots")
TYPED_STRUCT = enabled("typed_struct")
ORJSON = enabled("orjson")

# Keyed by identity: enum members are singletons, and Enum.__hash__ runs in Python (~0.2 µs).
_KIND_NAMES = {id(kind): kind.name for kind in SpanKind}
_STATUS_NAMES = {id(code): code.name for code in StatusCode}


def _enum_names(members: Sequence[Any], names: dict[int, str], default: str) -> list[str]:
    try:
        return list(map(names.__getitem__, map(id, members)))
    except KeyError:  # not one of the SDK's members (a span started with kind=None): what the API gives by default
        return [names.get(id(member), default) for member in members]


_TYPED_COLUMNS = frozenset(TYPED_ATTRIBUTES)


def _json_default(value: Any) -> Any:
    return str(value)


_orjson_dumps = partial(orjson.dumps, default=_json_default)


def _dumps_bytes(value: Any) -> bytes:
    if ORJSON:
        try:
            return _orjson_dumps(value)
        except TypeError:  # orjson refuses integers beyond 64 bits and lone surrogates; the standard library does not
            pass
    return _stdlib_dumps_bytes(value)


def _stdlib_dumps_bytes(value: Any) -> bytes:
    # Unescaped, so that a lone surrogate can be replaced: DuckDB's JSON functions reject a "\ud800" escape.
    try:
        text = json.dumps(value, default=_json_default, ensure_ascii=False, allow_nan=False)
    except ValueError:  # NaN or an infinity, which JSON has no word for: null, as orjson writes them
        text = json.dumps(_finite(value), default=_json_default, ensure_ascii=False, allow_nan=False)
    return storable_text(text).encode()


def _finite(value: Any) -> Any:
    """``value`` with every NaN and infinity (inside dicts, lists and tuples too) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _dumps(value: Any) -> str:
    return _dumps_bytes(value).decode()


# What a row needs from a span, read straight from the SDK's private slots (see _span_fields).
_PRIVATE_SLOTS = {
    "context": "_context",
    "parent": "_parent",
    "status_code": "_status._status_code",
    "status_message": "_status._description",
    "attributes": "_attributes._dict",
    "events": "_events._dq",
    "resource": "_resource",
    "scope_name": "_instrumentation_scope._name",
    "name": "_name",
    "kind": "_kind",
    "start_time": "_start_time",
    "end_time": "_end_time",
}
_read_private_slots = attrgetter(*_PRIVATE_SLOTS.values())


def _read_public_properties(span: ReadableSpan) -> tuple[Any, ...]:
    scope = span.instrumentation_scope
    return (
        span.context,
        span.parent,
        span.status.status_code,
        span.status.description,
        dict(span.attributes or {}),
        span.events,
        span.resource,
        None if scope is None else scope.name,
        span.name,
        span.kind,
        span.start_time,
        span.end_time,
    )


def _span_fields(spans: Sequence[ReadableSpan]) -> dict[str, tuple[Any, ...]]:
    """The values of :data:`_PRIVATE_SLOTS` for every span, as columns.

    The SDK's public accessors are Python properties (~50 ns a call), and ``attributes`` and
    ``events`` wrap or copy what they return; the private slots behind them are read and
    transposed in C. Spans that lack a slot (not made by the SDK's tracer) use the properties.
    """
    if READ_PRIVATE_SLOTS:
        try:
            rows = list(map(_read_private_slots, spans))
        except AttributeError:
            FALLBACKS["slots"] += 1
            rows = list(map(_read_public_properties, spans))
    else:
        rows = list(map(_read_public_properties, spans))
    return dict(zip(_PRIVATE_SLOTS, zip(*rows, strict=True), strict=True))


def _hex_column(ids: list[int | None], width: int) -> pa.Array:
    """Ids as lower-case hex strings, built with no per-id Python: all ids are joined and hexed at
    once, and Arrow is handed the text with fixed offsets (None -> null)."""
    count = len(ids)
    nulls = ids.count(None)
    present = [i or 0 for i in ids] if nulls else cast("list[int]", ids)  # no None in it
    raw = _big_endian(present, width)
    validity = pa.array(list(map(bool, ids)), pa.bool_()).buffers()[1] if nulls else None
    return pa.StringArray.from_buffers(
        count, _fixed_offsets(count, 2 * width), pa.py_buffer(raw.hex().encode("ascii")), validity, nulls
    )


def _big_endian(ids: list[int], width: int) -> bytes:
    if width == _U64.itemsize:  # span ids: packed in C, ~3x faster than int.to_bytes each
        packed = array.array("Q", ids)
        if sys.byteorder == "little":
            packed.byteswap()
        return packed.tobytes()
    byteorder: Literal["big"] = "big"
    return b"".join(map(int.to_bytes, ids, repeat(width), repeat(byteorder)))


_U64 = array.array("Q")


def hex_id_column(ids: Sequence[bytes], width: int) -> pa.Array:
    """Ids given as raw bytes (as OTLP sends them: ``width`` bytes each, or empty for none) as lower-case hex
    strings, empty -> null; hexed all at once like :func:`_hex_column`. Callers check the widths."""
    nulls = ids.count(b"")
    # An empty id becomes zeros (dict.get(id, id) in a C loop, no Python per id): every id then takes width bytes.
    raw = b"".join(ids) if not nulls else b"".join(map(_zeros_for_empty(width).get, ids, ids))
    validity = pa.array(list(map(bool, ids)), pa.bool_()).buffers()[1] if nulls else None
    return pa.StringArray.from_buffers(
        len(ids), _fixed_offsets(len(ids), 2 * width), pa.py_buffer(raw.hex().encode("ascii")), validity, nulls
    )


@lru_cache(maxsize=4)
def _zeros_for_empty(width: int) -> dict[bytes, bytes]:
    return {b"": bytes(width)}


def resource_json(attributes: Any) -> str:
    """A resource's attributes as the ``resource`` column's JSON text."""
    return _dumps(dict(attributes))


def service_name(attributes: Any) -> str | None:
    """A resource's ``service.name`` for the ``service_name`` column and the spans' folder: None (the unknown
    service) when it is not text. An application may set it to a number; as it was, it failed every batch of its
    spans (the resource JSON keeps the value)."""
    service = attributes.get("service.name")
    return service if isinstance(service, str) else None


@lru_cache(maxsize=64)
def _fixed_offsets(count: int, step: int) -> pa.Buffer:
    if step == 0:  # every value empty (spans sent without a name: OTLP's default is ""); range() takes no step 0
        return pa.py_buffer(bytes(4 * (count + 1)))
    return pa.py_buffer(array.array("i", range(0, step * (count + 1), step)))


JSON_CHUNK = 256
"""Values encoded between joins. orjson returns each value in a 4 KiB allocation whatever its length: a batch of
4,000 spans' attributes held 16 MB of them at once (for 2.5 MB of text) until they were joined."""


def _orjson_each(values: Sequence[Any], nulls: int) -> list[bytes] | None:
    """Each value by orjson, looped in C; None when orjson refuses one (then each is tried in turn)."""
    try:
        # orjson.dumps itself, not _orjson_dumps: passing default= costs ~40% of a small dict's encoding, and a
        # value that needs it raises TypeError here and is encoded with it below.
        if not nulls:
            return list(map(orjson.dumps, values))
        return [b"" if v is None else orjson.dumps(v) for v in values]
    except TypeError:
        FALLBACKS["orjson"] += 1
        return None


MAX_COLUMN_BYTES = 2**31 - 1
"""Most bytes of text one string column of a batch holds: Arrow's ``string`` type has 32-bit offsets. A batch
whose attributes or events JSON would pass it is encoded as several (:func:`spans_to_batches`). Module-level so
that a test can lower it (``monkeypatch.setattr``) and exercise the split with kilobytes instead of gigabytes;
nothing else should change it."""


class ColumnTooLarge(ValueError):
    """A JSON column of the batch being encoded would pass :data:`MAX_COLUMN_BYTES`: encode fewer spans at once."""


def _json_column(values: Sequence[Any]) -> pa.Array:
    """Each value as JSON text, None as null: orjson's bytes go into the Arrow buffer undecoded, joined
    :data:`JSON_CHUNK` values at a time. Raises :class:`ColumnTooLarge` as soon as the text passes
    :data:`MAX_COLUMN_BYTES`, before it is joined; a single value that long alone is recorded as null."""
    lengths = array.array("q")
    parts = []
    total = 0
    for start in range(0, len(values), JSON_CHUNK):
        chunk = values[start : start + JSON_CHUNK]
        encoded = _orjson_each(chunk, chunk.count(None)) if ORJSON else None
        if encoded is None:
            encoded = [b"" if v is None else _dumps_bytes(v) for v in chunk]
        sizes = list(map(len, encoded))  # in C: this is the exporter's hot path
        if max(sizes) > MAX_COLUMN_BYTES:
            encoded = [b"" if len(e) > MAX_COLUMN_BYTES else e for e in encoded]
            values = _too_long_as_null(values, start, chunk, encoded)
            sizes = list(map(len, encoded))
        total += sum(sizes)
        if total > MAX_COLUMN_BYTES:
            raise ColumnTooLarge(f"{total} bytes of JSON text in one column, past {MAX_COLUMN_BYTES}")
        lengths.extend(sizes)
        parts.append(b"".join(encoded))
    offsets = array.array("i", accumulate(lengths, initial=0))
    nulls = values.count(None)
    validity = pa.array([v is not None for v in values], pa.bool_()).buffers()[1] if nulls else None
    return pa.StringArray.from_buffers(
        len(values), pa.py_buffer(offsets), pa.py_buffer(b"".join(parts)), validity, nulls
    )


def _too_long_as_null(values: Sequence[Any], start: int, chunk: Sequence[Any], encoded: list[bytes]) -> list[Any]:
    """``values`` with those of ``chunk`` (at ``start``) whose text ``encoded`` emptied as None: no batch could
    hold one, so it costs its own value (logged), not its span's row."""
    logger.warning(
        "agenteval: a span's attributes or events as JSON pass %d bytes, more than one Parquet row can hold; "
        "recorded as null, the span's other columns are kept",
        MAX_COLUMN_BYTES,
    )
    listed = list(values)
    for i, (value, text) in enumerate(zip(chunk, encoded, strict=True)):
        if value is not None and not text:
            listed[start + i] = None
    return listed


def spans_to_batches(spans: Sequence[ReadableSpan]) -> list[pa.RecordBatch]:
    """The rows of :func:`spans_to_batch`, in order, in as many batches as it takes for each JSON column to hold
    at most :data:`MAX_COLUMN_BYTES` (one batch but for spans carrying gigabytes): halves are encoded apart until
    each fits."""
    try:
        return [spans_to_batch(spans)]
    except ColumnTooLarge:
        if len(spans) < 2:  # cannot happen (a value too long alone is null), but must never recurse forever
            raise
        half = len(spans) // 2
        return spans_to_batches(spans[:half]) + spans_to_batches(spans[half:])


def spans_to_table(spans: Sequence[ReadableSpan]) -> pa.Table:
    """The rows of :func:`spans_to_batches` as one table (one chunk but for spans carrying gigabytes): what a caller
    that encodes a batch of spans once, for its own queries and for the files, should use, since one batch whose JSON
    passes 2 GB cannot be made."""
    return pa.Table.from_batches(spans_to_batches(spans), schema=SPAN_SCHEMA)


_FINISH_REASONS = TYPED_ATTRIBUTES["finish_reason"]
_STRUCT_COLUMNS = [name for name in TYPED_ATTRIBUTES if name != "finish_reason"]


def spans_to_batch(spans: Sequence[ReadableSpan]) -> pa.RecordBatch:
    """One row per span, in :data:`SPAN_SCHEMA`."""
    if not spans:
        return _empty_batch()
    fields = _span_fields(spans)
    contexts = fields["context"]
    starts, ends = fields["start_time"], fields["end_time"]
    if None in ends:  # a span exported unended (rare, but the SDK allows it) lasted no time
        ends = tuple(start if end is None else end for start, end in zip(starts, ends, strict=True))
    resources, service_names = _resource_columns(fields["resource"])
    attributes: Sequence[Any] = fields["attributes"]
    status_messages: Sequence[str | None] = fields["status_message"]
    events = [_event_dicts(e) if e else None for e in fields["events"]]
    if capture.config.mask_secrets:
        attributes, status_messages = _masked(fields["scope_name"], attributes, events, status_messages, resources)
    return columns_to_batch(
        trace_ids=_hex_column(list(map(itemgetter(0), contexts)), 16),
        span_ids=_hex_column(list(map(itemgetter(1), contexts)), 8),
        parent_span_ids=_hex_column([p and p[1] for p in fields["parent"]], 8),
        names=fields["name"],
        kinds=_enum_names(fields["kind"], _KIND_NAMES, SpanKind.INTERNAL.name),
        starts=starts,
        ends=ends,
        status_codes=_enum_names(fields["status_code"], _STATUS_NAMES, StatusCode.UNSET.name),
        status_messages=status_messages,
        scope_names=fields["scope_name"],
        attributes=attributes,
        events=events,
        resources=resources,
        service_names=service_names,
    )


def _masked(
    scopes: Sequence[str | None],
    attributes: Sequence[Any],
    events: list[list[dict[str, Any]] | None],
    status_messages: Sequence[str | None],
    resources: list[str],
) -> tuple[Sequence[Any], Sequence[str | None]]:
    """The spans' secrets masked as ``agenteval collect`` masks them (:mod:`.masking`): an agent's other
    instrumentations (an HTTP client's URL with ``?api-key=``, a header) and every resource. The events and
    resources are masked in place; the attributes and status messages come back as new lists when any span is
    another instrumentation's (the SDK's attributes cannot be changed: those spans' are copied to dicts), as they
    were otherwise."""
    from .masking import mask_received, mask_resources  # they read this module's resource_json

    if sum(map(scopes.count, OWN_SCOPES)) == len(scopes):  # agenteval's own spans alone: their resource only
        mask_resources(resources)
        return attributes, status_messages
    copied = [a if s in OWN_SCOPES else dict(a) for a, s in zip(attributes, scopes, strict=True)]
    messages = list(status_messages)
    mask_received(list(scopes), copied, events, messages, resources)
    return copied, messages


def columns_to_batch(
    *,
    trace_ids: pa.Array,
    span_ids: pa.Array,
    parent_span_ids: pa.Array,
    names: Sequence[str],
    kinds: Sequence[str],
    starts: Sequence[int],
    ends: Sequence[int],
    status_codes: Sequence[str],
    status_messages: Sequence[str | None],
    scope_names: Sequence[str | None],
    attributes: Sequence[Any],
    events: Sequence[list[dict[str, Any]] | None],
    resources: Sequence[str],
    service_names: Sequence[str | None],
) -> pa.RecordBatch:
    """The one mapping of spans to rows, from their fields as columns (ids already hex strings, kinds and status
    codes as the SDK's enum names, attributes as dicts, events as ``{"name", "timestamp", "attributes"}`` lists,
    resources as JSON text). The SDK's spans (:func:`spans_to_batch`) and spans received over OTLP
    (``agenteval collect``) both come here, so both get the same typed columns and names derived from other
    instrumentations' conventions."""
    attributes = _readable_attributes(attributes, scope_names)
    columns: dict[str, Any] = {
        "trace_id": trace_ids,
        "span_id": span_ids,
        "parent_span_id": parent_span_ids,
        "name": names,
        "kind": kinds,
        "start_time": starts,
        "end_time": ends,
        # pyarrow.compute costs ~40 µs a call at this batch size; one comprehension is cheaper.
        "duration_ms": [(end - start) / 1e6 for start, end in zip(starts, ends, strict=True)],
        "status_code": status_codes,
        "status_message": status_messages,
        "scope_name": scope_names,
        "finish_reason": _first_reasons(list(map(dict.get, attributes, repeat(_FINISH_REASONS)))),
        "attributes": _json_column(attributes),
        "events": _events_column(events),
        "resource": resources,
        "service_name": service_names,
    }
    columns.update(_typed_columns(attributes))
    return _to_batch(columns)


def _readable_attributes(attributes: Sequence[Any], scopes: Sequence[str | None]) -> Sequence[Any]:
    """The attribute dicts, with the GenAI names derived for spans of other instrumentations (see
    :mod:`.conventions`); agenteval's own spans, the common case, are counted past in C."""
    if sum(map(scopes.count, OWN_SCOPES)) == len(scopes):
        return attributes
    return [a if s in OWN_SCOPES else derived(a) for a, s in zip(attributes, scopes, strict=True)]


def _first_reasons(reasons: list[Any]) -> list[Any]:
    """The first finish reason of each span (the attribute is a list; a lone string is taken whole). Any other
    value an application set (a number) is taken whole too: the typed column makes it text or null."""
    return [(r[0] if isinstance(r, (list, tuple)) else r) if r else None for r in reasons]


def _typed_columns(attributes: Sequence[dict[str, Any]]) -> dict[str, pa.Array]:
    """The typed attribute columns, read from the dicts in one pass by Arrow.

    Attribute values are user-set: when one has the wrong type, columns are built one by one
    and the misfits become null (the JSON keeps them).
    """
    if TYPED_STRUCT:
        try:
            # Only the typed attributes some span has go through the struct (production spans have no experiment,
            # case or trial ids; the struct conversion looks up every field in every dict); the others are nulls.
            keys = _keys(attributes)
            present = tuple(name for name in _STRUCT_COLUMNS if TYPED_ATTRIBUTES[name] in keys)
            typed = pa.array(_narrowed(attributes, present), type=_typed_struct(present))
            # The struct's own fields, not flatten(): flatten releases the GIL (see _gil_held).
            columns = {name: typed.field(i) for i, name in enumerate(present)}
            count = len(attributes)
            return {n: columns[n] if n in columns else _nulls(_TYPES[n], count) for n in _STRUCT_COLUMNS}
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, UnicodeEncodeError):
            FALLBACKS["typed_struct"] += 1
    return {
        name: _typed_attribute_array(
            list(map(dict.get, attributes, repeat(TYPED_ATTRIBUTES[name]))), SPAN_SCHEMA.field(name).type
        )
        for name in _STRUCT_COLUMNS
    }


_TYPES = {name: SPAN_SCHEMA.field(name).type for name in _STRUCT_COLUMNS}

WIDE_SPAN_ATTRIBUTES = 64
"""A span with more attributes than this gives the typed columns' struct conversion a dict of their names alone:
the conversion goes through every key of a dict it is given (~1 µs each), which cost 6 s of CPU for one span of
1.5 million attributes received by ``agenteval collect``."""


def _narrowed(attributes: Sequence[dict[str, Any]], present: tuple[str, ...]) -> Sequence[dict[str, Any]]:
    """``attributes``, with each dict of more than :data:`WIDE_SPAN_ATTRIBUTES` cut to the typed names ``present``
    (the common case, no such dict, told by one C loop and left as it is)."""
    if max(map(len, attributes), default=0) <= WIDE_SPAN_ATTRIBUTES:
        return attributes
    names = [TYPED_ATTRIBUTES[name] for name in present]
    return [{name: a[name] for name in names if name in a} if len(a) > WIDE_SPAN_ATTRIBUTES else a for a in attributes]


def _keys(attributes: Sequence[Any]) -> frozenset[str]:
    """Every attribute name in the batch (one C loop over the dicts' keys)."""
    return frozenset(chain.from_iterable(attributes))


@lru_cache(maxsize=64)
def _typed_struct(names: tuple[str, ...]) -> pa.StructType:
    return pa.struct([pa.field(TYPED_ATTRIBUTES[name], SPAN_SCHEMA.field(name).type) for name in names])


@lru_cache(maxsize=32)
def _nulls(arrow_type: pa.DataType, count: int) -> pa.Array:
    """A column with no values: immutable, so batches of one size share it (pa.array reads an environment
    variable through Python each call; not pa.nulls: see _gil_held). A few sizes only: a column of 32,768 nulls
    holds up to 256 KB, and a collector's batches come in every size."""
    return pa.array([None] * count, arrow_type)


def _empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=SPAN_SCHEMA)


def _events_column(events: Sequence[list[dict[str, Any]] | None]) -> pa.Array:
    if not any(events):
        return _nulls(pa.string(), len(events))
    return _json_column([e or None for e in events])


def _event_dicts(events: Any) -> list[dict[str, Any]]:
    return [{"name": e.name, "timestamp": e.timestamp, "attributes": dict(e.attributes or {})} for e in events]


def _resource_columns(resources: Sequence[Any]) -> tuple[list[str], list[str | None]]:
    """Resource JSON and service name per span; a provider's spans share one resource, encoded once."""
    if resources.count(resources[0]) == len(resources):  # identity is checked first: C speed
        resource = resources[0]
        return [resource_json(resource.attributes)] * len(resources), [service_name(resource.attributes)] * len(
            resources
        )
    encoded: dict[int, tuple[str, str | None]] = {}
    for resource in resources:
        if id(resource) not in encoded:
            encoded[id(resource)] = (resource_json(resource.attributes), service_name(resource.attributes))
    pairs = [encoded[id(r)] for r in resources]
    return [p[0] for p in pairs], [p[1] for p in pairs]


_MISFITS = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, UnicodeEncodeError)
"""What pyarrow raises for a value its column cannot hold."""


def _to_batch(columns: dict[str, Any]) -> pa.RecordBatch:
    arrays = []
    for field in SPAN_SCHEMA:
        values = columns[field.name]
        try:
            arrays.append(_column(field, values))
        except _MISFITS:
            # What the app gave the OpenTelemetry API, which checks few types, costs that value, not the batch: a lone
            # surrogate one character, a span or tracer named 123 or b"..." becomes its text; a start time past 2262
            # is null, and that span alone is then refused (a required value: see ParquetSpanExporter.export_batch).
            arrays.append(_fitted(values, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=SPAN_SCHEMA)


def _column(field: pa.Field, values: Any) -> pa.Array:
    if isinstance(values, pa.Array):
        return values
    if field.type == pa.string() and _uniform(values):
        # One resource, scope, experiment or status across the batch is common: no per-value work.
        return _repeated_string(values[0], len(values))
    if field.name in _TYPED_COLUMNS:
        return _typed_attribute_array(values, field.type)
    return pa.array(values, type=field.type)


def _repeated_string(value: str | None, count: int) -> pa.Array:
    """``value`` ``count`` times, built from buffers (pa.repeat releases the GIL: see _gil_held)."""
    if value is None:
        return _nulls(pa.string(), count)
    encoded = value.encode()
    return pa.StringArray.from_buffers(count, _fixed_offsets(count, len(encoded)), pa.py_buffer(encoded * count))


def _uniform(values: list[Any]) -> bool:
    first = values[0] if values else 0
    return (first is None or type(first) is str) and values.count(first) == len(values)


def _typed_attribute_array(values: list[Any], arrow_type: pa.DataType) -> pa.Array:
    """Attribute values are user-set: a wrong type becomes null in the typed column (the JSON keeps it)."""
    try:
        return pa.array(values, type=arrow_type)
    except _MISFITS:
        return _fitted(values, arrow_type)


def _fitted(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
    """``values`` as a column of ``arrow_type`` can hold them: for text, storable text (another value as its text);
    otherwise a value of another type, or out of the type's range, as null."""
    if arrow_type == pa.string():
        return pa.array([None if v is None else storable(v if isinstance(v, str) else str(v)) for v in values])
    if pa.types.is_boolean(arrow_type):
        return pa.array([v if isinstance(v, bool) else None for v in values], type=arrow_type)
    if pa.types.is_floating(arrow_type):
        return pa.array([v if isinstance(v, float) else None for v in values], type=arrow_type)
    limit = 2 ** (arrow_type.bit_width - 1)
    return pa.array(
        [v if isinstance(v, int) and not isinstance(v, bool) and -limit <= v < limit else None for v in values],
        type=arrow_type,
    )


def _sample_value(arrow_type: pa.DataType) -> Any:
    if pa.types.is_boolean(arrow_type):
        return True
    return 1 if pa.types.is_integer(arrow_type) else "x"


def sample_spans() -> list[ReadableSpan]:
    """A few real SDK spans of the shapes the encoder meets (a root with every typed attribute and an
    event, a child, a span with no experiment), made by a private provider that exports nowhere."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": "agenteval-warm-up"}), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("agenteval.warm_up")
    typed: dict[str, Any] = {key: _sample_value(SPAN_SCHEMA.field(name).type) for name, key in TYPED_ATTRIBUTES.items()}
    typed[_FINISH_REASONS] = ("stop",)
    with tracer.start_as_current_span("warm-up", kind=SpanKind.CLIENT, attributes=typed) as root:
        root.add_event("warm-up", {"n": 1})
        with tracer.start_as_current_span("warm-up child", attributes={TYPED_ATTRIBUTES[PARTITION_COLUMN]: "x"}):
            pass
    tracer.start_span("warm-up without experiment").end()
    return list(memory.get_finished_spans())
