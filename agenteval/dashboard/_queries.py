"""What the dashboard's pages read from the store: the same views and definitions the reports use, paginated in SQL.

Every figure goes through :mod:`agenteval.store._views` (``judged_trials``, ``current_trials``, ``current_scores``)
or the experiment's judged connection (:func:`agenteval.store._snapshots.judged_connection`), so a number on a
page and a number in ``agenteval report`` or ``agenteval sql`` cannot disagree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from typing import Any

import duckdb

from agenteval_instrumentation import attributes as A

from ..analysis._experiments import fetch, status_now
from ..analysis._stats import clustered_rate, known_interval
from ..analysis._statuses import INTERRUPTED, RUNNING
from ..dataset._cases import UNCATEGORIZED
from ..store import Store
from ..store._snapshots import judged_connection
from ..store._views import current_scores, current_trials, judged_trials, sql_string

PAGE_SIZE = 50
"""Cases per page of an experiment's case table."""

CASE_SORTS = {
    "case": "case_id",
    "category": "category",
    "pass_rate": "passes / attempts",
    "failed": "failed",
    "latency": "mean_ms",
}
"""The case table's sort keys (a whitelist: the key chooses an SQL expression, never enters SQL itself)."""

OUTCOMES = ("passed", "wrong", "failed")

MAX_OFFSET = 2**63 - 1
"""The largest OFFSET DuckDB takes (a BIGINT)."""


@dataclasses.dataclass(frozen=True)
class ExperimentRow:
    """One line of the experiments page."""

    experiment_id: str
    name: str | None
    dataset: str
    version: str
    agent: str
    status: str
    started_at: Any
    trials: int
    planned: int | None
    passed: int
    wrong: int
    failed: int
    infrastructure_failures: int
    pass_rate: float | None
    ci95: tuple[float, float] | None
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None


EXPERIMENTS_PAGE = 50
"""Experiments per page of the experiments page; ``agenteval experiments`` lists every one."""

EXPERIMENTS = """
WITH listed AS (
    SELECT e.experiment_id, e.name, e.dataset_name, e.version, e.agent, e.status, e.started_at, e.options,
           count(*) OVER () AS matching
    FROM experiments e
    WHERE (? IS NULL OR e.dataset_name = ?)
      AND (? IS NULL OR contains(lower(coalesce(e.name, '') || ' ' || e.experiment_id), lower(?)))
      AND (? IS NULL OR e.status IN (?, ?))
    ORDER BY e.started_at DESC, e.experiment_id LIMIT ? OFFSET ?
)
SELECT l.*, (SELECT count(*) FROM cases c WHERE c.experiment_id = l.experiment_id) AS planned_cases
FROM listed l ORDER BY l.started_at DESC, l.experiment_id
"""
"""A page of the experiments, newest first, and how many match; the cases are counted for the page's only.

A status is filtered on as it is now (see ``status_now``), not as recorded: a run recorded ``running`` that no
process holds is ``interrupted``. So the recorded status filters in SQL (also ``running`` for those two), and their
rows are then told apart and paged here; the others are paged in SQL."""

STARTED = "SELECT experiment_id, started_at FROM experiments"

FIGURES_BY_CASE = """
SELECT case_id, count(*) AS attempts, count(*) FILTER (WHERE passed) AS passes,
       count(*) FILTER (WHERE outcome = 'wrong') AS wrong, count(*) FILTER (WHERE outcome = 'failed') AS failed,
       count(*) FILTER (WHERE infrastructure) AS infrastructure,
       sum(input_tokens)::BIGINT AS input_tokens, sum(output_tokens)::BIGINT AS output_tokens, fsum(cost_usd) AS cost
FROM judged GROUP BY ALL
"""
"""Per case of one experiment, from its judged trials (the ``trials`` view's rows, read from the figures a run
saved: five times faster than the view at 100,000 trials); the pass rate's interval is clustered by case."""


@dataclasses.dataclass(frozen=True)
class ExperimentPage:
    """One page of the experiments page, and how many experiments match the filters."""

    rows: list[ExperimentRow]
    total: int
    page: int
    pages: int
    size: int


