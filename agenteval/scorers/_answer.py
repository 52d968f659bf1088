"""Matching a reply against ``expected_output`` (and ``acceptable_outputs``): normalised text on word
boundaries, numbers compared numerically, and ``"unknown"`` meaning the reply must say the answer is not known."""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Sequence

NUMBER = re.compile(r"(?<![\w.])[-−]?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,]*\w)|(?<![\w.])[-−]?\d+(?:\.\d+)?(?!\d)")
_CURRENCY_OR_UNIT = re.compile(r"^[£$€¥₹]?\s*([-−]?[\d.,]+)\s*(%|[a-zA-Z]{0,3})?$")
RELATIVE_TOLERANCE = 1e-6
ABSOLUTE_TOLERANCE = 1e-9

UNKNOWN_PHRASES = (
    "don't know",
    "do not know",
    "dont know",
    "not known",
    "unknown",
    "not available",
    "unavailable",
    "no information",
    "no data",
    "not in the",
    "not listed",
    "isn't listed",
    "is not listed",
    "cannot find",
    "can't find",
    "could not find",
    "couldn't find",
    "unable to find",
    "unable to determine",
    "not found",
    "no record",
    "doesn't say",
    "does not say",
    "doesn't mention",
    "does not mention",
    "don't mention",
    "do not mention",
    "don't say",
    "do not say",
    "don't specify",
    "do not specify",
    "not mentioned",
    "doesn't specify",
    "does not specify",
    "not specified",
    "cannot be determined",
    "can't be determined",
    "no way to know",
    "cannot predict",
    "can't predict",
    "not possible to know",
    "i'm not sure",
    "i am not sure",
    "not provided",
    "doesn't include",
    "does not include",
    "not included",
    "not have that information",
    "don't have",
    "do not have",
    "no answer",
)


def normalize(text: str) -> str:
    """Lower case, accents and punctuation dropped, thousands separators and trailing zeros removed."""
    text = unicodedata.normalize("NFKD", text.lower())
    text = "".join(c for c in text if not unicodedata.combining(c))
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    text = re.sub(r"(\d+\.\d*?)0+\b", r"\1", text)
    text = re.sub(r"(\d+)\.(?!\d)", r"\1", text)
    text = re.sub(r"[^\w\s.%-]|(?<!\d)[.-]|[.-](?!\d)", " ", text)
    return " ".join(text.split())


def _as_number(text: str) -> float:
    return float(text.replace(",", "").replace("−", "-"))


def numbers_in(text: str) -> list[float]:
    """Every number written in ``text`` (1,234.50 and -3 and 7.5 alike)."""
    return [_as_number(m) for m in NUMBER.findall(text)]


@functools.lru_cache(maxsize=4096)
def expected_number(expected: str) -> float | None:
    """The number an expected answer is, if it is one (currency signs, % and short units allowed)."""
    match = _CURRENCY_OR_UNIT.match(expected.strip())
    if not match:
        return None
    digits = match.group(1).replace(",", "").replace("−", "-")
    try:
        return float(digits)
    except ValueError:
        return None


def same_number(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=RELATIVE_TOLERANCE, abs_tol=ABSOLUTE_TOLERANCE)


def matches(expected: str, reply: str) -> tuple[bool, str]:
    """Whether ``reply`` gives ``expected``, and why."""
    wanted = expected_number(expected)
    if wanted is not None:
        for match in NUMBER.finditer(reply):  # stop at the first equal number; list them only to explain a miss
            if same_number(wanted, _as_number(match.group())):
                return True, f"the reply states {expected}"
        shown = ", ".join(f"{n:g}" for n in numbers_in(reply)[:5]) or "none"
        return False, f"expected the number {expected}; numbers in the reply: {shown}"
    target, text = normalize(expected), normalize(reply)
    if not target:
        return False, "the expected answer is empty after normalisation"
    if text == target or re.search(rf"(?<!\w){re.escape(target)}(?!\w)", text):
        return True, f"the reply contains {expected!r}"
    return False, f"{expected!r} is not in the reply"


def matches_any(answers: Sequence[str], reply: str) -> tuple[bool, str]:
    """Whether ``reply`` gives any one of ``answers``, each read as :func:`matches` reads it, and why.
    For a single answer this is :func:`matches`, reason included."""
    misses = []
    for answer in answers:
        ok, reason = matches(answer, reply)
        if ok:
            return True, reason
        misses.append(reason)
    if len(misses) == 1:
        return False, misses[0]
    return False, f"none of the {len(misses)} acceptable answers is in the reply: " + "; ".join(misses)


def says_unknown(reply: str) -> tuple[bool, str]:
    """Whether the reply says the answer is not known or not available."""
    text = reply.lower().replace("’", "'")
    for phrase in UNKNOWN_PHRASES:
        if phrase in text:
            return True, f"the reply says {phrase!r}"
    return False, "the reply gives an answer instead of saying it is not known"
