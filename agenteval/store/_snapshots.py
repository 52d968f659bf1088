"""An experiment's judged trials and the figures around them, computed once per state of the store and kept.

Judging a trial needs its current scores (each scorer's newest pass), and finding those means reading every
score the experiment ever had: at a million trials rescored once, 2.5 s of a 4 s report. So the judged trials,
and the figures a report reads from the scores and spans, are saved as a snapshot in
``<store>/.snapshots/experiment_id=<id>/<fingerprint>/`` and read from there while the store holds the same files.

The fingerprint hashes :data:`SNAPSHOT_VERSION` and the path, size and modification time of every file the
figures come from: the experiment's partitions of trials, scores and spans, and any file of those tables outside
a partition. Published files are never changed in place, so writing, compacting or removing any of them changes
the fingerprint, and a snapshot is read only under the fingerprint of the files as they are now: a snapshot can
be out of date on disk, never in a figure.

Only writers save snapshots, since reads never write: the end of a run (from the same computation as its
summary), ``rescore``, and :func:`refresh_figures` after ``agenteval compact``. A report that finds no current
snapshot computes the figures with the very same SQL, only slower. Deleting ``.snapshots`` loses nothing but
time.

A store on object storage keeps its snapshots on the machine that saved them, in a folder of its own per store
URL (:func:`~agenteval_exporters.storefs.local_home`): fingerprinted by the live files' listing, they are as
current as on disk; another machine's report computes the figures, as for a store written before snapshots.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import duckdb

from agenteval_exporters.files import STAGED_SUFFIX, partition_path
from agenteval_exporters.schema import PARTITION_COLUMN
from agenteval_exporters.storefs import RemoteRoot, duckdb_literal, local_home
from agenteval_instrumentation import attributes as A
from agenteval_instrumentation.masking import masked_logger

from . import _views as views
from ._fingerprints import SNAPSHOTS, files_fingerprint, fingerprint_of
from ._store import Store, sql_string

logger = masked_logger(__name__)

SNAPSHOT_SUFFIX = ".figures"
"""A snapshot's files are Parquet, named so that no glob over the store's ``*.parquet`` reaches them."""

SNAPSHOT_VERSION = 7
"""Part of every fingerprint: bump it when what a snapshot holds, or the SQL that fills it, changes (2: scores keep
their case, and scorer figures the spread their intervals need; 3: judged trials whose answer a scorer could not
judge fail as ``scorer_error``, infrastructure, where they were wrong; 4: scorer figures count only the scores of
current trials, not those of a try lost before its trial row was written; 5: scorer figures say which scorer
versions gave the current scores, and how many each; 6: judged trials say whether no pass/fail scorer judged them,
``unscored``; 7: scorer figures hold the passes, squared judged counts, discordant pairs and most judged in a unit
that a pass rate's interval is computed from)."""

SOURCES = ("trials", "scores", "spans")
"""The tables a snapshot's figures are read from (cases and experiments are small and read live)."""

BUCKET_TRIALS = 500_000
"""Trials judged at a time. Picking current scores sorts the scores of the trials at hand, so memory is bounded by
this many trials' scores, not by the experiment's size (about 400 MB at two passes of two scorers)."""

STALE_SNAPSHOT_SECONDS = 60.0
"""A replaced snapshot is removed once replaced for this long: a reader that chose it before has finished by then."""

SCORE_FIGURES = "trial_id, case_id, scorer, scorer_version, value, passed, continuous, error"
"""The columns of a bucket's current scores: what judging its trials and the scorer figures use. Not the experiment's
id: left out, it stays out of the window that picks them (see :func:`~._views.current_scores`)."""
USAGE_FIGURES = ", ".join([*views.USAGE, *(name + views.ALL_TRIES for name in views.USAGE)])
TRIAL_FIGURES = (
    "experiment_id, trial_id, case_id, attempt, outcome, passed, failure_type, infrastructure, error_message, "
    f"duration_ms, {USAGE_FIGURES}"
)
"""The columns of ``judged``, beside ``unscored`` (:func:`~._views.judged_trials`): what figures use (replies and
reasons are large, and reading them costs most)."""


def scorer_figures_sql(scores: str, unit: str) -> str:
    """Each scorer's figures over ``scores`` (a relation of current scores): what it scored, its pass rate or mean,
    its errors, and what their intervals need, clustered by ``unit`` (a column: the case, or a production trace):
    how many were judged and valued, in how many units, and the spread of the units' pass counts and value sums
    about the scorer's rate and mean (:func:`agenteval.analysis._stats.clustered_standard_error`), with the passes,
    squared judged counts, discordant pairs and most judged in a unit a pass rate's interval needs
    (:class:`agenteval.analysis._stats.RateCounts`); and ``versions``,
    the scorer versions that gave those scores (an LLM judge's is its prompt and model), each with how many it gave,
    most first: more than one means the figure mixes scorers (a rescore of some trials with another judge)."""
    return f"""
WITH versions AS (
  SELECT scorer, list(struct_pack(version := scorer_version, scored) ORDER BY scored DESC, scorer_version) AS versions
  FROM (SELECT scorer, scorer_version, count(*) AS scored FROM {scores} GROUP BY ALL) GROUP BY scorer),
per_unit AS (
  SELECT scorer, {unit} AS unit, bool_or(coalesce(continuous, false)) AS continuous, count(*) AS scored,
         count(passed) AS judged, count(*) FILTER (WHERE passed) AS passes, count(value) AS valued,
         fsum(value) AS value_sum, count(*) FILTER (WHERE error IS NOT NULL) AS errors
  FROM {scores} GROUP BY ALL),
totals AS (  -- from the scores themselves: a sum of the units' sums loses the last bits of an exact mean
  SELECT scorer, avg(passed::INT) AS rate, fsum(value) / count(value) AS mean_value FROM {scores} GROUP BY scorer),
about AS (SELECT * FROM per_unit JOIN totals USING (scorer) JOIN versions USING (scorer))
SELECT scorer, any_value(versions) AS versions, bool_or(continuous) AS continuous, sum(scored)::BIGINT AS scored,
       any_value(mean_value) AS mean,
       any_value(rate) AS pass_rate, sum(errors)::BIGINT AS errors,
       sum(judged)::BIGINT AS judged, count(*) FILTER (WHERE judged > 0) AS judged_units,
       coalesce(fsum((passes - judged * rate) ** 2), 0) AS pass_spread, sum(passes)::BIGINT AS passed,
       sum(judged * judged)::BIGINT AS judged_squares, sum(passes * (judged - passes))::BIGINT AS discordant,
       max(judged)::BIGINT AS most_judged,
       sum(valued)::BIGINT AS valued, count(*) FILTER (WHERE valued > 0) AS valued_units,
       coalesce(fsum((value_sum - valued * mean_value) ** 2), 0) AS value_spread
FROM about GROUP BY scorer ORDER BY scorer
"""


SCORER_FIGURES = scorer_figures_sql("current_scores", "case_id")

SPAN_LATENCY = f"""
SELECT coalesce(operation, 'other') AS operation, count(*) AS spans,
       quantile_cont(duration_ms, 0.5) AS p50_ms, quantile_cont(duration_ms, 0.95) AS p95_ms
FROM spans WHERE experiment_id = {{experiment}} AND scope_name IS DISTINCT FROM '{A.RUNNER_SCOPE}'
GROUP BY ALL ORDER BY spans DESC, operation
"""
"""Latency of the agent's own spans by operation (the runner's root spans are the trials, reported apart)."""

TOKENS_BY_ROLE = f"""
SELECT coalesce(role, 'agent') AS role, count(*) AS model_calls,
       sum(input_tokens)::BIGINT AS input_tokens, sum(output_tokens)::BIGINT AS output_tokens,
       coalesce(response_model, request_model) AS model
FROM spans WHERE experiment_id = {{experiment}} AND {views.COUNTED_MODEL_CALL} GROUP BY ALL ORDER BY role, model
"""

FIGURE_TABLES = {"scorer_figures": SCORER_FIGURES, "span_latency": SPAN_LATENCY, "tokens_by_role": TOKENS_BY_ROLE}
"""Besides ``judged``, the tables a judged connection holds, and the SQL that computes each."""

ORDER = {"scorer_figures": "scorer", "span_latency": "spans DESC, operation", "tokens_by_role": "role, model"}


@contextlib.contextmanager
def judged_connection(
    store: Store, experiment_id: str, *, save: bool = False, con: duckdb.DuckDBPyConnection | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection over the store holding the experiment's judged trials as ``judged``, and its
    ``scorer_figures``, ``span_latency`` and ``tokens_by_role``: read from the snapshot of the store as it
    is now, or computed. ``save``: a writer's call, which saves what it computed as the current snapshot.
    ``con``: a connection of the store's already open (opening one costs tens of ms), which the caller closes."""
    opened = con or store.connect()
    try:
        with contextlib.ExitStack() as computed:
            open_figures(store, experiment_id, opened, computed, save=save)
            yield opened
            _detach(opened)
    finally:
        if con is None:
            opened.close()


def open_figures(
    store: Store,
    experiment_id: str,
    con: duckdb.DuckDBPyConnection,
    computed: contextlib.ExitStack,
    *,
    save: bool = False,
) -> bool:
    """Give ``con`` the experiment's figure tables; True when they were read from a snapshot. Figures computed
    and not saved go to a temporary folder outside the store, which ``computed`` removes when it closes."""
    current = fingerprint(store, experiment_id)
    folder = snapshot_folder(store, experiment_id, current)
    if folder.is_dir():
        try:
            _attach(con, folder)
            return True
        except duckdb.Error as exc:  # replaced and removed since it was chosen, or damaged: compute instead
            logger.debug("agenteval: snapshot %s not read: %s", folder, exc)
            _detach(con)
    if save and _save(con, store, experiment_id, current):
        return False
    scratch = Path(computed.enter_context(tempfile.TemporaryDirectory(prefix="agenteval-figures-")))

    def compute() -> Path:
        # A fresh folder each try: a compaction of another process (a shard) swapping files under the query
        # makes it fail part way, and the retry reads the files as they are now.
        attempt = Path(tempfile.mkdtemp(dir=scratch))
        for kind in ("VIEW", "TABLE"):  # what a try that failed part way left
            with contextlib.suppress(duckdb.CatalogException):
                con.execute(f"DROP {kind} IF EXISTS current_scores")
        _compute_into(con, experiment_id, attempt)
        return attempt

    _attach(con, store.retry_on(con, compute))
    return False


def save_figures(store: Store, experiment_id: str) -> bool:
    """Save the experiment's snapshot for the store as it is now, unless it exists (a writer's call); whether it is
    there now. One that cannot be saved (a full disk) is not computed elsewhere instead: nobody would read it, and a
    full disk fails that too, which ended `agenteval compact` and `rescore` with DuckDB's error after their work."""
    current = fingerprint(store, experiment_id)
    if snapshot_folder(store, experiment_id, current).is_dir():
        return True
    with contextlib.closing(store.connect()) as con:
        return _save(con, store, experiment_id, current)


def refresh_figures(store: Store, *, missing: bool = False) -> list[str]:
    """Save a current snapshot for every experiment that has one out of date (after a compaction, say), and with
    ``missing`` for every experiment that has none (a store written before snapshots); the ids of those saved."""
    refreshed = []
    for experiment_id in _experiment_ids(store, missing):
        current = snapshot_folder(store, experiment_id, fingerprint(store, experiment_id)).is_dir()
        if not current and save_figures(store, experiment_id):
            refreshed.append(experiment_id)
    return refreshed


def _experiment_ids(store: Store, every: bool) -> list[str]:
    """Experiments with saved figures, or with ``every`` all those with trials."""
    if every and isinstance(store.root, RemoteRoot):
        folders = {f.relative.split("/")[1] for f in store.root.list_files("trials") if f.relative.count("/") == 2}
        return sorted(name.partition("=")[2] for name in folders if name.startswith(f"{PARTITION_COLUMN}="))
    folder = store.root / "trials" if every else snapshots_home(store)
    assert not isinstance(folder, RemoteRoot)
    return sorted(p.name.partition("=")[2] for p in folder.glob(f"{PARTITION_COLUMN}=*") if p.is_dir())


def snapshots_home(store: Store) -> Path:
    """The folder of the store's snapshots: in the store, or on this machine for a store on object storage."""
    if isinstance(store.root, RemoteRoot):
        return local_home(store.root, "snapshots", create=False)
    return store.root / SNAPSHOTS


def fingerprint(store: Store, experiment_id: str) -> str:
    """A hash of what the experiment's figures are read from (see the module's documentation)."""
    header = f"snapshot v{SNAPSHOT_VERSION}"
    root = store.root
    if not isinstance(root, RemoteRoot):
        return files_fingerprint(root, header, SOURCES, experiment_id)
    own = partition_path(PARTITION_COLUMN, experiment_id)
    return fingerprint_of(header, ((table, _remote_source_files(root, table, own)) for table in SOURCES))


def snapshot_folders(store: Store) -> list[Path]:
    """Every saved snapshot of every experiment (complete ones: saves in progress are not listed)."""
    return sorted(
        folder
        for folder in snapshots_home(store).glob(f"{PARTITION_COLUMN}=*/*")
        if folder.is_dir() and not folder.name.endswith(STAGED_SUFFIX)
    )


def snapshot_folder(store: Store, experiment_id: str, fingerprint: str) -> Path:
    """Where the snapshot with this fingerprint is (or would be) kept."""
    return snapshots_home(store) / partition_path(PARTITION_COLUMN, experiment_id) / fingerprint


def _remote_source_files(root: RemoteRoot, table: str, own_partition: str) -> list[tuple[str, int, int]]:
    """:func:`._fingerprints.source_files` for a store on object storage: the live files (see ``._live``) of the
    experiment's partition (the schema files beside the partitions change only with a new version, which the SQL
    follows)."""
    from ._live import partition_files

    partition = partition_files(root, f"{table}/{own_partition}")
    return [(f.relative.partition("/")[2], f.size, f.modified_ns) for f in partition.live]


def _attach(con: duckdb.DuckDBPyConnection, folder: Path) -> None:
    """Views over a folder of figure files, named as the tables they hold."""
    for table in ("judged", *FIGURE_TABLES):
        order = f" ORDER BY {ORDER[table]}" if table in ORDER else ""
        files = _parquet(folder / f"{table}*{SNAPSHOT_SUFFIX}")
        con.execute(f"CREATE TEMP VIEW {table} AS SELECT * FROM {files}{order}")


def _parquet(files: Path) -> str:
    """SQL reading figure files (a path or a glob), not as a partition (a snapshot's folder is ``experiment_id=``)."""
    # The folder as a pattern that matches only itself (the store's name may hold `[`: see duckdb_literal).
    pattern = duckdb_literal(files.parent) + os.sep + files.name
    return f"read_parquet({sql_string(pattern)}, hive_partitioning = false)"


def _detach(con: duckdb.DuckDBPyConnection) -> None:
    for table in ("judged", *FIGURE_TABLES):
        con.execute(f"DROP VIEW IF EXISTS {table}")


def _compute_into(con: duckdb.DuckDBPyConnection, experiment_id: str, folder: Path) -> None:
    """Write the experiment's figure files into ``folder``, :data:`BUCKET_TRIALS` trials at a time."""
    scores = folder / "scores"
    scores.mkdir()
    for bucket, some in enumerate(_trial_ranges(con, experiment_id)):
        # Every current score of the bucket, a lost try's too: judging joins them to current trials only.
        current = f"SELECT {SCORE_FIGURES} FROM ({views.current_scores(experiment_id, some)})"
        con.execute(f"CREATE OR REPLACE TEMP TABLE current_scores AS {current}")
        judged = folder / f"judged-{bucket}{SNAPSHOT_SUFFIX}"
        some_trials = f"({views.current_trials(experiment_id, some)})"
        trials = views.judged_trials(some_trials, "current_scores", "trial_id", unscored=True)
        _copy(con, f"SELECT {TRIAL_FIGURES}, unscored FROM ({trials})", judged)
        # The scores that count are those of the trials just judged: the bucket's current trials, found once.
        counted = views.scores_of_trials("current_scores", _parquet(judged), "trial_id")
        # The trial id has done its work: left out, these scratch files take about a third less time to write.
        _copy(con, f"SELECT * EXCLUDE (trial_id) FROM ({counted})", scores / f"scores-{bucket}{SNAPSHOT_SUFFIX}")
        con.execute("DROP TABLE current_scores")
    con.execute(f"CREATE TEMP VIEW current_scores AS SELECT * FROM {_parquet(scores / f'*{SNAPSHOT_SUFFIX}')}")
    for table, sql in FIGURE_TABLES.items():
        _copy(con, sql.format(experiment=sql_string(experiment_id)), folder / f"{table}{SNAPSHOT_SUFFIX}")
    con.execute("DROP VIEW current_scores")
    shutil.rmtree(scores)  # what the figures were computed from; reports need only the figures


def _trial_ranges(con: duckdb.DuckDBPyConnection, experiment_id: str) -> list[str]:
    """Conditions on ``trial_id`` that split the experiment into ranges of about :data:`BUCKET_TRIALS` trials,
    the first and last open-ended, so that every trial id is in exactly one. By
    range, not by hash: trial ids grow with time and files keep that order, so each range reads its own row
    groups rather than every score."""
    where = views.only(experiment_id)
    (trials,) = con.execute(f"SELECT count(*) FROM trial_history WHERE {where}").fetchone() or (0,)
    buckets = max(1, math.ceil(trials / BUCKET_TRIALS))
    if buckets == 1:
        return ["true"]
    bounds = [
        sql_string(high)
        for (high,) in con.execute(
            f"""SELECT max(trial_id) FROM (SELECT trial_id, ntile({buckets}) OVER (ORDER BY trial_id) AS bucket
                FROM trial_history WHERE {where}) GROUP BY bucket ORDER BY bucket"""
        ).fetchall()
    ]
    ranges = [f"trial_id <= {bounds[0]}"]
    ranges += [f"trial_id > {low} AND trial_id <= {high}" for low, high in zip(bounds, bounds[1:-1], strict=False)]
    return [*ranges, f"trial_id > {bounds[-2]}"]


def _copy(con: duckdb.DuckDBPyConnection, relation: str, path: Path) -> None:
    con.execute(f"COPY ({relation}) TO {sql_string(str(path))} (FORMAT parquet, COMPRESSION zstd)")


def _save(con: duckdb.DuckDBPyConnection, store: Store, experiment_id: str, current: str) -> bool:
    """Compute the figures into the store as the snapshot ``current``; whether it was saved. A store that
    cannot be written keeps none, and none is kept when the files changed while it was computed."""
    target = snapshot_folder(store, experiment_id, current)
    staged = target.with_name(f"{current}-{uuid.uuid4().hex[:8]}{STAGED_SUFFIX}")
    try:
        staged.mkdir(parents=True)
        _compute_into(con, experiment_id, staged)
        if fingerprint(store, experiment_id) != current:
            raise OSError("the experiment's files changed while its figures were computed")
        os.rename(staged, target)  # atomic: a snapshot folder is complete or absent
    except (OSError, duckdb.Error) as exc:
        # Another process saved the same snapshot first, or the store is read-only or full: reports still work.
        logger.debug("agenteval: snapshot of %s not saved: %s", experiment_id, exc)
        shutil.rmtree(staged, ignore_errors=True)
        return False
    _remove_replaced(target)
    _attach(con, target)
    return True


def _remove_replaced(kept: Path) -> None:
    """Remove the experiment's older snapshots, and leftovers of killed saves, once nobody can be reading them.

    A snapshot is chosen, however old, for as long as the files are the same; a newer one, saved from the files
    as they were when it was saved, says they had changed by then. So a snapshot goes once one saved after it is
    :data:`STALE_SNAPSHOT_SECONDS` old, not once it is that old itself: an hour-old snapshot replaced just now
    may have been chosen by a report still reading it."""
    cutoff = time.time() - STALE_SNAPSHOT_SECONDS
    saved: dict[Path, float] = {}
    for other in kept.parent.iterdir():
        with contextlib.suppress(OSError):
            saved[other] = other.stat().st_mtime
    settled = [when for folder, when in saved.items() if when < cutoff and not folder.name.endswith(STAGED_SUFFIX)]
    for other, when in saved.items():
        replaced = other.name.endswith(STAGED_SUFFIX) or any(when < later for later in settled)
        if other != kept and replaced and when < cutoff:
            with contextlib.suppress(OSError):
                shutil.rmtree(other)
