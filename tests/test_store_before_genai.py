"""A store written before the GenAI message shapes (tests/data/store-before-genai, by commit 42cfd87: provider
message shapes, no finish_reason, retrieval ids under the older name only, no wraps_model_call column) still
reports what that code reported, and rescoring it gives the scores it gave. The pass-rate intervals in
expected.json are the ones computed since they became Wilson's at the effective number of trials (they had read
0.0% to 0.0% for categories where no case passed), that number taken times (z / t)² since Student's t reads errors
estimated from few cases (a category of 5 cases: 49.0% to 94.3% became 37.5% to 96.4%), and since that number comes
from how often a case's attempts disagree, with each end the furthest any result with more passes (or failures)
gives, and the factor taken for trials without spread too (a category of 8 cases that all failed: 0.0% to 32.4%
became 0.0% to 41.1%); every other figure is that code's."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from agenteval.analysis import build_report
from agenteval.scorers import rescore
from agenteval.store import Store

OLD = Path(__file__).parent / "data" / "store-before-genai"
EXPECTED = json.loads((OLD / "expected.json").read_text())


@pytest.fixture
def store(tmp_path):
    shutil.copytree(OLD, tmp_path / "store")
    return Store(tmp_path / "store")


def as_json(value):
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def as_reported_then(now, then):
    """``now`` cut to the fields ``then`` had (a report may gain fields, never change the old ones), with rows
    that tie in their sort order in the order ``then`` has them (that code left ties in any order; sort orders
    now break them), and sums of money equal within 1e-12 (they are summed with compensation now)."""
    if isinstance(then, dict) and isinstance(now, dict):
        return {key: as_reported_then(now.get(key), value) for key, value in then.items()}
    if isinstance(then, list) and isinstance(now, list) and len(now) == len(then):
        if all(isinstance(row, dict) for row in then):
            by_text = {json.dumps(as_reported_then(n, t), sort_keys=True): n for n, t in zip(now, then, strict=True)}
            now = [by_text.get(json.dumps(t, sort_keys=True), n) for n, t in zip(now, then, strict=True)]
        return [as_reported_then(n, t) for n, t in zip(now, then, strict=True)]
    if isinstance(then, float) and isinstance(now, float) and math.isclose(now, then, rel_tol=1e-12):
        return then
    return now


@pytest.mark.parametrize("experiment_id", sorted(EXPECTED))
def test_an_older_store_reports_and_rescores_as_it_did(store, experiment_id):
    expected = EXPECTED[experiment_id]
    report = as_json(build_report(store, experiment_id).to_dict())
    assert as_reported_then(report, expected["report"]) == expected["report"]
    result = rescore(store, experiment_id)
    rows = store.rows(
        "SELECT trial_id, scorer, value, passed, reason FROM score_history WHERE pass_id = ? ORDER BY 1, 2",
        [result.pass_id],
    )
    assert as_json(rows) == expected["scores"]
