"""Spans masked on their way to another exporter (the OTLP backend's) as they are on their way to the store.

The store's exporter masks encoded columns (:func:`.masking.mask_received`); another exporter is handed
:class:`~opentelemetry.sdk.trace.ReadableSpan` objects, so :class:`MaskingSpanExporter` hands it copies masked by
those same functions: another instrumentation's attributes, its events' and links' attributes and its status
message, and every span's resource; agenteval's own spans keep their content (masked where it was captured). A
span with nothing to mask is handed on as it is, and a batch with nothing to mask costs one joined scan.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Link, Status

from agenteval_instrumentation import capture
from agenteval_instrumentation.masking import masked_logger

from .conventions import OWN_SCOPES
from .encode import resource_json
from .masking import mask_received, mask_resources

logger = masked_logger(__name__)


class MaskingSpanExporter(SpanExporter):
    """Hands ``exporter`` the spans it is given with their secrets masked (:func:`masked_spans`)."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            masked = masked_spans(spans)
        except Exception:  # a span masking cannot read is not sent raw: the batch fails, as a refused one does
            logger.exception("agenteval: masking spans for %s failed; the batch is not sent", type(self.exporter))
            return SpanExportResult.FAILURE
        return self.exporter.export(masked)

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.exporter.force_flush(timeout_millis)


def masked_spans(spans: Sequence[ReadableSpan]) -> Sequence[ReadableSpan]:
    """``spans`` as the store would have them masked: a copy of each span with something masked, the others as
    they are; all as they are when the application turned masking off (``configure_capture(mask_secrets=False)``)."""
    if not spans or not capture.config.mask_secrets:
        return spans
    resources = _masked_resources(spans)
    foreign = [i for i, span in enumerate(spans) if _scope(span) not in OWN_SCOPES]
    parts = {i: _MaskableParts(spans[i]) for i in foreign}
    messages = [p.status_message for p in parts.values()]
    if foreign and mask_received(
        [_scope(spans[i]) for i in foreign],
        [p.attributes for p in parts.values()],
        [p.events_and_links for p in parts.values()],
        messages,
        [],  # the resources: masked above, once each
    ):
        for part, message in zip(parts.values(), messages, strict=True):
            part.status_message = message
        changed = {i: p for i, p in parts.items() if p.changed()}
    elif not resources:
        return spans  # the common case: nothing to mask
    else:
        changed = {}
    out = list(spans)
    for i, span in enumerate(spans):
        resource = resources.get(id(span.resource), span.resource)
        if i in changed or resource is not span.resource:
            out[i] = _MaskedSpan(span, resource, changed.get(i))
    return out


def _scope(span: ReadableSpan) -> str | None:
    return span.instrumentation_scope.name if span.instrumentation_scope is not None else None


def _masked_resources(spans: Sequence[ReadableSpan]) -> dict[int, Resource]:
    """The masked copy of each distinct resource with something to mask, by the id of the original (a provider's
    spans share one resource): masked through its JSON text, as the store's ``resource`` column is."""
    distinct = {id(span.resource): span.resource for span in spans}
    masked = {}
    for key, resource in distinct.items():
        original = resource_json(resource.attributes)
        text = [original]
        mask_resources(text)
        if text[0] != original:
            masked[key] = Resource(json.loads(text[0]), resource.schema_url)
    return masked


class _MaskableParts:
    """A span's texts that masking may change, as the mutable dicts :func:`mask_received` masks in place: its
    attributes, its events' and links' attributes (one list: both are attribute maps, masked alike) and its status
    message. The span's properties are read once: each copies what it returns."""

    def __init__(self, span: ReadableSpan) -> None:
        self.span = span
        self.original = dict(span.attributes or {})
        self.attributes = dict(self.original)
        self.events = span.events
        self.links = span.links
        self.originals = [dict(e.attributes or {}) for e in self.events]
        self.originals += [dict(link.attributes or {}) for link in self.links]
        self.events_and_links: list[dict[str, Any]] = [{"attributes": dict(o)} for o in self.originals]
        self.status_message = span.status.description

    def changed(self) -> bool:
        return (
            self.attributes != self.original
            or self.status_message != self.span.status.description
            or any(p["attributes"] != o for p, o in zip(self.events_and_links, self.originals, strict=True))
        )

    def masked_events(self) -> list[Event]:
        masked = self.events_and_links[: len(self.events)]
        return [Event(e.name, m["attributes"], e.timestamp) for e, m in zip(self.events, masked, strict=True)]

    def masked_links(self) -> list[Link]:
        masked = self.events_and_links[len(self.events) :]
        return [Link(link.context, m["attributes"]) for link, m in zip(self.links, masked, strict=True)]


class _MaskedSpan(ReadableSpan):
    """A masked copy of ``original`` (its resource replaced, and its ``parts`` when given), which still counts
    what the original dropped (attributes, events and links past the SDK's limits)."""

    def __init__(self, original: ReadableSpan, resource: Resource, parts: _MaskableParts | None) -> None:
        super().__init__(
            name=original.name,
            context=original.context,
            parent=original.parent,
            resource=resource,
            attributes=original.attributes if parts is None else parts.attributes,
            events=original.events if parts is None else parts.masked_events(),
            links=original.links if parts is None else parts.masked_links(),
            kind=original.kind,
            status=original.status if parts is None else Status(original.status.status_code, parts.status_message),
            start_time=original.start_time,
            end_time=original.end_time,
            instrumentation_scope=original.instrumentation_scope,
        )
        self._original = original

    @property
    def dropped_attributes(self) -> int:
        return self._original.dropped_attributes

    @property
    def dropped_events(self) -> int:
        return self._original.dropped_events

    @property
    def dropped_links(self) -> int:
        return self._original.dropped_links
