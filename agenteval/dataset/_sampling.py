"""Stable, stratified samples of a dataset: the same cases every time for the same seed.

Each category gets a share of the sample in proportion to its size (largest remainders), and at
least one case when the sample is large enough to give every category one (taken from the
categories with the largest shares). Within a category the
cases with the smallest hash of (seed, case id) are taken, so a case's membership depends on its
id and its category's quota, never on its position in the file: appending cases to other
categories changes nothing unless it changes this category's quota.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ._cases import UNCATEGORIZED, Case


def _rank(seed: int, case_id: str) -> bytes:
    return hashlib.blake2b(f"{seed}\x00{case_id}".encode(), digest_size=8).digest()


def allocate(sizes: dict[str, int], n: int) -> dict[str, int]:
    """How many cases each category contributes to a sample of ``n``: proportional by largest
    remainders, then every empty category given one, taken from the largest quotas."""
    total = sum(sizes.values())
    if n >= total:
        return dict(sizes)
    quotas = {c: n * size // total for c, size in sizes.items()}
    # Integer remainders: exact, so float noise never decides a tie. Ties go to the bigger
    # category, then by name, so the result never depends on file order.
    by_remainder = sorted(sizes, key=lambda c: (-(n * sizes[c] % total), -sizes[c], c))
    for c in by_remainder[: n - sum(quotas.values())]:
        quotas[c] += 1
    if n >= len(sizes):
        for c in sorted((c for c in sizes if quotas[c] == 0), key=lambda c: (-sizes[c], c)):
            donor = max(quotas, key=lambda d: (quotas[d], sizes[d], d))
            quotas[donor] -= 1
            quotas[c] = 1
    return quotas


def sample_cases(cases: Sequence[Case], n: int, seed: int = 0) -> list[Case]:
    """``n`` cases spread across categories in proportion, in the dataset's order."""
    if n < 1:
        raise ValueError("the sample size must be at least 1")
    by_category: dict[str, list[Case]] = {}
    for case in cases:
        by_category.setdefault(case.category or UNCATEGORIZED, []).append(case)
    quotas = allocate({c: len(members) for c, members in by_category.items()}, n)
    chosen: set[str] = set()
    for category, members in by_category.items():
        ranked = sorted(members, key=lambda case: _rank(seed, case.id))
        chosen.update(case.id for case in ranked[: quotas[category]])
    return [case for case in cases if case.id in chosen]
