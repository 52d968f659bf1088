"""Online evaluation in the collector: production traces scored as they arrive, by the scorers of experiments.

A trace is taken as complete once its root span has been written (a root span ends after its children, and
exporters send spans as they end), or a span whose parent the sender flags as remote (a request from a gateway
whose spans go elsewhere: the top of the trace as far as the store goes), and is scored
:data:`DEFAULT_SCORE_DELAY` seconds later, so that children sent by another process or in a later request have
arrived too. The spans are published first (the writer's flush), then :class:`~agenteval.scorers.TraceScorer`
scores the sampled traces into the scores table, the rows ``agenteval rescore --traces`` writes. Scoring runs on a
thread of its own: a slow scorer never holds up receiving. What is still waiting when the collector stops is
scored then, after the last spans are written.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from agenteval_instrumentation.masking import masked_logger

from ..scorers._traces import TraceScorer
from ._settings import DEFAULT_SCORE_DELAY

logger = masked_logger(__name__)


def root_trace_ids(batch: pa.RecordBatch, remote_children: list[str]) -> list[str]:
    """The production traces whose root span is in ``batch``, and those of its ``remote_children``: spans whose
    parent is in another process (a gateway's, say, never sent here), the top of their trace as far as the store
    goes, as the ``traces`` view takes them (its root is the earliest span whose parent is not in the store)."""
    production = pc.is_null(batch.column("experiment_id"))
    roots = pc.filter(batch.column("trace_id"), pc.and_(pc.is_null(batch.column("parent_span_id")), production))
    ids = roots.to_pylist()
    if remote_children:  # rare: of production spans only, as roots are
        of_production = set(pc.filter(batch.column("trace_id"), production).to_pylist())
        ids += [t for t in remote_children if t in of_production]
    return list(dict.fromkeys(ids))


class OnlineScoring:
    """Scores the traces whose root spans were written, a delay later; one thread, one per collector."""

    def __init__(self, scorer: TraceScorer, publish: Callable[[], bool], delay: float = DEFAULT_SCORE_DELAY) -> None:
        self.scorer = scorer
        self.delay = delay
        self.publish = publish
        """Publishes every written span before a score (with HTTP workers, theirs too)."""
        self._due: deque[tuple[float, list[str]]] = deque()
        self._lock = threading.Condition()
        self._closing = False
        self.traces_finished = 0
        """Traces handed to the scorer (before its sampling)."""
        self.traces_scored = 0
        """Of which the scorer judged: sampled, and not ended in error."""
        self.scores_written = 0
        self.not_scored: dict[str, int] = {}
        """Scorer -> traces it could not judge for want of message content (captured off), as rescore --traces says."""
        self._thread = threading.Thread(target=self._run, name="agenteval-collect-scoring", daemon=True)
        self._thread.start()

    def written(self, batch: pa.RecordBatch, remote_children: list[str]) -> None:
        """The writer wrote ``batch``: its production traces whose root span (or a span with a remote parent, the
        trace's ``remote_children``) it holds become due."""
        self.roots_written(root_trace_ids(batch, remote_children))

    def roots_written(self, ids: list[str]) -> None:
        """These production traces' root spans were written (by this process or a worker): they become due."""
        if ids:
            with self._lock:
                self._due.append((time.monotonic() + self.delay, ids))
                self._lock.notify_all()

    def close(self) -> None:
        """Score every trace still waiting (call once the spans are all written), then stop."""
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._closing and not (self._due and self._due[0][0] <= time.monotonic()):
                    self._lock.wait(self._due[0][0] - time.monotonic() if self._due else None)
                if self._closing:
                    ids = [i for _, batch in self._due for i in batch]
                    self._due.clear()
                else:
                    ids = self._take_due()
            if ids:
                self._score(ids)
            elif self._closing:
                return

    def _take_due(self) -> list[str]:
        now, ids = time.monotonic(), []
        while self._due and self._due[0][0] <= now:
            ids += self._due.popleft()[1]
        return ids

    def _score(self, ids: list[str]) -> None:
        try:
            self.publish()
            result = self.scorer.score(ids)
        except Exception:  # a scorer's failure costs these traces their scores, never the collector
            logger.exception("agenteval collect: could not score %d production traces", len(ids))
            return
        self.traces_finished += len(ids)
        self.traces_scored += result.sampled - result.failed
        self.scores_written += result.scores
        for name, count in result.not_scored.items():
            self.not_scored[name] = self.not_scored.get(name, 0) + count
