"""Criteria for open-ended answers through a real run: a decorated agent over a JSONL file, scored at run
time from Arrow in memory, rescored from the Parquet store with the same scores, and with content capture
off scored at run time but left as they were by a rescore, which says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from agenteval import configure_capture, tool
from agenteval.run import evaluate
from agenteval.scorers import rescore
from agenteval.store import Store

POLICY = "Refunds are given within 30 days of purchase with a receipt."
ESSAY = "A receipt comes first. " + "Every refund is checked by hand. " * 150  # ~5,000 characters


@tool
def refund_policy() -> str:
    return POLICY


def shop_agent(question: str) -> str:
    q = question.lower()
    if "policy" in q or "window" in q:
        return refund_policy()
    if "need for a refund" in q:
        return "Bring a receipt."
    if "roman" in q:
        return "The Romans called it Lutetia."
    if "pi" in q:
        return "pi is about 3.14159000001"
    if "haiku" in q:
        return "Boxes travel back / receipts flutter in the wind / refunds, thirty days"
    if "depth" in q:
        return ESSAY
    if q == "hi":
        return "Hello! How can I help?"
    return "Why did the parcel blush? It saw the return label."


CASES = [
    {
        "id": "policy",
        "input": "What is the refund policy?",
        "expected_output": "",
        "must_contain": ["30 days", "Receipt"],
        "must_not_contain": ["guarantee"],
        "min_length": 20,
        "max_length": 200,
        "rubric": "States the 30-day window and that a receipt is needed.",
    },
    {"id": "needs", "input": "What do I need for a refund?", "expected_output": "", "must_contain": ["receipt", "box"]},
    {
        "id": "roman",
        "input": "What was Paris called in Roman times?",
        "expected_output": "",
        "acceptable_outputs": ["Lutetia", "Lutèce"],
    },
    {"id": "pi", "input": "What is pi to five places?", "expected_output": "3.14159", "acceptable_outputs": ["22/7"]},
    {"id": "haiku", "input": "Write a haiku about returns.", "expected_output": "", "max_length": 40},
    {
        "id": "essay",
        "input": "Explain the refund process in depth.",
        "expected_output": "",
        "min_length": 4500,
        "must_contain": ["receipt"],
    },
    {
        "id": "talk",
        "turns": ["Hi", "And the refund window?"],
        "expected_output": "",
        "must_contain": ["30 days"],
        "max_length": 100,
    },
    {"id": "joke", "input": "Tell me a joke.", "expected_output": ""},
]

JUDGED = {
    ("policy", "must_contain"): True,
    ("policy", "must_not_contain"): True,
    ("policy", "reply_length"): True,
    ("needs", "must_contain"): False,
    ("roman", "answer_match"): True,
    ("pi", "answer_match"): True,
    ("haiku", "reply_length"): False,
    ("essay", "reply_length"): True,  # the whole reply, though the copy in its span is cut at 4,000 characters
    ("essay", "must_contain"): True,
    ("talk", "must_contain"): True,
    ("talk", "reply_length"): True,  # the final reply's length, not the conversation's
}
OUTCOMES = {
    "policy": "passed",
    "needs": "wrong",
    "roman": "passed",
    "pi": "passed",
    "haiku": "wrong",
    "essay": "passed",
    "talk": "passed",
    "joke": "passed",  # no scorer applies: `agenteval audit` flags such cases
}
COMPARED = "trial_id, scorer, scorer_version, value, passed, reason, error, continuous"


@pytest.fixture
def dataset(tmp_path) -> str:
    path = tmp_path / "criteria.jsonl"
    path.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in CASES), encoding="utf-8")
    return str(path)


@pytest.fixture
def content_off():
    configure_capture(enabled=False)
    yield
    configure_capture(enabled=True)


def pass_ids(store: Store, experiment_id: str) -> list[str]:
    rows = store.rows(
        "SELECT pass_id FROM scores WHERE experiment_id = ? GROUP BY pass_id ORDER BY min(scored_at)", [experiment_id]
    )
    return [row["pass_id"] for row in rows]


def scores_of(store: Store, pass_id: str) -> list[tuple]:
    rows = store.rows(f"SELECT {COMPARED} FROM scores WHERE pass_id = ? ORDER BY trial_id, scorer", [pass_id])
    return [tuple(row.values()) for row in rows]


def judged(store: Store, pass_id: str) -> dict[tuple[str, str], bool]:
    rows = store.rows(
        "SELECT case_id, scorer, bool_and(passed) AS passed, count(*) AS n FROM scores WHERE pass_id = ? GROUP BY ALL",
        [pass_id],
    )
    assert {row["n"] for row in rows} == {2}  # both attempts of every case judged
    return {(row["case_id"], row["scorer"]): row["passed"] for row in rows}


def outcomes(store: Store, experiment_id: str) -> dict[str, str]:
    rows = store.rows(
        "SELECT case_id, string_agg(DISTINCT outcome) AS outcome FROM trials WHERE experiment_id = ? GROUP BY ALL",
        [experiment_id],
    )
    return {row["case_id"]: row["outcome"] for row in rows}


def test_criteria_are_scored_at_run_time_and_rescored_alike(tmp_path, dataset):
    store = Store(tmp_path / "s")
    experiment = evaluate(shop_agent, dataset, attempts=2, store=store, progress="none")
    (run_pass,) = pass_ids(store, experiment.id)
    assert judged(store, run_pass) == JUDGED
    assert outcomes(store, experiment.id) == OUTCOMES
    at_run_time = scores_of(store, run_pass)
    reasons = {
        (row["case_id"], row["scorer"]): row["reason"]
        for row in store.rows("SELECT DISTINCT case_id, scorer, reason FROM scores")
    }
    assert reasons["needs", "must_contain"] == "the final reply lacks 1 of 2: box"
    assert reasons["haiku", "reply_length"] == f"{len(shop_agent('haiku'))} characters, more than 40"
    assert reasons["essay", "reply_length"] == f"{len(ESSAY)} characters, at least 4500"
    assert reasons["roman", "answer_match"] == "the reply contains 'Lutetia'"
    # Rescoring from the store gives the same scores, value for value and reason for reason.
    again = rescore(store, experiment.id)
    assert again.trials == 16 and again.not_scored == {}
    assert scores_of(store, again.pass_id) == at_run_time
    # The rubric is kept with the case in the store's snapshot, for the judge.
    (snapshot,) = store.rows("SELECT \"case\" FROM cases WHERE case_id = 'policy'")
    assert json.loads(snapshot["case"])["rubric"] == CASES[0]["rubric"]


def test_with_content_capture_off_criteria_are_scored_at_run_time_and_kept_by_a_rescore(tmp_path, dataset, content_off):
    store = Store(tmp_path / "s")
    experiment = evaluate(shop_agent, dataset, attempts=2, store=store, progress="none")
    (run_pass,) = pass_ids(store, experiment.id)
    assert judged(store, run_pass) == JUDGED  # from the replies held in memory
    assert store.rows("SELECT count(*) AS n FROM trials WHERE reply IS NOT NULL") == [{"n": 0}]
    result = rescore(store, experiment.id)
    assert result.not_scored == {"must_contain": 8, "must_not_contain": 2, "reply_length": 8, "answer_match": 4}
    assert store.rows("SELECT count(*) AS n FROM scores WHERE pass_id = ?", [result.pass_id]) == [{"n": 0}]
    assert outcomes(store, experiment.id) == OUTCOMES  # the run-time judgements stand
    said = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", "rescore", experiment.id],
        env={**os.environ, "AGENTEVAL_STORE": str(tmp_path / "s")},
        capture_output=True,
        text=True,
    )
    assert said.returncode == 0
    assert "not re-run, for want of message content" in said.stdout
    assert "must_contain (8 trials)" in said.stdout and "reply_length (8 trials)" in said.stdout
