"""Criteria for open-ended answers in the case format (must_contain, acceptable_outputs, min_length,
max_length, rubric): what loads, what is refused with its line and field, and what survives the store's
case snapshot."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from agenteval.cli import main
from agenteval.dataset._cases import DatasetError, load_file, parse_case

BASE = {"input": "Describe the refund policy.", "expected_output": ""}


def write(tmp_path, *records) -> str:
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return str(path)


def test_criteria_load_into_the_case(tmp_path):
    path = write(
        tmp_path,
        {
            **BASE,
            "id": "open",
            "must_contain": ["30 days", "receipt"],
            "must_not_contain": ["guarantee"],
            "min_length": 40,
            "max_length": 400,
            "rubric": "Names the 30-day window and says a receipt is needed; polite.",
        },
        {"input": "What is pi to two places?", "expected_output": "3.14", "acceptable_outputs": ["22/7", 3.1416]},
        {"input": "Capital of France?", "expected_output": "", "acceptable_outputs": ["Paris"], "max_length": 60},
    )
    open_case, pi, france = load_file(path).cases
    assert open_case.must_contain == ("30 days", "receipt")
    assert (open_case.min_length, open_case.max_length) == (40, 400)
    assert open_case.rubric.startswith("Names the 30-day window")
    assert pi.acceptable_outputs == ("22/7", "3.1416")  # a number means its text, as in expected_output
    assert france.expected_output == "" and france.acceptable_outputs == ("Paris",) and france.min_length is None


def test_a_case_without_criteria_keeps_its_defaults_and_its_snapshot(tmp_path):
    (case,) = load_file(write(tmp_path, {"input": "q", "expected_output": "a"})).cases
    assert (case.must_contain, case.acceptable_outputs, case.min_length, case.max_length, case.rubric) == (
        (),
        (),
        None,
        None,
        None,
    )
    # The stored snapshot (and so the hash of generated datasets) of an older case does not change.
    assert json.loads(case.to_json()) == {"id": "1", "input": "q", "expected_output": "a"}


def test_criteria_survive_the_stored_snapshot(tmp_path):
    """Rescoring reads cases back from their JSON in the cases table: the criteria must come back equal."""
    path = write(
        tmp_path,
        {
            **BASE,
            "expected_output": "Paris",
            "acceptable_outputs": ["the French capital", 75],
            "must_contain": ["Ville Lumière"],
            "min_length": 0,
            "max_length": 80,
            "rubric": "Says Paris.",
        },
    )
    (case,) = load_file(path).cases
    assert parse_case(json.loads(case.to_json()), case.line) == case


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ({"must_contain": "receipt"}, "must_contain", 'must be a list of strings, e.g. ["receipt"]'),
        ({"must_contain": ["receipt", 3]}, "must_contain", "item 1 must be a string, not a number"),
        ({"must_contain": ["receipt", " "]}, "must_contain", "item 1 must not be empty"),
        ({"must_contain": ["Receipt", "receipt"]}, "must_contain", "item 1 ('receipt') repeats item 0; give it once"),
        (
            {"must_contain": ["receipt"], "must_not_contain": ["RECEIPT"]},
            "must_contain",
            "item 0 ('receipt') is also in must_not_contain: no reply can pass; remove one",
        ),
        (
            {"must_contain": ["no guarantee"], "must_not_contain": ["guarantee"]},
            "must_contain",
            "item 0 ('no guarantee') contains 'guarantee', forbidden by must_not_contain: no reply can pass; "
            "remove one",
        ),
        ({"acceptable_outputs": "Paris"}, "acceptable_outputs", 'must be a list of strings, e.g. ["Paris"]'),
        ({"acceptable_outputs": ["Paris", ""]}, "acceptable_outputs", "item 1 must not be empty"),
        ({"acceptable_outputs": [True]}, "acceptable_outputs", "item 0 must be a string, not a boolean"),
        (
            {"acceptable_outputs": ["Paris", " paris "]},
            "acceptable_outputs",
            "item 1 (' paris ') repeats item 0; give it once",
        ),
        (
            {"expected_output": "Paris", "acceptable_outputs": ["PARIS"]},
            "acceptable_outputs",
            "item 0 ('PARIS') repeats expected_output; remove it",
        ),
        (
            {"expected_output": "unknown", "acceptable_outputs": ["Paris"]},
            "acceptable_outputs",
            'cannot be combined with expected_output "unknown", which asks for a reply that says it does not '
            'know; give the right answers in expected_output and acceptable_outputs, or only "unknown"',
        ),
        (
            {"acceptable_outputs": ["Paris", "Unknown"]},
            "acceptable_outputs",
            'item 1 is "unknown"; to expect a reply that says so, use expected_output',
        ),
        ({"min_length": -1}, "min_length", "must be at least 0"),
        ({"min_length": 10.5}, "min_length", "must be an integer, not a number"),
        ({"min_length": "10"}, "min_length", "must be an integer, not a string"),
        ({"max_length": 0}, "max_length", "must be at least 1"),
        ({"max_length": True}, "max_length", "must be an integer, not a boolean"),
        ({"max_length": 2 * 10**6}, "max_length", "must be at most 1,000,000, not 2,000,000"),
        ({"max_length": 10**400}, "max_length", "must be at most 1,000,000, not a number of about 10^400"),
        (
            {"min_length": 50, "max_length": 20},
            "min_length",
            "is 50, more than max_length (20): no reply can pass; swap or fix them",
        ),
        (
            {"must_contain": ["ok", "thirty days"], "max_length": 10},
            "max_length",
            "is 10, shorter than must_contain item 1 (11 characters): no reply can pass; "
            "raise max_length or shorten the item",
        ),
        ({"rubric": ""}, "rubric", "must not be empty"),
        ({"rubric": ["polite"]}, "rubric", "must be a string, not a list"),
        ({"rubrik": "polite"}, "rubrik", "unknown field; did you mean 'rubric'?"),
        ({"must_contains": ["x"]}, "must_contains", "unknown field; did you mean 'must_contain'?"),
    ],
)
def test_a_bad_criterion_names_the_file_line_and_field(tmp_path, extra, field, message):
    path = write(tmp_path, {"input": "fine", "expected_output": "a"}, {**BASE, **extra})
    with pytest.raises(DatasetError) as info:
        load_file(path)
    assert [str(p) for p in info.value.problems] == [f"{path}:2: {field}: {message}"]


def test_null_means_not_given(tmp_path):
    record = {**BASE, "must_contain": None, "acceptable_outputs": None, "min_length": None, "rubric": None}
    (case,) = load_file(write(tmp_path, record)).cases
    assert case.must_contain == () and case.acceptable_outputs == () and case.min_length is None


def test_empty_lists_mean_nothing_to_check(tmp_path):
    (case,) = load_file(write(tmp_path, {**BASE, "must_contain": [], "acceptable_outputs": []})).cases
    assert case.must_contain == () and case.acceptable_outputs == ()


def test_validate_reports_every_bad_criterion(tmp_path):
    path = write(
        tmp_path,
        {**BASE, "must_contain": ["refund"], "max_length": 300},
        {**BASE, "min_length": 9, "max_length": 3},
        {**BASE, "acceptable_outputs": ["a", "A"]},
        {**BASE, "rubric": "   "},
    )
    result = CliRunner().invoke(main, ["validate", path])
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"{path}:2: min_length: is 9, more than max_length (3): no reply can pass; swap or fix them",
        f"{path}:3: acceptable_outputs: item 1 ('A') repeats item 0; give it once",
        f"{path}:4: rubric: must not be empty",
        f"{path}: 3 problems",
    ]
    good = write(tmp_path, {**BASE, "must_contain": ["refund"], "min_length": 10, "rubric": "Polite."})
    assert CliRunner().invoke(main, ["validate", good]).exit_code == 0
