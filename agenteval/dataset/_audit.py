"""What a dataset covers and where it is thin: cases per category and difficulty, fields used, how cases
are judged (and which nothing judges), categories too small to measure, and duplicate, reordered or
near-duplicate inputs."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from ..errors import UsageError
from ..run._options import MIN_CASES_PER_CATEGORY, NEAR_DUPLICATE_SIMILARITY
from ._card import ReviewStatus, card_path, keeps_a_card, read_card, review_status
from ._cases import FIELDS, OPTIONAL_DEFAULTS, SCORED_FIELDS, UNCATEGORIZED, Case, Dataset, gives
from ._similarity_join import similar_pairs

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
    """groups of case ids whose inputs are the same once normalised (those that normalise to nothing, such as
    emoji alone, compared case-folded with whitespace collapsed)"""
    near_duplicates: list[tuple[str, str, float]]
    """pairs of case ids whose inputs are alike (similarity), not identical: the first
    :data:`MAX_LISTED_PAIRS` found, in the dataset's order"""
    near_duplicate_pairs: int = 0
    """how many such pairs there are in all"""
    near_duplicate_groups: list[list[str]] = dataclasses.field(default_factory=list)
    """case ids linked by near-duplicate pairs (directly or through others), largest group first"""
    reordered: list[list[str]] = dataclasses.field(default_factory=list)
    """groups of case ids whose inputs have the same words, each as many times, in another order (see
    :func:`reordered_groups`)"""
    min_per_category: int = MIN_CASES_PER_CATEGORY
    path: str = ""
    """The dataset's file (or how it was generated)."""
    card: str | None = None
    """Where the dataset's card is or would be (``NAME.card.json``); None for a built-in or generated dataset."""
    review: ReviewStatus | None = None
    """Where the dataset stands against its card; None without one."""


def audit(
    dataset: Dataset,
    *,
    min_per_category: int = MIN_CASES_PER_CATEGORY,
    similarity: float = NEAR_DUPLICATE_SIMILARITY,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
) -> AuditReport:
    """Audit ``dataset``'s coverage and duplicates. ``similarity`` must be above 0 and at most 1 (see
    :func:`near_duplicates`, which ``on_progress`` follows)."""
    check_similarity(similarity)
    cases = dataset.cases
    categories = dataset.categories()
    difficulties: dict[str, dict[str, int]] = {}
    for case in cases:
        row = difficulties.setdefault(case.category or UNCATEGORIZED, {})
        key = case.difficulty or "unset"
        row[key] = row.get(key, 0) + 1
    used = Counter(
        name for case in cases for name, default in OPTIONAL_DEFAULTS.items() if getattr(case, name) != default
    )
    card = _user_card(dataset)
    review = None if card is None else _review(dataset)  # before the long part: a bad card fails at once
    alike = near_duplicates(cases, similarity, on_progress=on_progress)
    return AuditReport(
        dataset=dataset.name,
        cases=len(cases),
        categories=categories,
        difficulties=difficulties,
        fields={name: used[name] for name in FIELDS if used[name]},
        judging=judging(cases),
        thin_categories={c: n for c, n in categories.items() if n < min_per_category},
        duplicates=duplicate_groups(cases),
        near_duplicates=alike.pairs,
        near_duplicate_pairs=alike.total,
        near_duplicate_groups=alike.groups,
        reordered=reordered_groups(cases),
        min_per_category=min_per_category,
        path=dataset.path,
        card=None if card is None else str(card),
        review=review,
    )


def _user_card(dataset: Dataset) -> Path | None:
    """Where the card of a user's dataset file is; None for a built-in (kept by agenteval's maintainers, not
    reviewed by its users) or a generated one."""
    return card_path(dataset.path) if keeps_a_card(dataset.path) else None


def _review(dataset: Dataset) -> ReviewStatus | None:
    read = read_card(dataset.path)
    return None if read is None else review_status(read, dataset.hash)


