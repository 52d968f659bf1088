"""Human review: verdicts on trials (the store's ``reviews`` table), and accepting or rejecting generated cases.

A verdict appends a row to ``reviews``; the ``reviews`` view keeps each trial's newest. The verdicts export as the
labels file ``agenteval judge-check`` reads (one JSON object a line: ``trial_id`` and ``human``). Cases of a file
written by ``agenteval generate`` are accepted or rejected into a decisions file beside it (``FILE.review.jsonl``,
appended, newest decision wins); the accepted cases download as a dataset file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from ..analysis._experiments import fetch
from ..dataset._cases import parse_case
from ..errors import AgentevalError, UsageError
from ..store import Store

VERDICTS = ("pass", "fail")
DECISIONS = ("accept", "reject")
NOTE_CHARS = 2000
"""A note longer than this is cut: it is a remark, not a document."""
REVIEWS_SHOWN = 500
"""The newest verdicts the review page lists; the labels file and the ``reviews`` view give every one."""


class ReviewError(AgentevalError, ValueError):
    """A review that cannot be recorded: an unknown trial, or a verdict that is not pass or fail."""


def record_verdict(
    store: Store, experiment_id: str, trial_id: str, verdict: str, note: str = "", reviewer: str = ""
) -> dict[str, Any]:
    """Append a person's verdict on a stored trial to the ``reviews`` table; returns the row written."""
    if verdict not in VERDICTS:
        raise ReviewError(f"verdict must be pass or fail, not {verdict!r}")
    with contextlib.closing(store.connect(read_only=True)) as con:
        found = fetch(
            con,
            "SELECT case_id FROM trial_history WHERE experiment_id = ? AND trial_id = ? LIMIT 1",
            [experiment_id, trial_id],
        )
    if not found:
        raise ReviewError(f"no trial {trial_id!r} in experiment {experiment_id!r} of {store.root}")
    row = {
        "experiment_id": experiment_id,
        "trial_id": trial_id,
        "case_id": found[0]["case_id"],
        "verdict": verdict,
        "note": note.strip()[:NOTE_CHARS] or None,
        "reviewer": reviewer.strip()[:200] or None,
        "reviewed_at": time.time_ns(),
    }
    store.write("reviews", [row])
    return row


LATEST_REVIEWS = """
SELECT r.*, t.outcome AS scorers_outcome, t.failure_type
FROM (SELECT * FROM reviews WHERE (? IS NULL OR experiment_id = ?) ORDER BY reviewed_at DESC LIMIT ?) r
LEFT JOIN trials t USING (experiment_id, trial_id)
ORDER BY r.reviewed_at DESC
"""
"""Each reviewed trial's newest verdict beside the outcome the scorers give it now, the newest ``LIMIT`` of them."""

REVIEW_COUNT = "SELECT count(*) FROM reviews WHERE (? IS NULL OR experiment_id = ?)"


def reviews(store: Store, experiment_id: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """The current verdicts (newest first, the first ``limit`` of them, or all), each with the trial's outcome by
    its current scores."""
    with contextlib.closing(store.connect(read_only=True)) as con:
        return fetch(con, LATEST_REVIEWS, [experiment_id, experiment_id, limit])


def newest_reviews(store: Store, experiment_id: str | None = None) -> tuple[list[dict[str, Any]], int]:
    """What the review page lists: the newest :data:`REVIEWS_SHOWN` current verdicts, and how many there are."""
    with contextlib.closing(store.connect(read_only=True)) as con:
        shown = fetch(con, LATEST_REVIEWS, [experiment_id, experiment_id, REVIEWS_SHOWN])
        total = con.execute(REVIEW_COUNT, [experiment_id, experiment_id]).fetchall()[0][0]
    return shown, int(total)


def labels_jsonl(store: Store, experiment_id: str | None = None) -> str:
    """The current verdicts as the labels file ``agenteval judge-check`` reads."""
    lines = []
    for row in reversed(reviews(store, experiment_id)):
        label = {"trial_id": row["trial_id"], "human": row["verdict"]}
        if row["note"]:
            label["note"] = row["note"]
        lines.append(json.dumps(label, ensure_ascii=False))
    return "".join(line + "\n" for line in lines)


# --- cases of a generated dataset file -------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CaseFile:
    """A dataset file under review, and the decisions file beside it."""

    path: Path

    @property
    def decisions_path(self) -> Path:
        return self.path.with_name(self.path.name + ".review.jsonl")

    def cases(self) -> list[dict[str, Any]]:
        """The file's cases as written (each checked as a case; a bad line is an error naming it), each with the id
        the dataset gives it: a case written without one is its line number, as a run names it."""
        out = []
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise UsageError(f"--review-cases {self.path}: {exc.strerror or exc}") from exc
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                case = parse_case(record, number)
            except Exception as exc:  # the case parser's own error type is private: any is a bad line
                raise UsageError(f"{self.path}:{number}: not a case ({exc})") from None
            out.append({"id": case.id, **record})
        return out

    def decisions(self) -> dict[str, dict[str, Any]]:
        """Each case id's newest decision."""
        found: dict[str, dict[str, Any]] = {}
        if self.decisions_path.exists():
            for line in self.decisions_path.read_text(encoding="utf-8").splitlines():
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    record = json.loads(line)
                    found[str(record["case_id"])] = record
        return found

    def decide(self, case_id: str, decision: str, note: str = "", reviewer: str = "") -> None:
        """Append a decision on one of the file's cases."""
        if decision not in DECISIONS:
            raise ReviewError(f"decision must be accept or reject, not {decision!r}")
        if case_id not in {str(c.get("id")) for c in self.cases()}:
            raise ReviewError(f"no case {case_id!r} in {self.path}")
        record = {
            "case_id": case_id,
            "decision": decision,
            "note": note.strip()[:NOTE_CHARS] or None,
            "reviewer": reviewer.strip()[:200] or None,
            "decided_at": time.time(),
        }
        with open(self.decisions_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")

    def accepted_jsonl(self) -> str:
        """The accepted cases, as lines of a dataset file."""
        decided = self.decisions()
        kept = [c for c in self.cases() if decided.get(str(c.get("id")), {}).get("decision") == "accept"]
        return "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in kept)
