"""A report saved by the writers that save figures, and shown again without DuckDB while the store is unchanged.

A small report is mostly start-up: importing DuckDB, opening it and binding the store's views cost three times
what its queries do. So the end of a run, ``rescore`` and ``compact`` (the writers that save an experiment's
figures, see :mod:`agenteval.store._snapshots`) also save the experiment's :class:`Report` as JSON in
``<store>/.snapshots/reports/``, with a fingerprint of every file it was computed from: the whole
``experiments`` table (which experiment is the newest, and each shard's status, come from it) and the
experiment's files in ``cases``, ``trials``, ``scores``, ``spans`` and ``reviews``. ``agenteval report`` shows
the saved report only when the fingerprint of those files as they are now is the same, which a directory
listing tells; anything else (another write, a compaction, a newer agenteval, a store on object storage, an id
prefix) computes the report as before. A saved report can be out of date on disk, never on the screen.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from agenteval_exporters.partitions import store_path
from agenteval_instrumentation.masking import masked_logger

from .. import __version__
from .._output_files import replace_whole
from ..store._fingerprints import SNAPSHOTS, files_fingerprint
from ._report_data import Report, report_from_dict
from ._statuses import RUNNING

if TYPE_CHECKING:
    import duckdb

    from ..store import Store

logger = masked_logger(__name__)

REPORTS = "reports"
"""The folder of saved reports, in the store's snapshots folder."""

REPORT_VERSION = 13
"""Part of every fingerprint, with agenteval's version: bump it when what a report holds changes (2: pass-rate
intervals are Wilson's at the effective number of trials; 3: an answer a scorer could not judge is a
``scorer_error`` failure, infrastructure, not a wrong answer; 4: a pass rate over one case has an interval, Wilson's
at one; 5: the worst cases count their wrong answers and their failures by type; 6: the scorer table counts only
the scores of current trials; 7: each scorer says which versions gave its current scores, with a warning when
more than one did; 8: a measured spread's effective number of trials is taken times (z / t)², t with cases - 1
degrees of freedom; 9: the outcomes count the trials no pass/fail scorer judged, with a warning when there are
some; 10: a continuous scorer's mean has the t interval of its observed spread, not a pass rate's Wilson; 11: a
pass rate's effective number of trials comes from its cases' agreement, and each end is the furthest any result
with more passes, or more failures, gives; 12: pass@1 over cases of equal attempts has the pass rate's interval,
and pass@k and pass^k the lowest (highest) any result with values raised (lowered) gives; 13: a continuous scorer's
mean has the t interval of its spread on the logit scale, never above Wilson's for every case at 1)."""

NEWEST = "newest.json"
"""Names the experiment whose saved report ``agenteval report`` without an id shows."""

EXPERIMENT_TABLES = ("cases", "trials", "scores", "spans", "reviews")
"""The tables whose files in the experiment's partition the report is computed from (and ``experiments``)."""

_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def save_report(store: Store, experiment_id: str, con: duckdb.DuckDBPyConnection | None = None) -> bool:
    """Save the experiment's report for the store as it is now (a writer's call, after its figures are saved);
    whether it was saved. A store on object storage, or one that cannot be written, keeps none. ``con``: a
    connection of the store's already open (opening one costs tens of ms), which the caller closes."""
    root = store.root
    if not isinstance(root, Path) or not _SAFE_ID.fullmatch(experiment_id):
        return False
    from . import _experiments as ex
    from ._report import build_report

    before = _fingerprint(root, experiment_id)
    try:
        with contextlib.ExitStack() as opened:
            if con is None:
                con = opened.enter_context(contextlib.closing(store.connect(traces=False)))
            report = build_report(store, experiment_id, con=con)
            newest = ex.find(store, con=con)
    except Exception as exc:  # no experiment record, an unreadable file, ...: the writer's own work stands
        logger.debug("agenteval: report of %s not saved: %s", experiment_id, exc)
        return False
    if _fingerprint(root, experiment_id) != before:  # written to while computed: keep nothing
        return False
    is_newest = newest is not None and newest.experiment_id == experiment_id
    saved = {"fingerprint": before, "newest": is_newest, "report": report.to_dict()}
    try:
        _write_atomically(_report_path(root, experiment_id), json.dumps(saved))
        if is_newest:
            _write_atomically(root / SNAPSHOTS / REPORTS / NEWEST, json.dumps({"experiment_id": experiment_id}))
    except OSError as exc:  # read-only or full: reports are computed instead
        logger.debug("agenteval: report of %s not saved: %s", experiment_id, exc)
        return False
    return True


def save_reports(store: Store, experiment_ids: list[str]) -> None:
    """Save the reports of these experiments and of the newest one (after a compaction, which changes the
    ``experiments`` table every saved report's fingerprint covers)."""
    from . import _experiments as ex

    try:
        newest = ex.find(store)
    except Exception as exc:  # as in save_report: what the compaction did stands
        logger.debug("agenteval: the newest experiment's report not saved: %s", exc)
        newest = None
    for experiment_id in dict.fromkeys([*experiment_ids, *([newest.experiment_id] if newest else [])]):
        save_report(store, experiment_id)


def saved_report(store: str | os.PathLike[str] | None, experiment_id: str | None) -> Report | None:
    """The saved report of ``experiment_id`` (None: the newest experiment) when it is current, else None."""
    root = store_path(store)
    if not isinstance(root, Path):
        return None
    newest = experiment_id is None
    try:
        if newest:
            experiment_id = json.loads((root / SNAPSHOTS / REPORTS / NEWEST).read_text())["experiment_id"]
        if not isinstance(experiment_id, str) or not _SAFE_ID.fullmatch(experiment_id):
            return None
        saved = json.loads(_report_path(root, experiment_id).read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(saved, dict) or (newest and saved.get("newest") is not True):
        return None  # the pointer is older than a save of the experiment once another was newer
    if saved.get("fingerprint") != _fingerprint(root, experiment_id):
        return None
    try:
        report = report_from_dict(saved["report"])
    except (KeyError, TypeError, ValueError) as exc:  # damaged: compute it instead
        logger.debug("agenteval: saved report of %s not read: %s", experiment_id, exc)
        return None
    if report.experiment.status == RUNNING:  # saved while it ran: whether it still runs is not in any file
        return None
    return report


def _fingerprint(root: Path, experiment_id: str) -> str:
    header = f"report v{REPORT_VERSION} agenteval {__version__}"
    return files_fingerprint(root, header, EXPERIMENT_TABLES, experiment_id, whole_tables=("experiments",))


def _report_path(root: Path, experiment_id: str) -> Path:
    return root / SNAPSHOTS / REPORTS / f"{experiment_id}.json"


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_whole(path, text)
