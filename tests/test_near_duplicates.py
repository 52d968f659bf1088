"""The audit's near-duplicate search finds exactly what comparing every pair finds: the same pairs in the same order
with the same similarities, the same count and the same groups, on many random datasets and their edge cases; and a
long search shows its progress."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from terminal import run_with_stderr_on_a_terminal

from agenteval.dataset import Case
from agenteval.dataset._audit import MAX_LISTED_PAIRS, PROGRESS_FROM_CASES, NearDuplicates, near_duplicates, normalize

WORDS = ["refund", "order", "ship", "plan", "app", "café", "naïve", "日本", "straße", "ß", "x", "+", "2", "éa"]
EMPTY = ["", "?!", "👍", "🎉🎉", "  "]
THRESHOLDS = [1e-9, 0.001, 0.1, 0.25, 0.28, 1 / 3, 0.5, 0.6, 2 / 3, 0.7, 0.75, 0.8, 0.9, 0.95, 1.0]


def all_pairs(cases: list[Case], threshold: float, listed: int) -> NearDuplicates:
    """The definition, by brute force: every pair of inputs whose word sets score ``shared / (|a| + |b| - shared)``
    >= ``threshold`` and whose words differ in the set or in how many times each comes; listed by later case, then
    earlier; grouped as connected components, largest first."""
    words = [normalize(" ".join(case.turns) if case.turns else case.input).split() for case in cases]
    pairs = []
    for later in range(len(cases)):
        for earlier in range(later):
            a, b = set(words[earlier]), set(words[later])
            if not a or not b:
                continue
            shared = len(a & b)
            score = shared / (len(a) + len(b) - shared)
            if score >= threshold and (a != b or sorted(words[earlier]) != sorted(words[later])):
                pairs.append((earlier, later, score))
    component = list(range(len(cases)))

    def root(k: int) -> int:
        while component[k] != k:
            k = component[k]
        return k

    for earlier, later, _ in pairs:
        component[root(earlier)] = root(later)
    members: dict[int, list[int]] = {}
    for k in sorted({k for earlier, later, _ in pairs for k in (earlier, later)}):
        members.setdefault(root(k), []).append(k)
    groups = sorted(members.values(), key=lambda g: (-len(g), g[0]))
    return NearDuplicates(
        [(cases[e].id, cases[later].id, round(s, 3)) for e, later, s in pairs[:listed]],
        len(pairs),
        [[cases[k].id for k in g] for g in groups],
    )


def random_input(rng: random.Random, vocabulary: list[str]) -> str:
    kind = rng.random()
    if kind < 0.08:
        return rng.choice(EMPTY)
    if kind < 0.16:
        return rng.choice(vocabulary)  # a single word
    words = [rng.choice(vocabulary) for _ in range(rng.randint(2, 9))]  # repeats included
    text = " ".join(word.upper() if rng.random() < 0.1 else word for word in words)
    return text + rng.choice(["", "?", ".", " !"])


def random_cases(rng: random.Random) -> list[Case]:
    vocabulary = rng.sample(WORDS, rng.randint(2, len(WORDS)))
    texts: list[str] = []
    for _ in range(rng.randint(0, 60)):
        if texts and rng.random() < 0.2:
            texts.append(rng.choice(texts))  # the same input again
        elif texts and rng.random() < 0.15:
            words = rng.choice(texts).split()
            texts.append(" ".join(words + words[:1]))  # a word repeated once more
        else:
            texts.append(random_input(rng, vocabulary))
    return [Case(id=f"c{i}", input=text, expected_output="") for i, text in enumerate(texts)]


@pytest.mark.parametrize("seed", range(40))
def test_the_search_finds_what_comparing_every_pair_finds(seed):
    rng = random.Random(seed)
    for _ in range(25):
        cases = random_cases(rng)
        threshold = rng.choice([*THRESHOLDS, rng.uniform(0.01, 1.0)])
        listed = rng.choice([0, 1, 3, 10, MAX_LISTED_PAIRS])
        found = near_duplicates(cases, threshold, listed)
        assert found == all_pairs(cases, threshold, listed), (seed, threshold, listed, [c.input for c in cases])


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_the_edge_cases_give_what_comparing_every_pair_gives(threshold):
    texts = [
        *EMPTY,  # alike to nothing
        "ok",
        "ok",
        "OK!",  # single words: the same input three times
        "ok ok",  # the same word twice: alike to "ok" at 1.0
        "say ok",
        "say ok, ok",
        "ok say",
        "say ok",
        "café naïve",
        "CAFÉ naïve naïve",
        "日本 café",
        "straße",
        "STRASSE",
        "2 + 2",
        "2 + 3",
        "2 - 2",
    ]
    cases = [Case(id=f"e{i}", input=text, expected_output="") for i, text in enumerate(texts)]
    assert near_duplicates(cases, threshold) == all_pairs(cases, threshold, MAX_LISTED_PAIRS)


def test_many_copies_of_few_inputs_are_counted_and_listed_as_every_pair_would_be():
    """Copies of one word set are joined once and their cases counted by multiplication: the count, the groups and
    the first pairs listed are still those of every pair, cut at ``listed``."""
    rng = random.Random(7)
    texts = ["say ok", "say ok ok", "say ok ok ok", "say no", "say ok now"]
    cases = [Case(id=f"m{i}", input=rng.choice(texts), expected_output="") for i in range(300)]
    for threshold in (0.5, 0.7, 1.0):
        for listed in (0, 5, 100, MAX_LISTED_PAIRS):
            assert near_duplicates(cases, threshold, listed) == all_pairs(cases, threshold, listed)


def test_pairs_scoring_exactly_the_threshold_are_found_whatever_the_float_rounding():
    """Every bound the search prunes by is computed in the floats the scores are compared in: ``ceil(2/3 * 15 /
    (5/3))`` is 7 while 6 shared words of inputs of 7 and 8 words score exactly 2/3, and ``0.28 * 25`` is
    7.000000000000001. Here each threshold is the exact score of two inputs, whose shared words are made the
    commonest of the dataset (the last a prefix holds)."""
    for size_x in range(1, 27):
        for size_y in range(size_x, 27):
            for shared in range(1, size_x + 1 if size_x < size_y else size_x):  # not the same words
                threshold = shared / (size_x + size_y - shared)
                common = [f"s{k}" for k in range(shared)]
                x = common + [f"x{k}" for k in range(size_x - shared)]
                y = common + [f"y{k}" for k in range(size_y - shared)]
                fillers = [f"{word} f{k}{word}" for word in common for k in range(2)]
                cases = [Case(id=f"i{i}", input=" ".join(t), expected_output="") for i, t in enumerate([x, y])]
                cases += [Case(id=f"f{i}", input=text, expected_output="") for i, text in enumerate(fillers)]
                found = near_duplicates(cases, threshold)
                assert ("i0", "i1", round(threshold, 3)) in found.pairs, (size_x, size_y, shared)
                assert found == all_pairs(cases, threshold, MAX_LISTED_PAIRS), (size_x, size_y, shared)


def write_cases(path: Path, count: int) -> Path:
    lines = (
        json.dumps({"id": f"q{i}", "input": f"question {i} about topic {7 * i}", "expected_output": ""})
        for i in range(count)
    )
    path.write_text("\n".join(lines) + "\n")
    return path


def audit_process(*arguments: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "agenteval.cli", "audit", *arguments]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_long_audit_shows_its_progress_on_stderr_as_a_run_does(tmp_path):
    """An audit of 100,000 cases said nothing for minutes. Now, from PROGRESS_FROM_CASES cases, it shows its progress
    as `agenteval run` does: lines on stderr when it is not a terminal, nothing with --quiet or --json."""
    long = write_cases(tmp_path / "long.jsonl", PROGRESS_FROM_CASES)
    stdout, stderr = audit_process(str(long)).communicate(timeout=300)
    shown = stderr.decode().splitlines()
    assert shown[0] == f"looking for near-duplicates among {PROGRESS_FROM_CASES} distinct inputs", shown
    assert shown[-1] == f"{PROGRESS_FROM_CASES}/{PROGRESS_FROM_CASES} done", shown
    assert b"done" not in stdout and b"Cases per category" in stdout
    for quiet in (["--quiet"], ["-q"], ["--json"]):
        stdout, stderr = audit_process(str(long), *quiet).communicate(timeout=300)
        assert stderr == b"" and stdout, quiet
    short = write_cases(tmp_path / "short.jsonl", PROGRESS_FROM_CASES - 1)
    assert audit_process(str(short)).communicate(timeout=300)[1] == b""


def test_on_a_terminal_a_long_audit_shows_a_bar_on_stderr_and_its_report_alone_on_stdout(tmp_path):
    long = write_cases(tmp_path / "long.jsonl", PROGRESS_FROM_CASES)
    command = [sys.executable, "-m", "agenteval.cli", "audit", str(long)]
    exit_code, stdout, drawn = run_with_stderr_on_a_terminal(command)
    assert exit_code == 0
    total = f"{PROGRESS_FROM_CASES}/{PROGRESS_FROM_CASES}".encode()
    assert b"looking for near-duplicates" in drawn and total in drawn and "━".encode() in drawn, drawn[-500:]
    assert b"looking for near-duplicates" not in stdout and total not in stdout and b"Cases per category" in stdout
