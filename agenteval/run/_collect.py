"""A span processor that ties every span inside a trial to it, and gathers each trial's spans.

The user's own ``@tool`` code knows nothing of trials, so the ids are stamped on every span at its
start from the trial's context (a context variable the runner sets), never by joining up to a root
span later. A span started where that variable is not set (a thread the agent started) but under a
span of a trial (the OpenTelemetry context carried over by hand, ``trace.use_span``, an explicit
parent) takes its parent's ids: it is that trial's work. Spans are gathered per trial as they end;
the runner takes them when the trial is over.
"""

from __future__ import annotations

import contextvars
import dataclasses
import os
import threading
import weakref
from pathlib import Path
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.trace import get_current_span

from agenteval_exporters.conventions import mark_wrapper
from agenteval_exporters.storefs import RemoteRoot, as_root, is_remote
from agenteval_instrumentation import attributes as A


@dataclasses.dataclass(frozen=True)
class TrialTag:
    """The ids stamped on every span started inside one trial."""

    experiment_id: str | None
    case_id: str
    trial_id: str
    attempt: int
    role: str | None = None

    def attributes(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            A.EXPERIMENT_ID: self.experiment_id,
            A.CASE_ID: self.case_id,
            A.TRIAL_ID: self.trial_id,
            A.TRIAL_ATTEMPT: self.attempt,
        }
        if self.role:
            out[A.ROLE] = self.role
        if self.experiment_id is None:  # a production trace judged online: its spans stay outside experiments
            del out[A.EXPERIMENT_ID]
        return out


TRIAL_KEYS = (A.EXPERIMENT_ID, A.CASE_ID, A.TRIAL_ID, A.TRIAL_ATTEMPT, A.ROLE)
"""The attributes that tie a span to its trial (and to the side of it, :data:`A.ROLE`, that made it)."""


@dataclasses.dataclass(eq=False, slots=True)
class TrialScope:
    """The current trial as a context holds it: its tag, the attributes stamped from it (built once, not per span),
    and whether it has ended. A thread or asyncio task the trial started carries a scope of its own (:meth:`carried`)
    and may outlive the trial (a worker started lazily by the first trial, serving later ones): a span started there
    after the end is no trial's. The trial's own code past its end (an agent given up on at its timeout runs on) is
    still the trial's: its spans are stored as the trial's late spans."""

    tag: TrialTag
    attributes: dict[str, Any]
    ended: bool = False
    started_by: TrialScope | None = None
    """In a thread, pool task or asyncio task the trial started: the trial's own scope, whose end it may outlive."""
    side_of: TrialScope | None = None
    """In a side of the trial with a tag of its own (the simulated user's): the trial's own scope, whose end is this
    one's (only the trial's own scope is ended, with the trial)."""

    def carried(self) -> TrialScope:
        """The scope of a thread, pool task or asyncio task started in this one (nested: the trial's own scope still
        ends it)."""
        return TrialScope(self.tag, self.attributes, started_by=self.started_by or self.side_of or self)

    def side(self, tag: TrialTag) -> TrialScope:
        """The scope of a side of this trial tagged ``tag`` (the simulated user): its code is the trial's own, and a
        thread it starts outlives the trial as one the trial started does."""
        return TrialScope(tag, tag.attributes(), started_by=self.started_by, side_of=self.side_of or self)

    @property
    def outlived(self) -> bool:
        """A thread or task the trial started, running on after the trial ended."""
        return self.started_by is not None and self.started_by.ended


current_trial: contextvars.ContextVar[TrialScope | None] = contextvars.ContextVar(
    "agenteval_current_trial", default=None
)


def trial_context(tag: TrialTag) -> contextvars.Token[TrialScope | None]:
    """Make ``tag`` the current trial."""
    return current_trial.set(TrialScope(tag, tag.attributes()))


