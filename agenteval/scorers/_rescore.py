"""Re-running scorers over an experiment's stored spans without calling the agent: a new scoring pass.

The same feature query and scorers as at run time, over the Parquet store instead of Arrow batches
in memory, a batch of trials at a time so memory is bounded by the batch, not the experiment.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence

import pyarrow as pa
from opentelemetry.sdk.trace.export import SpanExporter

from agenteval_exporters import spans_to_table

from ..analysis import _experiments as ex
from ..analysis._saved_report import save_report
from ..analysis._statuses import RUNNING
from ..dataset._cases import Case, case_from_snapshot
from ..errors import ExperimentNotFound, UsageError
from ..run._collect import TrialCollector, collector_for
from ..run._export import send_pass
from ..run._options import DEFAULT_MAX_RETRIES, DEFAULT_REQUEST_TIMEOUT, DEFAULT_RESCORE_BATCH
from ..store import Store
from ..store._snapshots import save_figures
from ..store._store import sql_string
from ..store._views import current_scores
from ._base import Scorer
from ._engine import ScoringEngine, score_table
from ._features import NO_REPLIES, features_sql
from ._judge import answers_beside_judge, judge_in_charge
from ._loading import load_scorers, spec_label


@dataclasses.dataclass
class RescoreResult:
    """What a rescore pass did."""

    experiment_id: str
    pass_id: str
    trials: int
    scores: int
    scorers: list[str]
    seconds: float
    """Scoring the trials and writing their scores."""
    not_scored: dict[str, int] = dataclasses.field(default_factory=dict)
    """Scorer -> trials it was not re-run on: it needs message content, and the experiment ran with
    content capture off (those trials keep their earlier scores)."""
    figures_seconds: float = 0.0
    """Saving the experiment's figures for reports afterwards (see ``agenteval.store._snapshots``)."""
    otlp: ex.OTLPExport | None = None
    """With ``otlp=True``: the evaluation spans sent to the backend, and those it refused."""
    without_case: dict[str, int] = dataclasses.field(default_factory=dict)
    """Case id -> trials not re-run because the case is not in the store's ``cases`` table (a damaged snapshot
    set aside by ``agenteval doctor``, a store restored in part): every scorer reads the case, so their earlier
    scores stand."""
    still_running: bool = False
    """The experiment's run was still going when the pass began: the pass scored the trials finished by then, and the
    run scores the rest with its own scorers (rescore again once it ends for a pass over them all)."""


def stored_cases(store: Store, experiment_id: str) -> dict[str, Case]:
    """The experiment's cases as they were when it ran (the snapshot in ``cases``)."""
    rows = store.rows('SELECT case_id, line, "case" FROM cases WHERE experiment_id = ?', [experiment_id])
    return {row["case_id"]: case_from_snapshot(json.loads(row["case"]), row["line"] or 0) for row in rows}


def _run_scorers(experiment: ex.Experiment) -> list[Scorer]:
    """The built-ins plus the scorers the run recorded; one that cannot be loaded again is named with what to do
    (a scorer defined in the script that called ``evaluate()`` is recorded as ``__main__:NAME``, which no later
    process can import, and a ``Scorer(...)`` of a function, or a SQL one with a ``when=``, by its bare name)."""
    loaded: list[Scorer] = []
    for spec in experiment.options.get("scorers", []):
        try:
            loaded.extend(load_scorers([spec], only=True))
        except UsageError as exc:
            raise UsageError(
                f"experiment {experiment.experiment_id} was scored with {spec_label(spec)}, which rescore cannot "
                f"load again ({exc}); a scorer defined in the script that ran evaluate(), or made with Scorer(...) "
                "of a function, has no import path: name the scorers to run with --scorer MODULE:ATTR (a module on "
                "PYTHONPATH), or pass the Scorer objects to agenteval.scorers.rescore(store, id, scorers=[...]) in "
                "Python"
            ) from exc
    return load_scorers(loaded)


