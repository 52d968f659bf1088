"""What both OTLP encodings decode into: span fields as columns, checked, then the store's span rows.

The protobuf (:mod:`._protobuf`) and JSON (:mod:`._json`) readers fill the same columns, which go through the
exporter's own mapping (:func:`agenteval_exporters.encode.columns_to_batch`): a span received over OTLP gets the row the
in-process exporter would have written for it, with the same typed columns and attribute conventions.

A request that cannot be read as a whole (not protobuf, not JSON, the wrong shape above the spans) is a
:class:`PayloadError` (400). A span that cannot be stored (ids of the wrong length, an end before its start,
an unknown kind, a wrongly typed field in JSON) is rejected alone and counted: the client hears a partial
success with the count and the first reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, TypeVar

import pyarrow as pa

from agenteval_exporters.encode import columns_to_batch, hex_id_column
from agenteval_exporters.masking import mask_received
from agenteval_instrumentation.attributes import DROPPED_ATTRIBUTES_COUNT

from ._settings import MAX_SPAN_ATTRIBUTES

TRACE_ID_BYTES = 16
SPAN_ID_BYTES = 8
MAX_NANOS = 2**63 - 1  # what a timestamp[ns] column holds
NO_PARENT = bytes(SPAN_ID_BYTES)
"""An all-zero parent id: OpenTelemetry's invalid id, stored as no parent (a root), as an empty one is."""
REMOTE_PARENT = 0x300
"""A span's ``flags`` with both bits set (``SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK`` and ``..._IS_REMOTE_MASK``):
its parent came from another process (a ``traceparent`` header), whose spans may never reach this collector, so
the span is the top of its trace here, as a root is (see :func:`remote_parent`)."""

# The SDK's enum names, which the store's ``kind`` and ``status_code`` columns hold. OTLP's UNSPECIFIED kind
# may be taken as INTERNAL (trace.proto).
KINDS = {0: "INTERNAL", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
STATUS_CODES = {0: "UNSET", 1: "OK", 2: "ERROR"}
KIND_NAMES = {f"SPAN_KIND_{name}": number for number, name in KINDS.items()} | {"SPAN_KIND_UNSPECIFIED": 0}
STATUS_NAMES = {f"STATUS_CODE_{name}": number for number, name in STATUS_CODES.items()}


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
    remote_children: tuple[str, ...] = ()
    """Hex ids of the traces of the spans whose parent is remote (:data:`REMOTE_PARENT`)."""

    @property
    def accepted(self) -> int:
        return 0 if self.batch is None else self.batch.num_rows


class SpanColumns:
    """Span fields as columns, appended span by span (every list grows together)."""

    def __init__(self) -> None:
        self.rejected = 0
        self.reason: str | None = None
        self.remote_children: list[bytes] = []
        """Trace ids of the spans whose parent is remote, in no particular order (see :data:`REMOTE_PARENT`)."""
        self._batches: list[pa.RecordBatch] = []
        self._empty()

    def _empty(self) -> None:
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

    def flush_if_full(self) -> None:
        """Make the spans added so far rows once there are :data:`DECODE_CHUNK_SPANS` of them: a span's fields as
        Python objects take ~1 KB, its row a tenth of that, so a request of 600,000 small spans decoded whole took
        730 MB at once (and two requests decoding together twice that)."""
        if len(self.names) >= DECODE_CHUNK_SPANS:
            self._batches.append(self._batch())
            self._empty()

    def decoded(self) -> Decoded:
        if self.names:
            self._batches.append(self._batch())
            self._empty()
        batches, self._batches = self._batches, []
        if not batches:
            return Decoded(None, self.rejected, self.reason)
        batch = batches[0] if len(batches) == 1 else pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
        remote = tuple(dict.fromkeys(trace_id.hex() for trace_id in self.remote_children))
        return Decoded(batch, self.rejected, self.reason, remote)

    def _batch(self) -> pa.RecordBatch:
        mask_received(self.scope_names, self.attributes, self.events, self.status_messages, self.resources)
        parents = self.parent_span_ids
        if NO_PARENT in parents:  # a root, as written by senders that fill the invalid id in for "none"
            parents = [b"" if parent == NO_PARENT else parent for parent in parents]
        return columns_to_batch(
            trace_ids=hex_id_column(self.trace_ids, TRACE_ID_BYTES),
            span_ids=hex_id_column(self.span_ids, SPAN_ID_BYTES),
            parent_span_ids=hex_id_column(parents, SPAN_ID_BYTES),
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


def remote_parent(flags: int, parent: bytes) -> bool:
    """Whether a span with these ``flags`` and ``parent`` id has a parent in another process."""
    return flags & REMOTE_PARENT == REMOTE_PARENT and parent not in (b"", NO_PARENT)


DECODE_CHUNK_SPANS = 16_384
"""Spans decoded into rows at a time (see :meth:`SpanColumns.flush_if_full`): the SDK sends 512 a request, so only
requests of many small spans are decoded in more than one piece."""


T = TypeVar("T")


def capped(items: Sequence[T], limit: int = MAX_SPAN_ATTRIBUTES) -> tuple[Sequence[T], int]:
    """A span's (an event's, a resource's) attributes or a span's events as sent (encoded, or OTLP/JSON), up to
    ``limit``, and how many were dropped: cut before they are read, so that the ones dropped cost nothing."""
    dropped = len(items) - limit
    return (items[:limit], dropped) if dropped > 0 else (items, 0)


def with_dropped(attributes: dict[str, Any], dropped: int, key: str = DROPPED_ATTRIBUTES_COUNT) -> dict[str, Any]:
    """``attributes``, saying under ``key`` how many :func:`capped` dropped (when it dropped some)."""
    if dropped > 0:
        attributes[key] = dropped
    return attributes


def check_ids(trace_id: bytes, span_id: bytes, parent: bytes) -> None:
    if len(trace_id) != TRACE_ID_BYTES or not any(trace_id):
        raise RejectedSpan(f"trace_id is {_id_problem(trace_id, TRACE_ID_BYTES)}")
    if len(span_id) != SPAN_ID_BYTES or not any(span_id):
        raise RejectedSpan(f"span_id is {_id_problem(span_id, SPAN_ID_BYTES)}")
    if parent and len(parent) != SPAN_ID_BYTES:
        raise RejectedSpan(f"parent_span_id is {_id_problem(parent, SPAN_ID_BYTES)}")


def _id_problem(value: bytes, width: int) -> str:
    return f"{len(value)} bytes, not {width}" if len(value) != width else "all zeros (invalid)"


def check_times(start: int, end: int) -> None:
    if not 0 <= start <= MAX_NANOS or not 0 <= end <= MAX_NANOS:
        raise RejectedSpan("a timestamp is out of range (nanoseconds since 1970 up to 2**63-1)")
    if end < start:
        raise RejectedSpan("end_time_unix_nano is before start_time_unix_nano")
