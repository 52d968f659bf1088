"""What a dataset covers and where it is thin: cases per category and difficulty, fields used, how cases
are judged (and which nothing judges), categories too small to measure, and duplicate or near-duplicate
inputs."""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Sequence

from ..run._options import MIN_CASES_PER_CATEGORY, NEAR_DUPLICATE_SIMILARITY
from ._cases import FIELDS, OPTIONAL_DEFAULTS, SCORED_FIELDS, Case, Dataset, gives

_TOKEN = re.compile(r"\w+|[-+*/^%=<>×÷]")


def normalize(text: str) -> str:
    """Lower case, punctuation dropped (arithmetic signs kept), whitespace collapsed: the form
    duplicates are compared in."""
    return " ".join(_TOKEN.findall(text.lower()))


ANSWER_FIELDS = ("expected_output", "acceptable_outputs")
CRITERIA_FIELDS = tuple(f for f in SCORED_FIELDS if f not in ANSWER_FIELDS)
"""What a case can be judged by when it has no expected answer: tools, required and forbidden text,
lengths, and the rest of the scored fields."""


@dataclasses.dataclass
class Judging:
    """How the cases are judged, each counted once, by the first that applies."""

    answer: int
    """By an expected answer (``expected_output``, ``"unknown"`` included, or ``acceptable_outputs``)."""
    criteria: int
    """No expected answer, but criteria (:data:`CRITERIA_FIELDS`)."""
    rubric_only: int
    """Only a ``rubric``: judged by the LLM judge alone, so they pass whenever they do not fail without one."""
    unscorable: list[str]
    """Ids of cases with no expected answer, criteria or rubric: no scorer applies, so their trials pass
    whenever they do not fail."""


def judging(cases: Sequence[Case]) -> Judging:
    """How ``cases`` are judged: see :class:`Judging`."""
    answer = criteria = rubric_only = 0
    unscorable = []
    for case in cases:
        if any(gives(case, f) for f in ANSWER_FIELDS):
            answer += 1
        elif any(gives(case, f) for f in CRITERIA_FIELDS):
            criteria += 1
        elif case.rubric is not None:
            rubric_only += 1
        else:
            unscorable.append(case.id)
    return Judging(answer, criteria, rubric_only, unscorable)


@dataclasses.dataclass
class AuditReport:
    """The findings of :func:`audit`."""

    dataset: str
    cases: int
    categories: dict[str, int]
    difficulties: dict[str, dict[str, int]]
    """category -> difficulty (or ``unset``) -> cases"""
    fields: dict[str, int]
    """optional field -> how many cases use it"""
    judging: Judging
    thin_categories: dict[str, int]
    duplicates: list[list[str]]
    """groups of case ids whose inputs are the same once normalised"""
    near_duplicates: list[tuple[str, str, float]]
    """pairs of case ids whose inputs are alike (similarity), not identical"""
    min_per_category: int = MIN_CASES_PER_CATEGORY


def audit(
    dataset: Dataset,
    *,
    min_per_category: int = MIN_CASES_PER_CATEGORY,
    similarity: float = NEAR_DUPLICATE_SIMILARITY,
) -> AuditReport:
    """Audit ``dataset``'s coverage and duplicates."""
    cases = dataset.cases
    categories = dataset.categories()
    difficulties: dict[str, dict[str, int]] = {}
    for case in cases:
        row = difficulties.setdefault(case.category or "uncategorized", {})
        key = case.difficulty or "unset"
        row[key] = row.get(key, 0) + 1
    used = Counter(
        name for case in cases for name, default in OPTIONAL_DEFAULTS.items() if getattr(case, name) != default
    )
    return AuditReport(
        dataset=dataset.name,
        cases=len(cases),
        categories=categories,
        difficulties=difficulties,
        fields={name: used[name] for name in FIELDS if used[name]},
        judging=judging(cases),
        thin_categories={c: n for c, n in categories.items() if n < min_per_category},
        duplicates=duplicate_groups(cases),
        near_duplicates=near_duplicate_pairs(cases, similarity),
        min_per_category=min_per_category,
    )


def duplicate_groups(cases: Sequence[Case]) -> list[list[str]]:
    """Ids of cases whose inputs (or conversations) are identical once normalised."""
    groups: dict[str, list[str]] = {}
    for case in cases:
        groups.setdefault(_text(case), []).append(case.id)
    return [ids for ids in groups.values() if len(ids) > 1]


def _text(case: Case) -> str:
    return normalize(" ".join(case.turns) if case.turns else case.input)


def near_duplicate_pairs(cases: Sequence[Case], threshold: float) -> list[tuple[str, str, float]]:
    """Pairs of cases whose word sets have Jaccard similarity >= ``threshold`` but are not identical.

    A prefix-filtered similarity join: words are ordered rarest first, and two sets can only reach
    the threshold if they share a word among their first ``|x| - ceil(threshold * |x|) + 1``, so only
    those candidates are compared. Exact on the result, and fast on large datasets.
    """
    sets = [frozenset(_text(case).split()) for case in cases]
    frequency = Counter(word for words in sets for word in words)
    ordered = [sorted(words, key=lambda w: (frequency[w], w)) for words in sets]
    index: dict[str, list[int]] = {}
    pairs = []
    for i, words in enumerate(ordered):
        if not words:
            continue
        prefix = len(words) - math.ceil(threshold * len(words)) + 1
        candidates: set[int] = set()
        for word in words[:prefix]:
            candidates.update(index.get(word, ()))
            index.setdefault(word, []).append(i)
        for j in sorted(candidates):
            union = len(sets[i] | sets[j])
            score = len(sets[i] & sets[j]) / union if union else 0.0
            if score >= threshold and sets[i] != sets[j]:
                pairs.append((cases[j].id, cases[i].id, round(score, 3)))
    return pairs
