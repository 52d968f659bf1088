"""Stratified, stable sampling; and the audit's findings."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from agenteval.cli import main
from agenteval.dataset import Case, Dataset, audit, load_dataset
from agenteval.dataset._audit import MAX_LISTED_PAIRS
from agenteval.dataset._sampling import allocate, sample_cases
from agenteval.errors import UsageError


def make(counts: dict[str, int], prefix: str = "") -> list[Case]:
    return [
        Case(id=f"{prefix}{category}-{i}", input=f"question {category} {i}", expected_output="a", category=category)
        for category, n in counts.items()
        for i in range(n)
    ]


def by_category(cases):
    out = {}
    for case in cases:
        out[case.category] = out.get(case.category, 0) + 1
    return out


def test_allocation_is_proportional_and_covers_every_category():
    assert allocate({"a": 50, "b": 30, "c": 20}, 10) == {"a": 5, "b": 3, "c": 2}
    assert allocate({"a": 97, "b": 2, "c": 1}, 10) == {"a": 8, "b": 1, "c": 1}  # every category, when n allows
    assert allocate({"a": 5, "b": 5, "c": 5}, 2) in (
        {"a": 1, "b": 1, "c": 0},
        {"a": 1, "b": 0, "c": 1},
        {"a": 0, "b": 1, "c": 1},
    )
    assert allocate({"a": 3, "b": 2}, 10) == {"a": 3, "b": 2}
    for n in range(1, 60):
        quotas = allocate({"a": 31, "b": 17, "c": 7, "d": 2}, n)
        assert sum(quotas.values()) == min(n, 57)
        if 4 <= n:
            assert min(quotas.values()) >= 1
        assert all(q <= size for q, size in zip(quotas.values(), (31, 17, 7, 2), strict=True))


def test_sample_is_the_same_for_the_same_seed_and_in_dataset_order():
    cases = make({"x": 40, "y": 25, "z": 10})
    first = sample_cases(cases, 20, seed=3)
    assert first == sample_cases(cases, 20, seed=3)
    assert first != sample_cases(cases, 20, seed=4)
    assert by_category(first) == {"x": 11, "y": 7, "z": 2}  # 10.67, 6.67, 2.67 by largest remainders
    positions = [cases.index(c) for c in first]
    assert positions == sorted(positions)


def test_membership_survives_appending_unrelated_cases_and_reordering():
    cases = make({"x": 20, "y": 20, "z": 20})
    before = {c.id for c in sample_cases(cases, 12, seed=1)}
    grown = cases + make({"w": 20}, prefix="new-")
    after = {c.id for c in sample_cases(grown, 16, seed=1)}  # 4 per category as before, plus w's 4
    assert before <= after
    assert {c.id for c in sample_cases(list(reversed(cases)), 12, seed=1)} == before


def test_sampling_a_builtin_dataset():
    hard = load_dataset("hard")
    sample = sample_cases(hard.cases, 20, seed=0)
    assert len(sample) == 20 and len(by_category(sample)) == 10


def test_audit_findings():
    cases = make({"big": 8, "thin": 2}) + [
        Case(id="dup-1", input="What is the refund window?", expected_output="30 days", category="big"),
        Case(id="dup-2", input="what is the REFUND window", expected_output="30 days", category="big"),
        Case(
            id="near-1",
            input="How many days is the refund window for opened items?",
            expected_output="30",
            category="big",
            difficulty="hard",
        ),
        Case(
            id="near-2",
            input="How many days is the refund window for unopened items?",
            expected_output="30",
            category="big",
            difficulty="easy",
            expected_tools=(),
        ),
        Case(id="op-1", input="What is 6 / 2 * 3?", expected_output="9", category="big"),
        Case(id="op-2", input="What is 6 - 2 - 3?", expected_output="1", category="big"),
    ]
    report = audit(Dataset("t", "t.jsonl", "h", cases))
    assert report.thin_categories == {"thin": 2}
    assert report.duplicates == [["dup-1", "dup-2"]]
    assert [(a, b) for a, b, _ in report.near_duplicates] == [("near-1", "near-2")]
    assert report.difficulties["big"] == {"unset": 12, "hard": 1, "easy": 1}
    assert report.fields == {"category": 16, "expected_tools": 1, "difficulty": 2}


def test_audit_near_duplicates_match_a_brute_force_comparison():
    import random

    rng = random.Random(5)
    words = ["refund", "window", "days", "order", "ship", "price", "plan", "leave", "office", "app"]
    cases = [
        Case(id=str(i), input=" ".join(rng.sample(words, rng.randint(3, 6))), expected_output="", category="c")
        for i in range(150)
    ]
    report = audit(Dataset("t", "t", "h", cases), similarity=0.7)
    sets = [set(c.input.split()) for c in cases]
    expected = {
        (cases[i].id, cases[j].id)
        for i in range(len(cases))
        for j in range(i + 1, len(cases))
        if sets[i] != sets[j] and len(sets[i] & sets[j]) / len(sets[i] | sets[j]) >= 0.7
    }
    assert {(a, b) for a, b, _ in report.near_duplicates} == expected
    assert report.near_duplicate_pairs == len(expected)
    # The groups are the pairs' connected components: every case of a group is linked to the rest of it.
    grouped = [set(group) for group in report.near_duplicate_groups]
    assert sorted(len(g) for g in grouped) == sorted(len(g) for g in _components(expected))
    assert all(any({a, b} <= g for g in grouped) for a, b in expected)


def _components(pairs: set[tuple[str, str]]) -> list[set[str]]:
    groups: list[set[str]] = []
    for a, b in pairs:
        touching = [g for g in groups if a in g or b in g]
        merged = {a, b}.union(*touching)
        groups = [g for g in groups if g not in touching] + [merged]
    return groups


def test_audit_command(tmp_path):
    path = tmp_path / "cases.jsonl"
    path.write_text(
        "\n".join(json.dumps({"input": f"q{i}", "expected_output": "a", "category": "solo"}) for i in range(2)) + "\n"
    )
    result = CliRunner().invoke(main, ["audit", str(path)])
    assert result.exit_code == 0
    assert "Too few cases to measure (fewer than 5): solo (2)" in result.output.replace("\n", " ")
    as_json = json.loads(CliRunner().invoke(main, ["audit", "hard", "--json"]).output)
    assert as_json["cases"] == 55 and as_json["thin_categories"] == {} and as_json["duplicates"] == []
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{\n")
    failed = CliRunner().invoke(main, ["audit", str(bad)])
    assert failed.exit_code == 1 and "agenteval validate" in failed.output


def test_audit_says_how_cases_are_judged_and_which_nothing_judges(tmp_path):
    records = [
        {"id": "exact", "input": "2 + 2?", "expected_output": "4"},
        {"id": "unknown", "input": "Our CFO?", "expected_output": "unknown"},
        {"id": "several", "input": "Roman Paris?", "expected_output": "", "acceptable_outputs": ["Lutetia"]},
        {"id": "words", "input": "Refund policy?", "expected_output": "", "must_contain": ["30 days"]},
        {"id": "short", "input": "A haiku.", "expected_output": "", "max_length": 80, "min_length": 0},
        {"id": "no-tools", "input": "Hello.", "expected_output": "", "expected_tools": []},
        {"id": "graded", "input": "Write a thank-you note.", "expected_output": "", "rubric": "Warm, names the gift."},
        {"id": "joke", "input": "Tell me a joke.", "expected_output": ""},
        {"id": "empty-lists", "input": "Anything.", "expected_output": "", "must_contain": [], "relevant_docs": []},
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = audit(load_dataset(str(path)))
    assert (report.judging.answer, report.judging.criteria, report.judging.rubric_only) == (3, 3, 1)
    assert report.judging.unscorable == ["joke", "empty-lists"]  # an empty list gives nothing to check
    assert {f: report.fields[f] for f in ("acceptable_outputs", "must_contain", "min_length", "max_length")} == {
        "acceptable_outputs": 1,
        "must_contain": 1,
        "min_length": 1,
        "max_length": 1,
    }
    assert report.fields["rubric"] == 1
    shown = " ".join(CliRunner().invoke(main, ["audit", str(path)], terminal_width=200).output.split())
    assert "Nothing judges 2 case(s), so they pass whenever they do not fail: joke, empty-lists." in shown
    assert "1 case(s) are judged by their rubric alone" in shown
    as_json = json.loads(CliRunner().invoke(main, ["audit", str(path), "--json"]).output)
    assert as_json["judging"] == {"answer": 3, "criteria": 3, "rubric_only": 1, "unscorable": ["joke", "empty-lists"]}


def test_audit_of_a_dataset_every_case_of_which_is_judged_says_nothing_more():
    report = audit(load_dataset("hard"))
    assert report.judging.unscorable == [] and report.judging.rubric_only == 0
    assert report.judging.answer + report.judging.criteria == report.cases
    assert "Nothing judges" not in CliRunner().invoke(main, ["audit", "hard"]).output


def test_audit_of_templated_inputs_groups_them_and_counts_their_pairs_without_holding_them(tmp_path):
    # Inputs from one template are all alike: their pairs grow with the square of the cases (1,000 such cases
    # printed a 500,000-row table in 90 s and 1.5 GB; 3,000 held 4.5 million pairs, 500 MB, even for --json).
    # The audit groups them, shows and lists a few pairs and counts them all.
    path = tmp_path / "templated.jsonl"
    cases = 120
    inputs = [f"What is the refund policy for order number {1000 + i}?" for i in range(cases)]
    records = [{"id": f"o{i}", "input": text, "expected_output": "x"} for i, text in enumerate(inputs)]
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    pairs = cases * (cases - 1) // 2
    result = CliRunner().invoke(main, ["audit", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    shown = [line for line in result.output.splitlines() if " 0.80 " in line]
    assert len(shown) == 50
    assert f"and {pairs - 50:,} more near-duplicate pairs (agenteval audit --json lists 1,000)" in result.output
    assert re.search(r"│ 120 +│ o0, o1, o2, o3, o4, o5, o6, o7, o8, o9, \.\.\. +│", result.output)
    as_json = json.loads(CliRunner().invoke(main, ["audit", str(path), "--json"]).output)
    assert len(as_json["near_duplicates"]) == MAX_LISTED_PAIRS < pairs
    assert as_json["near_duplicate_pairs"] == pairs
    assert as_json["near_duplicate_groups"] == [[f"o{i}" for i in range(cases)]]


def test_audit_shows_an_id_or_category_holding_a_line_break_on_one_line(tmp_path):
    """A table cell keeps line breaks (for replies): the duplicate group of "x\\nforged" and "b" showed as a row
    "x" and a row "forged, b", ids that are not in the file."""
    path = tmp_path / "cases.jsonl"
    records = [
        {"id": "x\nforged", "input": "Same question?", "expected_output": "a", "category": "one\ntwo"},
        {"id": "b", "input": "same question", "expected_output": "a"},
        {"id": "c\nd", "input": "What is the refund window for shoes?", "expected_output": "a"},
        {"id": "e", "input": "What is the refund window for hats?", "expected_output": "a"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = CliRunner().invoke(main, ["audit", str(path), "--similarity", "0.5"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "x\\x0aforged, b" in result.output and "c\\x0ad, e" in result.output, result.output
    assert "one\\x0atwo" in result.output
    assert not any(line.strip(" │┃").startswith(("forged", "d,", "d ", "two")) for line in result.output.splitlines())


def test_inputs_that_normalise_to_nothing_are_duplicates_only_of_the_same_text(tmp_path):
    """Normalising drops what is not a word or an arithmetic sign, so inputs of emoji or punctuation alone all
    normalised to "" and were listed as duplicates of each other ("👍" and "🎉🎉" the same input)."""
    inputs = {
        "thumbs": "👍",
        "party": "🎉🎉",
        "thumbs-again": " 👍 ",
        "puzzled": "?!",
        "shouting": "?!  ",
        "turns": None,  # a conversation of emoji alone
        "word": "👍 hello",
        "word-again": "🎉 HELLO!",
    }
    path = tmp_path / "cases.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {"id": key, "expected_output": "", **({"input": text} if text else {"turns": ["🎉", "🎉"]})},
                ensure_ascii=False,
            )
            + "\n"
            for key, text in inputs.items()
        ),
        encoding="utf-8",
    )
    done = CliRunner().invoke(main, ["audit", str(path), "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["duplicates"] == [
        ["thumbs", "thumbs-again"],
        ["puzzled", "shouting"],
        ["word", "word-again"],
    ]


def test_a_similarity_of_0_is_refused_naming_the_option_and_its_range(tmp_path):
    """Similarity is shared words over all words, so inputs sharing no word are at 0 and `--similarity 0` means
    every pair; pairs were only looked for among inputs sharing a word, so it counted 1 pair of 3 here."""
    path = tmp_path / "cases.jsonl"
    texts = ["alpha beta", "gamma delta", "alpha epsilon"]
    path.write_text("".join(json.dumps({"input": t, "expected_output": ""}) + "\n" for t in texts))
    refused = CliRunner().invoke(main, ["audit", str(path), "--similarity", "0"])
    assert refused.exit_code == 2 and "Invalid value for '--similarity'" in refused.output
    assert "0.0<x<=1.0" in refused.output, refused.output
    for threshold in (0.0, -0.5, 1.5, float("nan")):
        with pytest.raises(UsageError, match=r"--similarity must be above 0 and at most 1"):
            audit(load_dataset(str(path)), similarity=threshold)
    # Just above 0, every pair sharing a word is alike, and only those.
    done = CliRunner().invoke(main, ["audit", str(path), "--similarity", "0.001", "--json"])
    assert done.exit_code == 0 and json.loads(done.output)["near_duplicate_pairs"] == 1, done.output


def test_a_pair_scoring_exactly_the_threshold_is_found_whatever_the_float_rounding():
    """0.28 * 25 is 7.000000000000001 in floats while 7 / 25 >= 0.28: the prefix of a 25-word input came out one
    word short, and a 7-word input made of its 7 commonest words (similarity exactly 0.28) was never compared."""
    long = " ".join(f"w{i:02d}" for i in range(25))
    short = " ".join(f"w{i:02d}" for i in range(18, 25))
    common = [f"w{18 + k % 7} z{k} q{k} r{k} s{k}" for k in range(14)]  # makes the short input's words the commonest
    cases = [Case(id="long", input=long, expected_output=""), Case(id="short", input=short, expected_output="")]
    cases += [Case(id=f"c{k}", input=text, expected_output="") for k, text in enumerate(common)]
    report = audit(Dataset("t", "t", "h", cases), similarity=0.28)
    assert ("long", "short", 0.28) in report.near_duplicates


def test_audit_of_a_bad_dataset_shows_its_problems_with_escapes_visible(tmp_path):
    """audit printed the loader's problems raw: a field name holding a terminal escape (which the problem quotes)
    reached the terminal as one, where validate shows it escaped."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"input": "2+2?", "expected_output": "4", "\x1b[2Jcolour": 1}) + "\n")
    result = CliRunner().invoke(main, ["audit", str(bad)])
    assert result.exit_code == 1 and "run agenteval validate first" in result.output, result.output
    assert "\x1b" not in result.output and "\\x1b[2Jcolour" in result.output, result.output


def test_inputs_with_the_same_words_in_another_order_are_reported_as_such(tmp_path):
    """Inputs "what is 2 plus 3" and "3 plus 2, what is?" have the same words: not the same text, so not duplicates, and
    the same word set, which the near-duplicate search left out as identical. Neither finding reported them. They
    are listed apart, saying what they share (the order may be the question: "5 minus 3" and "3 minus 5"), and the
    same words repeated another number of times are near-duplicates (similarity 1.00); other questions are not."""
    records = [
        {"id": "sum", "input": "What is 2 plus 3?"},
        {"id": "sum-reordered", "input": "3 plus 2, what is?"},
        {"id": "sum-again", "input": "what is 2 PLUS 3"},  # the same text: a duplicate, and of the same words
        {"id": "minus", "input": "What is 5 minus 3?"},
        {"id": "minus-swapped", "input": "What is 3 minus 5?"},
        {"id": "times", "input": "What is 7 times 8?"},
        {"id": "echo", "input": "Say ok."},
        {"id": "echo-twice", "input": "Say ok, ok."},
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps({**r, "expected_output": "x"}) + "\n" for r in records))
    report = audit(load_dataset(str(path)))
    assert report.duplicates == [["sum", "sum-again"]]
    assert report.reordered == [["sum", "sum-reordered", "sum-again"], ["minus", "minus-swapped"]]
    assert [(a, b, s) for a, b, s in report.near_duplicates] == [("echo", "echo-twice", 1.0)]
    shown = " ".join(CliRunner().invoke(main, ["audit", str(path)], terminal_width=200).output.split())
    assert "The same words in another order" in shown and "sum, sum-reordered, sum-again" in shown
    assert "times" not in shown.split("The same words in another order")[1]
    as_json = json.loads(CliRunner().invoke(main, ["audit", str(path), "--json"]).output)
    assert as_json["reordered"] == [["sum", "sum-reordered", "sum-again"], ["minus", "minus-swapped"]]
