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
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import duckdb

from agenteval_exporters.files import STAGED_SUFFIX, partition_path
from agenteval_exporters.schema import PARTITION_COLUMN
from agenteval_instrumentation import attributes as A

from . import _views as views
from ._store import Store, sql_string

logger = logging.getLogger(__name__)

SNAPSHOTS = ".snapshots"
"""The store's folder of snapshots; hidden, so no glob over the tables reads it."""

SNAPSHOT_SUFFIX = ".figures"
"""A snapshot's files are Parquet, named so that no glob over the store's ``*.parquet`` reaches them."""

SNAPSHOT_VERSION = 1
"""Part of every fingerprint: bump it when what a snapshot holds, or the SQL that fills it, changes."""

SOURCES = ("trials", "scores", "spans")
"""The tables a snapshot's figures are read from (cases and experiments are small and read live)."""

UNPARTITIONED_SPANS = "date="
"""Spans outside any experiment are partitioned by day; none of them belongs to an experiment."""

STALE_SNAPSHOT_SECONDS = 60.0
"""A replaced snapshot is removed once older than this: a reader that chose it just before has finished by then."""

SCORE_FIGURES = "experiment_id, trial_id, scorer, value, passed, continuous, error"
USAGE_FIGURES = ", ".join([*views.USAGE, *(name + views.ALL_TRIES for name in views.USAGE)])
TRIAL_FIGURES = (
    "experiment_id, trial_id, case_id, attempt, outcome, passed, failure_type, infrastructure, error_message, "
    f"duration_ms, {USAGE_FIGURES}"
)
"""The columns of ``judged``: what figures use (replies and reasons are large, and reading them costs most)."""

SCORER_FIGURES = """
SELECT scorer, bool_or(coalesce(continuous, false)) AS continuous, count(*) AS scored,
       avg(value) AS mean, avg(passed::INT) AS pass_rate, count(*) FILTER (WHERE error IS NOT NULL) AS errors
FROM current_scores GROUP BY scorer ORDER BY scorer
"""

SPAN_LATENCY = f"""
SELECT coalesce(operation, 'other') AS operation, count(*) AS spans,
       quantile_cont(duration_ms, 0.5) AS p50_ms, quantile_cont(duration_ms, 0.95) AS p95_ms
FROM spans WHERE experiment_id = $experiment AND scope_name IS DISTINCT FROM '{A.RUNNER_SCOPE}'
GROUP BY ALL ORDER BY spans DESC, operation
"""
"""Latency of the agent's own spans by operation (the runner's root spans are the trials, reported apart)."""

TOKENS_BY_ROLE = """
SELECT coalesce(role, 'agent') AS role, count(*) AS model_calls,
       sum(input_tokens)::BIGINT AS input_tokens, sum(output_tokens)::BIGINT AS output_tokens,
       coalesce(response_model, request_model) AS model
FROM spans WHERE experiment_id = $experiment AND operation = 'chat' GROUP BY ALL ORDER BY role, model
"""

FIGURE_TABLES = {"scorer_figures": SCORER_FIGURES, "span_latency": SPAN_LATENCY, "tokens_by_role": TOKENS_BY_ROLE}
"""Besides ``judged``, the tables a judged connection holds, and the SQL that computes each."""

ORDER = {"scorer_figures": "scorer", "span_latency": "spans DESC, operation", "tokens_by_role": "role, model"}


def judged_trials(experiment_id: str | None = None, scores: str | None = None) -> str:
    """Current trials judged by their current scores (of one experiment, or all: the ``trials`` view).
    ``scores``: a relation already holding the current scores, if one was computed."""
    trials = f"({views.current_trials(experiment_id)})"
    return views.judged_trials(trials, scores or f"({views.current_scores(experiment_id)})")


