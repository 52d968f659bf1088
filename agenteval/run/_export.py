"""A run's spans to the OTLP backend the standard variables name: after scoring, with back-pressure, counted.

The SDK's ``BatchSpanProcessor`` drops spans once its queue is full ("Queue full, dropping Span"): a run that
finishes thousands of trials a second would lose most of them on the way to the backend. A run hands its spans
over itself, a micro-batch at a time, after the batch is scored, to :class:`OTLPForwarder`: a bounded queue
that makes the run wait while it is full (the run slows to the backend's pace, nothing is dropped) and one
thread that exports from it, counting the spans the exporter took and those it refused (a whole export, or the
spans a backend's partial success rejects).

Scoring first lets each trial's root span carry its outcome, and its scores as ``gen_ai.evaluation.result``
events, to the backend (:func:`judged_root`): the root ended before it was scored, so the copy sent is rebuilt
with them. The spans written to the store are the ones recorded, unchanged.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from agenteval_instrumentation import attributes as A
from agenteval_instrumentation.masking import masked_logger

from .._otlp_rejections import RejectionCountingExporter

logger = masked_logger(__name__)

QUEUE_SPANS = 8_192
"""How many spans may wait for the exporter before the run waits for it."""

BATCH_SPANS = 512
"""The most spans in one export (the SDK's batch size)."""

GIVE_UP_AFTER = 3
"""Failed exports in a row after which the backend is taken for gone: the rest of the run's spans are counted
failed without being sent (they are in the store), so an unreachable backend never holds up the run for each
batch's retries."""

_END = object()


@dataclasses.dataclass
class ForwardCounts:
    sent: int = 0
    failed: int = 0


class OTLPForwarder:
    """Exports spans in order from a bounded queue on one thread; :meth:`send` blocks while the queue is full."""

    def __init__(self, exporter: SpanExporter, max_queue: int = QUEUE_SPANS) -> None:
        self.exporter = exporter
        self.counts = ForwardCounts()
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, max_queue // BATCH_SPANS))
        self._thread = threading.Thread(target=self._work, name="agenteval-otlp", daemon=True)
        self._closed = False
        self._failures_in_a_row = 0
        self._thread.start()

    def send(self, spans: Sequence[ReadableSpan]) -> None:
        """Queue ``spans`` for export, waiting while the queue is full."""
        for start in range(0, len(spans), BATCH_SPANS):
            self._queue.put(list(spans[start : start + BATCH_SPANS]))

    def _work(self) -> None:
        while True:
            batch = self._queue.get()
            if batch is _END:
                return
            if self._failures_in_a_row >= GIVE_UP_AFTER:
                self.counts.failed += len(batch)
                continue
            try:
                result = self.exporter.export(batch)
            except Exception:  # an exporter must not raise; one that does loses this batch, counted
                logger.exception("agenteval: the OTLP exporter raised")
                result = SpanExportResult.FAILURE
            if result is SpanExportResult.SUCCESS:
                # Taken but not kept: a backend's partial success, or parts of a batch refused for their size.
                rejected = min(self._rejected(), len(batch))
                self.counts.sent += len(batch) - rejected
                self.counts.failed += rejected
                self._failures_in_a_row = 0
            else:
                self.counts.failed += len(batch)
                self._failures_in_a_row += 1
                if self._failures_in_a_row == GIVE_UP_AFTER:
                    logger.warning(
                        "agenteval: the OTLP backend refused %d exports in a row; the rest of this run's spans are "
                        "not sent (the store has them all)",
                        GIVE_UP_AFTER,
                    )

    def _rejected(self) -> int:
        """The spans the backend answered the last export it accepted that it rejected, when it can tell."""
        return self.exporter.take_rejected() if isinstance(self.exporter, RejectionCountingExporter) else 0

    def close(self) -> ForwardCounts:
        """Export everything queued, then shut the exporter down; returns the counts."""
        if not self._closed:
            self._closed = True
            self._queue.put(_END)
            self._thread.join()
            self.exporter.shutdown()
        return self.counts


def label(passed: bool | None, continuous: bool, error: str | None) -> str:
    """A score's label for ``gen_ai.evaluation.score.label``."""
    if error is not None:
        return "error"
    if continuous:
        return "scored"
    return "pass" if passed else "fail"


def evaluation_event(score: dict[str, Any], timestamp: int) -> Event:
    """One score as a ``gen_ai.evaluation.result`` event."""
    attributes: dict[str, Any] = {
        A.GEN_AI_EVALUATION_NAME: score["scorer"],
        A.GEN_AI_EVALUATION_SCORE_LABEL: label(score.get("passed"), bool(score.get("continuous")), score.get("error")),
    }
    if score.get("value") is not None:
        attributes[A.GEN_AI_EVALUATION_SCORE_VALUE] = float(score["value"])
    explanation = score.get("error") or score.get("reason")
    if explanation:
        attributes[A.GEN_AI_EVALUATION_EXPLANATION] = str(explanation)
    return Event(A.GEN_AI_EVALUATION_RESULT, attributes, timestamp)


def outcome_attributes(outcome: str, failure_type: str | None, infrastructure: bool | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {A.TRIAL_OUTCOME: outcome}
    if failure_type is not None:
        attributes[A.TRIAL_FAILURE_TYPE] = failure_type
        attributes[A.TRIAL_INFRASTRUCTURE] = bool(infrastructure)
    return attributes


def judged_root(
    root: ReadableSpan, outcome: dict[str, Any], scores: Sequence[dict[str, Any]], now: int
) -> ReadableSpan:
    """A copy of a trial's ended root span with its outcome attributes and one event per score."""
    return ReadableSpan(
        name=root.name,
        context=root.context,
        parent=root.parent,
        resource=root.resource,
        attributes={**(root.attributes or {}), **outcome},
        events=[*root.events, *(evaluation_event(s, now) for s in scores)],
        links=root.links,
        kind=root.kind,
        instrumentation_scope=root.instrumentation_scope,
        status=root.status,
        start_time=root.start_time,
        end_time=root.end_time,
    )


RESCORED_ROOTS = f"""
SELECT r.trial_id, r.trace_id, r.span_id, t.outcome, t.failure_type, t.infrastructure
FROM spans r JOIN trials t ON t.trial_id = r.trial_id AND t.trace_id = r.trace_id
WHERE r.experiment_id = ? AND t.experiment_id = ? AND r.scope_name = '{A.RUNNER_SCOPE}' AND r.parent_span_id IS NULL
"""
"""Each current trial's root span (of the try that counts) and its outcome by the current scores."""


def send_pass(store: Any, experiment_id: str, pass_id: str, exporter: SpanExporter) -> ForwardCounts:
    """A scoring pass's scores to the OTLP backend: for each trial, one ``evaluation`` span parented to its
    root span (which ended long ago), carrying the trial's outcome and one ``gen_ai.evaluation.result`` event
    per new score."""
    scores: dict[str, list[dict[str, Any]]] = {}
    for score in store.rows(
        "SELECT * FROM score_history WHERE experiment_id = ? AND pass_id = ?", [experiment_id, pass_id]
    ):
        scores.setdefault(score["trial_id"], []).append(score)
    collected = _Collected()
    # A private provider: the evaluation spans go to this pass's backend only. Resource.create reads
    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, which route them (a Phoenix project, a Langfuse environment).
    service = os.environ.get("OTEL_SERVICE_NAME") or "agenteval"
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(collected))
    tracer = provider.get_tracer(A.RUNNER_SCOPE)
    now = time.time_ns()
    for root in store.rows(RESCORED_ROOTS, [experiment_id, experiment_id]):
        if root["trial_id"] not in scores:
            continue
        parent = SpanContext(int(root["trace_id"], 16), int(root["span_id"], 16), True, TraceFlags(TraceFlags.SAMPLED))
        attributes = {
            A.EXPERIMENT_ID: experiment_id,
            A.TRIAL_ID: root["trial_id"],
            **outcome_attributes(root["outcome"], root["failure_type"], root["infrastructure"]),
        }
        span = tracer.start_span(
            f"evaluation {pass_id}", context=trace.set_span_in_context(NonRecordingSpan(parent)), attributes=attributes
        )
        for score in scores[root["trial_id"]]:
            event = evaluation_event(score, now)
            span.add_event(event.name, event.attributes, event.timestamp)
        span.end()
    provider.shutdown()
    forwarder = OTLPForwarder(exporter)
    forwarder.send(collected.spans)
    return forwarder.close()


class _Collected(SpanExporter):
    """Keeps the spans it is given (then sent through an :class:`OTLPForwarder`, counted)."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS
