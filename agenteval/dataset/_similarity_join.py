"""Every pair of word sets whose Jaccard similarity reaches a threshold, found without comparing every pair.

An exact similarity join (AllPairs and PPJoin, Bayardo et al. 2007 and Xiao et al. 2008): words are ranked rarest
first; the distinct sets are taken smallest first; a set is compared only with earlier sets that share a word among
the first few of both (the prefix filter), are not too small (the size filter), and can still reach the overlap the
threshold needs from where that word sits in each (the position filter). Inputs that share many common words
("hi, I have a question about my order ...") then meet only through their rarer words. Every bound is computed in
the float arithmetic scores are compared in, so a pair scoring exactly the threshold is never filtered out.

Sets that are the same are joined once and their cases counted by multiplication, so a dataset of many copies costs
what its distinct inputs cost. What is held grows with the inputs and ``listed``, never with the pairs.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from itertools import chain

PROGRESS_EVERY = 512
"""Sets joined between two calls of ``on_progress``."""


@dataclasses.dataclass(frozen=True)
class Joined:
    """The alike pairs of a join, by position in the input: the first ``listed`` as (earlier, later, score) ordered
    by later then earlier position, how many in all, and the groups they link (largest first, positions in order)."""

    pairs: list[tuple[int, int, float]]
    total: int
    groups: list[list[int]]


def similar_pairs(
    words_of: Sequence[Sequence[str]],
    threshold: float,
    listed: int,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
) -> Joined:
    """The pairs of word lists whose word sets have Jaccard similarity >= ``threshold`` (``shared / (|a| + |b| -
    shared)``, in floats) and whose words differ, in the set or in how many times each is there (the same words
    repeated another number of times are alike at 1.0). Empty lists are alike to nothing. ``threshold`` is in
    (0, 1]. ``on_progress(done, total)`` is called as the distinct sets are joined."""
    members: dict[frozenset[str], list[int]] = {}
    for position, words in enumerate(words_of):
        if words:
            members.setdefault(frozenset(words), []).append(position)
    found = _Found(list(members.values()), listed)
    for k, positions in enumerate(found.members):
        if len(positions) > 1:
            found.within(k, _multiset_labels(words_of, positions))
    for x, alike in _join(list(members), threshold, on_progress):
        found.across(x, alike)
    return found.joined()


def _multiset_labels(words_of: Sequence[Sequence[str]], positions: list[int]) -> list[int]:
    """For cases with one word set: which of them hold each word the same number of times (same label)."""
    labels: dict[tuple[str, ...], int] = {}
    return [labels.setdefault(tuple(sorted(words_of[p])), len(labels)) for p in positions]


def _join(
    sets: list[frozenset[str]], threshold: float, on_progress: Callable[[int, int], None]
) -> Iterator[tuple[int, list[tuple[int, float]]]]:
    """(x, [(y, score), ...]) for every set ``x`` of ``sets`` (all distinct) and the earlier-joined sets ``y``
    scoring >= ``threshold`` with it, where there are any."""
    frequency = Counter(chain.from_iterable(sets))
    rarest_first = sorted(frequency)
    rarest_first.sort(key=frequency.__getitem__)  # stable: ties stay in alphabetical order
    rank = {word: r for r, word in enumerate(rarest_first)}
    ranked = [sorted(map(rank.__getitem__, words)) for words in sets]
    sizes = [len(words) for words in sets]
    fewest = _Overlaps(threshold, max(sizes, default=0))
    postings: dict[int, list[tuple[int, int, int]]] = {}
    """word -> (set, words after this one in it, its size) for the words of each set's indexed prefix, smallest
    sets first"""
    skipped: dict[int, int] = {}
    """word -> how many of its postings are sets too small for every set from now on"""
    order = sorted(range(len(sets)), key=sizes.__getitem__)
    for done, x in enumerate(order):
        if done % PROGRESS_EVERY == 0:
            on_progress(done, len(order))
        words, size = ranked[x], sizes[x]
        smallest = fewest.alone[size]  # a set of fewer words scores below the threshold whatever it shares
        counts: dict[int, int] = {}  # set -> words shared so far, or -1 once it cannot reach the threshold
        for px in range(size - smallest + 1):
            listing = postings.get(words[px])
            if listing is None:
                continue
            start = skipped.get(words[px], 0)
            while start < len(listing) and listing[start][2] < smallest:
                start += 1
            skipped[words[px]] = start
            rest = size - px - 1
            for y, rest_y, size_y in listing[start:]:
                seen = counts.get(y, 0)
                if seen >= 0:
                    most = seen + 1 + (rest if rest < rest_y else rest_y)
                    counts[y] = seen + 1 if most >= fewest.together[size + size_y] else -1
        alike = []
        for y, seen in counts.items():
            if seen > 0:
                shared = len(sets[x] & sets[y])
                score = shared / (size + sizes[y] - shared)
                if score >= threshold:
                    alike.append((y, score))
        if alike:
            yield x, alike
        for px in range(size - fewest.together[2 * size] + 1):
            postings.setdefault(words[px], []).append((x, size - px - 1, size))
    on_progress(len(order), len(order))


class _Overlaps:
    """The fewest shared words that can reach the threshold, in the float arithmetic the scores are compared in:
    ``ceil(threshold * size)`` alone can be one too many (``0.28 * 25`` is ``7.000000000000001``, while
    ``7 / 25 >= 0.28``), which shortened a prefix and missed pairs scoring exactly the threshold."""

    def __init__(self, threshold: float, largest: int) -> None:
        self.alone = [_fewest_alone(threshold, size) for size in range(largest + 1)]
        """by the size of one set, with any other"""
        self.together = [_fewest_together(threshold, sizes) for sizes in range(2 * largest + 1)]
        """by the sum of two sets' sizes; at twice a set's size, what it shares with any set at least as large"""


def _fewest_alone(t: float, size: int) -> int:
    """A score is at most ``shared / size``, whatever the other set."""
    return _least(lambda shared: shared / size >= t, math.ceil(t * size), size)


def _fewest_together(t: float, sizes: int) -> int:
    """Two sets whose sizes add up to ``sizes`` score ``shared / (sizes - shared)``, and share at most half."""
    return _least(lambda shared: shared / (sizes - shared) >= t, math.ceil(t * sizes / (1 + t)), sizes // 2)


def _least(reaches: Callable[[int], bool], estimate: int, most: int) -> int:
    """The least count in 1..``most`` that ``reaches`` (true from some count on), starting from ``estimate``; ``most``
    when none does (no pair can then reach the threshold, so nothing is filtered wrongly)."""
    least = min(max(1, estimate), most)
    while least > 1 and reaches(least - 1):
        least -= 1
    while least < most and not reaches(least):
        least += 1
    return least


class _Found:
    """What the join found, counted and grouped by case, with the first ``listed`` pairs kept in a bounded heap."""

    def __init__(self, members: list[list[int]], listed: int) -> None:
        self.members = members
        """positions of the cases of each distinct set, in order"""
        self.listed = listed
        self.total = 0
        self._first: list[tuple[int, int, float]] = []
        """(-later, -earlier, score): a max-heap of the smallest (later, earlier) seen"""
        self._linked = _Groups(len(members))
        self._alike = [False] * len(members)

    def within(self, k: int, labels: list[int]) -> None:
        """Cases of one set are alike (1.0) when they hold some word another number of times."""
        shares = Counter(labels).values()
        if len(shares) < 2:
            return
        n = len(labels)
        self.total += n * (n - 1) // 2 - sum(m * (m - 1) // 2 for m in shares)
        self._alike[k] = True
        self._keep(_mixed_pairs(self.members[k], labels), 1.0)

    def across(self, x: int, alike: list[tuple[int, float]]) -> None:
        """Every case of set ``x`` is alike every case of each set of ``alike`` (set, score). Run for every pair of
        alike sets (millions for inputs of one template), so the union and the listing check are inlined."""
        members, flags, a = self.members, self._alike, self.members[x]
        flags[x] = True
        root, parent = self._linked.root(x), self._linked.parent
        cases = 0
        last = self._last_kept()
        for y, score in alike:
            flags[y] = True
            k = y
            while parent[k] != k:  # y's root, halving its path, joined to x's
                parent[k] = parent[parent[k]]
                k = parent[k]
            parent[k] = root
            b = members[y]
            cases += len(b)
            later = a[0] if a[0] > b[0] else b[0]
            if last is None or later < last[0] or (later == last[0] and a[0] + b[0] - later < last[1]):
                self._keep(_cross_pairs(a, b), score)  # most are not, once the first are kept
                last = self._last_kept()
        self.total += len(a) * cases

    def _last_kept(self) -> tuple[int, int] | None:
        """The last (later, earlier) kept once ``listed`` are, which later pairs must come before; None until then."""
        first = self._first
        if len(first) < self.listed:
            return None
        return (-first[0][0], -first[0][1]) if first else (-1, -1)

    def _keep(self, pairs: Iterator[tuple[int, int]], score: float) -> None:
        """Keep those of ``pairs`` (in ascending order) among the first ``listed`` of all: stop at the first that
        comes after every pair kept, once ``listed`` are."""
        first = self._first
        for later, earlier in pairs:
            if len(first) < self.listed:
                heapq.heappush(first, (-later, -earlier, score))
            elif first and (later, earlier) < (-first[0][0], -first[0][1]):
                heapq.heapreplace(first, (-later, -earlier, score))
            else:
                return

    def joined(self) -> Joined:
        pairs = sorted((-later, -earlier, score) for later, earlier, score in self._first)
        components: dict[int, list[int]] = {}
        for k, alike in enumerate(self._alike):
            if alike:
                components.setdefault(self._linked.root(k), []).extend(self.members[k])
        groups = sorted((sorted(g) for g in components.values()), key=lambda g: (-len(g), g[0]))
        return Joined([(earlier, later, round(score, 3)) for later, earlier, score in pairs], self.total, groups)


def _cross_pairs(a: list[int], b: list[int]) -> Iterator[tuple[int, int]]:
    """(later, earlier) for every position of ``a`` with every position of ``b`` (two sorted, disjoint lists), in
    ascending order. Each position yields at least one pair once the other list has begun, so stopping early costs
    what was taken."""
    ia, ib = bisect_left(a, b[0]), bisect_left(b, a[0])
    while ia < len(a) or ib < len(b):
        if ib == len(b) or (ia < len(a) and a[ia] < b[ib]):
            later, others = a[ia], b
            ia += 1
        else:
            later, others = b[ib], a
            ib += 1
        for earlier in others:
            if earlier > later:
                break
            yield later, earlier


def _mixed_pairs(positions: list[int], labels: list[int]) -> Iterator[tuple[int, int]]:
    """(later, earlier) for every two of ``positions`` (sorted) whose labels differ, in ascending order. Runs of one
    label are stepped over whole: two runs side by side differ, so each pair costs at most one run skipped."""
    runs: list[tuple[int, int, int]] = []  # (label, first, end) of each run of one label
    for k, label in enumerate(labels):
        if runs and runs[-1][0] == label:
            runs[-1] = (label, runs[-1][1], k + 1)
        else:
            runs.append((label, k, k + 1))
    for r in range(1, len(runs)):
        label, first, end = runs[r]
        for k in range(first, end):
            for q in range(r):
                if runs[q][0] != label:
                    for j in range(runs[q][1], runs[q][2]):
                        yield positions[k], positions[j]


class _Groups:
    """Disjoint sets (union-find, with path halving): a set is joined to another by making its root's parent any
    member of the other."""

    def __init__(self, size: int) -> None:
        self.parent = list(range(size))

    def root(self, k: int) -> int:
        parent = self.parent
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k