@contextlib.contextmanager
def judged_connection(store: Store, experiment_id: str, *, save: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection over the store holding the experiment's judged trials as ``judged``, and its
    ``scorer_figures``, ``span_latency`` and ``tokens_by_role``: read from the snapshot of the store as it
    is now, or computed. ``save``: a writer's call, which saves what it computed as the current snapshot."""
    con = store.connect()
    try:
        open_figures(store, experiment_id, con, save=save)
        yield con
    finally:
        con.close()


def open_figures(store: Store, experiment_id: str, con: duckdb.DuckDBPyConnection, *, save: bool = False) -> bool:
    """Give ``con`` the experiment's figure tables; True when they were read from a snapshot."""
    current = fingerprint(store, experiment_id)
    folder = snapshot_folder(store, experiment_id, current)
    if folder.is_dir():
        try:
            _read_snapshot(con, folder)
            return True
        except duckdb.Error as exc:  # replaced and removed since it was chosen, or damaged: compute instead
            logger.debug("agenteval: snapshot %s not read: %s", folder, exc)
            _drop_figures(con)
    _compute(con, experiment_id)
    if save:
        _save(con, store, experiment_id, current)
    return False


def save_figures(store: Store, experiment_id: str) -> None:
    """Save the experiment's snapshot for the store as it is now, unless it exists (a writer's call)."""
    with judged_connection(store, experiment_id, save=True):
        pass


def refresh_figures(store: Store) -> list[str]:
    """Save a current snapshot for every experiment that has one out of date (after a compaction, say);
    the ids of those refreshed. Experiments never snapshotted are left alone."""
    refreshed = []
    for folder in sorted((store.root / SNAPSHOTS).glob(f"{PARTITION_COLUMN}=*")):
        experiment_id = folder.name.partition("=")[2]
        if not snapshot_folder(store, experiment_id, fingerprint(store, experiment_id)).is_dir():
            save_figures(store, experiment_id)
            refreshed.append(experiment_id)
    return refreshed


def fingerprint(store: Store, experiment_id: str) -> str:
    """A hash of what the experiment's figures are read from (see the module's documentation)."""
    digest = hashlib.sha256(f"snapshot v{SNAPSHOT_VERSION}\n".encode())
    own = partition_path(PARTITION_COLUMN, experiment_id)
    for table in SOURCES:
        for path, size, modified in sorted(_source_files(store.root / table, own)):
            digest.update(f"{table}/{path}\0{size}\0{modified}\n".encode())
    return digest.hexdigest()[:24]


def snapshot_folders(store: Store) -> list[Path]:
    """Every saved snapshot of every experiment (complete ones: saves in progress are not listed)."""
    return sorted(
        folder
        for folder in (store.root / SNAPSHOTS).glob(f"{PARTITION_COLUMN}=*/*")
        if folder.is_dir() and not folder.name.endswith(STAGED_SUFFIX)
    )


def snapshot_folder(store: Store, experiment_id: str, fingerprint: str) -> Path:
    """Where the snapshot with this fingerprint is (or would be) kept."""
    return store.root / SNAPSHOTS / partition_path(PARTITION_COLUMN, experiment_id) / fingerprint


def _source_files(folder: Path, own_partition: str) -> Iterator[tuple[str, int, int]]:
    """Every Parquet file under ``folder`` that can hold the experiment's rows: (relative path, size, mtime)."""
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        if entry.is_dir():
            elsewhere = entry.name.startswith(f"{PARTITION_COLUMN}=") and entry.name != own_partition
            if elsewhere or entry.name.startswith(UNPARTITIONED_SPANS):
                continue
            for path, size, modified in _source_files(Path(entry.path), own_partition):
                yield f"{entry.name}/{path}", size, modified
        elif entry.name.endswith(".parquet"):
            with contextlib.suppress(FileNotFoundError):  # compacted away while listed: the listing changed anyway
                stat = entry.stat()
                yield entry.name, stat.st_size, stat.st_mtime_ns


def _read_snapshot(con: duckdb.DuckDBPyConnection, folder: Path) -> None:
    for table in ("judged", *FIGURE_TABLES):
        source = sql_string(str(folder / f"{table}{SNAPSHOT_SUFFIX}"))
        order = f" ORDER BY {ORDER[table]}" if table in ORDER else ""
        con.execute(
            f"CREATE TEMP VIEW {table} AS SELECT * FROM read_parquet({source}, hive_partitioning = false){order}"
        )


def _drop_figures(con: duckdb.DuckDBPyConnection) -> None:
    for table in ("judged", *FIGURE_TABLES):
        con.execute(f"DROP VIEW IF EXISTS {table}")


def _compute(con: duckdb.DuckDBPyConnection, experiment_id: str) -> None:
    current_scores = views.current_scores(experiment_id)
    con.execute(f"CREATE TEMP TABLE current_scores AS SELECT {SCORE_FIGURES} FROM ({current_scores})")
    judged = judged_trials(experiment_id, "current_scores")
    con.execute(f"CREATE TEMP TABLE judged AS SELECT {TRIAL_FIGURES} FROM ({judged})")
    for table, sql in FIGURE_TABLES.items():
        con.execute(f"CREATE TEMP TABLE {table} AS {sql}", {"experiment": experiment_id} if "$" in sql else None)
    con.execute("DROP TABLE current_scores")


def _save(con: duckdb.DuckDBPyConnection, store: Store, experiment_id: str, current: str) -> None:
    """Write the figure tables as the snapshot ``current``; a store that cannot be written keeps none."""
    target = snapshot_folder(store, experiment_id, current)
    staged = target.with_name(f"{current}-{uuid.uuid4().hex[:8]}{STAGED_SUFFIX}")
    try:
        staged.mkdir(parents=True)
        for table in ("judged", *FIGURE_TABLES):
            written = staged / f"{table}{SNAPSHOT_SUFFIX}"
            con.execute(f"COPY {table} TO {sql_string(str(written))} (FORMAT parquet, COMPRESSION zstd)")
        os.rename(staged, target)  # atomic: a snapshot folder is complete or absent
    except (OSError, duckdb.Error) as exc:
        # Another process saved the same snapshot first, or the store is read-only or full: reports still work.
        logger.debug("agenteval: snapshot of %s not saved: %s", experiment_id, exc)
        shutil.rmtree(staged, ignore_errors=True)
        return
    _remove_replaced(target)


def _remove_replaced(kept: Path) -> None:
    """Remove the experiment's older snapshots, and leftovers of killed saves, once nobody can be reading them."""
    cutoff = time.time() - STALE_SNAPSHOT_SECONDS
    for other in kept.parent.iterdir():
        with contextlib.suppress(OSError):
            if other != kept and other.stat().st_mtime < cutoff:
                shutil.rmtree(other)
