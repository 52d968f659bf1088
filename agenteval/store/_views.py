"""The store's views, and the one SQL definition of a trial's outcome.

The views people query by name give the report's numbers: ``experiments`` (each experiment's latest
row), ``trials`` (current trials judged by their current scores) and ``scores`` (each current trial's newest
score from each scorer: :func:`counted_scores`). The rows as written stay queryable as ``experiment_history``,
``trial_history`` and ``score_history``. Reports, compare, the gate and the run itself build their
figures from the same functions, given an experiment id, so a figure and a query over the views
cannot disagree.
"""

from __future__ import annotations

SCORER_ERROR = "scorer_error"
"""The failure of a trial that answered but whose answer an applicable pass/fail scorer could not judge (an LLM
judge's API was down, a scorer raised): infrastructure. Defined here, by :func:`judged_trials`, which types it
from the current scores; it is never raised at run time, so a rescore that judges the answer clears it."""


def sql_string(value: str) -> str:
    """A SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


HISTORY = {
    "experiments": "experiment_history",
    "trials": "trial_history",
    "scores": "score_history",
    "reviews": "review_history",
}
"""Stored tables whose rows are history (appended, superseded, re-scored), and the views that show them as written."""

ALL_TRIES = "_all_tries"
USAGE = ("input_tokens", "output_tokens", "cost_usd")
"""A trial's usage: these columns hold the try that counts (the one whose answer was judged), the same
names with ``_all_tries`` every try, rate-limited tries that were retried included."""

OLD_USAGE_MARKER = f"input_tokens{ALL_TRIES}"
"""Absent (null) in rows written before the usage was split: their usage columns held every try."""


COUNTED_MODEL_CALL = "operation = 'chat' AND wraps_model_call IS NOT TRUE"
"""The spans table's model calls whose usage counts: one per actual model request. A model-call span with
another beneath it (an SDK's own span, another instrumentation's) is a wrapper of that request, flagged
``wraps_model_call`` where the child started (see ``agenteval_exporters.conventions``); spans written before
the flag existed count as they did."""


def raw_table(table: str) -> str:
    """The view that shows a stored table's rows as written."""
    return HISTORY.get(table, table)


def only(experiment_id: str | None, alias: str = "") -> str:
    """A condition keeping one experiment's rows (or all, for None)."""
    column = f"{alias}.experiment_id" if alias else "experiment_id"
    return f"{column} = {sql_string(experiment_id)}" if experiment_id else "true"


def stored_trials(read: str) -> str:
    """Trial rows as written by any version. Before usage was split, ``input_tokens``, ``output_tokens`` and
    ``cost_usd`` held every try: they are read as ``*_all_tries``, and the try that counts as unknown (null)."""
    replaced = []
    for name in USAGE:
        replaced.append(f"CASE WHEN {OLD_USAGE_MARKER} IS NULL THEN NULL ELSE {name} END AS {name}")
        replaced.append(f"coalesce({name}{ALL_TRIES}, {name}) AS {name}{ALL_TRIES}")
    return f"SELECT * REPLACE ({', '.join(replaced)}) FROM {read}"


SHARD_OF = "json_extract_string(options, '$.shard')"
"""An experiment row's shard (``K/N``) when its run was one of N slices (``--shard``), else null."""


def latest_experiments(experiment_id: str | None = None) -> str:
    """Each experiment's newest row: a status change appends a row. An experiment run in shards has a newest
    row per shard; its status combines theirs: ``failed`` if one failed, else ``running`` or ``interrupted``
    if one is, else ``partial`` while fewer than N shards have run, else ``completed``; it started when its
    first shard did and ended when its last did."""
    return f"""
WITH per_shard AS (
    SELECT *, {SHARD_OF} AS shard_of FROM experiment_history WHERE {only(experiment_id)}
    QUALIFY row_number() OVER (PARTITION BY experiment_id, shard_of ORDER BY updated_at DESC) = 1
), combined AS (
    SELECT experiment_id,
           CASE WHEN bool_or(status = 'failed') THEN 'failed'
                WHEN bool_or(status = 'running') THEN 'running'
                WHEN bool_or(status = 'interrupted') THEN 'interrupted'
                WHEN count(*) < max(TRY_CAST(split_part(shard_of, '/', 2) AS INTEGER)) THEN 'partial'
                ELSE 'completed' END AS shards_status,
           min(started_at) AS shards_started_at,
           CASE WHEN bool_and(ended_at IS NOT NULL) THEN max(ended_at) END AS shards_ended_at,
           any_value(error) FILTER (WHERE status = 'failed') AS shards_error
    FROM per_shard WHERE shard_of IS NOT NULL GROUP BY experiment_id
)
SELECT p.* EXCLUDE (shard_of) REPLACE (
    coalesce(c.shards_status, p.status) AS status,
    CASE WHEN c.experiment_id IS NULL THEN p.started_at ELSE c.shards_started_at END AS started_at,
    CASE WHEN c.experiment_id IS NULL THEN p.ended_at ELSE c.shards_ended_at END AS ended_at,
    CASE WHEN c.experiment_id IS NULL THEN p.error ELSE c.shards_error END AS error
)
FROM per_shard p LEFT JOIN combined c USING (experiment_id)
QUALIFY row_number() OVER (PARTITION BY p.experiment_id ORDER BY p.updated_at DESC) = 1
"""


