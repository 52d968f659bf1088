"""Where a run's finished trials go: the store's span, score and trial writers, owned together so that
the order they publish in is kept in one place.

A trial row is published only after its spans and scores (:meth:`StoreSink.flush`): a trial row on disk
means its spans and scores are there too, so a run killed at any moment loses at most the trials not yet
flushed, and ``--resume`` re-runs exactly the trials that have no row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from agenteval_instrumentation.text import storable_text

from ..store import TRIALS, Store

NEVER = 3600.0
"""The writers' own time-based publishing, switched off: the run flushes them itself, in order."""

_INT64 = range(-(2**63), 2**63)


class StoreSink:
    """The span, score and trial writers of one store for one run.

    ``keep_trials``: trial rows are kept in :attr:`kept` instead of written. A cluster's worker publishes its
    trials' spans and scores itself and hands the rows to the driver, whose writing them is the trials' commit
    (see ``agenteval.run._ray``)."""

    def __init__(
        self, store: Store, keep_trials: bool = False, commit_check: Callable[[], None] = lambda: None
    ) -> None:
        # Writers, not the span exporter: the exporter logs write errors (as an SDK exporter must), a run
        # has to stop on them, and record why.
        self.spans = store.writer("spans", flush_interval=NEVER)
        self.scores = store.writer("scores", flush_interval=NEVER)
        self.trials = None if keep_trials else store.writer("trials", flush_interval=NEVER)
        self.commit_check = commit_check
        """Called before trial rows are published; raises (an ``OSError``) when this process may no longer commit
        trials: the run's lease was lost (see ``agenteval.store._lease.RemoteLease.check``)."""
        self.kept: list[dict[str, Any]] = []
        self._unpublished: list[pa.RecordBatch | list[dict[str, Any]]] = []
        """Trial rows handed over whose spans and scores are not published yet: they reach the trials writer (or
        :attr:`kept`) only once those are, so that no file of trial rows can be written before theirs."""

    def add(self, spans: pa.Table | None, scores: pa.Table, trial_rows: list[dict[str, Any]]) -> None:
        """Hand over a micro-batch: the trials' spans, their scores, and their rows (published by :meth:`flush`)."""
        for batch in spans.to_batches() if spans is not None else ():
            self.spans.append(batch)
        for batch in scores.to_batches():
            self.scores.append(batch)
        if trial_rows:
            self._unpublished.append(trial_rows if self.trials is None else trial_batch(trial_rows))

    def flush(self) -> None:
        """Publish everything handed over, spans first, then scores, then trial rows; raises the first
        storage error (the rows are kept for the next try; trial rows wait until their spans and scores are out)."""
        self.spans.flush()
        self.scores.flush()
        self._release_trials()
        if self.trials is not None:
            self.commit_check()
            self.trials.flush()

    def close(self, before: Callable[[], None] = lambda: None) -> OSError | None:
        """Run ``before`` (the last micro-batch), flush and close every writer: each step is tried, so one
        that fails (a full disk) leaves the others to save what they can; but trial rows whose spans or scores could
        not be published are dropped, not written (``--resume`` runs those trials again). Returns the first storage
        error."""
        first: OSError | None = None
        for step in (before, self.spans.close, self.scores.close):
            try:
                step()
            except OSError as exc:
                first = first or exc
        if first is None:
            self._release_trials()
        self._unpublished.clear()
        if self.trials is not None:
            try:
                self.commit_check()
            except OSError as exc:  # not this process's to commit any more: its unpublished rows are dropped
                self.trials.discard()
                first = first or exc
            try:
                self.trials.close()  # rows released earlier whose own file failed are tried once more
            except OSError as exc:
                first = first or exc
        return first

    def _release_trials(self) -> None:
        """Hand the trial rows over, their spans and scores being published."""
        unpublished, self._unpublished = self._unpublished, []
        for rows in unpublished:  # each batch once, even if an append raises (its rows are the writer's then)
            if isinstance(rows, list):
                self.kept.extend(rows)
            else:
                assert self.trials is not None
                self.trials.append(rows)


def trial_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """Trial rows as a batch; values the table cannot hold (a lone surrogate, an integer past 64 bits,
    both from agent or user code) are repaired or dropped in the rows they are in, not the batch."""
    try:
        return pa.RecordBatch.from_pylist(rows, schema=TRIALS)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, UnicodeEncodeError):
        return pa.RecordBatch.from_pylist([_storable_row(row) for row in rows], schema=TRIALS)


def _storable_row(row: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, value in row.items():
        if isinstance(value, str):
            value = storable_text(value)
        elif isinstance(value, int) and not isinstance(value, bool) and value not in _INT64:
            value = None
        out[name] = value
    return out