class TrialCollector(SpanProcessor):
    """Stamps trial ids at span start; hands finished spans to the run that owns their experiment."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: dict[str, dict[str, list[ReadableSpan]]] = {}  # experiment -> trial -> spans
        self._stores: dict[str, str] = {}  # experiment -> the store its run writes the spans to
        self.outside_trials = 0
        """Spans started with no trial and no parent while a run was open: work the agent handed to a thread
        without its context, which no trial can own (see :meth:`on_start`)."""
        self.after_trials = 0
        """Spans started in the context of a trial that had ended: in a thread it started that outlived it."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        current = current_trial.get()
        if current is None:
            self._tie_to_parents_trial(span, parent_context)
        elif not current.outlived:
            span.set_attributes(current.attributes)
        else:  # stamped, it would be stored as a late span of a trial whose work it is not
            with self._lock:
                self.after_trials += 1
        mark_wrapper(span, parent_context)  # usage is counted once, on the innermost model call

    def _tie_to_parents_trial(self, span: Span, parent_context: Context | None) -> None:
        """Stamp ``span`` with its parent's trial ids, if its parent is a trial's span; count it if a run is
        open and it has no parent at all (a new trace started by a thread that was not given the context)."""
        parent = get_current_span(parent_context)
        if not parent.get_span_context().is_valid:
            if self._spans:
                with self._lock:
                    self.outside_trials += 1
            return
        # Any: an SDK span's attributes (a remote or non-recording parent has none), read as they were written.
        attributes: Any = getattr(parent, "attributes", None)
        if attributes and A.TRIAL_ID in attributes:
            span.set_attributes({key: attributes[key] for key in TRIAL_KEYS if key in attributes})

    def on_end(self, span: ReadableSpan) -> None:
        attributes = span.attributes or {}
        # Any: the ids are looked up as they are; one of another type (or none) finds nothing.
        experiment_id: Any = attributes.get(A.EXPERIMENT_ID)
        trials = self._spans.get(experiment_id)
        if trials is None:
            return
        trial_id: Any = attributes.get(A.TRIAL_ID)
        with self._lock:
            trials.setdefault(trial_id, []).append(span)

    def open(self, experiment_id: str, store: str | os.PathLike[str] | RemoteRoot | None = None) -> None:
        """Start gathering the spans of ``experiment_id``, whose run writes them to ``store`` itself."""
        with self._lock:
            self._spans.setdefault(experiment_id, {})
            if store is not None:
                self._stores[experiment_id] = store_key(store)

    def close(self, experiment_id: str) -> list[ReadableSpan]:
        """Stop gathering; returns spans never taken (late spans of trials that timed out)."""
        with self._lock:
            left = self._spans.pop(experiment_id, {})
            self._stores.pop(experiment_id, None)
        return [span for spans in left.values() for span in spans]

    def written_by_run(self, span: ReadableSpan, store: str | None) -> bool:
        """Whether a run in progress writes ``span`` to the store keyed ``store`` (see :func:`store_key`); with
        ``store`` None, whether a run in progress handles ``span`` at all (it sends its spans over OTLP itself)."""
        if not self._stores:
            return False
        experiment_id: Any = (span.attributes or {}).get(A.EXPERIMENT_ID)
        if experiment_id is None:
            return False
        return experiment_id in self._stores if store is None else self._stores.get(experiment_id) == store

    def take(self, experiment_id: str, trial_id: str) -> list[ReadableSpan]:
        """The spans of a finished trial, removed from the collector."""
        with self._lock:
            return self._spans.get(experiment_id, {}).pop(trial_id, [])

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def store_key(store: str | os.PathLike[str] | RemoteRoot) -> str:
    """One name per store, however the path to it was written (a store on object storage: its URL)."""
    if isinstance(store, RemoteRoot) or is_remote(store):
        return str(as_root(store))
    return str(Path(store).resolve())


# Keyed by the provider itself, held weakly: an id() key outlives its provider, and a new provider given
# the same id would get a collector that is not among its processors (its spans then never collected).
_collectors: weakref.WeakKeyDictionary[TracerProvider, TrialCollector] = weakref.WeakKeyDictionary()


def collector_for(provider: TracerProvider) -> TrialCollector:
    """The one collector of ``provider``, added to it on first use."""
    collector = _collectors.get(provider)
    if collector is None:
        collector = _collectors[provider] = TrialCollector()
        provider.add_span_processor(collector)
    return collector