def trial_key(experiment_id: str | None) -> str:
    """The columns that tell a trial's rows apart among one experiment's (or every experiment's): within one
    experiment its id is the same on every row, and hashing it is wasted work."""
    return "trial_id" if experiment_id else "experiment_id, trial_id"


def current_trials(experiment_id: str | None = None, where: str = "true") -> str:
    """Trials not superseded by a retry (``--retry-failed``), with their run-time outcome as stored; ``where``
    keeps some of them (a condition on the trials table's columns).

    An anti join against the few rows that supersede another: DuckDB plans ``NOT EXISTS`` with every
    trial on the build side, 0.8 s of a report at a million trials against 0.03 s this way.
    """
    return f"""
SELECT t.* FROM trial_history t
ANTI JOIN (SELECT experiment_id, supersedes FROM trial_history
           WHERE {only(experiment_id)} AND supersedes IS NOT NULL) r
       ON r.experiment_id = t.experiment_id AND r.supersedes = t.trial_id
WHERE {only(experiment_id, "t")} AND ({where})
"""


def current_scores(experiment_id: str | None = None, where: str = "true") -> str:
    """Each trial's newest score from each scorer: a rescore replaces what it re-ran, and what it did not
    re-run stays current from the pass before. ``where`` keeps the scores of some trials (a condition on
    the scores table's columns that holds for all of a trial's scores or none, such as one on its id).

    A pass scores a trial at most once per scorer, so while there is one pass there is nothing to pick,
    and the window, a report's costliest step, is skipped (a third of the time for a run never rescored).
    Given one experiment, the window leaves its id out of the partition, so a caller that does not select
    the id keeps it out of the window's rows too: picking the current scores of 500,000 trials rescored once
    peaks at 470 MB rather than 550 MB.
    """
    passes = "(SELECT count(DISTINCT pass_id) FROM s)"
    return f"""
WITH s AS NOT MATERIALIZED (SELECT * FROM score_history WHERE {only(experiment_id)} AND ({where}))
(SELECT * FROM s WHERE {passes} <= 1)
UNION ALL
(SELECT * FROM s WHERE {passes} > 1
 QUALIFY row_number() OVER (PARTITION BY {trial_key(experiment_id)}, scorer ORDER BY scored_at DESC, pass_id) = 1)
"""


def counted_scores(experiment_id: str | None = None, where: str = "true") -> str:
    """The current scores that count: those of current trials, and of production traces (which have no trial row).
    Every figure read from scores reads these: the ``scores`` view, and a report's scorer table (whose snapshot
    finds each bucket's current trials once, to judge them and to count their scores, with :func:`scores_of_trials`).

    A try lost after its scores were published but before its trial row was (a run killed between the two, a Ray
    worker lost mid-task) leaves scores whose trial has no row; ``--resume`` runs the trial again under a new id, so
    the lost try's scores would count beside the new one's. They stay in ``score_history``, as written. ``where`` as
    for :func:`current_scores`, on columns the trials table has too (the trial's or the case's id)."""
    scores = current_scores(experiment_id, f"experiment_id IS NOT NULL AND ({where})")
    tried = scores_of_trials(f"({scores})", f"({current_trials(experiment_id, where)})", trial_key(experiment_id))
    if experiment_id:
        return tried
    return f"({tried}) UNION ALL ({current_scores(where=f'experiment_id IS NULL AND ({where})')})"


def scores_of_trials(scores: str, trials: str, keys: str) -> str:
    """The rows of ``scores`` whose trial is in ``trials``, matched by ``keys``: given current scores and current
    trials, the scores that count (:func:`counted_scores`)."""
    return f"SELECT s.* FROM {scores} s SEMI JOIN {trials} t USING ({keys})"