def duplicate_groups(cases: Sequence[Case]) -> list[list[str]]:
    """Ids of cases whose inputs (or conversations) are identical once normalised; inputs that normalise to
    nothing (only emoji or punctuation) are compared as :func:`_duplicate_key` says."""
    groups: dict[tuple[bool, str], list[str]] = {}
    for case in cases:
        groups.setdefault(_duplicate_key(case), []).append(case.id)
    return [ids for ids in groups.values() if len(ids) > 1]


def reordered_groups(cases: Sequence[Case]) -> list[list[str]]:
    """Ids of cases whose inputs have the same words, each as many times, in another order once normalised
    ("What is 2 plus 3?" and "3 plus 2, what is?"), in the dataset's order. Listed apart from duplicates because
    the order may be the question ("5 minus 3" and "3 minus 5"); a group whose inputs are all one text is a
    duplicate only, and is not listed again."""
    by_words: dict[tuple[str, ...], list[Case]] = {}
    for case in cases:
        words = _text(case).split()
        if words:
            by_words.setdefault(tuple(sorted(words)), []).append(case)
    return [[c.id for c in group] for group in by_words.values() if len({_text(c) for c in group}) > 1]


def _raw(case: Case) -> str:
    return " ".join(case.turns) if case.turns else case.input


def _text(case: Case) -> str:
    return normalize(_raw(case))


def _duplicate_key(case: Case) -> tuple[bool, str]:
    """What two duplicate inputs share: the normalised text, or, when normalising leaves nothing ("👍", "?!"),
    the text itself case-folded with its whitespace collapsed, so that "👍" and "🎉🎉" are not the same input
    while two "👍" still are. The flag keeps the two kinds of key apart."""
    normalised = _text(case)
    if normalised:
        return True, normalised
    return False, " ".join(_raw(case).casefold().split())


PROGRESS_FROM_CASES = 2000
"""Audits of this many cases or more show their progress (``agenteval audit``): the near-duplicate search of inputs
from one template grows with the square of the cases (3,000 of them: 3 s)."""

MAX_LISTED_PAIRS = 1000
"""Near-duplicate pairs an audit lists. Inputs from one template are all alike, so their pairs grow with the square
of the cases (3,000 such cases: 4.5 million pairs, 500 MB held); past this many they are counted and grouped."""


@dataclasses.dataclass(frozen=True)
class NearDuplicates:
    """Pairs of cases whose inputs are alike: the first :data:`MAX_LISTED_PAIRS`, how many in all, and the groups
    they link (largest first, ids in the dataset's order)."""

    pairs: list[tuple[str, str, float]]
    total: int
    groups: list[list[str]]


def check_similarity(threshold: float) -> None:
    """Refuse a ``--similarity`` outside (0, 1]. Inputs that share no word are at 0, so at 0 every pair would be
    alike, and pairs are looked for only among inputs sharing a word: the count would be wrong, not just long."""
    if not 0 < threshold <= 1:  # NaN too
        raise UsageError(
            f"--similarity must be above 0 and at most 1, not {threshold}: inputs sharing no word are at 0, so at 0 "
            "every pair would count as alike"
        )


def near_duplicates(
    cases: Sequence[Case],
    threshold: float,
    listed: int = MAX_LISTED_PAIRS,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
) -> NearDuplicates:
    """The pairs of cases whose word sets have Jaccard similarity >= ``threshold`` but whose words differ: inputs
    with the same words, each as many times, are duplicates or reordered (:func:`reordered_groups`), while the same
    words repeated another number of times ("say ok", "say ok, ok") are alike at 1.0. ``threshold`` is above 0 and
    at most 1 (:func:`check_similarity`). Found by an exact similarity join (:mod:`._similarity_join`), without
    comparing every pair; ``on_progress(done, total)`` follows it.
    """
    check_similarity(threshold)
    joined = similar_pairs([_text(case).split() for case in cases], threshold, listed, on_progress)
    pairs = [(cases[earlier].id, cases[later].id, score) for earlier, later, score in joined.pairs]
    groups = [[cases[k].id for k in group] for group in joined.groups]
    return NearDuplicates(pairs, joined.total, groups)