def experiments(
    store: Store,
    dataset: str | None = None,
    status: str | None = None,
    text: str | None = None,
    *,
    page: int = 1,
    size: int = EXPERIMENTS_PAGE,
) -> ExperimentPage:
    """A page of the store's experiments, newest first, with their figures; filtered by dataset, status and name
    or id. Only the page's experiments have their figures read (a judged connection each)."""
    by_case: dict[str, list[dict[str, Any]]] = {}
    page = min(max(page, 1), MAX_OFFSET // size)
    # Not read-only: an experiment without saved figures (a running one) has them computed into a temporary
    # folder, as a report does.
    with contextlib.closing(store.connect()) as opened:
        listed, total, page = _listed(store, opened, dataset, status, text, page, size)
        for row in listed:
            with judged_connection(store, row["experiment_id"], con=opened) as con:
                by_case[row["experiment_id"]] = fetch(con, FIGURES_BY_CASE)
    rows = [_experiment_row(row, by_case.get(row["experiment_id"], [])) for row in listed]
    return ExperimentPage(rows, total, page, max(1, math.ceil(total / size)), size)


def _listed(
    store: Store,
    con: duckdb.DuckDBPyConnection,
    dataset: str | None,
    status: str | None,
    text: str | None,
    page: int,
    size: int,
) -> tuple[list[dict[str, Any]], int, int]:
    """The page's experiment records with their status as it is now, how many match, and the page (the last one
    when ``page`` is past it)."""
    told_apart = status in (RUNNING, INTERRUPTED)  # which recorded running still run is known only here: page here
    also = RUNNING if told_apart else status

    def read(limit: int | None, offset: int) -> list[dict[str, Any]]:
        rows = fetch(con, EXPERIMENTS, [dataset, dataset, text, text, status, status, also, limit, offset])
        for row in rows:
            shard = json.loads(row["options"] or "{}").get("shard")
            row["status"] = status_now(store, row["experiment_id"], row["status"], shard)
        return [row for row in rows if status is None or row["status"] == status]

    if told_apart:
        every = read(None, 0)
        page = min(page, max(1, math.ceil(len(every) / size)))
        return every[(page - 1) * size : page * size], len(every), page
    rows = read(size, (page - 1) * size)
    if not rows and page > 1:  # past the last page (a stale link): the last page, with the true count
        first = read(1, 0)
        page = math.ceil(first[0]["matching"] / size) if first else 1
        rows = read(size, (page - 1) * size) if first else []
    return rows, rows[0]["matching"] if rows else 0, page


def _experiment_row(row: dict[str, Any], cases: list[dict[str, Any]]) -> ExperimentRow:
    """An experiment's line, from its record and its per-case figures."""
    mean, se, interval = clustered_rate([(c["attempts"], c["passes"]) for c in cases])
    attempts = json.loads(row["options"] or "{}").get("attempts")
    return ExperimentRow(
        experiment_id=row["experiment_id"],
        name=row["name"],
        dataset=row["dataset_name"],
        version=row["version"],
        agent=row["agent"],
        status=row["status"],
        started_at=row["started_at"],
        trials=sum(c["attempts"] for c in cases),
        planned=row["planned_cases"] * attempts if isinstance(attempts, int) else None,
        passed=sum(c["passes"] for c in cases),
        wrong=sum(c["wrong"] for c in cases),
        failed=sum(c["failed"] for c in cases),
        infrastructure_failures=sum(c["infrastructure"] for c in cases),
        pass_rate=None if math.isnan(mean) else mean,
        ci95=known_interval(interval),
        input_tokens=_total(c["input_tokens"] for c in cases),
        output_tokens=_total(c["output_tokens"] for c in cases),
        cost_usd=_total(c["cost"] for c in cases),
    )


def _total(values: Any) -> Any:
    present = [v for v in values if v is not None]
    return math.fsum(present) if present and isinstance(present[0], float) else sum(present) if present else None


def filter_choices(store: Store) -> dict[str, list[str]]:
    """The datasets and statuses the experiments page can filter by."""
    with contextlib.closing(store.connect(read_only=True)) as con:
        datasets = [r[0] for r in con.execute("SELECT DISTINCT dataset_name FROM experiments ORDER BY 1").fetchall()]
        records = con.execute(
            "SELECT experiment_id, status, json_extract_string(options, '$.shard') FROM experiments"
        ).fetchall()
    statuses = sorted({status_now(store, eid, status, shard) for eid, status, shard in records})
    return {"datasets": [d for d in datasets if d], "statuses": statuses}


@dataclasses.dataclass(frozen=True)
class CasePage:
    """One page of an experiment's case table, and how many cases match the filters."""

    rows: list[dict[str, Any]]
    total: int
    page: int
    pages: int
    categories: list[str]
    scorers: list[str]
    categories_total: int
    """How many categories the experiment's cases have; ``categories`` holds the first :data:`CATEGORIES_SHOWN`."""


CATEGORIES_SHOWN = 50
"""The categories an experiment's page lists (its plot, report table and category filter) and a comparison's page
compares, the first by name; ``agenteval report --format json`` and ``agenteval compare --json`` give every one."""

CATEGORY_CHOICES = f"""
SELECT category, count(*) OVER () AS categories
FROM (SELECT DISTINCT coalesce(category, '{UNCATEGORIZED}') AS category FROM cases WHERE experiment_id = ?)
ORDER BY 1 LIMIT ?
"""


CASE_TABLE = """
WITH per_case AS (
    SELECT j.case_id, coalesce(any_value(c.category), {uncategorized}) AS category,
           count(*) AS attempts, count(*) FILTER (WHERE j.passed) AS passes,
           count(*) FILTER (WHERE j.outcome = 'failed') AS failed, avg(j.duration_ms) AS mean_ms
    FROM judged j LEFT JOIN (SELECT case_id, category FROM cases WHERE experiment_id = {experiment}) c
         ON c.case_id = j.case_id
    WHERE {where}
    GROUP BY j.case_id
    HAVING {having}
), shown AS (
    SELECT *, {key} AS sort_key, count(*) OVER () AS matching FROM per_case
    ORDER BY sort_key {direction}, case_id LIMIT ? OFFSET ?
)
SELECT s.*, list({{'attempt': t.attempt, 'trial_id': t.trial_id, 'outcome': t.outcome,
                  'failure_type': t.failure_type}} ORDER BY t.attempt) AS tries
FROM shown s JOIN judged t USING (case_id)
GROUP BY ALL ORDER BY sort_key {direction}, case_id
"""
"""A page of cases: filtered, sorted and cut to the page first, then each shown case's attempts gathered."""


def case_page(
    store: Store,
    experiment_id: str,
    *,
    page: int = 1,
    sort: str = "case",
    descending: bool = False,
    category: str | None = None,
    outcome: str | None = None,
    scorer: str | None = None,
    size: int = PAGE_SIZE,
    con: duckdb.DuckDBPyConnection | None = None,
) -> CasePage:
    """A page of the experiment's cases with each attempt's outcome. ``outcome`` keeps cases with an attempt
    that ended so (``passed``, ``wrong``, ``failed`` or a failure type); ``scorer`` keeps cases with an attempt
    that scorer did not pass; sorted by a key of :data:`CASE_SORTS`. Filtering, sorting and paging run in SQL."""
    where, having, params = ["true"], ["true"], []
    if category:
        where.append(f"coalesce(c.category, {sql_string(UNCATEGORIZED)}) = ?")
        params.append(category)
    if outcome in OUTCOMES:
        having.append("bool_or(j.outcome = ?)")
        params.append(outcome)
    elif outcome:
        having.append("bool_or(j.failure_type = ?)")
        params.append(outcome)
    if con is None:
        # Not read-only: without saved figures the judged trials are computed into a temporary folder, as reports do.
        with contextlib.closing(store.connect()) as opened:
            return _case_page(store, experiment_id, opened, where, having, params, page, sort, descending, scorer, size)
    return _case_page(store, experiment_id, con, where, having, params, page, sort, descending, scorer, size)


def _case_page(
    store: Store,
    experiment_id: str,
    opened: duckdb.DuckDBPyConnection,
    where: list[str],
    having: list[str],
    params: list[Any],
    page: int,
    sort: str,
    descending: bool,
    scorer: str | None,
    size: int,
) -> CasePage:
    with judged_connection(store, experiment_id, con=opened) as con:
        if scorer:
            failing = current_scores(experiment_id, "scorer = " + sql_string(scorer))
            where.insert(0, f"j.trial_id IN (SELECT trial_id FROM ({failing}) WHERE passed IS NOT TRUE)")
        sql = CASE_TABLE.format(
            uncategorized=sql_string(UNCATEGORIZED),
            experiment=sql_string(experiment_id),
            where=" AND ".join(where),
            having=" AND ".join(having),
            key=CASE_SORTS.get(sort, "case_id"),
            direction="DESC" if descending else "ASC",
        )
        page = min(max(page, 1), MAX_OFFSET // size)  # OFFSET is a BIGINT: a larger page number was a 500
        rows = fetch(con, sql, [*params, size, (page - 1) * size])
        if not rows and page > 1:
            # Past the last page (a stale link, a typed number): the count comes with the rows, so an empty page
            # said "0 cases match". Show the last page, with the true count.
            first = fetch(con, sql, [*params, 1, 0])
            page = math.ceil(first[0]["matching"] / size) if first else 1
            rows = fetch(con, sql, [*params, size, (page - 1) * size]) if first else []
        listed = con.execute(CATEGORY_CHOICES, [experiment_id, CATEGORIES_SHOWN]).fetchall()
        scorers = [r[0] for r in con.execute("SELECT scorer FROM scorer_figures").fetchall()]
    total = rows[0]["matching"] if rows else 0
    categories = [r[0] for r in listed]
    categories_total = listed[0][1] if listed else 0
    return CasePage(rows, total, page, max(1, math.ceil(total / size)), categories, scorers, categories_total)


@dataclasses.dataclass(frozen=True)
class SpanNode:
    """A span in the trial's tree: its row, depth, and where it sits on the trial's timeline (0..1)."""

    span: dict[str, Any]
    depth: int
    offset: float
    width: float
    attributes: dict[str, Any]
    events: list[Any]


@dataclasses.dataclass(frozen=True)
class TrialView:
    """Everything the trial page shows."""

    trial: dict[str, Any]
    case: dict[str, Any] | None
    conversation: list[tuple[str, str]]
    scores: list[dict[str, Any]]
    spans: list[SpanNode]
    reviews: list[dict[str, Any]]
    spans_total: int
    """How many spans the trial has (each written once or more counted once); ``spans`` holds the first
    :data:`SPANS_SHOWN` of them."""


SPANS_SHOWN = 500
"""The spans a trial's page shows, the first by start time; the SQL page (the ``spans`` view) gives every one."""

TRIAL_SPANS = """
SELECT * FROM spans WHERE experiment_id = ? AND trial_id = ?
QUALIFY row_number() OVER (PARTITION BY span_id ORDER BY start_time) = 1
ORDER BY start_time, span_id LIMIT ?
"""
"""A trial's first spans by start time (a parent starts before its children), a span written twice once."""

SPAN_COUNT = "SELECT count(DISTINCT span_id) FROM spans WHERE experiment_id = ? AND trial_id = ?"


def _one_trial(experiment_id: str, trial_id: str) -> str:
    """The ``trials`` view's row for one trial: the same definition, kept to one trial's rows."""
    cond = "trial_id = " + sql_string(trial_id)
    return judged_trials(f"({current_trials(experiment_id, cond)})", f"({current_scores(experiment_id, cond)})")


def trial(store: Store, experiment_id: str, trial_id: str) -> TrialView | None:
    """A trial with its case, conversation, every score (current ones flagged), spans as a tree, and reviews."""
    with contextlib.closing(store.connect(read_only=True)) as con:
        found = fetch(con, _one_trial(experiment_id, trial_id))
        if not found:
            found = fetch(
                con, "SELECT * FROM trial_history WHERE experiment_id = ? AND trial_id = ?", [experiment_id, trial_id]
            )
        if not found:
            return None
        row = found[0]
        cases = fetch(
            con, "SELECT * FROM cases WHERE experiment_id = ? AND case_id = ?", [experiment_id, row["case_id"]]
        )
        cond = "trial_id = " + sql_string(trial_id)
        current = {(s["scorer"], s["pass_id"]) for s in fetch(con, current_scores(experiment_id, cond))}
        scores = fetch(
            con,
            "SELECT * FROM score_history WHERE experiment_id = ? AND trial_id = ? ORDER BY scored_at DESC, scorer",
            [experiment_id, trial_id],
        )
        for score in scores:
            score["current"] = (score["scorer"], score["pass_id"]) in current
        spans = fetch(con, TRIAL_SPANS, [experiment_id, trial_id, SPANS_SHOWN])
        span_count = con.execute(SPAN_COUNT, [experiment_id, trial_id]).fetchone()
        reviews = fetch(
            con,
            "SELECT * FROM review_history WHERE experiment_id = ? AND trial_id = ? ORDER BY reviewed_at DESC",
            [experiment_id, trial_id],
        )
    case = cases[0] if cases else None
    spans_total = span_count[0] if span_count else 0
    return TrialView(row, case, _conversation(row, case, spans), scores, span_tree(spans), reviews, spans_total)


def _texts(messages: Any) -> list[tuple[str, str]]:
    """(role, text) of messages in the GenAI conventions' shape (role and typed parts)."""
    try:
        parsed = json.loads(messages) if isinstance(messages, str) else messages or []
        out = []
        for message in parsed:
            parts = message.get("parts") or []
            text = "\n".join(str(p.get("content", "")) for p in parts if p.get("type", "text") == "text")
            out.append((str(message.get("role", "?")), text))
        return out
    except (ValueError, AttributeError, TypeError):
        return []


def _conversation(
    row: dict[str, Any], case: dict[str, Any] | None, spans: list[dict[str, Any]]
) -> list[tuple[str, str]]:
    """Every user message and reply: the root span's messages when it recorded them (simulated users), else the
    case's turns or input, and the trial's reply."""
    for span in spans:
        if span["scope_name"] == A.RUNNER_SCOPE and span["parent_span_id"] is None and span["attributes"]:
            attributes = json.loads(span["attributes"])
            users = _texts(attributes.get(A.GEN_AI_INPUT_MESSAGES))
            replies = _texts(attributes.get(A.GEN_AI_OUTPUT_MESSAGES))
            if users:
                turns = []
                for index in range(max(len(users), len(replies))):
                    turns += users[index : index + 1] + replies[index : index + 1]
                return turns
    turns = []
    if case is not None:
        whole = json.loads(case["case"] or "{}")
        for turn in whole.get("turns") or []:
            if isinstance(turn, dict):
                turns.append((str(turn.get("role", "user")), str(turn.get("content", ""))))
        if not turns and case["input"] is not None:
            turns.append(("user", case["input"]))
    if row.get("reply") is not None:
        turns.append(("assistant", row["reply"]))
    return turns


def span_tree(spans: list[dict[str, Any]]) -> list[SpanNode]:
    """Spans in tree order (each after its parent, siblings by start), with their place on the timeline."""
    if not spans:
        return []
    # A span written twice (an export retried through collect, a run's spans sent to its own store) is one span:
    # each copy of a parent walked every copy of its children, so the tree grew as 2 to the power of its depth.
    unique: dict[str, dict[str, Any]] = {}
    for span in spans:
        unique.setdefault(span["span_id"], span)
    spans = list(unique.values())
    ids = set(unique)
    children: dict[str | None, list[dict[str, Any]]] = {}
    for span in spans:
        parent = span["parent_span_id"] if span["parent_span_id"] in ids else None
        children.setdefault(parent, []).append(span)
    start = min(s["start_time"] for s in spans)
    end = max(s["end_time"] for s in spans)
    total = max((end - start).total_seconds(), 1e-9)
    out: list[SpanNode] = []

    def walk(parent: str | None, depth: int) -> None:
        for span in children.get(parent, []):
            offset = (span["start_time"] - start).total_seconds() / total
            width = max((span["end_time"] - span["start_time"]).total_seconds() / total, 0.002)
            attributes = json.loads(span["attributes"] or "{}")
            events = json.loads(span["events"] or "[]")
            out.append(SpanNode(span, depth, offset, min(width, 1 - offset), attributes, events))
            walk(span["span_id"], depth + 1)

    walk(None, 0)
    return out


def case_trials(store: Store, experiment_id: str, case_id: str) -> list[dict[str, Any]]:
    """A case's current trials in one experiment, judged as the ``trials`` view judges them, with their scores."""
    cond = "case_id = " + sql_string(case_id)
    with contextlib.closing(store.connect(read_only=True)) as con:
        trials = fetch(
            con,
            judged_trials(f"({current_trials(experiment_id, cond)})", f"({current_scores(experiment_id, cond)})")
            + " ORDER BY attempt",
        )
        scores = fetch(con, current_scores(experiment_id, cond))
    for row in trials:
        row["scores"] = sorted((s for s in scores if s["trial_id"] == row["trial_id"]), key=lambda s: s["scorer"])
    return trials


def is_connection_error(exc: Exception) -> bool:
    """A DuckDB error a user's statement can cause (shown on the page, not a crash)."""
    return isinstance(exc, duckdb.Error)