def scorer_verdicts(scores: str, keys: str) -> str:
    """Per ``keys`` (a trial, or a production trace), what its current pass/fail ``scores`` say: ``all_passed``
    (every one passed), and the first scorer (by name) that could not judge its answer, ``errored_scorer``, with
    that error, ``scorer_error``; continuous scores are reported beside, never folded in. What makes an answered
    trial (or trace) passed, wrong, or a ``scorer_error`` failure (:func:`judged_trials`)."""
    return f"""
SELECT {keys}, bool_and(passed IS TRUE) AS all_passed,
       -- the first scorer (by name) that errored, so the message is the same however the scores are read
       min(scorer) FILTER (WHERE error IS NOT NULL) AS errored_scorer,
       arg_min(error, scorer) FILTER (WHERE error IS NOT NULL) AS scorer_error
FROM {scores} WHERE NOT coalesce(continuous, false) GROUP BY ALL
"""


def unjudged_message(verdicts: str) -> str:
    """SQL: the message of a ``scorer_error`` failure, from a row (alias ``verdicts``) of :func:`scorer_verdicts`."""
    return f"'scorer ' || {verdicts}.errored_scorer || ' could not judge the answer: ' || {verdicts}.scorer_error"


def judged_trials(trials: str, scores: str, keys: str = "experiment_id, trial_id", *, unscored: bool = False) -> str:
    """``trials`` with ``outcome`` and ``passed`` judged by ``scores`` (their current scores): what passing means.

    A trial fails when it never produced an answer (``failure_type``); it passes when it did not fail and
    every applicable pass/fail scorer passed (a false or an error, whose ``passed`` is null, does not pass;
    a trial no pass/fail scorer applies to passes); otherwise its answer is wrong. Continuous scores are
    reported beside, never folded in.

    An answer that some applicable pass/fail scorer could not judge (its score has an ``error``: a judge's API was
    down, a scorer raised) says nothing about the agent, so it is not wrong either: the trial fails as a
    ``scorer_error``, infrastructure, with that scorer's error as its message. Its row is never rewritten: the
    failure comes from the current scores, and a rescore that judges the answer makes it passed or wrong. (The row's
    ``outcome``, ``passed`` and, for a trial that answered, ``infrastructure`` are the run's verdict, replaced here.)

    ``trials`` is a relation with the trials table's ``failure_type``, ``infrastructure``, ``error_message``,
    ``outcome`` and ``passed``; ``keys`` join it to ``scores``. With ``unscored``, a column of that name says whether
    the trial answered with no pass/fail score to judge it (its case gives no expected answer, criteria or rubric):
    it passed on no scorer's word, which reports and compare count.
    """
    flagged = ",\n    t.failure_type IS NULL AND j.all_passed IS NULL AS unscored" if unscored else ""
    passes = "t.failure_type IS NULL AND coalesce(j.all_passed, true)"
    unjudged = "t.failure_type IS NULL AND j.errored_scorer IS NOT NULL"
    return f"""
SELECT t.* REPLACE (
    CASE WHEN t.failure_type IS NOT NULL OR {unjudged} THEN 'failed' WHEN {passes} THEN 'passed' ELSE 'wrong' END
        AS outcome,
    {passes} AS passed,
    CASE WHEN {unjudged} THEN {sql_string(SCORER_ERROR)} ELSE t.failure_type END AS failure_type,
    -- an answered trial's stored flag is the run's verdict on the scores it had then: the current ones decide
    CASE WHEN {unjudged} THEN true WHEN t.failure_type IS NOT NULL THEN t.infrastructure END AS infrastructure,
    CASE WHEN {unjudged} THEN {unjudged_message("j")} ELSE t.error_message END AS error_message
){flagged}
FROM {trials} t
LEFT JOIN ({scorer_verdicts(scores, keys)}) j USING ({keys})
"""


def current_reviews(experiment_id: str | None = None) -> str:
    """Each trial's newest human verdict: a person who changes their mind appends a row."""
    return f"""
SELECT * FROM review_history WHERE {only(experiment_id)}
QUALIFY row_number() OVER (PARTITION BY experiment_id, trial_id ORDER BY reviewed_at DESC) = 1
"""


CURRENT_VIEWS = {
    "experiments": latest_experiments(),
    "scores": counted_scores(),
    "trials": judged_trials(f"({current_trials()})", f"({current_scores()})"),
    "reviews": current_reviews(),
}
"""The views people query by name, over the history views (created after them)."""