def rescore(
    store: Store,
    experiment_id: str | None = None,
    scorers: Sequence[Scorer | str] = (),
    *,
    batch_size: int = DEFAULT_RESCORE_BATCH,
    on_batch: Callable[[int, int], None] = lambda done, total: None,
    judge: str | None = None,
    judge_base_url: str | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    max_retries: int = DEFAULT_MAX_RETRIES,
    otlp: bool = False,
    only_errors: bool = False,
) -> RescoreResult:
    """Score the experiment's current trials again and append the scores as a new pass.

    With no ``scorers``: the built-ins plus the scorers the run added. With ``scorers`` (Scorer objects,
    built-in names or ``MODULE:ATTR``): only those. ``judge`` (``PROVIDER/MODEL``) grades the stored replies
    with the LLM judge (each request bounded by ``request_timeout`` seconds, a transient failure sent again at most
    ``max_retries`` times), which then decides whether an answer is right; without it, a run's judge is not called
    again and its scores stand. ``otlp=True`` also sends the new scores to the OTLP
    backend the standard ``OTEL_EXPORTER_OTLP_*`` variables name, as a run does (see ``agenteval.run._export``).
    ``only_errors=True`` scores only the trials that one of the chosen scorers could not judge (a judge whose API
    was down): the others' scores stand, and a judge that fails this time cannot undo their grades.
    A store folder that is not there raises :class:`agenteval.store.NoStore`.
    """
    store.require()  # before anything is set up, and never "the store is empty" for a mistyped folder
    exporter = _otlp_exporter() if otlp else None
    experiment = ex.find(store, experiment_id)
    if experiment is None:
        raise ExperimentNotFound(
            f"no experiment {experiment_id!r} in {store.root}" if experiment_id else "the store is empty"
        )
    chosen = load_scorers(scorers, only=True) if scorers else _run_scorers(experiment)
    grader = _judge(judge, judge_base_url, request_timeout, max_retries)
    if grader is not None:
        chosen = judge_in_charge(chosen, grader)
    elif experiment.options.get("judge"):
        chosen = answers_beside_judge(chosen)  # as they ran: the run's judge decides what is right
    store.ensure()  # a store that cannot take the new scores is said before the work
    engine = ScoringEngine(chosen)
    collector = _judge_spans_collected(experiment.experiment_id) if engine.has_coroutines() else None
    cases = stored_cases(store, experiment.experiment_id)
    pass_id = uuid.uuid4().hex[:12]
    started = time.perf_counter()
    answered = _answered_trials(experiment.experiment_id, [s.name for s in chosen] if only_errors else None)
    bounds = _batches(store, answered, batch_size)
    total_trials = sum(count for _, _, count in bounds)
    done = scores = rescored = 0
    not_scored: Counter[str] = Counter()
    without_case: Counter[str] = Counter()
    on_batch(0, total_trials)  # the work is known: a display can start before the first batch ends
    for low, high, count in bounds:
        features = _features(store, experiment.experiment_id, answered, low, high)
        case_ids = features.column("case_id").to_pylist()
        known = [case_id in cases for case_id in case_ids]
        if not all(known):  # one lost case costs its own trials, not the pass
            without_case.update(case_id for case_id, found in zip(case_ids, known, strict=True) if not found)
            features = features.filter(pa.array(known))
        rescored += features.num_rows
        judged = engine.judge(features, cases)
        not_scored.update(judged.not_scored)
        table = score_table(experiment.experiment_id, judged, pass_id, time.time_ns())
        if collector is not None:  # the judge's own spans, beside the trials': its tokens are reported apart
            made = [span for trial_id in judged.case_ids for span in collector.take(experiment.experiment_id, trial_id)]
            if made:
                store.write("spans", spans_to_table(made))
        if table.num_rows:
            store.write("scores", table)
        done += count
        scores += table.num_rows
        # Drop this batch before the next is built: memory is bounded by one batch, not two.
        del features, judged, table
        pa.default_memory_pool().release_unused()
        on_batch(done, total_trials)
    if collector is not None:
        collector.close(experiment.experiment_id)
    sent = None
    if exporter is not None:
        counts = send_pass(store, experiment.experiment_id, pass_id, exporter)
        sent = ex.OTLPExport(counts.sent, counts.failed)
    seconds = time.perf_counter() - started
    save_figures(store, experiment.experiment_id)  # reports read these instead of judging every trial again
    save_report(store, experiment.experiment_id)  # and `agenteval report` this, while nothing changes
    return RescoreResult(
        experiment.experiment_id,
        pass_id,
        rescored,
        scores,
        [s.name for s in chosen],
        seconds,
        dict(not_scored),
        time.perf_counter() - started - seconds,
        sent,
        dict(sorted(without_case.items())),
        experiment.status == RUNNING,
    )


def _judge(name: str | None, base_url: str | None, request_timeout: float, max_retries: int) -> Scorer | None:
    if name is None:
        return None
    from ..models._model import named_model
    from ._judge import llm_judge

    model = named_model(name, "--judge", base_url=base_url, request_timeout=request_timeout, max_retries=max_retries)
    return llm_judge(model)


def _judge_spans_collected(experiment_id: str) -> TrialCollector:
    """The collector that gathers a judge's spans (stamped with the trials' ids) while the batches are scored."""
    from ..tracing import sdk_provider

    collector = collector_for(sdk_provider())
    collector.open(experiment_id)
    return collector


def _otlp_exporter() -> SpanExporter:
    from ..tracing import otlp_exporter_from_env

    exporter = otlp_exporter_from_env()
    if exporter is None:
        raise UsageError(
            "--otlp sends the scores to the OTLP backend that OTEL_EXPORTER_OTLP_ENDPOINT (or "
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) names; neither is set"
        )
    return exporter


def _answered_trials(experiment_id: str, errors_of: Sequence[str] | None = None) -> str:
    """SQL: the experiment's current trials that answered; with ``errors_of`` (scorer names), only those whose
    current score from one of them is an error."""
    answered = f"SELECT * FROM ({ex.current_trials(experiment_id)}) WHERE failure_type IS NULL"
    if errors_of is None:
        return f"({answered})"
    names = ", ".join(sql_string(name) for name in errors_of) or "NULL"
    errored = f"SELECT trial_id FROM ({current_scores(experiment_id)}) WHERE error IS NOT NULL AND scorer IN ({names})"
    return f"({answered} AND trial_id IN ({errored}))"


def _batches(store: Store, answered: str, size: int) -> list[tuple[str, str, int]]:
    """Ranges of the ``answered`` trials' ids of about ``size`` trials each: (first id, last id, trials)."""
    rows = store.rows(
        f"""SELECT min(trial_id) AS low, max(trial_id) AS high, count(*) AS n FROM (
                SELECT trial_id, (row_number() OVER (ORDER BY trial_id) - 1) // {int(size)} AS batch
                FROM {answered}) GROUP BY batch ORDER BY batch"""
    )
    return [(row["low"], row["high"], row["n"]) for row in rows]


def _features(store: Store, experiment_id: str, answered: str, low: str, high: str) -> pa.Table:
    within = f"trial_id BETWEEN {sql_string(low)} AND {sql_string(high)}"
    trials = f"(SELECT *, {NO_REPLIES} FROM {answered} WHERE {within})"
    spans = f"(SELECT * FROM spans WHERE experiment_id = {sql_string(experiment_id)} AND {within})"
    return store.query(features_sql(trials, spans))
