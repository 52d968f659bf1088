"""Experiments: one run of one agent configuration over one dataset, as rows of the store.

A status change appends a row; the newest row (``updated_at``) is the experiment's state.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import uuid
from typing import Any

import duckdb

from ..errors import AgentevalError, UsageError
from ..store import Store
from ..store._lease import is_running
from ..store._snapshots import judged_connection
from ..store._views import counted_scores, current_trials
from ._report_data import ShardProgress
from ._stats import clustered_rate, known_interval
from ._statuses import COMPLETED as COMPLETED  # the statuses, read here as ex.COMPLETED, ...
from ._statuses import FAILED as FAILED
from ._statuses import INTERRUPTED, RUNNING


def fetch(con: duckdb.DuckDBPyConnection, sql: str, parameters: list[Any] | None = None) -> list[dict[str, Any]]:
    """Rows of a query as dicts."""
    cursor = con.execute(sql, parameters or [])
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def new_experiment_id() -> str:
    """Sortable by start time, unique across machines."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


@dataclasses.dataclass
class Experiment:
    """An experiment's record, and its summary once it has run."""

    experiment_id: str
    name: str | None
    dataset_name: str
    dataset_hash: str
    agent: str
    version: str
    options: dict[str, Any]
    status: str
    started_at: int
    ended_at: int | None = None
    environment: dict[str, Any] = dataclasses.field(default_factory=dict)
    prices: dict[str, Any] = dataclasses.field(default_factory=dict)
    summary: Summary | None = None
    """The figures at the end of the run that returned this record (None for a record read from the store)."""
    error: str | None = None
    """Why the run failed (status ``failed``): the error that stopped it."""

    @property
    def id(self) -> str:
        return self.experiment_id

    def row(self) -> dict[str, Any]:
        """The experiments-table row for the current state."""
        return {
            "experiment_id": self.experiment_id,
            "name": self.name,
            "dataset_name": self.dataset_name,
            "dataset_hash": self.dataset_hash,
            "agent": self.agent,
            "version": self.version,
            "options": json.dumps(self.options, sort_keys=True, default=str),
            "status": self.status,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "updated_at": time.time_ns(),
            "environment": json.dumps(self.environment, sort_keys=True),
            "prices": json.dumps(self.prices, sort_keys=True),
            "error": self.error,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Experiment:
        def ns(value: Any) -> int | None:
            return None if value is None else int(value.timestamp() * 1e9) if hasattr(value, "timestamp") else value

        return cls(
            experiment_id=row["experiment_id"],
            name=row["name"],
            dataset_name=row["dataset_name"],
            dataset_hash=row["dataset_hash"],
            agent=row["agent"],
            version=row["version"],
            options=json.loads(row["options"] or "{}"),
            status=row["status"],
            started_at=ns(row["started_at"]) or 0,
            ended_at=ns(row["ended_at"]),
            environment=json.loads(row["environment"] or "{}"),
            prices=json.loads(row["prices"] or "{}"),
            error=row.get("error"),
        )


def status_now(store: Store, experiment_id: str, recorded: str, shard: str | None = None) -> str:
    """An experiment's status as recorded, except that a run recorded ``running`` that no live process holds any
    more (killed with SIGKILL, its machine lost: nothing could record its end) is ``interrupted``, as it is for
    ``--resume``. ``shard``: the record's shard (``K/N``) of a run in shards."""
    if recorded != RUNNING or is_running(store.root, experiment_id, shard):
        return recorded
    return INTERRUPTED


def as_now(store: Store, experiment: Experiment) -> Experiment:
    """``experiment`` with its status as :func:`status_now` tells it."""
    status = status_now(store, experiment.experiment_id, experiment.status, experiment.options.get("shard"))
    return experiment if status == experiment.status else dataclasses.replace(experiment, status=status)


def save(store: Store, experiment: Experiment) -> None:
    """Record the experiment's current state (a new row; the newest wins)."""
    store.write("experiments", [experiment.row()])


class AmbiguousId(AgentevalError, ValueError):
    """An experiment id prefix that several experiments start with; the message names them."""


class EmptyId(UsageError):
    """An experiment id given as an empty string (an unset variable in a CI script): it names no experiment."""


def find(
    store: Store,
    experiment_id: str | None = None,
    status: str | tuple[str, ...] | None = None,
    con: duckdb.DuckDBPyConnection | None = None,
) -> Experiment | None:
    """An experiment by id (a unique prefix is enough), or (``experiment_id`` None) the newest one, optionally with a
    ``status``; ``con``: a connection of the store's already open. An empty id is refused: it is the start of every
    id, and taken for "the newest" it made ``gate --baseline "$UNSET"`` compare the newest run with the candidate."""
    if experiment_id == "":
        raise EmptyId(
            "the experiment id is empty: give an id, or a unique start of one, as agenteval experiments lists them"
        )
    sql = "SELECT * FROM experiments WHERE true"
    params: list[Any] = []
    if experiment_id:
        sql += " AND starts_with(experiment_id, ?)"
        params.append(experiment_id)
    if status:
        statuses = (status,) if isinstance(status, str) else status
        sql += f" AND status IN ({', '.join('?' for _ in statuses)})"
        params.extend(statuses)
    sql += " ORDER BY started_at DESC"
    rows = store.rows(sql, params) if con is None else fetch(con, sql, params)
    if experiment_id and len(rows) > 1 and not any(r["experiment_id"] == experiment_id for r in rows):
        matching = ", ".join(r["experiment_id"] for r in rows)
        raise AmbiguousId(f"experiment id {experiment_id!r} is ambiguous: {matching}; give more of it")
    exact = [r for r in rows if r["experiment_id"] == experiment_id]
    chosen = exact[0] if exact else rows[0] if rows else None
    return as_now(store, Experiment.from_row(chosen)) if chosen else None


SHARD_RECORDS = """
SELECT * FROM experiment_history WHERE experiment_id = ? AND json_extract_string(options, '$.shard') IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY json_extract_string(options, '$.shard') ORDER BY updated_at DESC) = 1
ORDER BY json_extract_string(options, '$.shard')
"""


def shard_records(store: Store, experiment_id: str, con: duckdb.DuckDBPyConnection | None = None) -> list[Experiment]:
    """The newest record of each shard that has run of a sharded experiment (see ``agenteval.run._shards``);
    ``con``: a connection of the store's already open."""
    rows = store.rows(SHARD_RECORDS, [experiment_id]) if con is None else fetch(con, SHARD_RECORDS, [experiment_id])
    return [as_now(store, Experiment.from_row(row)) for row in rows]


NOT_STARTED = "not started"


def shard_progress(
    store: Store, experiment_id: str, trials_by_case: dict[str, int], con: duckdb.DuckDBPyConnection | None = None
) -> list[ShardProgress]:
    """Each of the N shards of an experiment run in shards (none for one that was not), from the shards'
    records and ``trials_by_case`` (trials in the store per case id); ``con``: a connection already open."""
    records = {e.options["shard"]: e for e in shard_records(store, experiment_id, con)}
    if not records:
        return []
    from ..run._shards import Shard, shard_of  # here: with the dataset loader it costs a report 15 to 30 ms

    count = Shard.parse(next(iter(records))).count
    trials = [0] * (count + 1)
    for case_id, n in trials_by_case.items():
        trials[shard_of(case_id, count)] += n
    shards = [str(Shard(k, count)) for k in range(1, count + 1)]
    return [
        ShardProgress(s, records[s].status if s in records else NOT_STARTED, trials[k])
        for k, s in enumerate(shards, start=1)
    ]


def find_shard(store: Store, experiment_id: str, shard: str) -> Experiment | None:
    """The newest record of one shard (``K/N``) of an experiment, or None when that shard never ran."""
    return next((e for e in shard_records(store, experiment_id) if e.options.get("shard") == shard), None)


def find_exact(store: Store, experiment_id: str) -> Experiment | None:
    """The experiment with this very id (not a prefix), or None."""
    rows = store.rows("SELECT * FROM experiments WHERE experiment_id = ?", [experiment_id])
    return as_now(store, Experiment.from_row(rows[0])) if rows else None


EXPERIMENT_LIST = """
SELECT e.experiment_id, e.name, e.status, e.dataset_name, e.version, e.agent, e.started_at, e.error,
       count(t.trial_id) AS trials,
       avg(t.passed::INT) AS pass_rate,
       count(*) FILTER (WHERE t.outcome = 'failed') AS failed,
       json_extract_string(e.options, '$.shard') AS shard
FROM experiments e LEFT JOIN trials t USING (experiment_id)
GROUP BY ALL ORDER BY e.started_at DESC
"""


CASE_TOTALS = """
SELECT experiment_id, count(*) AS attempts, count(*) FILTER (WHERE passed) AS passes
FROM trials GROUP BY experiment_id, case_id
"""
"""Each case's attempts and passes, per experiment: what a pass rate's case-clustered interval is computed from."""


def list_experiments(store: Store) -> list[dict[str, Any]]:
    """The store's experiments, newest first, with trial count, pass rate and its 95% interval clustered by case
    (``pass_rate_ci95``, as a report gives it; None where it has none), and the status as :func:`status_now`
    tells it."""
    totals: dict[str, list[tuple[int, float]]] = {}
    for case in store.rows(CASE_TOTALS):
        totals.setdefault(case["experiment_id"], []).append((case["attempts"], case["passes"]))
    listed = []
    for row in store.rows(EXPERIMENT_LIST):
        row["status"] = status_now(store, row["experiment_id"], row["status"], row.pop("shard"))
        interval = known_interval(clustered_rate(totals.get(row["experiment_id"], []))[2])
        listed.append(
            {**{k: v for k, v in row.items() if k != "failed"}, "pass_rate_ci95": interval, "failed": row["failed"]}
        )
    return listed


def done_trials(store: Store, experiment_id: str) -> list[dict[str, Any]]:
    """The experiment's current trials: which (case, attempt) are done, and how they ended."""
    columns = "case_id, attempt, trial_id, outcome, failure_type, infrastructure"
    return store.rows(f"SELECT {columns} FROM ({current_trials(experiment_id)})")


def case_ids(store: Store, experiment_id: str) -> set[str]:
    """The ids of the cases the experiment chose to run: its cases snapshot."""
    rows = store.rows("SELECT DISTINCT case_id FROM cases WHERE experiment_id = ?", [experiment_id])
    return {row["case_id"] for row in rows}


def scorer_versions(store: Store, experiment_id: str) -> dict[str, list[str]]:
    """The versions of each scorer whose scores of the experiment's current trials count: what they were judged by."""
    rows = store.rows(
        "SELECT scorer, list(DISTINCT scorer_version ORDER BY scorer_version) AS versions "
        f"FROM ({counted_scores(experiment_id)}) GROUP BY scorer ORDER BY scorer"
    )
    return {row["scorer"]: list(row["versions"]) for row in rows}


SUMMARY = """
SELECT count(*) AS trials,
       count(*) FILTER (WHERE outcome = 'passed') AS passed,
       count(*) FILTER (WHERE outcome = 'wrong') AS wrong,
       count(*) FILTER (WHERE outcome = 'failed') AS failed,
       count(*) FILTER (WHERE infrastructure) AS infrastructure_failures,
       count(*) FILTER (WHERE unscored) AS unscored,
       avg(passed::INT) AS pass_rate,
       sum(input_tokens)::BIGINT AS input_tokens, sum(output_tokens)::BIGINT AS output_tokens,
       fsum(cost_usd) AS cost_usd,
       sum(input_tokens_all_tries)::BIGINT AS input_tokens_all_tries,
       sum(output_tokens_all_tries)::BIGINT AS output_tokens_all_tries,
       fsum(cost_usd_all_tries) AS cost_usd_all_tries
FROM judged
"""
"""Usage of the tries that count, and of every try (rate-limited ones included): what the run spent."""


@dataclasses.dataclass(frozen=True)
class Figures:
    """An experiment's figures over its current trials: outcomes, failures by type, the pass rate with its
    case-clustered standard error and 95% interval, and usage (of the tries that count, and of every try)."""

    trials: int
    passed: int
    wrong: int
    failed: int
    infrastructure_failures: int
    unscored: int
    """Of the passed, trials no pass/fail scorer judged (their case gives no expected answer, criteria or rubric)."""
    failures_by_type: dict[str, int]
    pass_rate: float | None
    """Passed over trials; None with no trials."""
    pass_rate_se: float | None
    """Its standard error, clustered by case."""
    pass_rate_ci95: tuple[float, float] | None
    cases: int
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    input_tokens_all_tries: int | None
    output_tokens_all_tries: int | None
    cost_usd_all_tries: float | None

    def to_dict(self) -> dict[str, Any]:
        """As JSON output shows it."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class OTLPExport:
    """What a run sent to the OTLP backend: spans the exporter took, and spans it refused (or never reached)."""

    spans_sent: int
    spans_failed: int


@dataclasses.dataclass(frozen=True)
class Summary(Figures):
    """What the end of a run reports: the experiment's figures, this run's own counts, and where to look next."""

    experiment_id: str
    name: str | None
    status: str
    dataset: str
    version: str
    this_run: dict[str, int]
    """Outcomes of the trials this run (or this resume) ran: ``trials``, ``passed``, ``wrong``, ``failed``,
    ``infrastructure``; ``cache_hits`` (model calls the response cache answered) and ``not_run_simulated`` (cases
    with a simulated user left out) when there were any."""
    report: str
    """The command that shows the full report."""
    resume: str | None
    """The command that resumes an interrupted run."""
    otlp: OTLPExport | None = None
    """The run's OTLP export, when the standard variables named a backend."""
    shard: str | None = None
    """``K/N`` when this run was one shard of the experiment; ``status`` is then this shard's own."""
    shards: list[ShardProgress] = dataclasses.field(default_factory=list)
    """Every shard of the experiment, with its status and trials so far (empty when it is not run in shards)."""
    experiment_status: str | None = None
    """The experiment's status over all its shards (``partial`` while some have not run)."""
    limits: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    """With ``--executor ray``: each model's cluster-wide limiter, its ``limits`` in order (how concurrency fell on
    429s and recovered) and how many worker processes' calls it limited (``callers``)."""


def counts(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """:data:`SUMMARY` and failures by type, over a :func:`judged_connection`."""
    (figures,) = fetch(con, SUMMARY)
    by_type = fetch(
        con, "SELECT failure_type, count(*) AS n FROM judged WHERE outcome = 'failed' GROUP BY 1 ORDER BY 2 DESC, 1"
    )
    figures["failures_by_type"] = {row["failure_type"]: row["n"] for row in by_type}
    return figures


def summarize(
    store: Store, experiment_id: str, con: duckdb.DuckDBPyConnection | None = None, *, save: bool = False
) -> Figures:
    """Counts of passed, wrong and failed trials, failures by type, tokens and cost (of the tries that count,
    and ``*_all_tries``), and the pass rate with its case-clustered interval. ``con``: a
    :func:`judged_connection` already open for the experiment; ``save``: a writer's call (the end of a run),
    which saves the figures it computed for later reports."""
    if con is None:
        with judged_connection(store, experiment_id, save=save) as opened:
            return summarize(store, experiment_id, opened)
    figures = counts(con)
    per_case = con.execute("SELECT count(*), count(*) FILTER (WHERE passed) FROM judged GROUP BY case_id").fetchall()
    _, standard_error, interval = clustered_rate(per_case)
    figures["pass_rate_se"] = None if math.isnan(standard_error) else standard_error
    figures["pass_rate_ci95"] = None if figures["pass_rate"] is None else known_interval(interval)
    figures["cases"] = len(per_case)
    return Figures(**figures)
